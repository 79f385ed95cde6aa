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
import typing
import warnings

import pytest

from erl_lite.config import ERLConfig

# --- values of the wrong type, or not finite ---------------------------------------------------
FLOAT_FIELDS = [f.name for f in dataclasses.fields(ERLConfig)
                if typing.get_type_hints(ERLConfig)[f.name] in (float, float | None)]


def test_the_float_fields_are_found_from_the_annotations():
    # the NaN/inf test below covers every float field; this guards it against finding none
    assert {"learning_rate", "beta", "weight_decay", "internalization_coef", "max_grad_norm", "lora_alpha",
            "temperature", "top_p", "epsilon", "epsilon_high", "reward_threshold", "dual_clip"} <= set(FLOAT_FIELDS)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_non_finite_float_settings_are_refused_naming_the_field(name, value):
    with pytest.raises(ValueError, match=rf"ERLConfig\.{name}\b.*finite"):
        ERLConfig(**{name: value})
    with pytest.raises(ValueError, match=rf"ERLConfig\.{name}\b.*finite"):
        dataclasses.replace(ERLConfig(), **{name: value})
    with pytest.raises(ValueError, match=rf"ERLConfig\.{name}\b.*finite"):
        ERLConfig().replace(**{name: value})


@pytest.mark.parametrize("name, value", [
    ("temperature", True), ("learning_rate", False), ("top_p", "0.9"), ("beta", None), ("beta", [0.1]),
    ("beta", {"a": 1}), ("use_memory", 2), ("use_memory", 1), ("use_memory", "yes"), ("use_memory", None),
    ("seed", 1.5), ("seed", True), ("seed", "42"), ("max_steps", 2.5), ("num_generations", True),
    ("mode", 3), ("output_dir", 5), ("lora_target_modules", 7), ("lora_target_modules", ["q_proj", 3]),
    ("report_to", 1), ("generation_kwargs", [1]), ("generation_kwargs", {1: 2}), ("extra", "note"),
    ("warmup_steps", True), ("logging_steps", "1"), ("dual_clip", "3"), ("num_train_epochs", True),
    ("save_total_limit", 2.5), ("memory_type", None), ("progress_bar", 0.0),
])
def test_values_of_the_wrong_type_are_refused_naming_the_field(name, value):
    with pytest.raises(ValueError, match=rf"ERLConfig\.{name}\b"):
        ERLConfig(**{name: value})


@pytest.mark.parametrize("name, value, stored", [
    ("seed", 3.0, 3), ("max_steps", 10.0, 10), ("learning_rate", 1, 1), ("lora_alpha", 16, 16),
    ("dual_clip", None, None), ("logging_steps", 0.5, 0.5), ("logging_steps", 2, 2), ("report_to", ("wandb",), ["wandb"]),
    ("lora_target_modules", ("q_proj",), ("q_proj",)), ("scale_rewards", True, "group"),
])
def test_values_that_are_the_right_kind_still_pass(name, value, stored):
    # a whole float is a whole number (YAML and JSON write 3.0); an int is a float; None where allowed
    cfg = ERLConfig(**{"mode": "erl", name: value})
    assert getattr(cfg, name) == stored and type(getattr(cfg, name)) is type(stored)


# --- groups of one ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: ERLConfig(mode="rlvr", num_generations=1),
    lambda: ERLConfig(mode="erl_simple", num_generations=1),
    lambda: ERLConfig(mode="rlvr", num_generations=4).replace(num_generations=1),
    lambda: ERLConfig(num_generations=1).replace(mode="rlvr"),  # an explicit G follows a new mode
    lambda: ERLConfig.preset("cpu", mode="rlvr", num_generations=1),
], ids=["rlvr", "erl_simple", "replace-G", "replace-mode", "preset"])
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


@pytest.mark.parametrize("line, message", [
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
    ("learning-rate: 1e-3\nlearning_rate: 1e-4", "learning_rate is given twice (lines 2 and 3: "
                                                 "'learning-rate' and 'learning_rate')"),
])
def test_run_file_values_are_checked_naming_file_line_and_field(monkeypatch, tmp_path, capsys, line, message):
    import erl_lite.trainer
    from erl_lite.cli import main

    monkeypatch.setattr(erl_lite.trainer, "ERLTrainer", None)  # never reached

    path = _run_file(tmp_path, "env: demo\n" + line + "\n")
    assert main(["train", "--config", path]) == 2
    err = capsys.readouterr().err
    lineno = 2 if "twice" not in message else 3
    assert f"{path}:{lineno}:" in err and message in err, err


@pytest.mark.parametrize("flags, message", [
    (["--learning-rate", "nan"], "ERLConfig.learning_rate must be a finite number, got nan"),
    (["--beta", "inf"], "ERLConfig.beta must be a finite number, got inf"),
    (["--max-steps", "3", "--steps", "4"], "max_steps is given twice: --max-steps 3 and --steps 4"),
    (["--learning-rate", "1e-3", "--learning_rate", "1e-4"],
     "learning_rate is given twice: --learning-rate 0.001 and --learning_rate 0.0001"),
    (["--out", "a", "--output-dir", "b"], "output_dir is given twice: --out 'a' and --output-dir 'b'"),
    (["--use-memory", "--no-memory"], "use_memory is given twice: --use-memory True and --no-memory False"),
    (["--no_use_memory", "--use_memory", "true"], "use_memory is given twice"),
])
def test_command_line_values_are_checked_naming_the_option(monkeypatch, capsys, flags, message):
    import erl_lite.trainer
    from erl_lite.cli import main

    monkeypatch.setattr(erl_lite.trainer, "ERLTrainer", None)  # never reached
    assert main(["train", *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("flags, expected", [
    (["--max-steps", "3", "--steps", "3"], 3),  # two spellings that agree: no conflict
    (["--steps", "3", "--steps", "4"], 4),      # one spelling twice: argparse's rule, the last wins
])
def test_two_spellings_that_agree_or_one_spelling_twice_pass(flags, expected):
    from erl_lite.cli import build_parser, train_config

    assert train_config(build_parser().parse_args(["train", *flags])).max_steps == expected
