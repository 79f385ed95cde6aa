"""The erl-lite command line on your own data: ``--dataset`` and ``--reward-funcs`` (as ``trl grpo``),
``eval`` on what a run was trained on, "did you mean" for flag typos, defaults in ``--help``."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
from test_run_faults import rerecord

from erl_lite.cli import main
from erl_lite.testing import save_tiny_model

ROWS = [{"prompt": f"Add {i} and {i}.", "answer": str(2 * i)} for i in range(4)]
#: The smallest run: one step, two tasks of two samples, short replies and reflections.
TINY = [
    "--steps",
    "1",
    "--num-tasks-per-step",
    "2",
    "--num-generations",
    "2",
    "--eval-steps",
    "0",
    "--max-completion-length",
    "4",
    "--max-reflection-length",
    "4",
    "--learning-rate",
    "0.05",
]
REWARD_MODULE = """
def reward(completions, answer, **kwargs):
    return [float(a in c) for c, a in zip(completions, answer)]


def length_reward(completions, **kwargs):
    return [len(c) / 10 for c in completions]


def feedback(completions, answer, **kwargs):
    return [f"The answer is {a}." for a in answer]


NOT_A_FUNCTION = 3
"""


@pytest.fixture
def own_data(tmp_path, monkeypatch):
    """rows.jsonl and mymod.py in a fresh working directory (as a user's project folder)."""
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "mymod.py").write_text(REWARD_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mymod", raising=False)
    yield tmp_path
    sys.modules.pop("mymod", None)


def _python_reward_run(tmp_path) -> str:
    """A run trained from Python with a custom reward on dataset rows; its output folder."""
    from erl_lite.config import ERLConfig
    from erl_lite.run.trainer import ERLTrainer

    def reward(completions, **kwargs):
        return [len(c) % 2 for c in completions]

    out = str(tmp_path / "py_run")
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=2,
        eval_steps=0,
        max_completion_length=4,
        max_reflection_length=4,
        progress_bar=False,
        output_dir=out,
    )
    ERLTrainer(
        model=save_tiny_model(str(tmp_path / "model")), args=args, reward_funcs=reward, train_dataset=ROWS
    ).train()
    return out


# --- eval reads what the run was trained on ----------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--dataset", "rows.jsonl"], ["--limit", "2"]])
def test_eval_of_a_python_reward_run_asks_for_its_data_and_rewards(own_data, capsys, extra):
    """Before: scored the demo world ("env": "demo"), or with --dataset crashed with KeyError: 'map'."""
    out = _python_reward_run(own_data)
    capsys.readouterr()
    assert main(["eval", "--checkpoint", out, *extra]) == 2
    err = capsys.readouterr().err
    first, then = err.splitlines()[:2]
    assert "checkpoint-1 (step 1)" in first and then.startswith("erl-lite eval: error:")
    assert "--reward-funcs" in err and "reward" in err and "demo" not in err
    if not extra or extra[0] != "--dataset":
        assert "--dataset" in err


def test_a_checkpoint_records_its_environment(own_data):
    from erl_lite.jsonio import read_json

    state = read_json(os.path.join(_python_reward_run(own_data), "checkpoint-1", "erl_state.json"))
    assert state["env"]["name"] == "dataset"
    assert state["env"]["class"] == "erl_lite.integrations.dataset.RewardFunctionEnv"
    assert state["env"]["reward_funcs"] == [f"{__name__}:_python_reward_run.<locals>.reward"]


def test_eval_refuses_a_checkpoint_that_records_no_environment(tmp_path, capsys):
    """Every format-4 checkpoint records its environment; one without (edited by hand) is refused with the flags
    that name what to evaluate on, not scored on the demo world by guess."""
    from erl_lite.embedded.demo import demo_trainer

    out = tmp_path / "run"
    demo_trainer(seed=1, eval_tasks=2, max_steps=1, num_tasks_per_step=2, eval_steps=0, output_dir=str(out)).train()
    state = json.loads((out / "checkpoint-1" / "erl_state.json").read_text())
    assert state["env"]["class"] == "erl_lite.embedded.world.DemoLake"
    del state["env"]
    (out / "checkpoint-1" / "erl_state.json").write_text(json.dumps(state))
    rerecord(out / "checkpoint-1" / "erl_state.json")  # manifest and all, so only the missing record is wrong
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(out), "--limit", "2", "--num-generations", "1"]) == 2
    assert "records no environment (erl_state.json has no 'env'); pass --env NAME" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(out), "--limit", "2", "--num-generations", "1", "--env", "demo"]) == 0
    assert json.loads(capsys.readouterr().out)["env"] == "demo"


# --- train and eval on your own data -----------------------------------------------------------
@pytest.mark.parametrize("spec", ["mymod:reward", "mymod.reward", "./mymod.py:reward"])
def test_train_on_own_data_then_eval(own_data, capsys, spec):
    out = own_data / "run"
    assert (
        main(
            [
                "train",
                "--dataset",
                "rows.jsonl",
                "--reward-funcs",
                spec,
                "mymod:length_reward",
                "--feedback-func",
                "mymod:feedback",
                "--model",
                "tiny",
                *TINY,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "done: 1 steps" in capsys.readouterr().out
    state = json.loads((out / "checkpoint-1" / "erl_state.json").read_text())
    assert state["config"]["extra"]["env"] == "dataset"
    assert state["config"]["extra"]["reward_funcs"] == [spec, "mymod:length_reward"]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and any("The answer is" in json.dumps(s) for s in samples)  # the feedback function ran

    assert (
        main(
            [
                "eval",
                "--checkpoint",
                str(out),
                "--dataset",
                "rows.jsonl",
                "--reward-funcs",
                "mymod:reward",
                "--num-generations",
                "2",
            ]
        )
        == 0
    )
    got = json.loads(capsys.readouterr().out)
    assert (got["env"], got["tasks"], got["eval/num_episodes"]) == ("dataset", 4, 8.0)
    assert 0 <= got["eval/success"] <= 1

    assert main(["eval", "--checkpoint", str(out)]) == 2  # names what it was trained with
    err = capsys.readouterr().err
    assert "rows.jsonl" in err and spec in err and "--reward-funcs" in err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--reward-funcs", "nomod_xyz:reward"], "nomod_xyz:reward: no module named 'nomod_xyz'"),
        (["--reward-funcs", "mymod:nope"], "mymod:nope: module 'mymod' has no function 'nope'"),
        (["--reward-funcs", "mymod:NOT_A_FUNCTION"], "mymod:NOT_A_FUNCTION: not a function"),
        (["--reward-funcs", "mymod"], "expected module:function"),
        (["--reward-funcs", "missing.py:reward"], "missing.py:reward: no file"),
        (["--reward-funcs", "mymod:reward", "--feedback-func", "mymod:nothing"], "mymod:nothing"),
        ([], "--dataset needs --reward-funcs"),
        (["--reward-funcs", "mymod:reward", "--env", "frozenlake"], "--env"),
    ],
)
def test_bad_function_specs_are_named(own_data, capsys, argv, message, monkeypatch):
    import erl_lite.run.trainer

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", None)  # never reached
    assert main(["train", "--dataset", "rows.jsonl", *argv, "--model", "tiny", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("erl-lite train: error:") and message in err


def test_reward_funcs_without_dataset_is_refused(own_data, capsys):
    assert main(["train", "--reward-funcs", "mymod:reward", "--steps", "1"]) == 2
    assert "--reward-funcs needs --dataset" in capsys.readouterr().err


def test_trl_spellings_of_the_data_flags(own_data):
    from erl_lite.cli import build_parser

    args = build_parser().parse_args(["train", "--dataset_name", "rows.jsonl", "--reward_funcs", "mymod.reward"])
    assert (args.dataset, args.reward_funcs) == ("rows.jsonl", ["mymod.reward"])


# --- flag typos and --help -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv,typo,guess",
    [
        (["train", "--learnig-rate", "1e-3"], "--learnig-rate", "--learning-rate"),
        (["train", "--num_generatoins", "2"], "--num_generatoins", "--num-generations"),  # TRL's spelling, mistyped
        (["train", "--reward-fucns", "m:f"], "--reward-fucns", "--reward-funcs"),
        (["train", "--stesp=3"], "--stesp", "--steps"),
        (["eval", "--checkpont", "x"], "--checkpont", "--checkpoint"),  # argparse's complaint: --checkpoint missing
        (["demo", "--setps", "3"], "--setps", "--steps"),
        (["train", "--learning-rate", "1e-3", "--no-memroy", "--seeed", "2"], "--seeed", "--seed"),
    ],
)
def test_flag_typos_get_did_you_mean(capsys, argv, typo, guess):
    """Before: a bare "unrecognized arguments" (or "required: --checkpoint"), no guess."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"{typo}: did you mean {guess}?" in capsys.readouterr().err


def test_a_flag_far_from_every_other_gets_no_guess(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--zzzzqqqq"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzqqqq" in err and "did you mean" not in err


def _help_line(out: str, flag: str) -> str:
    """The option's entry in ``--help``: its line and, where argparse moved the help below a long
    option, the next one."""
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if re.match(rf"\s+{re.escape(flag)}\b(?!-)", line))
    return " ".join(lines[i : i + 2])


@pytest.mark.parametrize(
    "flag,default",
    [
        ("--learning-rate", "(default: 0.001; off the demo world: 0.002)"),
        ("--mode", "(default: erl)"),
        ("--use-memory", "(default: true)"),
        ("--dual-clip", "(default: 3.0)"),
        ("--seed", "(default: 0)"),
        ("--env", "(default: demo)"),
        ("--preset", "(default: demo on --env demo, cpu elsewhere)"),
    ],
)
def test_help_shows_each_default(monkeypatch, capsys, flag, default):
    monkeypatch.setenv("COLUMNS", "100000")  # one line per option
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert default in _help_line(out, flag)


@pytest.mark.parametrize(
    "record,rows,message",
    [
        ({"name": "mine", "class": "my.CustomEnv"}, None, "my.CustomEnv ('mine'), which erl-lite eval cannot build"),
        (None, "plain", "rows.jsonl:1: the demo environment plays tasks {task_id, prompt, data}"),
        # every row has a task_id, one has another key too: it is named (before: a bare StopIteration)
        (None, [{"task_id": "a"}, {"task_id": "b", "zz": 1}], "rows.jsonl:2: the demo environment plays tasks"),
        (None, [{"task_id": "a"}, {"task_id": "b", "data": {}}, [1, 2]], "rows.jsonl:3: the demo environment plays"),
    ],
)
def test_eval_names_what_it_cannot_rebuild(tmp_path, capsys, monkeypatch, record, rows, message):
    """Before: a custom environment was scored as the demo world; plain rows on the demo crashed with KeyError."""
    from erl_lite.embedded.demo import demo_trainer

    out = tmp_path / "run"
    demo_trainer(seed=1, eval_tasks=2, max_steps=1, num_tasks_per_step=2, eval_steps=0, output_dir=str(out)).train()
    if record is not None:
        path = out / "checkpoint-1" / "erl_state.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "env": record}))
        rerecord(path)  # as a checkpoint written with that record would be
    extra = []
    if rows:
        (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (ROWS if rows == "plain" else rows)))
        monkeypatch.chdir(tmp_path)
        extra = ["--dataset", "rows.jsonl"]
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(out), *extra]) == 2
    assert message in capsys.readouterr().err
