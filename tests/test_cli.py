"""The erl-lite command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from erl_lite.cli import build_parser, main
from erl_lite.testing import save_tiny_model

#: What ``erl-lite train`` records in the config's ``extra`` on the demo world (``erl-lite eval`` reads it).
DEMO_RECORD = {"env": "demo", "small": False}


def test_parser_knows_the_documented_flags():
    args = build_parser().parse_args(["demo", "--steps", "3", "--mode", "rlvr", "--seed", "2", "--out", "x"])
    assert (args.command, args.steps, args.mode, args.seed, args.out) == ("demo", 3, "rlvr", 2, "x")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--mode", "ppo"])


@pytest.mark.slow
def test_train_subcommand_on_a_local_model(tmp_path, capsys):
    model_dir = save_tiny_model(str(tmp_path / "model"))
    out = tmp_path / "run"
    code = main(
        ["train", "--env", "arithmetic", "--model", model_dir, "--steps", "1", "--out", str(out), "--no-memory"]
    )
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
    import erl_lite.run.trainer

    class Stop(Exception):
        pass

    def refuse(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", refuse)
    with pytest.raises(Stop):
        main(["train", "--env", "frozenlake", "--small", "--steps", "1"])
    assert "only taught the demo world" in capsys.readouterr().err


class _Built(Exception):
    """Raised by the stand-in trainer: the command got as far as building its trainer."""


def _trainer_arguments(monkeypatch, argv: list[str]) -> dict:
    """What ``main(argv)`` hands to ``ERLTrainer``, without training."""
    import erl_lite.run.trainer

    seen = {}

    def capture(**kwargs):
        seen.update(kwargs)
        raise _Built

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", capture)
    with pytest.raises(_Built):
        main(argv)
    return seen


@pytest.mark.parametrize(
    "flags,overrides",
    [
        ([], {}),
        (
            ["--steps", "3", "--seed", "2", "--no-memory", "--out", "runs/x"],
            dict(max_steps=3, seed=2, use_memory=False, output_dir="runs/x"),
        ),
    ],
)
def test_train_on_the_demo_world_runs_the_demo_settings(monkeypatch, flags, overrides):
    """``erl-lite train --env demo`` trains with exactly the demo's config (lr 1e-3, 30 steps, its
    budgets); its flags override it."""
    from erl_lite.embedded import DEMO_EVAL_TASKS, demo_config, demo_world

    seen = _trainer_arguments(monkeypatch, ["train", "--env", "demo", *flags])
    assert seen["args"] == demo_config(**overrides, extra=DEMO_RECORD)  # seed: the config's default
    assert seen["args"].learning_rate == 1e-3 and seen["args"].max_steps == overrides.get("max_steps", 30)
    assert seen["env"].symbols == demo_world(overrides.get("seed", 0)).symbols
    assert len(seen["eval_dataset"]) == DEMO_EVAL_TASKS
    assert seen["processing_class"].eos_token == "<|im_end|>"  # the embedded model


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--world", "sparse"],
        ["train", "--env", "demo", "--world", "sparse", "--seed", "2"],
    ],
)
def test_train_on_the_sparse_world(monkeypatch, argv):
    """``--world sparse`` trains on the embedded model's second world, as ``erl-lite demo --world
    sparse`` does, and records it so ``erl-lite eval`` rebuilds the same world."""
    from erl_lite.embedded import demo_config, demo_world

    seen = _trainer_arguments(monkeypatch, argv)
    seed = 2 if "--seed" in argv else 0
    expected = demo_world(seed, "sparse")
    assert seen["args"].extra == {**DEMO_RECORD, "world": "sparse"}
    assert seen["args"] == demo_config(**({"seed": 2} if seed else {}), extra={**DEMO_RECORD, "world": "sparse"})
    assert seen["env"].symbols == expected.symbols
    assert {t.data["size"] for t in seen["eval_dataset"]} == {5}  # the sparse world's 5x5 maps
    n = len(seen["eval_dataset"])
    assert [t.task_id for t in seen["eval_dataset"]] == [t.task_id for t in expected.test_tasks(n)]


def test_the_world_of_a_run_file_and_its_mistakes(monkeypatch, tmp_path, capsys):
    seen = _trainer_arguments(monkeypatch, ["train", "--config", _yaml(tmp_path, "world: sparse\n")])
    assert seen["args"].extra["world"] == "sparse"
    bad_file = _yaml(tmp_path, "world: huge\n")
    for argv, message in [
        (["train", "--env", "frozenlake", "--world", "sparse"], "--world applies to --env demo"),
        (["train", "--config", bad_file], "world must be one of demo, hard, sparse"),
    ]:
        assert main(argv) == 2
        assert message in capsys.readouterr().err


def test_resume_and_eval_rebuild_the_world_a_run_recorded(monkeypatch, tmp_path, capsys):
    import erl_lite.cli.evaluate as evaluate
    from erl_lite.embedded import world

    # The sparse world's 10,000 training maps take about 100 s to draw; 64 exercise the same path.
    monkeypatch.setitem(world.WORLDS, "sparse", {**world.WORLDS["sparse"], "n_train": 64})
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--world",
                "sparse",
                "--steps",
                "1",
                "--num-tasks-per-step",
                "1",
                "--eval-steps",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()  # the training's own lines
    # A resume builds its environment from its options: other ones than the checkpoint's are refused.
    for options, named in [
        ([], "world: 'sparse' there, 'demo' here"),
        (["--env", "frozenlake", "--world", "demo"], "env: 'demo' there, 'frozenlake' here"),
    ]:
        assert (
            main(
                [
                    "train",
                    "--resume",
                    "--out",
                    str(out),
                    "--steps",
                    "2",
                    "--num-tasks-per-step",
                    "1",
                    "--eval-steps",
                    "0",
                    *options,
                ]
            )
            == 2
        )
        assert named in capsys.readouterr().err
    built = []
    real = evaluate.build_environment
    monkeypatch.setattr(evaluate, "build_environment", lambda *a, **k: built.append((a, k)) or real(*a, **k))
    assert main(["eval", "--checkpoint", str(out), "--limit", "1", "--num-generations", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["env"] == "demo"
    assert built and built[0][1]["world"] == "sparse"


def test_train_config_without_training():
    from erl_lite.cli.train import train_settings
    from erl_lite.config import ERLConfig
    from erl_lite.embedded import demo_config

    parse = build_parser().parse_args
    assert train_settings(parse(["train"]))[1] == demo_config(extra=DEMO_RECORD)
    assert train_settings(parse(["train", "--steps", "4", "--mode", "erl_simple"]))[1] == demo_config(
        max_steps=4, mode="erl_simple", extra=DEMO_RECORD
    )
    # a named preset is used as it is, on the demo world too (no demo layer on top of it)
    assert train_settings(parse(["train", "--preset", "gpu"]))[1] == ERLConfig.preset("gpu", extra=DEMO_RECORD)
    assert train_settings(parse(["train", "--env", "qa", "--preset", "gpu"]))[1] == ERLConfig.preset(
        "gpu", extra={"env": "qa", "small": False}
    )


# --- every config field on the command line ----------------------------------------------------
def _train_help(monkeypatch, capsys) -> str:
    monkeypatch.setenv("COLUMNS", "100000")  # one line per option: no wrapping inside a sentence
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_train_help_lists_every_config_field_with_its_docstring(monkeypatch, capsys):
    import dataclasses

    from erl_lite.cli.config_args import field_docs, first_sentence
    from erl_lite.config import ERLConfig

    out = _train_help(monkeypatch, capsys)
    docs = field_docs()
    for f in dataclasses.fields(ERLConfig):
        if not (f.init and f.metadata.get("cli", True)):  # preset_name comes from --preset
            continue
        assert f"--{f.name.replace('_', '-')}" in out, f.name
        assert docs.get(f.name), f"ERLConfig.{f.name} has no docstring"
        assert first_sentence(docs[f.name]) in out, f.name
    for flag in (
        "--steps",
        "--out",
        "--no-memory",
        "--no-reflection",
        "--no-internalization",
        "--seed",
        "--mode",
        "--env",
        "--model",
        "--preset",
        "--load-in-4bit",
        "--resume",
        "--small",
        "--config",
    ):
        assert flag in out
    assert "Training iterations." in out and "{erl,erl_simple,rlvr}" in out


def test_field_docstrings_are_read_from_the_source():
    from erl_lite.cli.config_args import field_docs, first_sentence

    docs = field_docs()
    assert docs["learning_rate"].startswith("AdamW learning rate")
    assert first_sentence(docs["num_generations"]) == "G: first-attempt rollouts per task."
    assert first_sentence(docs["memory_type"]).startswith("single (paper: one slot")  # reST markup dropped
    assert first_sentence("Nucleus sampling (e.g. 0.9). More.") == "Nucleus sampling (e.g. 0.9)."


@pytest.mark.parametrize(
    "flags,expected",
    [
        (["--learning-rate", "1e-4", "--num-generations", "3"], dict(learning_rate=1e-4, num_generations=3)),
        (["--learning_rate", "1e-4", "--num_tasks_per_step", "2"], dict(learning_rate=1e-4, num_tasks_per_step=2)),
        (["--no-use-memory", "--train-reflection"], dict(use_memory=False)),
        (["--use_memory", "false", "--use_reflection", "true"], dict(use_memory=False)),
        (["--no_use_internalization"], dict(use_internalization=False)),
        (["--dual-clip", "none", "--save-total-limit", "2"], dict(dual_clip=None, save_total_limit=2)),
        (["--memory-type", "fifo", "--memory-size", "5"], dict(memory_type="fifo", memory_size=5)),
        (["--extra", "{note: first try}"], dict(extra={"note": "first try", **DEMO_RECORD}, preset_name="demo")),
        # the flags erl-lite train had before every field was an option
        (
            ["--steps", "3", "--out", "runs/x", "--seed", "5", "--mode", "rlvr"],
            dict(max_steps=3, output_dir="runs/x", seed=5, mode="rlvr", num_generations=10),
        ),
        (["--no-reflection"], dict(use_reflection=False)),
        (["--no-internalization", "--load-in-4bit"], dict(use_internalization=False, load_in_4bit=True)),
    ],
)
def test_each_kind_of_flag_reaches_the_config(flags, expected):
    from erl_lite.cli.train import train_settings
    from erl_lite.embedded import demo_config

    cfg = train_settings(build_parser().parse_args(["train", *flags]))[1]
    for name, value in expected.items():
        assert getattr(cfg, name) == value, name
    untouched = demo_config()
    assert cfg.max_completion_length == untouched.max_completion_length  # the rest: the demo's
    if "learning_rate" not in expected:
        assert cfg.learning_rate == untouched.learning_rate


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--mode", "ppo"], "mode must be one of"),
        (["--learning-rate", "fast"], "invalid float value"),
        (["--use_memory", "maybe"], "Truthy value expected: got maybe"),
        (["--max-steps", "1.5"], "invalid int value"),
    ],
)
def test_bad_flag_values_are_refused_naming_the_option(flags, message, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", *flags])
    err = capsys.readouterr().err
    assert message in err and flags[0] in err


def test_invalid_field_values_fail_before_loading_anything(monkeypatch, capsys):
    import erl_lite.run.trainer

    monkeypatch.setattr(erl_lite.run.trainer, "ERLTrainer", None)  # never reached
    assert main(["train", "--top-p", "1.5"]) == 2
    assert "ERLConfig.top_p must be in (0, 1]" in capsys.readouterr().err


# --- run files ---------------------------------------------------------------------------------
def _yaml(tmp_path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


def test_precedence_preset_then_file_then_flags(tmp_path):
    from erl_lite.cli.train import train_settings
    from erl_lite.config import DEFAULT_SEED
    from erl_lite.config.presets import PRESETS

    path = _yaml(tmp_path, "learning_rate: 1e-4\nmax-steps: 7\nmemory_type: fifo\npreset: gpu\n")
    cfg = train_settings(build_parser().parse_args(["train", "--config", path, "--steps", "2"]))[1]
    assert cfg.max_steps == 2  # flag over file
    assert cfg.learning_rate == 1e-4 and cfg.memory_type == "fifo"  # file over preset
    assert all(getattr(cfg, k) == v for k, v in PRESETS["gpu"].items() if k not in ("learning_rate", "max_steps"))
    assert cfg.eval_top_k == PRESETS["gpu"]["eval_top_k"] and cfg.preset_name == "gpu"  # preset from the file
    assert cfg.seed == DEFAULT_SEED  # the config's seed when neither file nor flag sets one

    path = _yaml(tmp_path, "env: qa\nsmall: true\nmodel: some/model\nseed: 4\nuse_memory: false\n")
    run, cfg = train_settings(build_parser().parse_args(["train", "--config", path, "--env", "sokoban"]))
    assert run == {
        "env": "sokoban",
        "small": True,
        "model": "some/model",
        "preset": "cpu",
        "world": "demo",
        "env_options": {},
    }
    assert cfg.max_completion_length == PRESETS["cpu"]["max_completion_length"]  # no demo settings off the demo
    assert (cfg.seed, cfg.use_memory, cfg.extra["env"]) == (4, False, "sokoban")


def test_run_file_drives_the_trainer(monkeypatch, tmp_path):
    from erl_lite.embedded import demo_world

    path = _yaml(tmp_path, "seed: 3\nnum_tasks_per_step: 2\n")
    seen = _trainer_arguments(monkeypatch, ["train", "--config", path])
    assert seen["args"].seed == 3 and seen["args"].num_tasks_per_step == 2
    assert seen["env"].symbols == demo_world(3).symbols  # the file's seed picks the world


@pytest.mark.parametrize(
    "text,message",
    [
        ("learning_rat: 1e-3\n", "unknown key 'learning_rat'; did you mean 'learning_rate'?"),
        ("steps: 3\n", "unknown key 'steps'; did you mean 'max_steps'?"),
        ("out: runs/x\n", "unknown key 'out'; did you mean 'output_dir'?"),
        ("presets: gpu\n", "did you mean 'preset'?"),
        ("- learning_rate\n", "must hold a mapping"),
        ("learning_rate: fast\n", "learning_rate: could not convert string to float"),
        ("env: mars\n", "env must be one of demo"),
        ("mode: [erl\n", "is not valid YAML"),
        ("num_generations: 0\n", "ERLConfig.num_generations must be a whole number >= 1"),
        ("small: maybe\n", "small must be true or false"),
        ("extra: [a, b]\n", "ERLConfig.extra must be a dict with string keys"),
    ],
)
def test_run_file_mistakes_are_named(tmp_path, capsys, text, message):
    path = _yaml(tmp_path, text)
    assert main(["train", "--config", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("erl-lite train: error:") and message in err


def test_missing_run_file_is_named(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read the config file" in capsys.readouterr().err


# --- eval and plot -----------------------------------------------------------------------------
TINY_RUN = ["--num-tasks-per-step", "2", "--num-generations", "2", "--eval-steps", "0", "--learning-rate", "0.05"]


def test_eval_reproduces_the_trained_model(tmp_path, capsys):
    """``erl-lite eval`` on a checkpoint gives what the trainer that wrote it measures in
    memory, with the same seed and tasks: the adapter, base model and sampler are the run's."""
    from transformers import set_seed

    from erl_lite.embedded.demo import demo_trainer

    trainer = demo_trainer(
        seed=1,
        eval_tasks=4,
        max_steps=1,
        num_tasks_per_step=2,
        eval_steps=0,
        learning_rate=0.05,
        output_dir=str(tmp_path),
    )
    trainer.train()
    set_seed(trainer.args.seed)
    expected = trainer.evaluate(num_generations=2)

    from test_run_ownership import snapshot

    run = snapshot(tmp_path)
    assert main(["eval", "--checkpoint", str(tmp_path), "--limit", "4", "--num-generations", "2"]) == 0
    assert snapshot(tmp_path) == run  # eval writes nothing (docs/RUNS.md): no lock, record or file left
    got = json.loads(capsys.readouterr().out)
    assert got["checkpoint"].endswith("checkpoint-1") and got["step"] == 1
    assert (got["env"], got["tasks"], got["num_generations"]) == ("demo", 4, 2)  # the env the checkpoint recorded
    assert {k: got[k] for k in expected} == expected


def test_train_run_file_then_eval_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    path = _yaml(tmp_path, f"max_steps: 1\noutput_dir: {out}\nseed: 2\n")
    assert main(["train", "--config", path, *TINY_RUN]) == 0
    capsys.readouterr()
    rows = tmp_path / "tasks.jsonl"
    from erl_lite.embedded import demo_world

    tasks = demo_world(2).test_tasks(3)
    rows.write_text(
        "".join(json.dumps({"task_id": t.task_id, "prompt": t.prompt, "data": t.data}) + "\n" for t in tasks)
    )
    assert (
        main(["eval", "--checkpoint", str(out / "checkpoint-1"), "--dataset", str(rows), "--num-generations", "1"]) == 0
    )
    got = json.loads(capsys.readouterr().out)
    assert (got["env"], got["tasks"], got["eval/num_episodes"]) == ("demo", 3, 3.0)  # env recorded by train
    assert 0 <= got["eval/success"] <= 1

    assert main(["plot", str(out / "history.jsonl"), "--out", str(tmp_path / "figs")]) == 0
    printed = capsys.readouterr().out.split()
    names = sorted(os.path.basename(p) for p in printed)
    assert names == ["eval.png", "gate_rate.png", "losses.png", "memory.png", "overview.png", "rewards.png"]
    assert all(os.path.getsize(p) > 1000 for p in printed)


def test_eval_on_a_dataset_scored_by_the_arithmetic_reward(tmp_path, capsys):
    from erl_lite.envs.arithmetic import make_arithmetic_dataset

    out = tmp_path / "run"
    model_dir = save_tiny_model(str(tmp_path / "model"))
    assert (
        main(
            [
                "train",
                "--env",
                "arithmetic",
                "--model",
                model_dir,
                "--steps",
                "1",
                "--out",
                str(out),
                *TINY_RUN,
                "--max-completion-length",
                "4",
                "--max-reflection-length",
                "4",
            ]
        )
        == 0
    )
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in make_arithmetic_dataset(3, seed=5)))
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(out), "--dataset", str(rows), "--num-generations", "2"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["env"], got["tasks"], got["eval/num_episodes"]) == ("arithmetic", 3, 6.0)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["eval", "--checkpoint", "{tmp}"], "no good checkpoint at"),
        (["plot", "{tmp}/history.jsonl"], "no run folder or history file at"),
    ],
)
def test_eval_and_plot_name_what_is_missing(tmp_path, capsys, argv, message):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags,message",
    [
        (
            ["--limit", "-1"],
            "argument --limit: must be a whole number >= 1, got '-1'",
        ),  # evaluated all tasks but the last
        (["--limit", "0"], "argument --limit: must be a whole number >= 1, got '0'"),
        (
            ["--num-generations", "0"],
            "argument --num-generations: must be a whole number >= 1, got '0'",
        ),  # ran the run's 2
        (["--num-generations", "-2"], "argument --num-generations: must be a whole number >= 1, got '-2'"),
    ],
)
def test_eval_refuses_counts_below_one_before_reading_the_checkpoint(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:  # refused while parsing (erl_lite.cli.arg_types)
        main(["eval", "--checkpoint", str(tmp_path / "nowhere"), *flags])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_eval_refuses_a_checkpoint_without_an_adapter(tmp_path, capsys):
    import torch
    from transformers import TrainerState

    from erl_lite.core.memory import ReflectionMemory
    from erl_lite.history import History
    from erl_lite.run.checkpoint import save_checkpoint
    from erl_lite.testing import tiny_model, tiny_tokenizer

    model = tiny_model(tiny_tokenizer())  # fully trained: no adapter, a whole checkpoint all the same
    optimizer = torch.optim.AdamW(model.parameters())
    save_checkpoint(
        str(tmp_path),
        3,
        model,
        optimizer,
        None,
        ReflectionMemory(),
        History(),
        {"config": {"mode": "rlvr"}},
        TrainerState(global_step=3),
    )
    assert main(["eval", "--checkpoint", str(tmp_path)]) == 2
    assert "holds no LoRA adapter" in capsys.readouterr().err


def test_python_dash_m_runs_the_command_line():
    """``python -m erl_lite.cli`` (as README's ``accelerate launch -m erl_lite.cli``) is the erl-lite command."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "erl_lite.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    assert "usage: erl-lite" in done.stdout


@pytest.mark.parametrize("hole_kinds", [2, 1])
def test_plot_checks_a_demo_runs_memory_against_the_holes_its_checkpoint_recorded(tmp_path, monkeypatch, hole_kinds):
    """``erl-lite plot`` on a run of the embedded world draws the memory panels as the demo does: the hole letters
    each rulebook names, checked against the world's (read from the checkpoint's env record), whether it is given
    the run folder or its history file. Any other environment keeps the panels' plain rulebook rows."""
    import erl_lite.viz.plots
    from erl_lite.embedded.demo import demo_trainer
    from erl_lite.embedded.rulebooks import named_holes
    from erl_lite.embedded.world import hole_letters

    drawn = []
    monkeypatch.setattr(
        erl_lite.viz.plots, "save_figures", lambda h, out, base=None, **check: drawn.append(check) or []
    )
    trainer = demo_trainer(seed=3, max_steps=1, num_tasks_per_step=2, eval_steps=0, output_dir=str(tmp_path / "run"))
    if hole_kinds == 1:
        trainer.env.hole_kinds = 1  # a world of one kind of hole: the checkpoint records it
    trainer.train()
    holes = hole_letters(trainer.env)
    assert len(holes) == hole_kinds
    for given in (tmp_path / "run", tmp_path / "run" / "history.jsonl"):
        assert main(["plot", str(given), "--out", str(tmp_path / f"figs{len(drawn)}")]) == 0
        assert drawn[-1] == {"memory_claims": named_holes, "memory_truth": holes}, given
    os.rename(tmp_path / "run" / "checkpoint-1", tmp_path / "elsewhere")  # no checkpoint: nothing to check against
    assert main(["plot", str(tmp_path / "run" / "history.jsonl"), "--out", str(tmp_path / "figs_none")]) == 0
    assert drawn[-1] == {}


def test_the_memory_check_is_the_embedded_worlds_alone():
    from erl_lite.embedded import demo_world
    from erl_lite.embedded.rulebooks import memory_check, named_holes
    from erl_lite.envs import FrozenLake
    from erl_lite.run.identity import environment_identity

    world = demo_world(5)
    assert memory_check(environment_identity(world)) == {
        "memory_claims": named_holes,
        "memory_truth": (world.symbols["hole"], world.symbols["hole2"]),
    }
    for record in (environment_identity(FrozenLake()), {}, {"class": "mine.DemoLake", "symbols": world.symbols}):
        assert memory_check(record) == {}, record
