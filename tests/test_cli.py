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
