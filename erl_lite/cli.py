"""The ``erl-lite`` command line.

* ``erl-lite demo`` — the main job: ERL on the embedded tiny model, on the CPU, in minutes;
  writes ``history.jsonl``, figures and a Markdown report to ``--out``.
* ``erl-lite train`` — the same trainer on a chosen environment (default: the demo world, with
  the demo's settings) and model (default: the embedded one; a hub name for the GPU preset, or a
  local folder), e.g.
  ``erl-lite train --env frozenlake --model Qwen/Qwen2.5-1.5B-Instruct --preset gpu --load-in-4bit``.
* ``erl-lite export --adapter DIR --out DIR [--push-to-hub USER/NAME]`` — merge a trained LoRA
  adapter (a checkpoint's ``adapter/`` folder or a saved adapter) into its base, dequantising a
  4-bit base, and save a standalone model (see :mod:`erl_lite.export`).

Departures from the paper: none; this is plumbing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from erl_lite.config import MODES, PRESETS, ERLConfig

ENVIRONMENTS = ("demo", "frozenlake", "sokoban", "qa", "arithmetic")


def _common(p: argparse.ArgumentParser, default_steps: int | None) -> None:
    p.add_argument("--steps", type=int, default=default_steps, help="training iterations")
    p.add_argument("--mode", choices=MODES, default="erl", help="erl (default), erl_simple or rlvr")
    p.add_argument("--seed", type=int, default=0, help="seed of the run (also picks the demo world's letters)")
    p.add_argument("--out", default=None, help="output folder for history, figures, report, checkpoints")
    p.add_argument("--no-memory", action="store_true", help="ablation: ERL without memory")
    p.add_argument("--no-reflection", action="store_true", help="ablation: ERL without reflection")
    p.add_argument("--no-internalization", action="store_true", help="ablation: no self-distillation")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="erl-lite", description="Experiential Reinforcement Learning, small.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train the embedded tiny model with ERL on the CPU (minutes)")
    _common(demo, default_steps=None)
    demo.add_argument("--eval-tasks", type=int, default=None, help="evaluation tasks (default: the demo's)")
    train = sub.add_parser("train", help="train a model on one of the environments")
    _common(train, default_steps=None)
    train.add_argument("--env", choices=ENVIRONMENTS, default="demo",
                       help="demo = the embedded model's world (letters drawn by --seed); the others are "
                            "the paper's tasks and an arithmetic example")
    train.add_argument("--small", action="store_true", help="the small (CPU) variant of the environment")
    train.add_argument("--model", default="embedded",
                       help="hub name or local folder; 'embedded' = the packaged tiny model; "
                            "'tiny' = a random 2-layer model built offline (plumbing checks only)")
    train.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    train.add_argument("--load-in-4bit", action="store_true", help="QLoRA: quantize the base model to 4-bit NF4")
    train.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    _export_parser(sub)
    return parser


def _export_parser(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="merge a LoRA adapter into its base model and save it (optionally push)")
    export.add_argument("--adapter", required=True, help="adapter folder (a checkpoint's adapter/ or a saved adapter)")
    export.add_argument("--out", required=True, help="folder for the merged model and its tokenizer")
    export.add_argument("--quantization", choices=("auto", "none", "4bit"), default="auto",
                        help="how the base was loaded in training; 4bit: dequantise it before merging "
                             "(auto: read it from the adapter folder or its checkpoint)")
    export.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                        help="dtype of the saved weights (auto: the base's own)")
    export.add_argument("--base-model", default=None, help="load the base from here instead of the adapter's record")
    export.add_argument("--push-to-hub", default=None, metavar="REPO",
                        help="then upload the merged folder to this hub repository (needs the network and a token)")
    export.add_argument("--public", action="store_true", help="with --push-to-hub: create the repository public")


def _export(args: argparse.Namespace) -> int:
    from erl_lite import export

    result = export.export_merged(args.adapter, args.out, quantization=args.quantization, dtype=args.dtype,
                                  base_model=args.base_model)
    print(f"merged {args.adapter} into {result.base_model} ({result.quantization} base, saved in {result.dtype}): "
          f"{result.out_dir}")
    if args.push_to_hub:
        url = export.push_to_hub(result.out_dir, args.push_to_hub, private=not args.public)
        print(f"pushed to {url}")
    return 0


def _overrides(args: argparse.Namespace) -> dict:
    o = {"mode": args.mode, "seed": args.seed}
    if args.steps is not None:
        o["max_steps"] = args.steps
    if args.out:
        o["output_dir"] = args.out
    if args.no_memory:
        o["use_memory"] = False
    if args.no_reflection:
        o["use_reflection"] = False
    if args.no_internalization:
        o["use_internalization"] = False
    return o


def train_config(args: argparse.Namespace) -> ERLConfig:
    """The :class:`~erl_lite.config.ERLConfig` of ``erl-lite train``: on ``--env demo`` the
    demo's own settings (:func:`erl_lite.embedded.demo_config`, on ``--preset``), else the
    preset; the flags override either.

    Example:
        >>> args = build_parser().parse_args(["train", "--steps", "5"])
        >>> cfg = train_config(args)
        >>> cfg.max_steps, cfg.learning_rate, cfg.max_completion_length
        (5, 0.0005, 24)
    """
    overrides = {"load_in_4bit": args.load_in_4bit, **_overrides(args)}
    if args.env == "demo":  # the embedded model's world: its budgets, temperatures and schedule
        from erl_lite.embedded.demo import demo_config

        return demo_config(preset=args.preset, **overrides)
    return ERLConfig.preset(args.preset, **overrides)


def _train(args: argparse.Namespace) -> int:
    from erl_lite.trainer import ERLTrainer

    cfg = train_config(args)
    if args.model == "embedded" and args.env != "demo":
        print(f"warning: the embedded model was only taught the demo world; on --env {args.env} expect "
              "rewards near zero (use a hub model or a local folder with --model)", file=sys.stderr)
    model, tokenizer = args.model, None
    if args.model == "embedded":
        from transformers import set_seed

        from erl_lite.embedded.loading import load_embedded

        set_seed(args.seed)  # the LoRA initialisation draws from the global RNG (as in the demo)
        model, tokenizer = load_embedded(quantization="4bit" if args.load_in_4bit else "none")
    elif args.model == "tiny":
        import tempfile

        from erl_lite.testing import save_tiny_model

        model = save_tiny_model(tempfile.mkdtemp(prefix="erl_lite_tiny_"))
    env, rows, kwargs = _environment(args.env, args.small, args.seed)
    trainer = ERLTrainer(model=model, processing_class=tokenizer, args=cfg, env=env, train_dataset=rows, **kwargs)
    history = trainer.train(resume_from_checkpoint=True if args.resume else None)
    last = history.last("eval/success", kind="eval")
    print(f"done: {len(history.of_kind('train'))} steps; last eval success {last}")
    return 0


def _environment(name: str, small: bool, seed: int = 0):
    from erl_lite import envs

    if name == "demo":
        from erl_lite.embedded.demo import DEMO_EVAL_TASKS, step_line
        from erl_lite.embedded.world import demo_world

        world = demo_world(seed)
        # The demo's settings turn the progress bar off in favour of one line per step.
        return world, None, {"eval_dataset": world.test_tasks(DEMO_EVAL_TASKS), "callbacks": [step_line]}
    if name == "arithmetic":
        from erl_lite.envs.arithmetic import arithmetic_feedback, arithmetic_reward, make_arithmetic_dataset

        rows = make_arithmetic_dataset(2000, seed=0)
        return None, rows, {"reward_funcs": arithmetic_reward, "feedback_func": arithmetic_feedback,
                            "eval_dataset": make_arithmetic_dataset(64, seed=1)}
    cls = {"frozenlake": envs.FrozenLake, "sokoban": envs.Sokoban, "qa": envs.MultiHopQA}[name]
    return (cls.small() if small else cls()), None, {}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from erl_lite.embedded.demo import run_demo

        run_demo(out=args.out or "erl_lite_demo", steps=args.steps, seed=args.seed,
                 eval_tasks=args.eval_tasks, **{k: v for k, v in _overrides(args).items()
                                                if k not in ("seed", "max_steps", "output_dir")})
        return 0
    if args.command == "export":
        return _export(args)
    return _train(args)


if __name__ == "__main__":
    sys.exit(main())
