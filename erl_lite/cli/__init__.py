"""The ``erl-lite`` command line: the parser and :func:`main`; each command lives in its module. Commands:
``demo`` (:func:`erl_lite.embedded.demo.run_demo`), ``train`` (:mod:`~erl_lite.cli.train`), ``eval``
(:mod:`~erl_lite.cli.evaluate`), ``plot`` (a run's figures), ``export`` (merge a LoRA adapter into its base),
``doctor`` (:mod:`~erl_lite.cli.doctor`) and ``compare`` (:mod:`~erl_lite.cli.compare`). Errors a user can fix print
as one paragraph (:mod:`~.errors`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Any, Sequence

from erl_lite.cli import arg_types
from erl_lite.cli.budget import add_budget_parser, run_budget
from erl_lite.cli.compare import add_compare_parser, run_compare
from erl_lite.cli.config_args import SuggestingParser, add_config_arguments, add_trl_names, shown_value
from erl_lite.cli.doctor import add_doctor_parser, run_doctor
from erl_lite.cli.errors import read_run, usage_error, user_errors
from erl_lite.cli.evaluate import run_eval
from erl_lite.cli.train import ENVIRONMENTS, FLAG_ALIASES, FLAG_NEGATIONS, run_preset, run_train
from erl_lite.config import DEFAULT_SEED, ERLConfig
from erl_lite.config.checks import AUTO, MODES, QUANTIZATIONS
from erl_lite.config.field_types import expand_path
from erl_lite.config.presets import PRESETS


def build_parser() -> argparse.ArgumentParser:
    """The ``erl-lite`` parser: one sub-parser per command, each built by its own function."""
    parser = SuggestingParser(prog="erl-lite", description="Experiential Reinforcement Learning, small.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_demo_parser, _train_parser, _eval_parser, _plot_parser, _export_parser):
        add(sub)
    add_doctor_parser(sub)
    add_budget_parser(sub)
    add_compare_parser(sub)
    return parser


def _demo_parser(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="train the embedded tiny model with ERL on the CPU (minutes)")
    demo.add_argument("--steps", type=arg_types.whole(1), default=None, help="training iterations")
    demo.add_argument("--mode", choices=MODES, default="erl", help="erl (default), erl_simple or rlvr")
    demo.add_argument(
        "--seed",
        type=arg_types.seed,
        default=DEFAULT_SEED,
        help="seed of the run (also picks the demo world's letters)",
    )
    demo.add_argument(
        "--out",
        type=arg_types.folder,
        default=None,
        help="output folder for history, figures, report, checkpoints (an earlier demo's there are replaced)",
    )
    for flag, field in FLAG_NEGATIONS.items():  # the paper's ablations, as on erl-lite train
        demo.add_argument(flag, action="store_true", help=f"ablation: ERL with {field}=False")
    demo.add_argument(
        "--eval-tasks", type=arg_types.whole(1), default=None, help="evaluation tasks (default: the demo's)"
    )
    demo.add_argument(
        "--model",
        type=arg_types.embedded_build,
        default=None,
        metavar="DIR",
        help="another build of the embedded model (scripts/build_embedded_model.py --out DIR); "
        "default: the shipped one",
    )
    demo.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an --out holding another run (deleted) "
        "or other files (kept); by default only an empty folder or an earlier demo's",
    )
    from erl_lite.embedded.world import WORLDS

    demo.add_argument(
        "--world",
        choices=sorted(WORLDS),
        default="demo",
        help="demo: 3x3 maps (default); sparse: 5x5 maps where first attempts rarely succeed",
    )


def _train_parser(sub: argparse._SubParsersAction) -> None:
    from erl_lite.embedded.world import WORLDS

    train = sub.add_parser(
        "train",
        help="train a model on one of the environments, or on your own data",
        description="Train with ERL. Every ERLConfig field is an option; values come from "
        "the preset (demo on --env demo, cpu elsewhere), then --config, "
        "then the flags. The defaults shown are those of the demo preset on the "
        "demo world (and of the cpu preset off it, where they differ); --preset "
        "gpu or paper changes some of them.",
        argument_default=argparse.SUPPRESS,  # an option not given stays unset: a --config file may set it
    )
    train.add_argument(
        "--config",
        metavar="YAML",
        default=None,
        type=expand_path,
        help="run file: ERLConfig fields (and env, model, preset, small); flags override it",
    )
    train.add_argument(
        "--env",
        choices=ENVIRONMENTS,
        help="demo = the embedded model's world (letters drawn by --seed); the others are the "
        "paper's tasks and an arithmetic example (default: demo)",
    )
    train.add_argument(
        "--world",
        choices=sorted(WORLDS),
        help="with --env demo: demo = 3x3 maps (default); sparse = 5x5 maps where first attempts "
        "rarely succeed (as erl-lite demo --world)",
    )
    train.add_argument("--small", action="store_true", help="the small (CPU) variant of the environment")
    train.add_argument(
        "--env-options",
        type=json.loads,
        metavar="JSON",
        help="the environment's own keywords, e.g. '{\"size\": 5}' or for arithmetic '{\"n\": 500}'",
    )
    train.add_argument(
        "--model",
        type=expand_path,
        help="hub name or local folder; 'embedded' (default) = the packaged tiny model; "
        "'tiny' = a random 2-layer model built offline (plumbing checks only)",
    )
    train.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="ERLConfig.preset's settings under the rest (default: demo on --env demo, cpu elsewhere)",
    )
    _data_arguments(train, train=True)
    train.add_argument(
        "--resume", action="store_true", default=False, help="continue from the latest checkpoint in --out"
    )
    train.add_argument(
        "--ignore-config-mismatch", action="store_true", help="with --resume: continue despite changed settings"
    )
    add_config_arguments(
        train,
        aliases=FLAG_ALIASES,
        negations=FLAG_NEGATIONS,
        notes={"seed": "Also picks the demo world's letters."},
        defaults=_shown_defaults(),
        title="ERLConfig fields (--name-with-dashes, or TRL's --name_with_underscores)",
    )
    add_trl_names(train)


def _data_arguments(p: argparse.ArgumentParser, train: bool) -> None:
    """``--dataset``, ``--reward-funcs``, ``--feedback-func`` and ``--reward-weights`` (train); TRL's spellings too."""
    group = p.add_argument_group("your own data (as trl grpo)")
    sources = "a .jsonl/.json/.csv/.parquet file, a saved dataset folder or a hub dataset name"
    options = [
        (
            "--dataset",
            "PATH_OR_NAME",
            None,
            f"rows to train on ({sources}), each with a 'prompt' and the columns the reward functions read"
            if train
            else f"rows to evaluate on instead of the test split: with --reward-funcs, {sources}; "
            "without, a .jsonl of prompt/answer rows for a run on --env arithmetic, or of tasks {task_id, prompt, "
            "data} of the run's environment",
        ),
        (
            "--reward-funcs",
            "MODULE:FUNCTION",
            "+",
            "reward functions, TRL-style (completions=..., prompts=..., <columns>=...): module:function, "
            "path/to/file.py:function or module.function; modules are looked up in the working directory first",
        ),
    ]
    if train:
        options += [
            (
                "--feedback-func",
                "MODULE:FUNCTION",
                None,
                "function returning one feedback text per completion, for the reflection "
                "(default: the rewards' own 'Reward: r.' text)",
            ),
            (
                "--reward-weights",
                "W",
                "+",
                "one weight per reward function: the reward is their weighted sum (default: 1 each)",
            ),
        ]
    # A shown spelling takes its parser's default: unset on train (a --config file may set it), None on eval.
    for flag, metavar, nargs, help_text in options:
        dest = flag[2:].replace("-", "_")
        kind = {"dataset": expand_path, "reward_weights": float}.get(dest)
        group.add_argument(flag, dest=dest, metavar=metavar, nargs=nargs, help=help_text, type=kind)
        trl = "--dataset_name" if dest == "dataset" else "--" + dest
        group.add_argument(
            trl, dest=dest, metavar=metavar, nargs=nargs, default=argparse.SUPPRESS, type=kind, help=argparse.SUPPRESS
        )


def _shown_defaults() -> dict[str, str]:
    """Each field's ``--help`` default: the demo preset's, and the cpu preset's where it differs."""
    on_demo = ERLConfig.preset(run_preset("demo", None)).to_dict()
    elsewhere = ERLConfig.preset(run_preset("frozenlake", None)).to_dict()
    shown = {name: shown_value(value) for name, value in on_demo.items()}
    for name in [n for n, value in on_demo.items() if elsewhere[n] != value and n != "extra"]:
        shown[name] += f"; off the demo world: {shown_value(elsewhere[name])}"
    return shown


def _eval_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="first-attempt success of a checkpoint (no memory); prints JSON",
        description="Evaluate a checkpoint's adapter as the trainer does: first attempts from "
        "the initial prompt, no memory, the checkpoint's evaluation sampler.",
    )
    p.add_argument(
        "--checkpoint",
        required=True,
        metavar="DIR",
        type=expand_path,
        help="a checkpoint-<step> folder, or a run folder (its latest checkpoint)",
    )
    p.add_argument(
        "--env",
        choices=ENVIRONMENTS,
        default=None,
        help="environment (default: the one the checkpoint was trained on)",
    )
    p.add_argument(
        "--small",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the small variant of the environment (default: as trained)",
    )
    _data_arguments(p, train=False)
    p.add_argument(
        "--num-generations",
        type=arg_types.whole(1),
        default=None,
        help="samples per task (default: the checkpoint's eval_num_generations)",
    )
    p.add_argument("--limit", type=arg_types.whole(1), default=None, help="evaluate only the first N tasks")
    p.add_argument(
        "--base-model",
        default=None,
        metavar="DIR",
        type=expand_path,
        help="load the adapter's base from here instead of the path the checkpoint records",
    )


def _plot_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="draw a run's figures from its history.jsonl")
    p.add_argument("history", help="a history.jsonl file, or a run folder holding one")
    p.add_argument(
        "--out", type=arg_types.folder, default=None, help="folder for the PNGs (default: the history's folder)"
    )
    p.add_argument("--overwrite", action="store_true", help="draw into an --out folder that holds other files")
    p.add_argument("--baseline", default=None, type=expand_path, help="another run's history, drawn dashed")


def _export_parser(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="merge a LoRA adapter into its base model and save it (optionally push)")
    export.add_argument(
        "--adapter",
        required=True,
        type=expand_path,
        help="adapter folder (a checkpoint-<step> folder, output_dir after training, or a saved adapter)",
    )
    export.add_argument(
        "--out", type=arg_types.folder, required=True, help="folder for the merged model and its tokenizer"
    )
    export.add_argument(
        "--quantization",
        choices=(AUTO, *QUANTIZATIONS),
        default=AUTO,
        help="how the base was loaded in training; 4bit: dequantise it before merging "
        "(auto: read it from the adapter folder's erl_lite.json)",
    )
    export.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        default="auto",
        help="dtype of the saved weights (auto: the base's own)",
    )
    export.add_argument("--base-model", default=None, type=expand_path, help="the base's folder (default: as recorded)")
    export.add_argument(
        "--push-to-hub",
        default=None,
        metavar="REPO",
        help="then upload the merged folder to this hub repository (needs the network and a token)",
    )
    export.add_argument("--public", action="store_true", help="with --push-to-hub: create the repository public")
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an --out that is neither empty nor an "
        "earlier export (files of the same names are written over)",
    )


def _export(args: argparse.Namespace) -> int:
    from erl_lite.run import export

    try:
        adapter = export.run_adapter(args.adapter, lambda path: read_run("export", path))
        result = export.export_merged(
            adapter,
            args.out,
            quantization=args.quantization,
            dtype=args.dtype,
            base_model=args.base_model,
            overwrite=args.overwrite,
        )
    except user_errors() as e:
        return usage_error("export", e)
    print(
        f"merged {adapter} into {result.base_model} ({result.quantization} base, saved in {result.dtype}): "
        f"{result.out_dir}"
    )
    if args.push_to_hub:
        url = export.push_to_hub(result.out_dir, args.push_to_hub, private=not args.public)
        print(f"pushed to {url}")
    return 0


def _demo_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The demo's ``--mode`` and ablation flags as config fields."""
    ablations = {field: False for flag, field in FLAG_NEGATIONS.items() if getattr(args, flag[2:].replace("-", "_"))}
    return {"mode": args.mode, **ablations}


def _plot(args: argparse.Namespace) -> int:
    from erl_lite.embedded.rulebooks import memory_check
    from erl_lite.history import History
    from erl_lite.run.checkpoint import FIGURES
    from erl_lite.run.lock import RunLock, check_out
    from erl_lite.viz.plots import save_figures

    try:
        with warnings.catch_warnings(record=True) as caught:  # a torn last line: say so, draw the rest
            warnings.simplefilter("always", UserWarning)
            is_folder = os.path.isdir(args.history)
            run = args.history if is_folder else os.path.dirname(os.path.abspath(args.history))
            choice = read_run("plot", run) if is_folder or os.path.isfile(args.history) else None
            history = History.load(choice.folder if is_folder else args.history)
            baseline = History.load(args.baseline) if args.baseline else None
        if not any(k != "step" and type(v) in (int, float) for r in history.records for k, v in r.items()):
            # e.g. a samples.jsonl (its rows have a step but no metric): empty panels would replace the figures
            raise ValueError(f"{args.history} holds no history records: pass a run folder or its history.jsonl")
        out = args.out or run
        # Its own run's folder takes its figures redrawn; any other --out must be empty (figures of the same
        # names there may be someone else's). Figures erl_lite did not write are never replaced.
        own = not os.path.isdir(out) or os.path.samefile(out, run)
        with RunLock(out, "plot"):
            check_out(out, "erl-lite plot", "plot", own or args.overwrite, writes=(FIGURES,))
            for w in caught:
                print(f"erl-lite plot: warning: {w.message}", file=sys.stderr)
            # A run of the embedded world: its memory panels check each rulebook's holes against the world's.
            env = choice.state.run.get("env", {}) if choice and choice.state else {}
            for path in save_figures(history, out, baseline, **memory_check(env)):
                print(path)
    except user_errors() as e:
        return usage_error("plot", e)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``erl-lite`` command ``argv`` (default: ``sys.argv``); the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from erl_lite.embedded.demo import build_demo, train_demo

        out = args.out or "erl_lite_demo"
        try:  # bad arguments, a missing model folder: one paragraph; errors while training keep their traceback
            trainer = build_demo(
                out,
                args.steps,
                args.seed,
                args.eval_tasks,
                model_dir=args.model,
                world=args.world,
                overwrite=args.overwrite,
                **_demo_overrides(args),
            )
        except user_errors() as e:
            return usage_error("demo", e)
        try:
            train_demo(trainer, out, args.world, args.seed, model_dir=args.model)
        except user_errors()[0] as e:  # CheckpointError: --out held by another writer (others keep a traceback)
            return usage_error("demo", e)
        return 0
    commands = {
        "train": run_train,
        "eval": run_eval,
        "plot": _plot,
        "export": _export,
        "doctor": run_doctor,
        "budget": run_budget,
        "compare": run_compare,
    }
    return commands[args.command](args)
