"""Bad numbers on any command line are refused while parsing, naming the flag: ``erl-lite``, the
scripts and the benchmarks (one home for the ranges: :mod:`erl_lite.cli.arg_types`), and a seed no
RNG takes is refused by :class:`~erl_lite.config.ERLConfig` itself."""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import sys

import pytest

from erl_lite.config import ERLConfig

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Every file that builds an argparse parser a user runs.
PARSER_FILES = sorted([*ROOT.glob("scripts/*.py"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("erl_lite/cli/*.py")])


def _module(relative: str):
    """A script (scripts/ and benchmarks/ are not packages) loaded as a module, without running it."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(f"_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _no_work(module, monkeypatch, tmp_path):
    """Should a bad flag slip through, fail at once and away from the checkout: relative outputs
    land in tmp_path, and neither make_assets' child processes nor compare_modes' pool can start."""
    monkeypatch.chdir(tmp_path)
    for name in ("subprocess", "mp"):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, None)


def _usage_error(script, argv, monkeypatch, capsys, tmp_path) -> str:
    """What ``script`` prints to stderr when it refuses ``argv`` with argparse's exit code 2 (it parses
    only, where it has a ``parse_args``, so nothing runs should a flag slip through)."""
    module = _module(script)
    monkeypatch.setattr(sys, "argv", [script, *argv])
    _no_work(module, monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as exit_:
        module.parse_args(argv) if hasattr(module, "parse_args") else module.main()
    assert exit_.value.code == 2
    return capsys.readouterr().err


def _cli_error(argv, capsys) -> str:
    """What ``erl-lite argv`` prints to stderr when it refuses it with exit code 2 (argparse's, or a
    user error's paragraph)."""
    from erl_lite.cli import main

    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    return capsys.readouterr().err


def test_no_command_line_number_is_a_bare_int_or_float():
    # The mechanism behind every case below: a flag typed plain int/float takes 0 and -1 and fails
    # (or silently does something else) long after parsing. Each must use a range from arg_types.
    bare = []
    for path in PARSER_FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for kw in node.keywords:
                    if kw.arg == "type" and isinstance(kw.value, ast.Name) and kw.value.id in ("int", "float"):
                        bare.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.literal_eval(node.args[0])}")
    assert not bare, bare


BAD_SCRIPT_ARGS = [
    ("scripts/compare_modes.py", ["--seeds", "-1"], "--seeds"),
    ("scripts/compare_modes.py", ["--seeds", "0", "0"], "--seeds"),
    ("scripts/compare_modes.py", ["--jobs", "0"], "--jobs"),
    ("scripts/compare_modes.py", ["--steps", "0"], "--steps"),
    ("scripts/compare_modes.py", ["--steps", "-3"], "--steps"),
    ("scripts/compare_modes.py", ["--eval-steps", "-1"], "--eval-steps"),
    ("scripts/compare_modes.py", ["--variants", "ERL", "ERL"], "--variants"),
    ("scripts/make_assets.py", ["--jobs", "0"], "--jobs"),
    ("benchmarks/embedded_bands.py", ["--tasks", "0"], "--tasks"),
    ("benchmarks/embedded_bands.py", ["--samples", "0"], "--samples"),
    ("benchmarks/embedded_bands.py", ["--run-seeds", "-1"], "--run-seeds"),
    ("benchmarks/embedded_bands.py", ["--run-seeds", "1", "1"], "--run-seeds"),
    ("benchmarks/step_time.py", ["--steps", "0"], "--steps"),
    ("benchmarks/step_time.py", ["--beta", "-0.1"], "--beta"),
    ("benchmarks/shared_prefix.py", ["--group", "0"], "--group"),
    ("benchmarks/env_stats.py", ["--n", "-5"], "--n"),
]


@pytest.mark.parametrize("script,argv,flag", BAD_SCRIPT_ARGS, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_a_script_refuses_a_bad_number_before_any_work(script, argv, flag, monkeypatch, capsys, tmp_path):
    assert f"argument {flag}" in _usage_error(script, argv, monkeypatch, capsys, tmp_path)


BAD_BUILDS = [
    (["--steps", "0"], "--steps"),
    (["--batch", "0"], "--batch"),
    (["--threads", "0"], "--threads"),
    (["--reflection-share", "2"], "--reflection-share"),
    (["--runs", "-1"], "--runs"),
    (["--lr", "0"], "--lr"),
    (["--seed", "-1"], "--seed"),
    (["--runs", "0", "--sparse-runs", "0"], "--runs"),  # an empty corpus
    (["--heads", "3"], "--heads"),  # 128 hidden units do not split into 3 heads
]


@pytest.mark.parametrize("argv,flag", BAD_BUILDS, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_the_model_build_refuses_bad_settings_before_the_corpus(argv, flag, monkeypatch, capsys, tmp_path):
    assert f"argument {flag}" in _usage_error("scripts/build_embedded_model.py", argv, monkeypatch, capsys, tmp_path)


@pytest.mark.parametrize(
    "argv,named",
    [
        (["train", "--env", "demo", "--seed", "-5", "--steps", "1"], "ERLConfig.seed"),  # a config field: its check
        (["train", "--env", "demo", "--seed", str(2**32), "--steps", "1"], "ERLConfig.seed"),
        (["demo", "--seed", "-1"], "argument --seed"),
        (["demo", "--steps", "0"], "argument --steps"),
        (["demo", "--eval-tasks", "-2"], "argument --eval-tasks"),
        (["eval", "--checkpoint", "x", "--limit", "0"], "argument --limit"),
        (["eval", "--checkpoint", "x", "--num-generations", "-1"], "argument --num-generations"),
    ],
)
def test_erl_lite_names_the_flag_of_a_bad_number(argv, named, capsys):
    assert named in _cli_error(argv, capsys)


@pytest.mark.parametrize("seed", [-1, 2**32, True, 1.5])
def test_the_config_refuses_a_seed_no_rng_takes(seed):
    # numpy (via transformers.set_seed) takes 0..2**32-1; a bad seed failed at the first step.
    with pytest.raises(ValueError, match="ERLConfig.seed"):
        ERLConfig(seed=seed)


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "taken"
    path.write_text("not a folder")
    return path


@pytest.mark.parametrize(
    "script,argv",
    [
        ("scripts/compare_modes.py", ["--out", "{file}"]),
        ("scripts/compare_modes.py", ["--runs", "{file}/runs"]),
        ("scripts/build_embedded_model.py", ["--out", "{file}"]),
    ],
)
def test_a_script_refuses_an_output_folder_that_is_a_file(script, argv, a_file, monkeypatch, capsys, tmp_path):
    # build_embedded_model --out FILE ran the whole build, then failed when saving.
    argv = [a.format(file=a_file) for a in argv]
    err = _usage_error(script, argv, monkeypatch, capsys, tmp_path)
    assert f"argument {argv[0]}" in err and "not a folder" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--steps", "1", "--out", "{file}"],
        ["plot", "{history}", "--out", "{file}"],
        ["export", "--adapter", "{history}", "--out", "{file}"],
    ],
)
def test_erl_lite_refuses_an_output_folder_that_is_a_file(argv, a_file, capsys):
    err = _cli_error([a.format(file=a_file, history=ROOT / "erl_lite" / "assets" / "demo") for a in argv], capsys)
    assert "argument --out" in err and "not a folder" in err and "Traceback" not in err


def test_the_demo_refuses_an_output_folder_that_is_a_file_before_any_step(a_file):
    from erl_lite.embedded.demo import build_demo
    from erl_lite.run.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="not a writable folder"):
        build_demo(str(a_file), steps=1, eval_tasks=2, verbose=False)


@pytest.mark.parametrize(
    "content,message",
    [
        ("{bad", "compare_results.json:1:2: not valid JSON"),
        (None, "no results to replot"),
    ],
)
def test_replot_names_a_missing_or_damaged_results_file(content, message, monkeypatch, capsys, tmp_path):
    if content is not None:
        (tmp_path / "compare_results.json").write_text(content)
    argv = ["--replot", "--out", str(tmp_path)]
    assert message in _usage_error("scripts/compare_modes.py", argv, monkeypatch, capsys, tmp_path)


@pytest.mark.parametrize("script", ["scripts/compare_modes.py", "benchmarks/embedded_bands.py"])
def test_a_script_refuses_a_model_folder_without_a_build(script, monkeypatch, capsys, tmp_path):
    # compare_modes --model /no/such started its pool and failed in a worker with a traceback.
    err = _usage_error(script, ["--model", str(tmp_path / "no_build")], monkeypatch, capsys, tmp_path)
    assert "argument --model: no embedded model in" in err and "build_embedded_model.py --out" in err


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"limit": -1}, "limit"),
        ({"limit": 0}, "limit"),
        ({"num_generations": 0}, "num_generations"),
        ({"limit": 2.5}, "limit"),
    ],
)
def test_evaluate_checkpoint_refuses_a_bad_count_before_reading_the_checkpoint(kw, name, tmp_path):
    # The Python path under erl-lite eval's flags: limit=-1 evaluated every task but the last.
    from erl_lite.cli.evaluate import evaluate_checkpoint

    with pytest.raises(ValueError, match=f"evaluate_checkpoint.{name} must be a whole number >= 1"):
        evaluate_checkpoint(str(tmp_path / "nowhere"), **kw)


@pytest.mark.parametrize("eval_tasks", [0, -1, 1.5, True])
def test_demo_trainer_refuses_a_bad_eval_task_count_before_loading_the_model(eval_tasks):
    # The Python path under erl-lite demo --eval-tasks: -1 evaluated on 99 maps, 0 on the default 64.
    from erl_lite.embedded import demo_trainer

    with pytest.raises(ValueError, match="demo_trainer.eval_tasks must be a whole number >= 1"):
        demo_trainer(seed=0, eval_tasks=eval_tasks, max_steps=1)
