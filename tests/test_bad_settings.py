"""Bad settings, bad files and bad command lines get an answer that names the field, the file
and line, or the row; never a bare TypeError or a silently wrong run.

Grouped as a user meets them: values of the wrong type or not finite (in Python, in a YAML run
file, on the command line), one field given twice, groups of one, files that do not parse,
prompts and rewards that cannot be used, and the command line's missing paths.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import typing
import warnings

import pytest

from erl_lite.config import ERLConfig

# --- values of the wrong type, or not finite ---------------------------------------------------
FLOAT_FIELDS = [
    f.name for f in dataclasses.fields(ERLConfig) if typing.get_type_hints(ERLConfig)[f.name] in (float, float | None)
]


def test_the_float_fields_are_found_from_the_annotations():
    # the NaN/inf test below covers every float field; this guards it against finding none
    assert {
        "learning_rate",
        "beta",
        "weight_decay",
        "internalization_coef",
        "max_grad_norm",
        "lora_alpha",
        "temperature",
        "top_p",
        "epsilon",
        "epsilon_high",
        "reward_threshold",
        "dual_clip",
    } <= set(FLOAT_FIELDS)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_non_finite_float_settings_are_refused_naming_the_field(name, value):
    with pytest.raises(ValueError, match=rf"ERLConfig\.{name}\b.*finite"):
        ERLConfig(**{name: value})
    with pytest.raises(ValueError, match=rf"ERLConfig\.{name}\b.*finite"):
        dataclasses.replace(ERLConfig(), **{name: value})
    with pytest.raises(ValueError, match=rf"ERLConfig\.{name}\b.*finite"):
        ERLConfig().replace(**{name: value})


@pytest.mark.parametrize(
    "name, value",
    [
        ("temperature", True),
        ("learning_rate", False),
        ("top_p", "0.9"),
        ("beta", None),
        ("beta", [0.1]),
        ("beta", {"a": 1}),
        ("use_memory", 2),
        ("use_memory", 1),
        ("use_memory", "yes"),
        ("use_memory", None),
        ("seed", 1.5),
        ("seed", True),
        ("seed", "42"),
        ("max_steps", 2.5),
        ("num_generations", True),
        ("mode", 3),
        ("output_dir", 5),
        ("lora_target_modules", 7),
        ("lora_target_modules", ["q_proj", 3]),
        ("report_to", 1),
        ("generation_kwargs", [1]),
        ("generation_kwargs", {1: 2}),
        ("extra", "note"),
        ("warmup_steps", True),
        ("logging_steps", "1"),
        ("dual_clip", "3"),
        ("num_train_epochs", True),
        ("save_total_limit", 2.5),
        ("memory_type", None),
        ("progress_bar", 0.0),
    ],
)
def test_values_of_the_wrong_type_are_refused_naming_the_field(name, value):
    with pytest.raises(ValueError, match=rf"ERLConfig\.{name}\b"):
        ERLConfig(**{name: value})


@pytest.mark.parametrize(
    "name, value, stored",
    [
        ("seed", 3.0, 3),
        ("max_steps", 10.0, 10),
        ("learning_rate", 1, 1),
        ("lora_alpha", 16, 16),
        ("dual_clip", None, None),
        ("logging_steps", 0.5, 0.5),
        ("logging_steps", 2, 2),
        ("report_to", ("wandb",), ["wandb"]),
        ("lora_target_modules", ("q_proj",), ("q_proj",)),
        ("scale_rewards", True, "group"),
    ],
)
def test_values_that_are_the_right_kind_still_pass(name, value, stored):
    # a whole float is a whole number (YAML and JSON write 3.0); an int is a float; None where allowed
    cfg = ERLConfig(**{"mode": "erl", name: value})
    assert getattr(cfg, name) == stored and type(getattr(cfg, name)) is type(stored)


# --- groups of one ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: ERLConfig(mode="rlvr", num_generations=1),
        lambda: ERLConfig(mode="erl_simple", num_generations=1),
        lambda: ERLConfig(mode="rlvr", num_generations=4).replace(num_generations=1),
        lambda: ERLConfig(num_generations=1).replace(mode="rlvr"),  # an explicit G follows a new mode
        lambda: ERLConfig.preset("cpu", mode="rlvr", num_generations=1),
    ],
    ids=["rlvr", "erl_simple", "replace-G", "replace-mode", "preset"],
)
def test_a_group_of_one_is_refused_where_it_is_the_only_baseline(make):
    # RLVR and Algorithm 1 train first attempts only: with G = 1 the advantage is the raw reward
    with pytest.raises(ValueError, match=r"ERLConfig\.num_generations.*(rlvr|erl_simple).*baseline"):
        make()


def test_a_group_of_one_in_erl_mode_warns_that_advantages_are_raw_rewards():
    with pytest.warns(UserWarning, match=r"num_generations=1.*A = r"):
        cfg = ERLConfig(num_generations=1)
    assert cfg.num_generations == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # G >= 2, and the mode's default, say nothing
        ERLConfig(num_generations=2), ERLConfig(mode="rlvr"), ERLConfig(mode="erl_simple", num_generations=2)


# --- the same mistakes in a YAML run file: named with the file and the line ---------------------------
def _run_file(tmp_path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "line, message",
    [
        ("temperature: true", "ERLConfig.temperature must be a finite number, got True"),
        ("use_memory: 2", "ERLConfig.use_memory must be true or false, got 2"),
        ("seed: 1.5", "ERLConfig.seed must be an integer, got 1.5"),
        ("learning_rate: null", "ERLConfig.learning_rate must be a finite number, got None"),
        ("learning_rate: [1, 2]", "ERLConfig.learning_rate must be a finite number, got [1, 2]"),
        ("beta: {a: 1}", "ERLConfig.beta must be a finite number, got {'a': 1}"),
        ("max_grad_norm: .nan", "ERLConfig.max_grad_norm must be a finite number, got nan"),
        ("weight-decay: .inf", "ERLConfig.weight_decay must be a finite number, got inf"),
        ("lora_alpha: 'nan'", "ERLConfig.lora_alpha must be a finite number, got nan"),
        ("mode: 3", "ERLConfig.mode must be a string, got 3"),
        ("lora_target_modules: [q_proj, 4]", "ERLConfig.lora_target_modules must be a string or a list of strings"),
        ("max_steps: null\nmax_steps: 3", "max_steps is given twice (lines 2 and 3)"),
        (
            "learning-rate: 1e-3\nlearning_rate: 1e-4",
            "learning_rate is given twice (lines 2 and 3: 'learning-rate' and 'learning_rate')",
        ),
    ],
)
def test_run_file_values_are_checked_naming_file_line_and_field(monkeypatch, tmp_path, capsys, line, message):
    import erl_lite.run.trainer
    from erl_lite.cli import main

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", None)  # never reached

    path = _run_file(tmp_path, "env: demo\n" + line + "\n")
    assert main(["train", "--config", path]) == 2
    err = capsys.readouterr().err
    lineno = 2 if "twice" not in message else 3
    assert f"{path}:{lineno}:" in err and message in err, err


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("seed: 1\ntop_p: 1.5\n", 2, "ERLConfig.top_p must be in (0, 1]"),
        ("num-generations: 0\n", 1, "ERLConfig.num_generations must be a whole number >= 1"),
        ("mode: rlvr\n\nnum_generations: 1\n", 3, "ERLConfig.num_generations=1 with mode='rlvr'"),
    ],
)
def test_run_file_values_out_of_range_name_the_line_that_set_them(monkeypatch, tmp_path, capsys, text, line, message):
    import erl_lite.run.trainer
    from erl_lite.cli import main

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", None)  # never reached
    path = _run_file(tmp_path, text)
    assert main(["train", "--config", path]) == 2
    assert f"{path}:{line}: {message}" in capsys.readouterr().err
    # a flag that sets the field takes the blame away from the file
    assert main(["train", "--config", path, "--top-p", "2.0", "--num-generations", "0"]) == 2
    assert f"{path}:" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--learning-rate", "nan"], "ERLConfig.learning_rate must be a finite number, got nan"),
        (["--beta", "inf"], "ERLConfig.beta must be a finite number, got inf"),
        (["--max-steps", "3", "--steps", "4"], "max_steps is given twice: --max-steps 3 and --steps 4"),
        (
            ["--learning-rate", "1e-3", "--learning_rate", "1e-4"],
            "learning_rate is given twice: --learning-rate 0.001 and --learning_rate 0.0001",
        ),
        (["--out", "a", "--output-dir", "b"], "output_dir is given twice: --out 'a' and --output-dir 'b'"),
        (["--use-memory", "--no-memory"], "use_memory is given twice: --use-memory True and --no-memory False"),
        (["--no_use_memory", "--use_memory", "true"], "use_memory is given twice"),
    ],
)
def test_command_line_values_are_checked_naming_the_option(monkeypatch, capsys, flags, message):
    import erl_lite.run.trainer
    from erl_lite.cli import main

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", None)  # never reached
    assert main(["train", *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--max-steps", "3", "--steps", "3"], 3),  # two spellings that agree: no conflict
        (["--steps", "3", "--steps", "4"], 4),  # one spelling twice: argparse's rule, the last wins
    ],
)
def test_two_spellings_that_agree_or_one_spelling_twice_pass(flags, expected):
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings

    assert train_settings(build_parser().parse_args(["train", *flags]))[1].max_steps == expected


# --- files that do not parse: named with the file and the 1-based line ------------------------------
GOOD_ROWS = [{"prompt": "2+2=?", "answer": "4"}, {"prompt": "3+3=?", "answer": "6"}]


@pytest.mark.parametrize("bad", ['{"prompt": "4+4=?", "answer": }', '{"prompt": "4+4=?"', "prompt: 4+4", "[1, 2"])
@pytest.mark.parametrize("blank_lines", [0, 2])
def test_a_bad_line_in_a_dataset_file_is_named_by_file_and_line(tmp_path, bad, blank_lines):
    from erl_lite.integrations.data_sources import load_rows

    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in GOOD_ROWS) + "\n" * (1 + blank_lines) + bad + "\n")
    with pytest.raises(ValueError, match=rf"{path}:{3 + blank_lines}: not valid JSON"):
        load_rows(str(path))


@pytest.mark.slow
def test_eval_names_the_bad_line_of_its_dataset(tmp_path, capsys):
    from erl_lite.cli import main

    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--env",
                "arithmetic",
                "--model",
                "tiny",
                "--steps",
                "1",
                "--out",
                str(out),
                "--num-tasks-per-step",
                "2",
                "--num-generations",
                "2",
                "--eval-steps",
                "0",
            ]
        )
        == 0
    )
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(GOOD_ROWS[0]) + "\n\n" + json.dumps(GOOD_ROWS[1]) + "\n{oops}\n")
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(out), "--dataset", str(rows)]) == 2
    assert f"{rows}:4: not valid JSON" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, line, column",
    [("", 1, 1), ('{"step": 3,\n "config": }', 2, 12), ('{"step": 3', 1, 11), ("{\n\n  'step': 1}", 3, 3)],
)
def test_a_damaged_run_record_is_named_by_file_line_and_column(tmp_path, capsys, text, line, column):
    from erl_lite.cli import main
    from erl_lite.run.checkpoint import CheckpointError, read_checkpoint

    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    state = folder / "erl_state.json"
    state.write_text(text)
    with pytest.raises(CheckpointError, match=rf"{state}:{line}:{column}:"):
        read_checkpoint(str(folder))
    assert main(["eval", "--checkpoint", str(tmp_path)]) == 2
    assert f"{state}:{line}:{column}:" in capsys.readouterr().err


def _history(tmp_path, tail: str) -> str:
    from erl_lite.history import History

    h = History(out_dir=str(tmp_path))
    for step in (1, 2, 3):
        h.log({"step": step, "reward/first": 0.1 * step})
    with open(tmp_path / "history.jsonl", "a", encoding="utf-8") as f:
        f.write(tail)
    return str(tmp_path / "history.jsonl")


@pytest.mark.parametrize("torn", ['{"kind": "train", "step": 4, "rew', "{", '{"kind": "train", "step": 4}{"k'])
def test_a_history_whose_last_line_a_crash_cut_off_still_loads_and_plots(tmp_path, capsys, torn):
    from erl_lite.cli import main
    from erl_lite.history import History

    path = _history(tmp_path, torn)  # no newline at the end: the write was cut short
    with pytest.warns(UserWarning, match=rf"{path}:4: .*cut off"):
        history = History.load(path)
    assert history.series("reward/first")[0] == [1, 2, 3]
    assert main(["plot", path, "--out", str(tmp_path / "figs")]) == 0
    assert f"{path}:4:" in capsys.readouterr().err and os.listdir(tmp_path / "figs")


@pytest.mark.parametrize("bad", ['{"kind": "train", "step": 4, "rew\n', '{"step": 5}\n{oops\n{"step": 6}\n'])
def test_a_damaged_line_inside_a_history_is_an_error_naming_file_and_line(tmp_path, capsys, bad):
    from erl_lite.cli import main
    from erl_lite.history import History

    path = _history(tmp_path, bad)
    line = 4 if bad.startswith('{"kind"') else 5
    with pytest.raises(ValueError, match=rf"{path}:{line}: not valid JSON"):
        History.load(path)
    assert main(["plot", path]) == 2
    assert f"{path}:{line}: not valid JSON" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["typo", "runs/x", "history.json"])
def test_a_history_path_that_does_not_exist_is_not_read_as_its_folder(tmp_path, capsys, name):
    # History.load("run/typo") read run/history.jsonl: erl-lite plot drew another run without a word.
    from erl_lite.cli import main
    from erl_lite.history import History

    _history(tmp_path, "")
    with pytest.raises(FileNotFoundError, match=f"no run folder or history file at {tmp_path / name}"):
        History.load(tmp_path / name)
    assert main(["plot", str(tmp_path / name), "--out", str(tmp_path / "figs")]) == 2
    assert f"{tmp_path / name}" in capsys.readouterr().err and not (tmp_path / "figs").exists()


# --- the command line: missing paths and nothing to resume, one paragraph and exit code 2 -------------
def _no_traceback(err: str) -> None:
    # progress bars may come first; the error is one paragraph, with no traceback
    assert "Traceback" not in err and "erl-lite " in err and ": error: " in err, err


@pytest.mark.parametrize(
    "model",
    [
        "./nonexistent",
        "../nowhere/model",
        "/no/such/model",
        "~/no-such-model",
        "{tmp}/missing",
        "{tmp}/missing/deeper",
        "runs\\model",
    ],
)
def test_a_missing_model_path_is_named_as_a_missing_path(tmp_path, capsys, model):
    from erl_lite.cli import main
    from erl_lite.models import load_policy

    model = model.replace("{tmp}", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_policy(model, device="cpu")
    assert main(["train", "--env", "arithmetic", "--model", model, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert os.path.expanduser(model) in err and "does not exist" in err and "Repo id" not in err  # ~ expanded


def test_a_hub_name_is_not_taken_for_a_path():
    from erl_lite.models import check_model_source

    for name in ("Qwen/Qwen2.5-0.5B-Instruct", "gpt2", "org/name-1.5b"):
        check_model_source(name)  # left to transformers (hub or cache)


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "nothing to resume: no checkpoint-<step> folder in trainer_output"),  # the default output_dir
        (["--out", "{tmp}"], "nothing to resume: no checkpoint-<step> folder in {tmp}"),
        (["--out", "{tmp}/new"], "nothing to resume: no checkpoint-<step> folder in {tmp}/new"),
    ],
)
def test_resume_with_nothing_to_resume_is_one_clear_line(tmp_path, capsys, flags, message):
    from erl_lite.cli import main

    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    assert main(["train", "--env", "arithmetic", "--model", "tiny", "--steps", "1", "--resume", *flags]) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert message.replace("{tmp}", str(tmp_path)) in err


def test_resume_from_damaged_checkpoints_is_one_clear_paragraph(tmp_path, capsys):
    from erl_lite.cli import main

    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "erl_state.json").write_text("{")
    assert (
        main(["train", "--env", "arithmetic", "--model", "tiny", "--steps", "3", "--resume", "--out", str(tmp_path)])
        == 2
    )
    err = capsys.readouterr().err
    _no_traceback(err)
    assert "every checkpoint is damaged" in err and "erl_state.json:1:2" in err


@pytest.mark.parametrize("layout", ["missing", "empty", "checkpoint-without-adapter", "adapter-of-a-full-run"])
def test_export_without_a_lora_adapter_is_one_clear_paragraph(tmp_path, capsys, layout):
    from erl_lite.cli import main

    folder = tmp_path / "checkpoint-3"
    if layout == "empty":
        folder.mkdir()
    if layout in ("checkpoint-without-adapter", "adapter-of-a-full-run"):  # a whole checkpoint of a full run
        import torch
        from transformers import TrainerState

        from erl_lite.core.memory import ReflectionMemory
        from erl_lite.history import History
        from erl_lite.run.checkpoint import save_checkpoint
        from erl_lite.testing import tiny_model, tiny_tokenizer

        model = tiny_model(tiny_tokenizer())
        save_checkpoint(
            str(tmp_path),
            3,
            model,
            torch.optim.AdamW(model.parameters()),
            None,
            ReflectionMemory(),
            History(),
            {"config": {}},
            TrainerState(global_step=3),
        )
    adapter = folder / "adapter" if layout == "adapter-of-a-full-run" else folder
    assert main(["export", "--adapter", str(adapter), "--out", str(tmp_path / "merged")]) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert "no LoRA adapter" in err or "not a LoRA adapter" in err
    assert str(adapter) in err


@pytest.mark.slow
def test_eval_after_the_base_model_moved_names_it_and_the_flag(tmp_path, capsys):
    from erl_lite.cli import main
    from erl_lite.testing import save_tiny_model

    base = save_tiny_model(str(tmp_path / "base"))
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--env",
                "arithmetic",
                "--model",
                base,
                "--steps",
                "1",
                "--out",
                str(out),
                "--num-tasks-per-step",
                "2",
                "--num-generations",
                "2",
                "--eval-steps",
                "0",
            ]
        )
        == 0
    )
    moved = str(tmp_path / "moved")
    os.rename(base, moved)
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(out), "--limit", "1"]) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert base in err and "does not exist" in err and "--base-model" in err
    assert (
        main(["eval", "--checkpoint", str(out), "--limit", "1", "--num-generations", "1", "--base-model", moved]) == 0
    )
    assert main(["export", "--adapter", str(out / "checkpoint-1"), "--out", str(tmp_path / "m")]) == 2
    assert "--base-model" in capsys.readouterr().err


# --- prompts and rewards that cannot be used: named with the row, the function and the value ---------
def _trainer(rows, reward, script=lambda p: "4", **kw):
    from erl_lite.engine.generation import ScriptedGenerator
    from erl_lite.run.trainer import ERLTrainer
    from erl_lite.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    args = ERLConfig.preset(
        "cpu",
        **{
            **dict(
                max_steps=1,
                num_tasks_per_step=len(rows),
                num_generations=2,
                max_completion_length=6,
                max_reflection_length=8,
                eval_steps=0,
                progress_bar=False,
                beta=0.0,
            ),
            **kw,
        },
    )
    return ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        reward_funcs=reward,
        train_dataset=rows,
        generator=ScriptedGenerator(tok, script),
    )


def _answer_reward(prompts, completions, answer, **kw):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [float(a in t) for t, a in zip(texts, answer)]


def _parts(*texts):
    return [{"type": "text", "text": t} for t in texts]


@pytest.mark.parametrize(
    "prompt, seen",
    [
        ([{"role": "user", "content": _parts("What is 2+2?")}], "What is 2+2?"),
        ([{"role": "user", "content": _parts("What is ", "2+2?")}], "What is 2+2?"),
        (
            [{"role": "system", "content": _parts("Be brief.")}, {"role": "user", "content": _parts("2+2?")}],
            "Be brief.",
        ),
        (
            [
                {"role": "user", "content": "Remember 4."},
                {"role": "assistant", "content": _parts("OK.")},
                {"role": "user", "content": _parts("Say it.")},
            ],
            "OK.",
        ),
    ],
)
def test_chat_prompts_of_text_content_parts_are_read_as_text(prompt, seen):
    # TRL users send content parts ({"type": "text", "text": ...}); text parts are joined as a
    # multimodal chat template joins them, and the reward function sees the prompt as given
    prompts_seen, rendered = [], []

    def reward(prompts, completions, answer, **kw):
        prompts_seen.extend(prompts)
        return _answer_reward(prompts, completions, answer)

    def script(text):
        rendered.append(text)
        return "4"

    t = _trainer([{"prompt": prompt, "answer": "4"}], reward, script=script)
    t.train()
    assert seen in rendered[0] and "'type'" not in rendered[0]
    assert prompts_seen[0] == prompt and t.history.last("reward/first") == 1.0


@pytest.mark.parametrize(
    "content, message",
    [
        ([{"type": "image", "image": "cat.png"}, {"type": "text", "text": "What is this?"}], "'image' content part"),
        ([{"type": "text"}], "content part 0"),
        ([{"type": "text", "text": 3}], "content part 0"),
        (["just a string"], "content part 0"),
        ([], "no text"),
    ],
)
def test_chat_prompts_with_unusable_content_parts_are_refused_naming_the_row(content, message):
    rows = [{"prompt": "2+2?", "answer": "4"}, {"prompt": [{"role": "user", "content": content}], "answer": "4"}]
    with pytest.raises(ValueError, match=rf"dataset row 1: message 0.*{message}"):
        _trainer(rows, _answer_reward)


@pytest.mark.parametrize(
    "prompt",
    [
        "What is \ud800 2+2?",
        "\udfff",
        [{"role": "user", "content": "2+2?\udc80"}],
        [{"role": "user", "content": _parts("ok", "bad \ud83d")}],
    ],
)
def test_a_prompt_with_a_lone_surrogate_is_refused_naming_the_row(prompt):
    rows = [{"prompt": "2+2?", "answer": "4"}, {"prompt": prompt, "answer": "4"}]
    with pytest.raises(ValueError, match=r"dataset row 1.*lone surrogate"):
        _trainer(rows, _answer_reward)


@pytest.mark.parametrize(
    "bad", [1e200, -1e200, 1e39, 2e10, float("inf"), float("nan"), "1.0", [1.0], {"r": 1}], ids=lambda v: repr(v)
)
def test_a_reward_that_cannot_be_trained_on_names_function_row_and_value(bad):
    def scorer(completions, **kw):
        return [1.0] + [bad] * (len(completions) - 1)

    with pytest.raises(ValueError, match=r"reward function 'scorer': row 1 \(task .*\) is ") as err:
        _trainer([{"prompt": "2+2?", "answer": "4"}], scorer).train()
    assert repr(bad)[:8] in str(err.value) or str(bad) in str(err.value)


def test_a_reward_left_as_none_by_every_function_names_the_row_and_the_functions():
    def scorer(completions, **kw):
        return [1.0] + [None] * (len(completions) - 1)

    with pytest.raises(ValueError, match=r"row 1 \(task .*\): every reward function returned None \(\['scorer'\]\)"):
        _trainer([{"prompt": "2+2?", "answer": "4"}], scorer).train()


def test_large_reward_weights_cannot_push_the_sum_out_of_range():
    from erl_lite.integrations.dataset import RewardFunctionEnv
    from erl_lite.records import Task

    env = RewardFunctionEnv([lambda completions, **kw: [1e9] * len(completions)] * 2, reward_weights=[8.0, 8.0])
    ep = env.new_episode()
    ep.reset(Task("t", "x", {}))
    ep.step("a")
    with pytest.raises(ValueError, match=r"row 0 \(task 't'\): the weighted sum .* is 16000000000\.0"):
        env.score_batch([ep], [[1]])


@pytest.mark.parametrize("out", [lambda n: [1.0] * (n + 1), lambda n: [1.0] * (n - 1), lambda n: []])
def test_a_reward_list_of_the_wrong_length_names_the_function(out):
    def scorer(completions, **kw):
        return out(len(completions))

    with pytest.raises(ValueError, match=r"reward function 'scorer' returned \d+ values for 2 completions"):
        _trainer([{"prompt": "2+2?", "answer": "4"}], scorer).train()


# --- environment variables in paths: defined ones expand, undefined ones are refused --------------------
UNSET_PATHS = [
    "$ERL_LITE_UNSET_VAR/run",
    "${ERL_LITE_UNSET_VAR}/run",
    "runs/$ERL_LITE_UNSET_VAR",
    "~erl_lite_no_such_user/run",
]


@pytest.fixture
def unset_var(monkeypatch, tmp_path):
    monkeypatch.delenv("ERL_LITE_UNSET_VAR", raising=False)
    monkeypatch.setenv("ERL_LITE_SET_VAR", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # a folder literally named "$ERL_LITE_UNSET_VAR" would land here


@pytest.mark.parametrize("path", UNSET_PATHS)
def test_an_undefined_variable_in_output_dir_is_refused_at_config(unset_var, tmp_path, path):
    word = "~erl_lite_no_such_user" if path.startswith("~") else "ERL_LITE_UNSET_VAR"
    with pytest.raises(ValueError, match=rf"ERLConfig\.output_dir.*{word}"):
        ERLConfig(output_dir=path)
    with pytest.raises(ValueError, match=word):
        ERLConfig().replace(output_dir=path)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("path", ["$ERL_LITE_SET_VAR/run", "${ERL_LITE_SET_VAR}/run", "~/run"])
def test_a_defined_variable_in_output_dir_expands(unset_var, tmp_path, path):
    expected = os.path.join(os.path.expanduser("~") if path.startswith("~") else str(tmp_path), "run")
    assert ERLConfig(output_dir=path).output_dir == expected


@pytest.mark.parametrize("path", UNSET_PATHS)
@pytest.mark.parametrize("route", ["--out", "--model", "yaml"])
def test_an_undefined_variable_in_a_command_line_path_is_refused(unset_var, monkeypatch, tmp_path, capsys, path, route):
    import erl_lite.run.trainer
    from erl_lite.cli import main

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", None)  # never reached
    if route == "yaml":
        (tmp_path / "run.yaml").write_text(f"output_dir: '{path}'\n")
    flags = ["--config", "run.yaml"] if route == "yaml" else [route, path]
    try:
        code = main(["train", "--env", "arithmetic", "--steps", "1", *flags])
    except SystemExit as e:  # argparse's refusal of an option's value
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert ("erl_lite_no_such_user" if path.startswith("~") else "ERL_LITE_UNSET_VAR") in err and " here" in err
    assert sorted(os.listdir(tmp_path)) == (["run.yaml"] if route == "yaml" else [])


# --- combinations a run cannot honour, sizes it cannot hold, settings it would never read -------------
@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(generation_backend="vllm", load_in_4bit=True), r"generation_backend='vllm'.*load_in_4bit=True"),
        (dict(use_vllm=True, load_in_4bit=True), r"generation_backend='vllm'.*load_in_4bit=True"),
        (dict(vllm_importance_sampling_correction=True), r"vllm_importance_sampling_correction=True.*'generate'"),
        (
            dict(generation_backend="continuous", vllm_importance_sampling_mode="sequence_mask"),
            r"vllm_importance_sampling_mode='sequence_mask'.*'continuous'",
        ),
        (dict(vllm_importance_sampling_clip_max=2.0), r"vllm_importance_sampling_clip_max=2\.0"),
        (dict(vllm_importance_sampling_clip_min=0.5), r"vllm_importance_sampling_clip_min=0\.5"),
        (dict(vllm_gpu_memory_utilization=0.5), r"vllm_gpu_memory_utilization=0\.5"),
        (dict(memory_type="slots", memory_top_k=5), r"memory_top_k=5.*memory_type='slots'"),
        (dict(memory_top_k=5), r"memory_top_k=5.*memory_type='single'"),
        (dict(memory_size=10), r"memory_size=10.*memory_type='single'"),
        (dict(memory_type="fifo", memory_size=3, memory_top_k=5), r"memory_size=3 \(memory_top_k=5\).*fifo"),
        (dict(use_internalization=False, internalization_coef=0.5), r"internalization_coef=0\.5.*use_internalization"),
        (dict(use_internalization=False, internalization_mode="nll"), r"internalization_mode='nll'"),
    ],
)
def test_settings_the_run_would_drop_are_refused_at_config(kwargs, named):
    with pytest.raises(ValueError, match=named):
        ERLConfig(**kwargs)
    with pytest.raises(ValueError, match=named):
        ERLConfig.preset("cpu", **kwargs)


@pytest.mark.parametrize("size", [2**40, 2**17, 10**6])
@pytest.mark.parametrize("kind", ["slots", "fifo"])
def test_a_memory_too_large_to_hold_is_refused_with_its_bound(kind, size):
    with pytest.raises(ValueError, match=rf"memory_size={size}.*65536"):
        ERLConfig(memory_type=kind, memory_size=size)
    assert ERLConfig(memory_type=kind, memory_size=2**16).memory_size == 2**16  # the bound itself holds


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(generation_backend="vllm", vllm_importance_sampling_correction=True, vllm_gpu_memory_utilization=0.5),
        dict(memory_type="fifo", memory_size=10, memory_top_k=10),
        dict(memory_type="slots", memory_size=1024),
        dict(use_internalization=True, internalization_mode="nll"),
        dict(generation_backend="vllm"),
    ],
)
def test_settings_the_run_reads_still_pass(kwargs):
    ERLConfig(**kwargs)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--generation-backend", "vllm", "--load-in-4bit"], "load_in_4bit=True"),
        (["--vllm-importance-sampling-correction"], "vllm_importance_sampling_correction=True"),
        (["--memory-type", "slots", "--memory-size", str(2**40)], "memory_size=1099511627776"),
        (["--memory-type", "slots", "--memory-top-k", "4"], "memory_top_k=4"),
    ],
)
def test_the_same_combinations_are_refused_from_the_command_line_and_a_run_file(
    monkeypatch, tmp_path, capsys, flags, named
):
    import erl_lite.run.trainer
    from erl_lite.cli import main

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", None)  # never reached
    assert main(["train", *flags]) == 2
    assert named in capsys.readouterr().err
    lines = []
    for flag, value in zip(flags, [*flags[1:], None]):
        if flag.startswith("--"):
            lines.append(f"{flag[2:]}: {'true' if value is None or value.startswith('--') else value}")
    path = _run_file(tmp_path, "\n".join(lines) + "\n")
    assert main(["train", "--config", path]) == 2
    assert named in capsys.readouterr().err


# --- reward weights: one check for ERLTrainer, the command line and a run file -----------------------
def _always(completions, **kw):
    return [1.0] * len(completions)


def _never(completions, **kw):
    return [0.0] * len(completions)


BAD_WEIGHTS = [
    ([math.nan, 1.0], "finite"),
    ([1.0, math.inf], "finite"),
    ([-math.inf, 1.0], "finite"),
    ([1.0], "2 finite numbers"),
    ([1.0, 2.0, 3.0], "2 finite numbers"),
    ([], "2 finite numbers"),
    (["1", 1.0], "finite numbers"),
    ([True, 1.0], "finite numbers"),
    ([0.0, 0.0], "above 0"),
    ([-1.0, -0.5], "above 0"),
    ([-1.0, 0.0], "above 0"),
]


@pytest.mark.parametrize("weights, says", BAD_WEIGHTS)
def test_bad_reward_weights_are_refused_by_the_trainer_before_a_model_loads(weights, says):
    from erl_lite.run.trainer import ERLTrainer

    model = "no/such-model-is-loaded"  # the refusal comes first: nothing is fetched
    with pytest.raises(ValueError, match="reward_weights") as err:
        ERLTrainer(model=model, reward_funcs=[_always, _never], reward_weights=weights, train_dataset=[{"prompt": "x"}])
    assert says in str(err.value) and "_always _never" in str(err.value)


@pytest.mark.parametrize(
    "given, named",
    [
        ({"reward_weights": [1.0]}, "reward_weights"),
        ({"feedback_func": _never}, "feedback_func"),
        ({"reward_weights": [2.0], "feedback_func": _never}, "reward_weights, feedback_func"),
        ({"reward_weights": [math.nan]}, "reward_weights"),
        ({"environment_factory": object, "feedback_func": _never}, "feedback_func"),
    ],
)
def test_settings_for_reward_functions_are_refused_with_an_environment_that_scores_itself(given, named):
    from erl_lite.envs.frozenlake import FrozenLake
    from erl_lite.run.trainer import ERLTrainer

    # env= scores its own episodes: weights or feedback for reward functions would be dropped without a word.
    with pytest.raises(ValueError, match=f"{named} .*reward_funcs=") as err:
        ERLTrainer(
            model="no/such-model-is-loaded",
            **({} if "environment_factory" in given else {"env": FrozenLake()}),
            **given,
        )
    assert "env=" in str(err.value) or "environment_factory=" in str(err.value)


@pytest.mark.parametrize("weights", [[1.0, 0.0], [2.0, -1.0], (0.5, 0.5), [1, 3]])
def test_reward_weights_with_a_positive_one_pass(weights):
    from erl_lite.integrations.dataset import RewardFunctionEnv

    assert RewardFunctionEnv([_always, _never], reward_weights=weights).reward_weights == [float(w) for w in weights]


@pytest.mark.parametrize("weights, says", [(w, s) for w, s in BAD_WEIGHTS if all(isinstance(v, float) for v in w)])
@pytest.mark.parametrize("route", ["cli", "yaml"])
def test_bad_reward_weights_are_refused_alike_on_the_command_line_and_in_a_run_file(
    monkeypatch, tmp_path, capsys, weights, says, route
):
    import erl_lite.run.trainer
    from erl_lite.cli import main

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", None)  # never reached
    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": "Say 1."}) + "\n")
    (tmp_path / "weights_mod.py").write_text(
        "def _always(completions, **kw):\n    return [1.0] * len(completions)\n_never = _always\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    data = ["train", "--dataset", "rows.jsonl", "--reward-funcs", "weights_mod:_always", "weights_mod:_never"]
    if route == "yaml":
        (tmp_path / "run.yaml").write_text(
            f"reward_weights: {json.dumps(weights).replace('NaN', '.nan')}\n".replace("-Infinity", "-.inf").replace(
                "Infinity", ".inf"
            )
        )
        argv = [*data, "--config", "run.yaml"]
    else:
        argv = [*data, "--reward-weights", *map(str, weights)] if weights else data + ["--reward-weights"]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: --reward-weights with no value
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    argparse_refuses = route == "cli" and (weights == [] or -math.inf in weights)  # no value, or "-inf": a flag
    assert argparse_refuses or "reward_weights" in err and says in err, err


# --- a GPU preset on a machine without CUDA: one paragraph from the command line, exit code 2 ---------
@pytest.mark.parametrize(
    "flags",
    [
        ["--preset", "paper", "--model", "tiny"],
        ["--preset", "paper"],
        ["--preset", "gpu", "--env", "frozenlake"],
        ["--config", "run.yaml"],
    ],
)
def test_a_gpu_preset_without_cuda_is_one_paragraph_and_exit_2(monkeypatch, tmp_path, capsys, flags):
    import torch

    import erl_lite.run.trainer
    from erl_lite.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", None)  # never reached
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text("preset: paper\nenv: sokoban\n")
    assert main(["train", *flags, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("erl-lite train: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "CUDA" in err and "--preset cpu" in err
    assert not any(word in err for word in ("notebook", "PRESET =", "Colab", "allow_cpu"))


# --- resume refuses a change of the environment's settings, as it does the model's ------------------
def _env_differences(saved_env, resumed_env) -> list[str]:
    from erl_lite.run.identity import run_differences, run_identity

    config = ERLConfig().to_dict()
    return run_differences(run_identity(config, None, env=saved_env), run_identity(config, None, env=resumed_env))


@pytest.mark.parametrize(
    "saved, resumed, named",
    [
        (dict(sizes=(2, 3)), dict(sizes=(2, 3), prompt_style="reference"), "prompt_style: checkpoint 'plain'"),
        (dict(sizes=(2, 3)), dict(sizes=(2, 3), hint=False), "hint: checkpoint True, this run False"),
        (dict(sizes=(2, 3)), dict(sizes=(2, 3), max_actions=3), "max_turns: checkpoint 8, this run 3"),
        (dict(sizes=(2, 3)), dict(sizes=(2, 3), compact=True), "compact"),
        (dict(sizes=(2, 3)), dict(sizes=(2, 3), symbols={"agent": "Z"}), "symbols"),
    ],
)
def test_resume_names_each_changed_setting_of_a_grid_game(saved, resumed, named):
    from erl_lite.envs import FrozenLake

    lines = _env_differences(FrozenLake(**saved), FrozenLake(**resumed))
    assert any(line.startswith("env.") and named in line for line in lines), lines
    assert _env_differences(FrozenLake(**saved), FrozenLake(**saved)) == []


def test_resume_names_a_changed_reward_weight_or_environment_class():
    from erl_lite.envs import FrozenLake, Sokoban
    from erl_lite.integrations.dataset import RewardFunctionEnv

    lines = _env_differences(
        RewardFunctionEnv([_always, _never], reward_weights=[1, 0]),
        RewardFunctionEnv([_always, _never], reward_weights=[0, 1]),
    )
    assert lines == ["env.reward_weights: checkpoint [1.0, 0.0], this run [0.0, 1.0]"]
    assert any(line.startswith("env.class:") for line in _env_differences(FrozenLake(), Sokoban()))


def test_a_checkpoint_written_before_settings_were_recorded_still_resumes():
    from erl_lite.envs import FrozenLake
    from erl_lite.run.identity import run_differences, run_identity

    config = ERLConfig().to_dict()
    now = run_identity(config, None, env=FrozenLake(prompt_style="reference"))
    old = {**now, "env": {k: now["env"][k] for k in ("name", "class")}}
    assert run_differences(old, now) == []


@pytest.mark.slow
def test_a_frozenlake_run_resumed_with_another_prompt_style_is_refused(tmp_path):
    from erl_lite.envs import FrozenLake
    from erl_lite.run.trainer import ERLTrainer
    from erl_lite.testing import tiny_model, tiny_tokenizer

    def trainer(style):
        tok = tiny_tokenizer()
        args = ERLConfig.preset(
            "cpu",
            max_steps=1,
            num_tasks_per_step=1,
            num_generations=2,
            max_completion_length=4,
            max_reflection_length=4,
            eval_steps=0,
            progress_bar=False,
            save_steps=1,
            output_dir=str(tmp_path),
            diagnostics="off",
        )
        env = FrozenLake(sizes=(2, 2), max_actions=1, prompt_style=style)
        return ERLTrainer(model=tiny_model(tok, seed=3), processing_class=tok, args=args, env=env)

    trainer("plain").train()
    with pytest.raises(ValueError, match=r"env\.prompt_style: checkpoint 'plain', this run 'reference'"):
        trainer("reference").train(resume_from_checkpoint=True)


# --- one of a few words: one check, one wording ------------------------------------------------
def _choice_calls():
    """A function of each layer that takes one of a few words, given a word it does not take."""
    from erl_lite.config.presets import require_cuda_for_preset
    from erl_lite.core.advantages import group_advantages, internalization_weights
    from erl_lite.core.losses import row_losses
    from erl_lite.core.memory import ReflectionMemory
    from erl_lite.embedded.world import world_settings
    from erl_lite.envs.frozenlake import FrozenLake
    from erl_lite.envs.qa import MultiHopQA
    from erl_lite.integrations.budget import model_config
    from erl_lite.integrations.data_sources import load_rows

    return [
        (lambda: ERLConfig(loss_type="ppo"), "ERLConfig.loss_type must be one of seq_sum, token_mean, seq_mean, grpo"),
        (lambda: ERLConfig.preset("tpu"), "preset must be one of cpu, demo, gpu, paper, got 'tpu'"),
        (lambda: require_cuda_for_preset("tpu"), "preset must be one of None, cpu, demo, gpu, paper, got 'tpu'"),
        (lambda: group_advantages([1.0], scale="sum"), "scale must be one of group, batch, none, got 'sum'"),
        (lambda: internalization_weights([1.0], "sft"), "internalization mode must be one of raft, nll, got 'sft'"),
        (lambda: row_losses(None, None, "grpo"), "loss_type must be one of seq_sum, token_mean, seq_mean, got 'grpo'"),
        (lambda: ReflectionMemory("lifo"), "memory kind must be one of single, fifo, got 'lifo'"),
        (lambda: world_settings("mars"), "embedded world must be one of demo, hard, sparse, got 'mars'"),
        (lambda: FrozenLake(source="web"), "source must be one of generated, paper, got 'web'"),
        (lambda: MultiHopQA(source="web"), "source must be one of generated, hotpotqa, paper, got 'web'"),
        (lambda: model_config("qwen9"), "model config must be one of qwen2.5-0.5b-instruct, "),
        (lambda: load_rows([], split="dev"), "split must be one of eval, train, got 'dev'"),
    ]


@pytest.mark.parametrize("index", range(12))
def test_a_word_that_is_not_one_of_the_choices_is_refused_naming_them(index):
    call, message = _choice_calls()[index]
    with pytest.raises(ValueError) as caught:
        call()
    assert str(caught.value).startswith(message)


def test_a_choice_is_checked_only_by_config_checks_check_choice():
    """The ValueError "X must be one of a, b, got c" is written once, in config/checks.py (a new check calls it).
    Exempt: testing.py, whose room imports nothing of erl_lite, and the command line's argparse errors."""
    import pathlib
    import re

    package = pathlib.Path(__file__).resolve().parent.parent / "erl_lite"
    written = re.compile(r"must be one of|choose one of|; shipped: ")
    by_hand = []
    for path in package.rglob("*.py"):
        if str(path.relative_to(package)) in ("config/checks.py", "testing.py"):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        by_hand += [
            f"{path.relative_to(package)}:{n}"
            for n, line in enumerate(lines, 1)
            if written.search(line) and "ValueError" in lines[n - 2] + line
        ]
    assert not by_hand, f"write these with config.checks.check_choice: {by_hand}"


# --- environment options: typed and range-checked at construction, by name ------------------------------------------
def _env_cases():
    from erl_lite.embedded.world import DemoLake
    from erl_lite.envs import FrozenLake, MultiHopQA, Sokoban
    from erl_lite.envs.arithmetic import make_arithmetic_dataset

    return [
        (FrozenLake, {"hint": "false"}, "FrozenLake.hint"),  # a truthy string turned the hint on
        (FrozenLake, {"hint": 0}, "FrozenLake.hint"),
        (FrozenLake, {"compact": "yes"}, "FrozenLake.compact"),
        (FrozenLake, {"sizes": (2,)}, "FrozenLake.sizes"),  # was an IndexError
        (FrozenLake, {"sizes": (2.5, 3)}, "FrozenLake.sizes"),
        (FrozenLake, {"sizes": (4, 3)}, "FrozenLake.sizes"),
        (FrozenLake, {"symbol_seed": -1}, "FrozenLake.symbol_seed"),
        (FrozenLake, {"max_actions": 0}, "FrozenLake.max_actions"),
        (Sokoban, {"hint": "true"}, "Sokoban.hint"),
        (Sokoban, {"sizes": (3, 5)}, "Sokoban.sizes"),
        (Sokoban, {"sizes": "6"}, "Sokoban.sizes"),
        (MultiHopQA, {"max_turns": 0, "top_k": 0}, "MultiHopQA.max_turns"),
        (MultiHopQA, {"top_k": 0}, "MultiHopQA.top_k"),
        (MultiHopQA, {"max_turns": 2.0}, "MultiHopQA.max_turns"),
        (MultiHopQA, {"compact": "false"}, "MultiHopQA.compact"),
        (MultiHopQA, {"retriever": "bm25"}, "MultiHopQA.retriever"),
        (MultiHopQA, {"world": {"n_people": 0}}, "MultiHopQA.n_people"),
        (DemoLake, {"hints": "no"}, "DemoLake.hints"),
        (DemoLake, {"lined": 1}, "DemoLake.lined"),
        (make_arithmetic_dataset, {"n_ops": (0, 2)}, "make_arithmetic_dataset.n_ops"),
        (make_arithmetic_dataset, {"max_operand": 0}, "make_arithmetic_dataset.max_operand"),
        (make_arithmetic_dataset, {"chat": "yes"}, "make_arithmetic_dataset.chat"),
    ]


@pytest.mark.parametrize("case", range(22))
def test_environment_options_are_refused_at_construction_by_name(case):
    make, options, name = _env_cases()[case]
    with pytest.raises((TypeError, ValueError), match=re.escape(name)):
        make(**options)


def test_the_documented_option_values_are_accepted():
    from erl_lite.envs import FrozenLake, MultiHopQA, Sokoban

    assert FrozenLake(hint=False).hint is False and FrozenLake(hint=True, sizes=[2, 3]).hint is True
    assert MultiHopQA(max_turns=1, top_k=1).max_turns == 1 and Sokoban(sizes=(4, 4)).source == "generated"
