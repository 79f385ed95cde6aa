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
