"""Inputs a user, a crash or another tool can hand erl_lite: foreign and hostile run files for the doctor,
a solved run's silent weights, an oversized memory entry, and the paths and routes a user expects.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import erl_lite
from erl_lite.cli import main
from erl_lite.core.memory import MAX_RULEBOOK_CHARS, ReflectionMemory
from erl_lite.core.prompts import reflection_messages
from erl_lite.diagnostics.preflight import chat_findings
from erl_lite.testing import tiny_tokenizer

HEALTHY_ROW = {"kind": "train", "step": 1, "reflection/parse_rate": 1.0}


def run_folder(root: Path, history: bytes | str, args: bytes | str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, body in (("history.jsonl", history), ("training_args.json", args)):
        if body is not None:
            (root / name).write_bytes(body if isinstance(body, bytes) else body.encode())
    return root


def doctor(folder: Path, capsys) -> tuple[int, str, str]:
    code = main(["doctor", str(folder)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- item 4: the doctor survives any file -------------------------------------------------------------
FOREIGN = "".join(json.dumps({"step": s, "loss": 1 / s, "epoch": s / 8}) + "\n" for s in range(1, 9))


@pytest.mark.parametrize("history", [FOREIGN, "", json.dumps({"kind": "eval", "step": 1}) + "\n"])
def test_a_history_no_check_can_read_is_not_a_clean_bill(tmp_path, capsys, history):
    code, out, err = doctor(run_folder(tmp_path, history), capsys)
    assert code == 2 and "No warning" not in out
    assert "had anything to read" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "line, says",
    [
        ("[1, 2]", "got list"),
        ('"text"', "got str"),
        ("3", "got int"),
        ("null", "got NoneType"),
        ('{"kind": "train", "step": "x"}', "step"),
        ('{"kind": "train"}', "step"),
        ('{"kind": "train", "step": true}', "step"),
        ("DEEP", "nested"),
    ],
)
def test_a_hostile_history_line_is_named_in_one_line(tmp_path, capsys, line, says):
    line = "[" * 100_000 + "]" * 100_000 if line == "DEEP" else line
    code, out, err = doctor(run_folder(tmp_path, json.dumps(HEALTHY_ROW) + "\n" + line + "\n"), capsys)
    assert code == 2 and out == ""
    assert err.startswith("erl-lite doctor: error:") and "history.jsonl:2" in err and says in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("name", ["history.jsonl", "training_args.json"])
def test_non_utf8_bytes_name_the_file(tmp_path, capsys, name):
    good = (json.dumps(HEALTHY_ROW) + "\n").encode()
    bad = b'{"step": 1, "x": "\xff\xfe"}\n'
    folder = run_folder(tmp_path, bad if name == "history.jsonl" else good, bad if name != "history.jsonl" else None)
    code, _, err = doctor(folder, capsys)
    assert code == 2 and name in err and "UTF-8" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "args, says",
    [
        ('{"max_steps": 3, "mo', "not valid JSON"),
        ("[1, 2, 3]", "got list"),
        ('"erl"', "got str"),
        ('{"max_steps": "ten"}', "max_steps"),
        ('{"mode": 3}', "mode"),
        ('{"use_memory": "no"}', "use_memory"),
        ('{"learning_rate": [1]}', "learning_rate"),
        ("DEEP", "nested"),
    ],
)
def test_a_torn_or_wrong_typed_training_args_is_named(tmp_path, capsys, args, says):
    args = "[" * 100_000 + "]" * 100_000 if args == "DEEP" else args
    code, out, err = doctor(run_folder(tmp_path, json.dumps(HEALTHY_ROW) + "\n", args), capsys)
    assert code == 2 and "training_args.json" in err and says in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_exit_codes_are_distinct(tmp_path, capsys):
    rows = [{"kind": "train", "step": s, "reflection/parse_rate": p} for s in range(1, 5) for p in [1.0]]
    healthy = run_folder(tmp_path / "ok", "".join(json.dumps(r) + "\n" for r in rows))
    warned = run_folder(tmp_path / "bad", "".join(json.dumps({**r, "reflection/parse_rate": 0.0}) + "\n" for r in rows))
    assert [doctor(f, capsys)[0] for f in (healthy, warned, tmp_path / "none")] == [0, 1, 2]


@pytest.mark.parametrize("kind", [str, Path, "file", "history"])
def test_diagnose_takes_a_path_or_a_history(tmp_path, kind):
    rows = [{"kind": "train", "step": s, "reflection/parse_rate": 0.0} for s in range(1, 5)]
    run_folder(tmp_path, "".join(json.dumps(r) + "\n" for r in rows), json.dumps({"max_steps": 4}))
    given = {
        str: str(tmp_path),
        Path: tmp_path,
        "file": str(tmp_path / "history.jsonl"),
        "history": erl_lite.History.load(tmp_path),
    }[kind]
    report = erl_lite.diagnose(given)
    assert [f.name for f in report.warnings] == ["parse_rate"] and report.steps == 4
    if kind != "history":  # a path also reads the folder's settings
        assert report.max_steps == 4


def test_diagnose_names_a_hostile_record_from_python():
    with pytest.raises(ValueError, match=r"record 2 .*got list"):
        erl_lite.diagnose([HEALTHY_ROW, [1, 2]])


# --- item 5: no false alarm on a solved run ---------------------------------------------------------------
def test_a_run_solved_from_step_1_without_weight_decay_is_healthy(tmp_path, capsys):
    from test_diagnostics import trainer

    def right(prompt):
        return "1" if "1" in prompt.split("Say")[-1] else "0"

    trainer(tmp_path, right, max_steps=5, weight_decay=0.0, learning_rate=1e-2).train()
    code, out, _ = doctor(tmp_path, capsys)
    assert "frozen_weights" not in out and "solved" in out and code == 0


@pytest.mark.parametrize(
    "signal, fires",
    [
        ({}, False),
        ({"advantage/first": 0.5}, True),
        ({"internalization/weight": 0.7}, True),
        ({"grad_norm": 0.3}, True),
    ],
)
def test_frozen_weights_reads_only_steps_that_had_something_to_learn(signal, fires):
    rows = [
        {
            "kind": "train",
            "step": s,
            "optim/steps": 1.0,
            "weights/update_ratio": 0.0,
            "grad_norm": 0.0,
            "advantage/first": 0.0,
            **signal,
        }
        for s in range(1, 6)
    ]
    assert ("frozen_weights" in [f.name for f in erl_lite.diagnose(rows).warnings]) == fires


def plain_vocabulary_tokenizer():
    """A base model's tokenizer whose vocabulary has no chat markers at all."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<unk>", "<eos>", *map(chr, range(32, 127)), "\n"])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>")


@pytest.mark.parametrize(
    "tokenizer, level", [(lambda: tiny_tokenizer(chat_template=False), "warning"), (plain_vocabulary_tokenizer, "note")]
)
def test_a_missing_template_on_a_chat_vocabulary_is_a_warning(tokenizer, level):
    from erl_lite.envs.frozenlake import FrozenLake

    env = FrozenLake()
    found = [f for f in chat_findings(tokenizer(), env, env.train_tasks(1)[0], None) if f.name == "chat_template"]
    assert [f.level for f in found] == [level]
    assert ("<|im_start|>" in found[0].saw) == (level == "warning")


# --- item 6: bounded input ---------------------------------------------------------------------------------
from erl_lite.testing import CountingTokenizer  # noqa: E402


@pytest.mark.parametrize("part", ["base_prompt", "task_text", "trace", "feedback"])
def test_a_huge_part_is_tokenized_once_per_request(part):
    budget, counted = 1200, {}
    for size in (10_000, 1_000_000):
        parts = {
            "task_text": "Say 1.",
            "base_prompt": "A is you.",
            "trace": "x",
            "feedback": "wrong",
            part: "B" + "rule " * (size // 5) + "E",
        }
        tok = CountingTokenizer(tiny_tokenizer())
        _, ids = reflection_messages(**parts, reward=0.0, tokenizer=tok, max_tokens=budget)
        assert len(ids) <= budget
        counted[size] = tok.calls
        # what is read stays a small multiple of the budget, not of the part (one character per token here)
        assert tok.chars < 100 * budget
    assert counted[10_000] == counted[1_000_000] <= 12


@pytest.mark.parametrize("how", ["store", "load"])
def test_a_memory_entry_past_its_stated_size_is_cut_and_named(how):
    memory, entry = ReflectionMemory(), "HEAD " + "r" * (2 * MAX_RULEBOOK_CHARS) + " TAIL"
    with pytest.warns(UserWarning, match=rf"entries\[0\].*{2 * MAX_RULEBOOK_CHARS + 10:,} characters"):
        if how == "store":
            memory.maybe_store(entry, 1.0, 1.0)
        else:
            memory.load_state_dict({"kind": "single", "entries": [entry], "total_writes": 1})
    [kept] = memory.entries
    assert len(kept) <= MAX_RULEBOOK_CHARS and kept.startswith("HEAD") and kept.endswith("TAIL")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an entry within the size is kept whole, without a word
        memory.maybe_store("A is you.", 1.0, 1.0)
    assert memory.entries == ["A is you."]


# --- item 7: paths and routes -------------------------------------------------------------------------------
@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ERL_RUNS", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "given, expected",
    [
        ("~/erl_runs/x", "home/erl_runs/x"),
        ("$ERL_RUNS/x", "runs/x"),
        ("${ERL_RUNS}/y", "runs/y"),
        ("plain/z", "plain/z"),
    ],
)
@pytest.mark.parametrize("route", ["python", "cli", "yaml"])
def test_paths_expand_home_and_variables_by_every_route(home, given, expected, route):
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings
    from erl_lite.config import ERLConfig

    if route == "python":
        cfg = ERLConfig(output_dir=given)
    else:
        (home / "run.yaml").write_text(f"output_dir: {given}\n")
        argv = ["train", "--output-dir", given] if route == "cli" else ["train", "--config", "run.yaml"]
        cfg = train_settings(build_parser().parse_args(argv))[1]
    want = expected if expected.startswith("plain") else str(home / expected)
    assert cfg.output_dir == want and "~" not in cfg.output_dir and "$" not in cfg.output_dir


def test_the_doctor_and_history_expand_home(home, capsys):
    run_folder(home / "home" / "run", "".join(json.dumps({**HEALTHY_ROW, "step": s}) + "\n" for s in (1, 2, 3)))
    assert main(["doctor", "~/run"]) == 0
    assert erl_lite.History.load("~/run").records and erl_lite.diagnose("$HOME/run").steps == 3


@pytest.fixture
def captured_trainer(tmp_path, monkeypatch):
    """erl-lite train's trainer replaced by one that records its arguments and trains nothing."""
    import erl_lite.run.trainer
    from erl_lite.history import History

    seen = {}

    class Recorder:
        def __init__(self, **kwargs):
            seen.update(kwargs)

        def train(self, **kwargs):
            return History()

    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": "Say 1.", "answer": "1"}) + "\n")
    (tmp_path / "mymod_w.py").write_text("def a(completions, **kw):\n    return [1.0] * len(completions)\nb = a\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", Recorder)
    return seen


DATA = ["train", "--dataset", "rows.jsonl", "--reward-funcs", "mymod_w:a", "mymod_w:b", "--model", "tiny"]


@pytest.mark.parametrize("route", ["cli", "trl", "yaml"])
def test_reward_weights_reach_the_trainer(captured_trainer, tmp_path, capsys, route):
    if route == "yaml":
        (tmp_path / "run.yaml").write_text("reward_weights: [0, 1]\n")
        argv = [*DATA, "--config", "run.yaml"]
    else:
        argv = [*DATA, "--reward-weights" if route == "cli" else "--reward_weights", "0", "1"]
    assert main(argv) == 0, capsys.readouterr().err
    assert captured_trainer["reward_weights"] == [0.0, 1.0]


@pytest.mark.parametrize(
    "weights, says",
    [
        (["1"], "the 2 reward_funcs"),
        (["1", "2", "3"], "the 2 reward_funcs"),
        (["x", "1"], "x"),
        (["nan", "1"], "finite"),
    ],
)
def test_reward_weights_are_checked_against_the_reward_functions(captured_trainer, capsys, weights, says):
    try:
        code = main([*DATA, "--reward-weights", *weights])
    except SystemExit as e:  # argparse's own refusal of a word that is no number
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert "reward" in err and says in err and not captured_trainer


def test_reward_weights_without_reward_funcs_are_refused(captured_trainer, capsys):
    assert main(["train", "--reward-weights", "1", "--model", "tiny"]) == 2
    assert "--reward-weights needs" in capsys.readouterr().err
