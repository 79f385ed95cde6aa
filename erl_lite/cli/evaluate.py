"""``erl-lite eval``: first attempts of a checkpoint's adapter, no memory, on the test split it trained on, as JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from erl_lite.cli.errors import read_run, usage_error, user_errors
from erl_lite.cli.train import DATASET_ENV, ENVIRONMENTS, build_environment
from erl_lite.config import ERLConfig
from erl_lite.config.checks import check_whole, quantization_name
from erl_lite.jsonio import read_jsonl


def evaluate_checkpoint(
    checkpoint: str,
    env: str | None = None,
    small: bool | None = None,
    dataset: str | None = None,
    num_generations: int | None = None,
    limit: int | None = None,
    base_model: str | None = None,
    reward_funcs: Sequence[str] | None = None,
) -> dict[str, Any]:
    """What ``erl-lite eval`` prints: first-attempt metrics of a checkpoint's LoRA adapter, as ``ERLTrainer.evaluate``.
    ``dataset`` replaces the test split, scored by ``reward_funcs`` (``module:function`` specs) when given.
    Raises ValueError when the run trained on something this cannot rebuild."""
    from transformers import set_seed

    from erl_lite.core.phases import PhaseContext, attempt_first
    from erl_lite.engine.continuous import end_phase
    from erl_lite.engine.progress import Progress
    from erl_lite.integrations.wiring import generator_for
    from erl_lite.metrics import eval_metrics
    from erl_lite.models import load_policy

    for name, value in (("limit", limit), ("num_generations", num_generations)):
        if value is not None:  # before the checkpoint is read (--limit -1 read as "all but the last task")
            check_whole("evaluate_checkpoint", name, value, minimum=1)
    folder, state, cfg = _load_checkpoint(checkpoint)
    if reward_funcs:
        world, tasks, env_name = _scored_dataset(dataset, reward_funcs, env)
    else:
        env_name = env or _trained_env(folder, cfg, state.run.get("env"), dataset)
        small = cfg.extra.get("small", False) if small is None else small
        world, tasks = _evaluation_tasks(env_name, small, cfg)
        if dataset is not None:
            tasks = _read_tasks(dataset, world, env_name)
    tasks = tasks[:limit] if limit is not None else tasks
    n = cfg.eval_num_generations if num_generations is None else num_generations
    if not tasks or n < 1:
        raise ValueError(f"nothing to evaluate: {len(tasks)} tasks, {n} generations per task")
    model, tokenizer = load_policy(folder, quantization=quantization_name(cfg.load_in_4bit), base_model=base_model)
    # The bar goes to stderr (tqdm's stream), so stdout stays the JSON that eval prints.
    generator = generator_for(model, tokenizer, cfg)  # the run's generation_backend
    ctx = PhaseContext(generator=generator, tokenizer=tokenizer, env=world, config=cfg, progress=Progress(enabled=True))
    set_seed(cfg.seed)
    try:
        attempts = attempt_first(ctx, tasks, n, params=ctx.eval_params(), desc="evaluation")
    finally:
        end_phase(generator)
    return {
        "checkpoint": folder,
        "step": state.step,
        "env": env_name,
        "tasks": len(tasks),
        "num_generations": n,
        **eval_metrics(attempts),
    }


def _load_checkpoint(checkpoint: str) -> tuple[str, Any, ERLConfig]:
    """``(checkpoint folder, TrainingState, config)`` of a checkpoint, or of a run's newest good one."""
    from erl_lite.run.checkpoint import find_run
    from erl_lite.run.state import CheckpointError

    state = find_run(checkpoint).checkpoint()
    folder, saved = state.path, state.run.get("config", {})
    known = {name for name in ERLConfig.__dataclass_fields__ if not name.startswith("_")}
    if set(saved) - known:  # written by another erl_lite version
        print(f"warning: ignoring settings this erl_lite does not know: {sorted(set(saved) - known)}", file=sys.stderr)
    cfg = ERLConfig(**{k: v for k, v in saved.items() if k in known})
    if not os.path.isfile(os.path.join(folder, "adapter_config.json")):
        raise CheckpointError(
            f"{folder} holds no LoRA adapter (adapter_config.json); erl-lite eval reads the "
            "adapter that LoRA runs save with each checkpoint"
        )
    return folder, state, cfg


#: The class of each built-in ``--env``, as a checkpoint records it.
_ENV_CLASSES = {
    "erl_lite.embedded.world.DemoLake": "demo",
    "erl_lite.envs.frozenlake.FrozenLake": "frozenlake",
    "erl_lite.envs.sokoban.Sokoban": "sokoban",
    "erl_lite.envs.qa.MultiHopQA": "qa",
}


def _trained_env(folder: str, config: ERLConfig, recorded: dict[str, Any] | None, dataset: str | None) -> str:
    """The ``--env`` a checkpoint trained on (``extra``'s record, else the trainer's class record)."""
    extra = config.extra
    if extra.get("env") == DATASET_ENV:
        specs = " ".join(extra.get("reward_funcs") or [])
        raise ValueError(
            f"{folder} was trained on --dataset {extra.get('dataset')} scored by --reward-funcs "
            f"{specs}; erl-lite eval needs them again: --dataset PATH_OR_NAME --reward-funcs {specs}"
            " (no --feedback-func: eval scores first attempts only)"
        )
    if extra.get("env") in ENVIRONMENTS:
        return extra["env"]
    if recorded is None:  # every checkpoint erl_lite writes records it: this one was edited by hand
        raise ValueError(
            f"{folder} records no environment (erl_state.json has no 'env'); pass --env NAME, or --dataset "
            "and --reward-funcs, to say what to evaluate on"
        )
    if recorded.get("reward_funcs") is not None:
        specs = " ".join(recorded["reward_funcs"]) or "(none)"
        local = ""
        if "<locals>" in specs:
            local = " (a function defined inside another cannot be loaded by name: move it to a module's top level)"
        rows = "" if dataset is None else f" ({dataset} alone is scored by nothing)"
        raise ValueError(
            f"{folder} was trained from Python on dataset rows scored by the reward functions "
            f"{specs}; erl-lite eval cannot know those rows and functions{rows}: pass --dataset "
            f"PATH_OR_NAME --reward-funcs module:function [...]{local}"
        )
    name = _ENV_CLASSES.get(recorded.get("class", ""))
    if name is None:
        raise ValueError(
            f"{folder} was trained on the environment {recorded.get('class')} "
            f"({recorded.get('name')!r}), which erl-lite eval cannot build; pass --env NAME, or "
            "--dataset and --reward-funcs, or evaluate it in Python with ERLTrainer.evaluate()"
        )
    if name != "demo":
        print(
            f"warning: {folder} was trained on {recorded['class']} built in Python; evaluating erl-lite's "
            f"--env {name} (its default variant unless --small), which may have other settings",
            file=sys.stderr,
        )
    return name


def _scored_dataset(dataset: str | None, specs: Sequence[str], env: str | None) -> tuple[Any, list, str]:
    """``eval --dataset ... --reward-funcs ...``: the rows' evaluation split scored by the functions."""
    from erl_lite.envs.rows import rows_to_tasks
    from erl_lite.integrations.data_sources import load_rows
    from erl_lite.integrations.dataset import RewardFunctionEnv
    from erl_lite.run.func_specs import load_function

    if env is not None:
        raise ValueError(f"--env {env} and --reward-funcs both name what to evaluate on; give one")
    if dataset is None:
        raise ValueError("--reward-funcs needs --dataset PATH_OR_NAME: the rows whose completions they score")
    world = RewardFunctionEnv([load_function(spec, "reward function") for spec in specs])
    return world, rows_to_tasks(load_rows(dataset, "eval"), prefix="eval", where=dataset), DATASET_ENV


def _evaluation_tasks(name: str, small: bool, config: ERLConfig) -> tuple[Any, list]:
    """The environment ``erl-lite train --env name`` trains on, and its test tasks (read as the trainer reads them)."""
    from erl_lite.integrations.dataset import RewardFunctionEnv
    from erl_lite.integrations.wiring import read_tasks

    env, _, kwargs = build_environment(
        name,
        small,
        config.seed,
        world=config.extra.get("world", "demo"),
        preset=config.preset_name,
        options=config.extra.get("env_options"),
    )
    if env is None:  # a dataset with reward functions, as ERLTrainer wraps it
        env = RewardFunctionEnv(kwargs["reward_funcs"], kwargs.get("feedback_func"))
    return env, read_tasks(env, kwargs.get("eval_dataset"), "eval")


def _read_tasks(path: str, world: Any, env_name: str) -> list:
    """Tasks ``{task_id, prompt, data}`` from a JSONL file, or rows with a ``prompt`` when rewards score ``world``."""
    from erl_lite.envs.rows import rows_to_tasks
    from erl_lite.integrations.dataset import RewardFunctionEnv
    from erl_lite.records import Task

    def is_task(row: Any) -> bool:
        return isinstance(row, dict) and "task_id" in row and set(row) <= {"task_id", "prompt", "data"}

    rows = read_jsonl(path)
    if rows and all(is_task(r) for r in rows):
        return [Task(r["task_id"], r.get("prompt"), r.get("data") or {}) for r in rows]
    if rows and not isinstance(world, RewardFunctionEnv):  # the first row that is no task is named
        line, row = next((i, r) for i, r in enumerate(rows, 1) if not is_task(r))
        keys = sorted(row) if isinstance(row, dict) else f"a {type(row).__name__}"
        raise ValueError(
            f"{path}:{line}: the {env_name} environment plays tasks {{task_id, prompt, data}} (as "
            f"its test split holds), got {keys}; to score rows with reward functions instead, pass "
            "--reward-funcs module:function [...]"
        )
    return rows_to_tasks(rows, prefix="eval")


def run_eval(args: argparse.Namespace) -> int:
    """``erl-lite eval``: print the metrics as JSON; the exit code."""
    try:
        checkpoint = read_run("eval", args.checkpoint).checkpoint().path
        metrics = evaluate_checkpoint(
            checkpoint,
            args.env,
            args.small,
            args.dataset,
            args.num_generations,
            args.limit,
            args.base_model,
            args.reward_funcs,
        )
    except user_errors() as e:
        return usage_error("eval", e)
    print(json.dumps(metrics, indent=2))
    return 0
