"""Refusals the command line meets once training has begun (resuming): one paragraph naming the flag, no traceback."""

from __future__ import annotations

import pytest

from erl_lite.cli import main

TRAIN = ["train", "--model", "tiny", "--eval-steps", "0"]


@pytest.mark.slow
def test_a_resume_the_settings_refuse_is_one_paragraph_naming_the_flag(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main([*TRAIN, "--steps", "2", "--save-steps", "1", "--out", out]) == 0
    capsys.readouterr()
    assert main([*TRAIN, "--steps", "1", "--out", out, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "beyond max_steps=1" in err and "Set max_steps above 2" in err, err
    assert main([*TRAIN, "--steps", "3", "--out", out, "--resume", "--reward-threshold", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "reward_threshold" in err and "--ignore-config-mismatch" in err, err
    # The advice works: the flag it names reaches the trainer.
    flagged = [
        *TRAIN,
        "--steps",
        "3",
        "--out",
        out,
        "--resume",
        "--reward-threshold",
        "0.5",
        "--ignore-config-mismatch",
    ]
    with pytest.warns(UserWarning, match="reward_threshold"):
        assert main(flagged) == 0
    assert "done: 3 steps" in capsys.readouterr().out


@pytest.mark.parametrize(
    "env, options, named",
    [
        ("frozenlake", '{"bogus": 1}', "bogus"),
        ("sokoban", '{"bogus": 1, "boxes": 1}', "bogus"),
        ("qa", '{"colour": "red"}', "colour"),
        ("arithmetic", '{"digits": 3}', "digits"),
        ("demo", '{"size": 5}', "size"),  # the demo world takes none: it was ignored
    ],
)
def test_an_environment_option_it_does_not_take_is_refused_naming_it(env, options, named, tmp_path, capsys):
    argv = ["train", "--env", env, "--env-options", options, "--steps", "1", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--env-options" in err and repr(named) in err and env in err, err
    assert not (tmp_path / "run").exists()  # refused before any model is loaded or folder made
