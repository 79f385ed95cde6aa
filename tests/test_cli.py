"""The erl-lite command line."""

from __future__ import annotations

import json

import pytest

from erl_lite.cli import build_parser, main
from erl_lite.testing import save_tiny_model


def test_parser_knows_the_documented_flags():
    args = build_parser().parse_args(["demo", "--steps", "3", "--mode", "rlvr", "--seed", "2", "--out", "x"])
    assert (args.command, args.steps, args.mode, args.seed, args.out) == ("demo", 3, "rlvr", 2, "x")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--mode", "ppo"])


@pytest.mark.slow
def test_train_subcommand_on_a_local_model(tmp_path, capsys):
    model_dir = save_tiny_model(str(tmp_path / "model"))
    out = tmp_path / "run"
    code = main(["train", "--env", "arithmetic", "--model", model_dir, "--steps", "1", "--out", str(out),
                 "--no-memory"])
    assert code == 0
    records = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1]
    assert (out / "checkpoint-1" / "trainer_state.json").exists()
    assert "done: 1 steps" in capsys.readouterr().out


@pytest.mark.slow
def test_train_defaults_to_the_embedded_model_on_its_world(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--steps", "1", "--out", str(out), "--seed", "3"]) == 0
    records = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert len(train) == 1 and train[0]["truncated/first"] == 0  # the demo budgets were used
    assert [r for r in records if r["kind"] == "eval"]
    assert "warning" not in capsys.readouterr().err


def test_embedded_model_on_another_world_warns(monkeypatch, capsys):
    import erl_lite.trainer

    class Stop(Exception):
        pass

    def refuse(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(erl_lite.trainer, "ERLTrainer", refuse)
    with pytest.raises(Stop):
        main(["train", "--env", "frozenlake", "--small", "--steps", "1"])
    assert "only taught the demo world" in capsys.readouterr().err


class _Built(Exception):
    """Raised by the stand-in trainer: the command got as far as building its trainer."""


def _trainer_arguments(monkeypatch, argv: list[str]) -> dict:
    """What ``main(argv)`` hands to ``ERLTrainer``, without training."""
    import erl_lite.trainer

    seen = {}

    def capture(**kwargs):
        seen.update(kwargs)
        raise _Built

    monkeypatch.setattr(erl_lite.trainer, "ERLTrainer", capture)
    with pytest.raises(_Built):
        main(argv)
    return seen


@pytest.mark.parametrize("flags,overrides", [
    ([], {}),
    (["--steps", "3", "--seed", "2", "--no-memory", "--out", "runs/x"],
     dict(max_steps=3, seed=2, use_memory=False, output_dir="runs/x")),
])
def test_train_on_the_demo_world_runs_the_demo_settings(monkeypatch, flags, overrides):
    """``erl-lite train --env demo`` trains with exactly the demo's config (lr 5e-4, 30 steps, its
    budgets); its flags override it."""
    from erl_lite.embedded import DEMO_EVAL_TASKS, demo_config, demo_world

    seen = _trainer_arguments(monkeypatch, ["train", "--env", "demo", *flags])
    assert seen["args"] == demo_config(**{"seed": 0, **overrides})  # the demo's seed: the CLI's default
    assert seen["args"].learning_rate == 5e-4 and seen["args"].max_steps == overrides.get("max_steps", 30)
    assert seen["env"].symbols == demo_world(overrides.get("seed", 0)).symbols
    assert len(seen["eval_dataset"]) == DEMO_EVAL_TASKS
    assert seen["processing_class"].eos_token == "<|im_end|>"  # the embedded model


def test_train_config_without_training():
    from erl_lite.cli import train_config
    from erl_lite.config import ERLConfig
    from erl_lite.embedded import demo_config

    parse = build_parser().parse_args
    assert train_config(parse(["train"])) == demo_config(seed=0)
    assert train_config(parse(["train", "--steps", "4", "--mode", "erl_simple"])) == demo_config(
        seed=0, max_steps=4, mode="erl_simple")
    assert train_config(parse(["train", "--preset", "gpu"])) == demo_config(preset="gpu", seed=0)
    assert train_config(parse(["train", "--env", "qa", "--preset", "gpu"])) == ERLConfig.preset("gpu", seed=0)
