"""``erl-lite train``: the run's options and config (preset < ``--config`` file < flags) and its trainer."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any

from erl_lite.cli.config_args import given_fields
from erl_lite.cli.errors import usage_error, user_errors
from erl_lite.cli.run_files import load_config_file, locate_in_file
from erl_lite.config import DEFAULT_SEED, ERLConfig
from erl_lite.config.checks import check_choice, check_reward_weights, quantization_name
from erl_lite.config.field_types import expand_path
from erl_lite.config.presets import PAPER_GAMES, PAPER_MAX_STEPS, PRESETS, require_cuda_for_preset

ENVIRONMENTS = ("demo", "frozenlake", "sokoban", "qa", "arithmetic")
#: ``erl-lite train``'s options that are not config fields, with their defaults (``preset``: :func:`run_preset`).
RUN_DEFAULTS: dict[str, Any] = {
    "env": "demo",
    "model": "embedded",
    "preset": None,
    "small": False,
    "world": "demo",
    "env_options": {},
}
#: The run options that decide the environment ``erl-lite train`` builds (value when a checkpoint has none).
ENVIRONMENT_OPTIONS = {"env": None, "small": False, "world": "demo", "env_options": {}}
#: The options for your own data (as ``trl grpo``'s); a ``--config`` file may set them too.
DATA_OPTIONS = ("dataset", "reward_funcs", "feedback_func", "reward_weights")
#: The environment a run on ``--dataset ... --reward-funcs ...`` records (``erl-lite eval`` reads it).
DATASET_ENV = "dataset"
#: Short flags for two config fields, and switches that turn a part of ERL off.
FLAG_ALIASES = {"max_steps": ["--steps"], "output_dir": ["--out"], "overwrite_output_dir": ["--overwrite"]}
FLAG_NEGATIONS = {
    "--no-memory": "use_memory",
    "--no-reflection": "use_reflection",
    "--no-internalization": "use_internalization",
}
#: For run-file error messages: the field a command-line shorthand stands for.
_ALIAS_FIELDS = {flag.lstrip("-").replace("-", "_"): name for name, flags in FLAG_ALIASES.items() for flag in flags}


def run_preset(env: str, preset: str | None) -> str:
    if preset is not None:
        return preset
    return "demo" if env == "demo" else "cpu"


def train_settings(args: argparse.Namespace) -> tuple[dict[str, Any], ERLConfig]:
    """``erl-lite train``'s run options and config (preset < file < flags); ValueError names the file, key or field."""
    file_fields, file_run = (
        ({}, {})
        if args.config is None
        else load_config_file(args.config, other_keys=[*RUN_DEFAULTS, *DATA_OPTIONS], aliases=_ALIAS_FIELDS)
    )
    given = {k: getattr(args, k) for k in (*RUN_DEFAULTS, *DATA_OPTIONS) if hasattr(args, k)}
    run = {**RUN_DEFAULTS, **file_run, **given}
    data = _data_record(run, env_given="env" in file_run or "env" in given)
    if data:
        run["env"] = DATASET_ENV
    else:
        check_choice("env", run["env"], ENVIRONMENTS)
    run["preset"] = run_preset(run["env"], run["preset"])  # its name is checked by ERLConfig.preset below
    if not isinstance(run["small"], bool) or not isinstance(run["env_options"], dict):
        raise ValueError(
            f"small must be true or false, env_options a mapping; got {run['small']!r}, {run['env_options']!r}"
        )
    world = _world_record(run)
    flags = given_fields(args)
    overrides = {**file_fields, **flags}
    if not isinstance(overrides.get("extra") or {}, dict):
        raise ValueError(f"extra must be a mapping of names to values, got {overrides['extra']!r}")
    overrides["extra"] = {
        **(overrides.get("extra") or {}),
        "env": run["env"],
        "small": run["small"],
        **world,
        **data,
        **({"env_options": run["env_options"]} if run["env_options"] else {}),
    }
    if (
        run["model"] not in ("embedded", "tiny")
        and run["preset"] in ("cpu", "demo")
        and ("learning_rate" not in overrides)
    ):  # their rates are the embedded model's: too large for a pretrained one (presets.pretrained_rate_warning)
        overrides["learning_rate"] = PRESETS["gpu"]["learning_rate"]
    if run["preset"] == "paper" and not {"max_steps", "num_train_epochs"} & set(overrides):
        overrides["max_steps"] = PAPER_MAX_STEPS.get(run["env"], PRESETS["paper"]["max_steps"])
    try:
        return run, ERLConfig.preset(run["preset"], **overrides)
    except ValueError as e:  # a field the file set (and no flag overrode): name its line
        if args.config is None:
            raise
        raise ValueError(locate_in_file(str(e), args.config, set(file_fields) - set(flags))) from e


def _world_record(run: dict[str, Any]) -> dict[str, Any]:
    """``{"world": name}`` for ``extra``, none on the demo world (as earlier runs); ValueError off --env demo."""
    from erl_lite.embedded.world import WORLDS

    check_choice("world", run["world"], sorted(WORLDS))
    if run["world"] != "demo" and run["env"] != "demo":
        raise ValueError(f"--world applies to --env demo (the embedded model's worlds), not --env {run['env']}")
    return {} if run["world"] == "demo" else {"world": run["world"]}


def _data_record(run: dict[str, Any], env_given: bool) -> dict[str, Any]:
    """The :data:`DATA_OPTIONS` specs a run on your own data records in ``extra`` (empty otherwise)."""
    dataset, funcs, feedback, weights = (run.get(k) for k in DATA_OPTIONS)
    if dataset is None and funcs is None and feedback is None and weights is None:
        return {}
    if funcs is None and weights is not None:
        raise ValueError("--reward-weights needs --dataset and --reward-funcs: one weight per reward function")
    if funcs is None:
        raise ValueError(
            "--dataset needs --reward-funcs module:function [...]: the functions that score its "
            "completions (as trl grpo --reward_funcs)"
            if dataset is not None
            else "--feedback-func needs --dataset and --reward-funcs"
        )
    if dataset is None:
        raise ValueError("--reward-funcs needs --dataset PATH_OR_NAME: the rows whose completions they score")
    if env_given:
        raise ValueError(f"--env {run['env']} and --dataset/--reward-funcs both name what to train on; give one")
    funcs = [funcs] if isinstance(funcs, str) else funcs  # a run file may give one spec as a string
    if not (isinstance(funcs, list) and funcs and all(isinstance(f, str) for f in funcs)):
        raise ValueError(f"reward_funcs must be a list of module:function specs, got {funcs!r}")
    if not isinstance(dataset, str) or not (feedback is None or isinstance(feedback, str)):
        raise ValueError("dataset and feedback_func must be text (a path or name, a module:function spec)")
    weights = check_reward_weights(weights, funcs)
    return {
        "dataset": expand_path(dataset),
        "reward_funcs": list(funcs),
        "feedback_func": feedback,
        **({} if weights is None else {"reward_weights": weights}),
    }


def run_train(args: argparse.Namespace) -> int:
    """``erl-lite train``: build the trainer and train; the exit code."""
    from erl_lite.metric_names import EVAL_SUCCESS
    from erl_lite.run.checkpoint import list_checkpoints, named_for_its_step
    from erl_lite.run.state import CheckpointError

    try:
        run, cfg = train_settings(args)
        require_cuda_for_preset(run["preset"], command=True)
        if args.resume and not cfg.output_dir:
            raise ValueError("--resume needs --out (the run folder whose latest checkpoint to continue)")
        if args.resume and not list_checkpoints(cfg.output_dir):
            raise CheckpointError(
                f"nothing to resume: no checkpoint-<step> folder in {cfg.output_dir}; "
                "run without --resume to start this run"
            )
        if resumed := [p for p in list_checkpoints(cfg.output_dir) if named_for_its_step(p)][:1] if args.resume else []:
            same_environment(run, resumed[0])  # the one resume takes; a misnamed one is skipped there, named
        if run["model"] == "embedded" and run["env"] != "demo":
            print(
                f"warning: the embedded model was only taught the demo world; on --env {run['env']} expect "
                "rewards near zero (use a hub model or a local folder with --model)",
                file=sys.stderr,
            )
        trainer = _build_trainer(run, cfg)
    except user_errors() as e:  # bad settings, a missing model folder, a bad dataset file, ...
        return usage_error("train", e)
    try:
        history = trainer.train(
            resume_from_checkpoint=True if args.resume else None,
            ignore_config_mismatch=getattr(args, "ignore_config_mismatch", False),
        )
    except CheckpointError as e:  # a checkpoint damaged or refused, a folder; other errors keep their traceback
        return usage_error("train", e)
    last = history.last(EVAL_SUCCESS, kind="eval")
    print(f"done: {len(history.of_kind('train'))} steps; last eval success {last}")
    return 0


def same_environment(run: dict[str, Any], checkpoint: str) -> None:
    """Refuse (CheckpointError) to resume ``checkpoint`` on another environment than it trained on: the command line
    builds the environment from these options, the trainer only records it (a Python caller's is not checked)."""
    from erl_lite.run.checkpoint import run_record
    from erl_lite.run.state import CheckpointError

    try:
        saved = run_record(checkpoint)["config"].get("extra") or {}
    except CheckpointError:  # a damaged record: the trainer's resume reports it (or falls back)
        return
    if not isinstance(saved, dict) or saved.get("env") is None:
        return
    differ = [
        f"{k}: {saved.get(k, d)!r} there, {run[k]!r} here"
        for k, d in ENVIRONMENT_OPTIONS.items()
        if saved.get(k, d) != run[k]
    ]
    if differ:
        raise CheckpointError(
            f"{checkpoint} trained on another environment than this run would build "
            f"({'; '.join(differ)}); resume with the options it trained with"
        )


def _build_trainer(run: dict[str, Any], config: ERLConfig) -> Any:
    """``erl-lite train``'s trainer: the model and environment its run options name."""
    from erl_lite.run.trainer import ERLTrainer

    # The environment first: a missing reward function fails before a model is loaded.
    env, rows, kwargs = (
        _dataset_environment(config.extra)
        if run["env"] == DATASET_ENV
        else build_environment(run["env"], run["small"], config.seed, run["world"], run["preset"], run["env_options"])
    )
    model, tokenizer = run["model"], None
    if run["model"] == "embedded":
        from transformers import set_seed

        from erl_lite.embedded.loading import load_embedded

        set_seed(config.seed)  # the LoRA initialisation draws from the global RNG (as in the demo)
        model, tokenizer = load_embedded(quantization=quantization_name(config.load_in_4bit))
    elif run["model"] == "tiny":
        import tempfile

        from erl_lite.testing import save_tiny_model

        model = save_tiny_model(tempfile.mkdtemp(prefix="erl_lite_tiny_"))
    return ERLTrainer(model=model, processing_class=tokenizer, args=config, env=env, train_dataset=rows, **kwargs)


def _dataset_environment(record: dict[str, Any]) -> tuple[None, str, dict[str, Any]]:
    """``--dataset ... --reward-funcs ...``: the dataset's path or name and the functions loaded by spec."""
    from erl_lite.run.func_specs import load_function

    funcs = [load_function(spec, "reward function") for spec in record["reward_funcs"]]
    feedback = record.get("feedback_func")
    kwargs = {
        "reward_funcs": funcs,
        "reward_weights": record.get("reward_weights"),
        "feedback_func": feedback and load_function(feedback, "feedback function"),
    }
    return None, record["dataset"], kwargs


def build_environment(
    name: str,
    small: bool,
    seed: int = DEFAULT_SEED,
    world: str = "demo",
    preset: str | None = None,
    options: dict[str, Any] | None = None,
) -> tuple[Any, Any, dict[str, Any]]:
    """``(environment, dataset rows, other ERLTrainer arguments)`` of ``erl-lite train --env name``
    (``world``: which of the embedded model's worlds ``--env demo`` plays; ``paper``: ``PAPER_GAMES``;
    ``options``: the environment's or the arithmetic dataset's own keywords, ``--env-options``)."""
    from erl_lite import envs

    if name == "demo" and options:  # its world is --world's; the options were silently ignored before
        raise ValueError(
            f"--env-options: --env demo takes none (--world picks its world); got {', '.join(map(repr, options))}"
        )
    if name == "demo":
        from erl_lite.embedded.demo import DEMO_EVAL_TASKS, step_line
        from erl_lite.embedded.world import demo_world

        world = demo_world(seed, world)
        # The demo preset turns the progress bar off in favour of one line per step.
        return world, None, {"eval_dataset": world.test_tasks(DEMO_EVAL_TASKS), "callbacks": [step_line]}
    if name == "arithmetic":
        from erl_lite.envs import arithmetic as task

        rows = {**(task.SMALL if small else {"n": 2000}), "seed": 0, **(options or {})}
        return (
            None,
            _with_options(name, lambda: task.make_arithmetic_dataset(**rows)),
            {
                "reward_funcs": task.arithmetic_reward,
                "feedback_func": task.arithmetic_feedback,
                "eval_dataset": task.make_arithmetic_dataset(**{**rows, "n": 64, "seed": rows["seed"] + 1}),
            },
        )
    cls = {"frozenlake": envs.FrozenLake, "sokoban": envs.Sokoban, "qa": envs.MultiHopQA}[name]
    base = PAPER_GAMES.get(name, {}) if preset == "paper" else {}
    build = (lambda: cls.small(**options or {})) if small else lambda: cls(**{**base, **(options or {})})
    return _with_options(name, build), None, {}


def _with_options(name: str, build: Callable[[], Any]) -> Any:
    """``build()``, with a keyword the environment does not take (a TypeError deep in its constructors, which pass
    options on to their base classes) refused as the ``--env-options`` entry it came from."""
    try:
        return build()
    except TypeError as e:
        if not (bad := re.search(r"unexpected keyword argument '(\w+)'", str(e))):
            raise
        raise ValueError(f"--env-options: --env {name} has no option {bad.group(1)!r} ({e})") from None
