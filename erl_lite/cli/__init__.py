"""The ``erl-lite`` command line.

* ``erl-lite demo`` — the main job: ERL on the embedded tiny model, on the CPU, in minutes;
  writes ``history.jsonl``, figures and a Markdown report to ``--out``.
* ``erl-lite train`` — the same trainer on a chosen environment (default: the demo world, with
  the ``demo`` preset) and model (default: the embedded one; a hub name for the GPU preset, or a
  local folder), e.g.
  ``erl-lite train --env frozenlake --model Qwen/Qwen2.5-1.5B-Instruct --preset gpu --load-in-4bit``.
  Every :class:`~erl_lite.config.ERLConfig` field is an option (``--learning-rate``,
  ``--no-use-memory``, ...; see :mod:`erl_lite.cli.config_args`; ``--help`` shows each default), and
  ``--config run.yaml`` reads fields (and ``env``, ``model``, ``preset``, ``small``, ``dataset``,
  ``reward_funcs``, ``feedback_func``) from a file. Precedence: the preset (default: ``demo`` on
  ``--env demo``, ``cpu`` elsewhere) < the file < the flags. Your own data, as ``trl grpo``:
  ``erl-lite train --dataset rows.jsonl --reward-funcs mymod:reward [...] [--feedback-func mymod:fb]``
  (functions by ``module:function``, ``path/to/file.py:function`` or TRL's ``module.function``,
  see :mod:`erl_lite.func_specs`); the specs are recorded in the config's ``extra``.
* ``erl-lite eval --checkpoint DIR`` — first attempts of a checkpoint's adapter, no memory, on
  the test split of what the run trained on (``--env`` / ``--dataset rows.jsonl`` to choose).
  A run on dataset rows scored by Python functions (from the CLI or from Python, as the
  checkpoint's ``env`` record says) is refused without ``--dataset`` and ``--reward-funcs``,
  naming the functions it was trained with, rather than scored on the demo world; a checkpoint
  older than that record is evaluated on the demo world with a warning. Prints JSON metrics.
* ``erl-lite plot history.jsonl`` — the figures of :func:`erl_lite.viz.save_figures`.
* ``erl-lite export --adapter DIR --out DIR [--push-to-hub USER/NAME]`` — merge a trained LoRA
  adapter (a ``checkpoint-<step>`` folder, ``output_dir`` or a saved adapter) into its base, dequantising a
  4-bit base, and save a standalone model (see :mod:`erl_lite.integrations.export`).

A mistyped flag gets "did you mean --x?" (:class:`~erl_lite.cli.config_args.SuggestingParser`).
Errors a user can fix (a bad value, a missing or damaged file or folder, nothing to resume) are
printed as one paragraph naming the file and line, the field or the path, with exit code 2 and
no traceback; errors raised while training (a reward function's, say) keep their traceback.

Departures from the paper: none; this is plumbing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Any, Sequence

from erl_lite.config import DEFAULT_SEED, MODES, PRESETS, ERLConfig
from erl_lite.cli.config_args import SuggestingParser, add_config_arguments, given_fields, shown_value
from erl_lite.cli.run_files import load_config_file, locate_in_file
from erl_lite.jsonio import read_json, read_jsonl

ENVIRONMENTS = ("demo", "frozenlake", "sokoban", "qa", "arithmetic")
#: ``erl-lite train``'s options that are not config fields, with their defaults; a ``--config``
#: file may set them too. ``preset`` None: ``demo`` on the demo world, ``cpu`` elsewhere (:func:`run_preset`).
RUN_DEFAULTS: dict[str, Any] = {"env": "demo", "model": "embedded", "preset": None, "small": False}
#: ``erl-lite train``'s options for your own data (as ``trl grpo``'s); a ``--config`` file may set them too.
DATA_OPTIONS = ("dataset", "reward_funcs", "feedback_func")
#: The environment ``erl-lite train --dataset ... --reward-funcs ...`` records (``erl-lite eval`` reads it).
DATASET_ENV = "dataset"
#: The short flags ``erl-lite train`` had before every field was an option (they keep working).
FLAG_ALIASES = {"max_steps": ["--steps"], "output_dir": ["--out"]}
FLAG_NEGATIONS = {"--no-memory": "use_memory", "--no-reflection": "use_reflection",
                  "--no-internalization": "use_internalization"}


def _common(p: argparse.ArgumentParser, default_steps: int | None) -> None:
    p.add_argument("--steps", type=int, default=default_steps, help="training iterations")
    p.add_argument("--mode", choices=MODES, default="erl", help="erl (default), erl_simple or rlvr")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help="seed of the run (also picks the demo world's letters)")
    p.add_argument("--out", default=None, help="output folder for history, figures, report, checkpoints "
                                                "(an earlier demo's there are replaced)")
    p.add_argument("--no-memory", action="store_true", help="ablation: ERL without memory")
    p.add_argument("--no-reflection", action="store_true", help="ablation: ERL without reflection")
    p.add_argument("--no-internalization", action="store_true", help="ablation: no self-distillation")


def build_parser() -> argparse.ArgumentParser:
    parser = SuggestingParser(prog="erl-lite", description="Experiential Reinforcement Learning, small.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train the embedded tiny model with ERL on the CPU (minutes)")
    _common(demo, default_steps=None)
    demo.add_argument("--eval-tasks", type=int, default=None, help="evaluation tasks (default: the demo's)")
    demo.add_argument("--model", default=None, metavar="DIR",
                      help="another build of the embedded model (scripts/build_embedded_model.py --out DIR); "
                           "default: the shipped one")
    train = sub.add_parser("train", help="train a model on one of the environments, or on your own data",
                           description="Train with ERL. Every ERLConfig field is an option; values come from "
                                       "the preset (demo on --env demo, cpu elsewhere), then --config, "
                                       "then the flags. The defaults shown are those of the demo preset on the "
                                       "demo world (and of the cpu preset off it, where they differ); --preset "
                                       "gpu or paper changes some of them.")
    train.add_argument("--config", metavar="YAML", default=None,
                       help="run file: ERLConfig fields (and env, model, preset, small); flags override it")
    train.add_argument("--env", choices=ENVIRONMENTS, default=argparse.SUPPRESS,
                       help="demo = the embedded model's world (letters drawn by --seed); the others are the "
                            "paper's tasks and an arithmetic example (default: demo)")
    train.add_argument("--small", action="store_true", default=argparse.SUPPRESS,
                       help="the small (CPU) variant of the environment")
    train.add_argument("--model", default=argparse.SUPPRESS,
                       help="hub name or local folder; 'embedded' (default) = the packaged tiny model; "
                            "'tiny' = a random 2-layer model built offline (plumbing checks only)")
    train.add_argument("--preset", choices=sorted(PRESETS), default=argparse.SUPPRESS,
                       help="ERLConfig.preset's settings under the rest (default: demo on --env demo, cpu elsewhere)")
    _data_arguments(train, train=True)
    train.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    add_config_arguments(train, aliases=FLAG_ALIASES, negations=FLAG_NEGATIONS,
                         notes={"seed": "Also picks the demo world's letters."}, defaults=_shown_defaults(),
                         title="ERLConfig fields (--name-with-dashes, or TRL's --name_with_underscores)")
    _eval_parser(sub)
    _plot_parser(sub)
    _export_parser(sub)
    return parser


def _data_arguments(p: argparse.ArgumentParser, train: bool) -> None:
    """``--dataset``, ``--reward-funcs`` and (on train) ``--feedback-func``; TRL's spellings
    (``trl grpo --dataset_name ... --reward_funcs ...``) are accepted too, not shown."""
    group = p.add_argument_group("your own data (as trl grpo)")
    default = argparse.SUPPRESS if train else None  # train: a --config file may set them
    sources = "a .jsonl/.json/.csv/.parquet file, a saved dataset folder or a hub dataset name"
    options = [
        ("--dataset", "PATH_OR_NAME", None,
         f"rows to train on ({sources}), each with a 'prompt' and the columns the reward functions read"
         if train else f"rows to evaluate on instead of the test split: with --reward-funcs, {sources}; "
         "without, a .jsonl of prompt/answer rows for a run on --env arithmetic, or of tasks {task_id, prompt, "
         "data} of the run's environment"),
        ("--reward-funcs", "MODULE:FUNCTION", "+",
         "reward functions, TRL-style (completions=..., prompts=..., <columns>=...): module:function, "
         "path/to/file.py:function or module.function; modules are looked up in the working directory first"),
    ]
    if train:
        options.append(("--feedback-func", "MODULE:FUNCTION", None,
                        "function returning one feedback text per completion, for the reflection "
                        "(default: the rewards' own 'Reward: r.' text)"))
    for flag, metavar, nargs, help_text in options:
        dest = flag[2:].replace("-", "_")
        group.add_argument(flag, dest=dest, metavar=metavar, nargs=nargs, default=default, help=help_text)
        trl = "--dataset_name" if dest == "dataset" else "--" + dest
        group.add_argument(trl, dest=dest, metavar=metavar, nargs=nargs, default=argparse.SUPPRESS,
                           help=argparse.SUPPRESS)


def _shown_defaults() -> dict[str, str]:
    """The default ``--help`` shows for each field: the demo preset's (the default ``--env`` is the
    demo world), and the cpu preset's where other environments differ."""
    on_demo = ERLConfig.preset(run_preset("demo", None)).to_dict()
    elsewhere = ERLConfig.preset(run_preset("frozenlake", None)).to_dict()
    return {name: shown_value(value) + ("" if elsewhere[name] == value or name == "extra"
                                        else f"; off the demo world: {shown_value(elsewhere[name])}")
            for name, value in on_demo.items()}


def _eval_parser(sub: Any) -> None:
    p = sub.add_parser("eval", help="first-attempt success of a checkpoint (no memory); prints JSON",
                       description="Evaluate a checkpoint's adapter as the trainer does: first attempts from "
                                   "the initial prompt, no memory, the checkpoint's evaluation sampler.")
    p.add_argument("--checkpoint", required=True, metavar="DIR",
                   help="a checkpoint-<step> folder, or a run folder (its latest checkpoint)")
    p.add_argument("--env", choices=ENVIRONMENTS, default=None,
                   help="environment (default: the one the checkpoint was trained on; demo if unrecorded)")
    p.add_argument("--small", action=argparse.BooleanOptionalAction, default=None,
                   help="the small variant of the environment (default: as trained)")
    _data_arguments(p, train=False)
    p.add_argument("--num-generations", type=int, default=None,
                   help="samples per task (default: the checkpoint's eval_num_generations)")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N tasks")
    p.add_argument("--base-model", default=None, metavar="DIR",
                   help="load the adapter's base from here instead of the path the checkpoint records")


def _plot_parser(sub: Any) -> None:
    p = sub.add_parser("plot", help="draw a run's figures from its history.jsonl")
    p.add_argument("history", help="a history.jsonl file, or a run folder holding one")
    p.add_argument("--out", default=None, help="folder for the PNGs (default: the history's folder)")
    p.add_argument("--baseline", default=None, help="another run's history drawn dashed (e.g. the RLVR run)")


def _export_parser(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="merge a LoRA adapter into its base model and save it (optionally push)")
    export.add_argument("--adapter", required=True, help="adapter folder (a checkpoint-<step> folder, output_dir after training, or a saved adapter)")
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
    from erl_lite.integrations import export

    try:
        result = export.export_merged(args.adapter, args.out, quantization=args.quantization, dtype=args.dtype,
                                      base_model=args.base_model)
    except _user_errors() as e:
        return _usage_error("export", e)
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


def run_preset(env: str, preset: str | None) -> str:
    """The preset ``erl-lite train`` builds its config from: ``preset`` when named, else ``demo``
    on the demo world (the embedded model's budgets, temperatures and schedule) and ``cpu``
    elsewhere. A named preset is used as it is: no preset is layered on another.

    Example:
        >>> run_preset("demo", None), run_preset("frozenlake", None), run_preset("demo", "gpu")
        ('demo', 'cpu', 'gpu')
    """
    if preset is not None:
        return preset
    return "demo" if env == "demo" else "cpu"


def train_settings(args: argparse.Namespace) -> tuple[dict[str, Any], ERLConfig]:
    """``erl-lite train``'s run options (:data:`RUN_DEFAULTS`' keys) and its
    :class:`~erl_lite.config.ERLConfig`: the preset (:func:`run_preset`), then the ``--config``
    file, then the flags. The environment is recorded in the config's ``extra`` (``erl-lite eval`` reads it).

    Raises ValueError naming the file, key or field when a value is wrong.
    """
    file_fields, file_run = ({}, {}) if args.config is None else load_config_file(
        args.config, other_keys=[*RUN_DEFAULTS, *DATA_OPTIONS], aliases=_ALIAS_FIELDS)
    given = {k: getattr(args, k) for k in (*RUN_DEFAULTS, *DATA_OPTIONS) if hasattr(args, k)}
    run = {**RUN_DEFAULTS, **file_run, **given}
    data = _data_record(run, env_given="env" in file_run or "env" in given)
    if data:
        run["env"] = DATASET_ENV
    elif run["env"] not in ENVIRONMENTS:
        raise ValueError(f"env must be one of {', '.join(ENVIRONMENTS)}, got {run['env']!r}")
    run["preset"] = run_preset(run["env"], run["preset"])
    if run["preset"] not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(sorted(PRESETS))}, got {run['preset']!r}")
    if not isinstance(run["small"], bool):
        raise ValueError(f"small must be true or false, got {run['small']!r}")
    flags = given_fields(args)
    overrides = {**file_fields, **flags}
    if not isinstance(overrides.get("extra") or {}, dict):
        raise ValueError(f"extra must be a mapping of names to values, got {overrides['extra']!r}")
    overrides["extra"] = {**(overrides.get("extra") or {}), "env": run["env"], "small": run["small"], **data}
    try:
        return run, ERLConfig.preset(run["preset"], **overrides)
    except ValueError as e:  # a field the file set (and no flag overrode): name its line
        if args.config is None:
            raise
        raise ValueError(locate_in_file(str(e), args.config, set(file_fields) - set(flags))) from e


def _data_record(run: dict[str, Any], env_given: bool) -> dict[str, Any]:
    """What a run on your own data records in its config's ``extra`` (``dataset``,
    ``reward_funcs``, ``feedback_func``: the specs as given); empty for a built-in environment.

    Raises ValueError when the data options do not go together.
    """
    dataset, funcs, feedback = (run.get(k) for k in DATA_OPTIONS)
    if dataset is None and funcs is None and feedback is None:
        return {}
    if funcs is None:
        raise ValueError("--dataset needs --reward-funcs module:function [...]: the functions that score its "
                         "completions (as trl grpo --reward_funcs)" if dataset is not None else
                         "--feedback-func needs --dataset and --reward-funcs")
    if dataset is None:
        raise ValueError("--reward-funcs needs --dataset PATH_OR_NAME: the rows whose completions they score")
    if env_given:
        raise ValueError(f"--env {run['env']} and --dataset/--reward-funcs both name what to train on; give one")
    funcs = [funcs] if isinstance(funcs, str) else funcs  # a run file may give one spec as a string
    if not (isinstance(funcs, list) and funcs and all(isinstance(f, str) for f in funcs)):
        raise ValueError(f"reward_funcs must be a list of module:function specs, got {funcs!r}")
    if not isinstance(dataset, str) or not (feedback is None or isinstance(feedback, str)):
        raise ValueError("dataset and feedback_func must be text (a path or name, a module:function spec)")
    return {"dataset": dataset, "reward_funcs": list(funcs), "feedback_func": feedback}


def train_config(args: argparse.Namespace) -> ERLConfig:
    """The :class:`~erl_lite.config.ERLConfig` of ``erl-lite train`` (see :func:`train_settings`).

    Example:
        >>> args = build_parser().parse_args(["train", "--steps", "5", "--learning-rate", "1e-3"])
        >>> cfg = train_config(args)
        >>> cfg.max_steps, cfg.learning_rate, cfg.max_completion_length
        (5, 0.001, 24)
    """
    return train_settings(args)[1]


#: For run-file error messages: the field a command-line shorthand stands for.
_ALIAS_FIELDS = {flag.lstrip("-").replace("-", "_"): name for name, flags in FLAG_ALIASES.items() for flag in flags}


def _train(args: argparse.Namespace) -> int:
    from erl_lite.checkpoint import CheckpointError, list_checkpoints
    from erl_lite.metrics import EVAL_SUCCESS

    try:
        run, cfg = train_settings(args)
        if args.resume and not cfg.output_dir:
            raise ValueError("--resume needs --out (the run folder whose latest checkpoint to continue)")
        if args.resume and not list_checkpoints(cfg.output_dir):
            raise CheckpointError(f"nothing to resume: no checkpoint-<step> folder in {cfg.output_dir}; "
                                  "run without --resume to start this run")
    except _user_errors() as e:
        return _usage_error("train", e)
    if run["model"] == "embedded" and run["env"] != "demo":
        print(f"warning: the embedded model was only taught the demo world; on --env {run['env']} expect "
              "rewards near zero (use a hub model or a local folder with --model)", file=sys.stderr)
    try:
        trainer = _build_trainer(run, cfg)
    except _user_errors() as e:  # a missing model folder, a bad dataset file, ...
        return _usage_error("train", e)
    try:
        history = trainer.train(resume_from_checkpoint=True if args.resume else None)
    except CheckpointError as e:  # a damaged checkpoint to resume; other errors keep their traceback
        return _usage_error("train", e)
    last = history.last(EVAL_SUCCESS, kind="eval")
    print(f"done: {len(history.of_kind('train'))} steps; last eval success {last}")
    return 0


def _build_trainer(run: dict[str, Any], cfg: ERLConfig) -> Any:
    """``erl-lite train``'s trainer: the model and environment its run options name."""
    from erl_lite.trainer import ERLTrainer

    # The environment first: a missing reward function fails before a model is loaded.
    env, rows, kwargs = (_dataset_environment(cfg.extra) if run["env"] == DATASET_ENV
                         else _environment(run["env"], run["small"], cfg.seed))
    model, tokenizer = run["model"], None
    if run["model"] == "embedded":
        from transformers import set_seed

        from erl_lite.embedded.loading import load_embedded

        set_seed(cfg.seed)  # the LoRA initialisation draws from the global RNG (as in the demo)
        model, tokenizer = load_embedded(quantization="4bit" if cfg.load_in_4bit else "none")
    elif run["model"] == "tiny":
        import tempfile

        from erl_lite.testing import save_tiny_model

        model = save_tiny_model(tempfile.mkdtemp(prefix="erl_lite_tiny_"))
    return ERLTrainer(model=model, processing_class=tokenizer, args=cfg, env=env, train_dataset=rows, **kwargs)


def _user_errors() -> tuple[type[BaseException], ...]:
    """The errors a command prints as one paragraph (:func:`_usage_error`) instead of a traceback:
    bad values, missing or unreadable files and folders, damaged checkpoints. (A function, so that
    ``import erl_lite.cli`` stays free of torch.)"""
    from erl_lite.checkpoint import CheckpointError

    return CheckpointError, ValueError, OSError


def _usage_error(command: str, error: BaseException) -> int:
    """Print ``error`` as one paragraph, without a traceback; the exit code 2 (as argparse's)."""
    print(f"erl-lite {command}: error: {error}", file=sys.stderr)
    return 2


def _dataset_environment(record: dict[str, Any]) -> tuple[None, str, dict[str, Any]]:
    """``erl-lite train --dataset ... --reward-funcs ...``: the dataset (read by the trainer, as
    ``ERLTrainer(train_dataset=...)`` reads a path or name) and the functions loaded by spec."""
    from erl_lite.func_specs import load_function

    funcs = [load_function(spec, "reward function") for spec in record["reward_funcs"]]
    feedback = record.get("feedback_func")
    return None, record["dataset"], {"reward_funcs": funcs,
                                     "feedback_func": feedback and load_function(feedback, "feedback function")}


def _environment(name: str, small: bool, seed: int = DEFAULT_SEED):
    from erl_lite import envs

    if name == "demo":
        from erl_lite.embedded.demo import DEMO_EVAL_TASKS, step_line
        from erl_lite.embedded.world import demo_world

        world = demo_world(seed)
        # The demo preset turns the progress bar off in favour of one line per step.
        return world, None, {"eval_dataset": world.test_tasks(DEMO_EVAL_TASKS), "callbacks": [step_line]}
    if name == "arithmetic":
        from erl_lite.envs.arithmetic import arithmetic_feedback, arithmetic_reward, make_arithmetic_dataset

        rows = make_arithmetic_dataset(2000, seed=0)
        return None, rows, {"reward_funcs": arithmetic_reward, "feedback_func": arithmetic_feedback,
                            "eval_dataset": make_arithmetic_dataset(64, seed=1)}
    cls = {"frozenlake": envs.FrozenLake, "sokoban": envs.Sokoban, "qa": envs.MultiHopQA}[name]
    return (cls.small() if small else cls()), None, {}


# --- eval and plot ----------------------------------------------------------------------------
def evaluate_checkpoint(checkpoint: str, env: str | None = None, small: bool | None = None,
                        dataset: str | None = None, num_generations: int | None = None,
                        limit: int | None = None, base_model: str | None = None,
                        reward_funcs: Sequence[str] | None = None) -> dict[str, Any]:
    """What ``erl-lite eval`` prints: first-attempt metrics of a checkpoint's LoRA adapter.

    The adapter is loaded with :func:`erl_lite.models.load_policy` (its base from the adapter's
    ``base_model_name_or_path``, 4-bit when the run was) and the run's config from
    ``erl_state.json`` (:func:`erl_lite.checkpoint.run_record`); sampling is the config's evaluation sampler, seeded with its
    ``seed``, as in ``ERLTrainer.evaluate``. ``env``/``small`` default to what the run trained on
    (:func:`_trained_env`); ``dataset`` replaces the test split, and with ``reward_funcs``
    (``module:function`` specs) its rows (a path or name) are scored by them; ``base_model`` loads
    the base from this folder instead of the path the adapter records (a base that moved).

    Raises ValueError when the run trained on something this cannot rebuild (dataset rows
    scored by Python functions, without ``dataset`` and ``reward_funcs``; a custom environment).
    """
    from transformers import set_seed

    from erl_lite.checkpoint import ERL_STATE, HF_STATE, CheckpointError, adapter_folder, list_checkpoints, run_record
    from erl_lite.core.generation import HFGenerator
    from erl_lite.metrics import eval_metrics
    from erl_lite.models import load_policy
    from erl_lite.core.phases import PhaseContext, attempt_first
    from erl_lite.core.progress import Progress

    folder = checkpoint
    if not any(os.path.isfile(os.path.join(folder, name)) for name in (ERL_STATE, HF_STATE)):
        found = list_checkpoints(folder)
        if not found:
            raise CheckpointError(f"no checkpoint at {checkpoint}: neither an {ERL_STATE} nor "
                                  "checkpoint-<step> folders")
        folder = found[0]
    state = run_record(folder)  # erl_state.json (or a format-2 checkpoint's trainer_state.json)
    saved = state.get("config", {})
    known = {name for name in ERLConfig.__dataclass_fields__ if not name.startswith("_")}
    if set(saved) - known:  # written by another erl_lite version
        print(f"warning: ignoring settings this erl_lite does not know: {sorted(set(saved) - known)}",
              file=sys.stderr)
    cfg = ERLConfig(**{k: v for k, v in saved.items() if k in known})
    adapter = adapter_folder(folder)
    if not os.path.isfile(os.path.join(adapter, "adapter_config.json")):
        raise CheckpointError(f"{adapter} holds no LoRA adapter (adapter_config.json); erl-lite eval reads the "
                              "adapter that LoRA runs save with each checkpoint")
    if reward_funcs:
        world, tasks, env_name = _scored_dataset(dataset, reward_funcs, env, cfg)
    else:
        env_name = env or _trained_env(folder, cfg, state.get("env"), dataset)
        small = cfg.extra.get("small", False) if small is None else small
        world, tasks = _evaluation_tasks(env_name, small, cfg)
        if dataset is not None:
            tasks = _read_tasks(dataset, world, env_name)
    tasks = tasks[:limit] if limit is not None else tasks
    n = num_generations or cfg.eval_num_generations
    if not tasks or n < 1:
        raise ValueError(f"nothing to evaluate: {len(tasks)} tasks, {n} generations per task")
    model, tokenizer = load_policy(adapter, quantization="4bit" if cfg.load_in_4bit else "none",
                                   base_model=base_model)
    # The bar goes to stderr (tqdm's stream), so stdout stays the JSON that eval prints.
    ctx = PhaseContext(HFGenerator(model, tokenizer), tokenizer, world, cfg, Progress(enabled=True))
    set_seed(cfg.seed)
    attempts = attempt_first(ctx, tasks, n, params=ctx.eval_params(), desc="evaluation")
    return {"checkpoint": folder, "step": state.get("step"), "env": env_name, "tasks": len(tasks),
            "num_generations": n, **eval_metrics(attempts)}


#: The class each built-in environment of ``erl-lite train --env`` is, as a checkpoint records it.
_ENV_CLASSES = {"erl_lite.embedded.world.DemoLake": "demo", "erl_lite.envs.frozenlake.FrozenLake": "frozenlake",
                "erl_lite.envs.sokoban.Sokoban": "sokoban", "erl_lite.envs.qa.MultiHopQA": "qa"}


def _trained_env(folder: str, cfg: ERLConfig, recorded: dict[str, Any] | None, dataset: str | None) -> str:
    """The ``--env`` a checkpoint trained on: what ``erl-lite train`` recorded in the config's
    ``extra``, else the environment class the trainer recorded (``erl_state.json``'s
    ``env``); the demo world, with a warning, for a checkpoint older than both records.

    Raises ValueError for a run on dataset rows scored by reward functions (they are named,
    but only the user knows where they live) and for an environment the CLI cannot build.
    """
    extra = cfg.extra
    if extra.get("env") == DATASET_ENV:
        specs = " ".join(extra.get("reward_funcs") or [])
        raise ValueError(f"{folder} was trained on --dataset {extra.get('dataset')} scored by --reward-funcs "
                         f"{specs}; erl-lite eval needs them again: --dataset PATH_OR_NAME --reward-funcs {specs}"
                         " (no --feedback-func: eval scores first attempts only)")
    if extra.get("env") in ENVIRONMENTS:
        return extra["env"]
    if recorded is None:
        print(f"warning: {folder} does not record the environment it was trained on (it was written by an "
              "earlier erl_lite); evaluating the demo world. Pass --env, or --dataset and --reward-funcs, if "
              "the run trained on something else", file=sys.stderr)
        return "demo"
    if recorded.get("reward_funcs") is not None:
        specs = " ".join(recorded["reward_funcs"]) or "(none)"
        local = (" (a function defined inside another cannot be loaded by name: move it to a module's top "
                 "level)") if "<locals>" in specs else ""
        rows = "" if dataset is None else f" ({dataset} alone is scored by nothing)"
        raise ValueError(f"{folder} was trained from Python on dataset rows scored by the reward functions "
                         f"{specs}; erl-lite eval cannot know those rows and functions{rows}: pass --dataset "
                         f"PATH_OR_NAME --reward-funcs module:function [...]{local}")
    name = _ENV_CLASSES.get(recorded.get("class", ""))
    if name is None:
        raise ValueError(f"{folder} was trained on the environment {recorded.get('class')} "
                         f"({recorded.get('name')!r}), which erl-lite eval cannot build; pass --env NAME, or "
                         "--dataset and --reward-funcs, or evaluate it in Python with ERLTrainer.evaluate()")
    if name != "demo":
        print(f"warning: {folder} was trained on {recorded['class']} built in Python; evaluating erl-lite's "
              f"--env {name} (its default variant unless --small), which may have other settings",
              file=sys.stderr)
    return name


def _scored_dataset(dataset: str | None, specs: Sequence[str], env: str | None,
                    cfg: ERLConfig) -> tuple[Any, list, str]:
    """``eval --dataset ... --reward-funcs ...``: the rows' evaluation split scored by the functions."""
    from erl_lite.integrations.data_sources import load_rows
    from erl_lite.integrations.dataset import RewardFunctionEnv, rows_to_tasks
    from erl_lite.func_specs import load_function

    if env is not None:
        raise ValueError(f"--env {env} and --reward-funcs both name what to evaluate on; give one")
    if dataset is None:
        raise ValueError("--reward-funcs needs --dataset PATH_OR_NAME: the rows whose completions they score")
    world = RewardFunctionEnv([load_function(spec, "reward function") for spec in specs],
                              success_threshold=cfg.reward_threshold)
    return world, rows_to_tasks(load_rows(dataset, "eval"), prefix="eval", where=dataset), DATASET_ENV


def _evaluation_tasks(name: str, small: bool, cfg: ERLConfig) -> tuple[Any, list]:
    """The environment ``erl-lite train --env name`` trains on, and its test tasks."""
    from erl_lite.integrations.dataset import RewardFunctionEnv, rows_to_tasks
    from erl_lite.records import Task

    env, _, kwargs = _environment(name, small, cfg.seed)
    if env is None:  # a dataset with reward functions, as ERLTrainer wraps it
        env = RewardFunctionEnv(kwargs["reward_funcs"], kwargs.get("feedback_func"),
                                success_threshold=cfg.reward_threshold)
    tasks = kwargs.get("eval_dataset")
    if tasks is None:
        return env, env.test_tasks()
    return env, tasks if tasks and isinstance(tasks[0], Task) else rows_to_tasks(tasks, prefix="eval")


def _read_tasks(path: str, world: Any, env_name: str) -> list:
    """Tasks from a JSONL file for ``world``: tasks ``{task_id, prompt, data}`` of its own kind,
    or (when rewards score it, as on ``--env arithmetic``) dataset rows with a ``prompt``.

    Raises ValueError naming the file and row when plain rows are given to an environment that
    plays tasks of its own (the demo world reads a map from each task's ``data``)."""
    from erl_lite.integrations.dataset import RewardFunctionEnv, rows_to_tasks
    from erl_lite.records import Task

    rows = read_jsonl(path)
    if rows and all(isinstance(r, dict) and set(r) <= {"task_id", "prompt", "data"} and "task_id" in r
                    for r in rows):
        return [Task(r["task_id"], r.get("prompt"), r.get("data") or {}) for r in rows]
    if rows and not isinstance(world, RewardFunctionEnv):
        line = next(i for i, r in enumerate(rows, 1) if not (isinstance(r, dict) and "task_id" in r))
        row = rows[line - 1]
        keys = sorted(row) if isinstance(row, dict) else f"a {type(row).__name__}"
        raise ValueError(f"{path}:{line}: the {env_name} environment plays tasks {{task_id, prompt, data}} (as "
                         f"its test split holds), got {keys}; to score rows with reward functions instead, pass "
                         "--reward-funcs module:function [...]")
    return rows_to_tasks(rows, prefix="eval")


def _eval(args: argparse.Namespace) -> int:
    try:
        metrics = evaluate_checkpoint(args.checkpoint, args.env, args.small, args.dataset,
                                      args.num_generations, args.limit, args.base_model, args.reward_funcs)
    except _user_errors() as e:
        return _usage_error("eval", e)
    print(json.dumps(metrics, indent=2))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from erl_lite.history import History
    from erl_lite.viz import save_figures

    try:
        with warnings.catch_warnings(record=True) as caught:  # a torn last line: say so, draw the rest
            warnings.simplefilter("always", UserWarning)
            history = History.load(args.history)
            baseline = History.load(args.baseline) if args.baseline else None
    except _user_errors() as e:
        return _usage_error("plot", e)
    for w in caught:
        print(f"erl-lite plot: warning: {w.message}", file=sys.stderr)
    out = args.out or (args.history if os.path.isdir(args.history) else os.path.dirname(os.path.abspath(args.history)))
    for path in save_figures(history, out, baseline):
        print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from erl_lite.embedded.demo import run_demo

        run_demo(out=args.out or "erl_lite_demo", steps=args.steps, seed=args.seed,
                 eval_tasks=args.eval_tasks, model_dir=args.model, **{k: v for k, v in _overrides(args).items()
                                                if k not in ("seed", "max_steps", "output_dir")})
        return 0
    if args.command == "eval":
        return _eval(args)
    if args.command == "plot":
        return _plot(args)
    if args.command == "export":
        return _export(args)
    return _train(args)


if __name__ == "__main__":
    sys.exit(main())
