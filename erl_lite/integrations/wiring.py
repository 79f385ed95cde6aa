"""The trainer's wiring: what its arguments become (environment, tasks, process group, reporter,
memory, callbacks, metrics); the trainer imports only this module from ``integrations/``."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from erl_lite.config import ERLConfig
from erl_lite.core.env import Environment
from erl_lite.core.memory import MemoryBank, ReflectionMemory, SlotMemory
from erl_lite.engine.continuous import ContinuousGenerator, cache_tokens_for
from erl_lite.engine.generation import HFGenerator
from erl_lite.envs.multi import MultiEnvironment
from erl_lite.envs.rows import rows_to_tasks
from erl_lite.integrations.data_sources import load_rows
from erl_lite.integrations.dataset import RewardFunctionEnv
from erl_lite.integrations.distributed import DataParallel
from erl_lite.integrations.reporting import Reporter, resolve_report_to
from erl_lite.integrations.reward_calls import RewardFunctionError, RewardLog, mean_metrics
from erl_lite.integrations.trl_adapter import environment_from_factory, placeholder_rows
from erl_lite.metrics import describe, env_eval_metrics, env_step_metrics
from erl_lite.records import Task, check_unique_task_ids


def build_environment(
    config: ERLConfig,
    env: Environment | None,
    environment_factory: Any,
    reward_funcs: Any,
    feedback_func: Callable | None,
    reward_weights: Sequence[float] | None,
    train_dataset: Any,
) -> tuple[Environment, Any]:
    """``(environment, train_dataset)`` from exactly one of ``env=``, ``environment_factory=``, ``reward_funcs=``."""
    # What the chosen route never reads is refused, not dropped: env= scores its own episodes, and an
    # environment_factory= takes reward functions and weights but gives its own feedback.
    unread = ["reward_weights"] * (env is not None and reward_weights is not None) + ["feedback_func"] * (
        feedback_func is not None and (env is not None or environment_factory is not None)
    )
    if unread:
        route = "an env=" if env is not None else "an environment_factory="
        raise ValueError(
            f"{', '.join(unread)} go with reward_funcs= (dataset tasks); {route} scores its own "
            "episodes and would never read them: set them on the environment instead"
        )
    if environment_factory is not None:
        if env is not None:
            raise ValueError("pass env= or environment_factory=, not both")
        env = environment_from_factory(environment_factory, reward_funcs, reward_weights)
        if train_dataset is None:  # TRL's dataset-free mode: reset() returns the prompt
            train_dataset = placeholder_rows(environment_factory, config.max_steps, config.num_tasks_per_step)
        reward_funcs = None  # the adapter calls them, with environments= as TRL does
    if (env is None) == (reward_funcs is None):
        raise ValueError(
            "pass exactly one of env= (multi-turn), environment_factory= (TRL-style "
            "environment classes) or reward_funcs= (dataset tasks)"
        )
    if env is None:
        env = RewardFunctionEnv(reward_funcs, feedback_func, reward_weights)
    return env, train_dataset


def process_group(config: ERLConfig) -> DataParallel:
    """This process's rank and device under ``accelerate launch`` (one process otherwise)."""
    reducer = DataParallel.from_environment()
    if reducer.world_size > 1 and config.scale_rewards == "batch":
        # Each process sees only its shard of tasks; a per-shard std would differ from one process's.
        raise ValueError(
            "ERLConfig.scale_rewards='batch' is not supported under several processes "
            "(the std would be each process's own); use 'group' or 'none'"
        )
    return reducer


def reporter_for(config: ERLConfig, reducer: DataParallel) -> Reporter | None:
    """The trackers of ``config.report_to`` on rank 0 (None elsewhere, or where it names none); resolved on all ranks:
    a tracker that is not installed fails on all (ImportError)."""
    names = resolve_report_to(config.report_to)
    return Reporter(config, names) if names and reducer.is_main else None


def attach(env: Environment, trainer_state: Any, tokenizer: Any, config: ERLConfig) -> RewardLog:
    """Hand ``env`` the trainer's state view and tokenizer; returns the reward functions' log."""
    env.trainer_state = trainer_state
    env.reward_log = reward_log = RewardLog()
    env.use_tokenizer(tokenizer, config.chat_template_kwargs)  # e.g. tools= for the chat template
    return reward_log


def read_tasks(env: Environment, data: Any, split: str) -> Sequence[Task]:
    """Tasks of a dataset (anything ``load_rows`` reads), or of the env's split when ``data`` is None; ids unique."""
    where = f"{split}_dataset" if data is not None else f"the environment's {split} tasks"
    return check_unique_task_ids(_tasks(env, data, split), where)


def _tasks(env: Environment, data: Any, split: str) -> Sequence[Task]:
    if data is None and split == "train":
        return env.train_pool()
    if data is None:
        try:
            return env.test_tasks()
        except NotImplementedError:  # e.g. a TRL-style environment: no evaluation unless asked
            return []
    rows = load_rows(data, split)
    if isinstance(env, MultiEnvironment):
        return env.tasks_from_rows(rows, split)
    if rows and isinstance(rows[0], Task):
        return rows
    return rows_to_tasks(rows, prefix=split, where=f"{split}_dataset")


def memory_for(env: Environment, config: ERLConfig) -> ReflectionMemory | MemoryBank:
    """The paper's one memory, or one per environment when the run mixes environments."""
    if isinstance(env, MultiEnvironment):
        return MemoryBank(env.names, config.memory_type, config.memory_size, config.memory_top_k, env.env_name)
    if config.memory_type == "slots":  # the reference code's, emulated
        return SlotMemory(config.memory_size)
    return ReflectionMemory(config.memory_type, config.memory_size, config.memory_top_k)


def env_step_extras(env: Environment, outcome: Any, memory: Any, mode: str) -> dict[str, Any]:
    """The per-environment step metrics of a :class:`MultiEnvironment` run (none otherwise)."""
    if not isinstance(env, MultiEnvironment):
        return {}
    return env_step_metrics(outcome, env.env_name, env.names, memory, mode)


def env_eval_extras(env: Environment, attempts: list[Any]) -> dict[str, Any]:
    """The per-environment evaluation metrics of a :class:`MultiEnvironment` run (none otherwise)."""
    if not isinstance(env, MultiEnvironment):
        return {}
    return env_eval_metrics(attempts, env.env_name, env.names)


def logged_metrics(reward_log: RewardLog, reducer: DataParallel) -> dict[str, float]:
    """Means over all processes of what reward functions passed to ``log_metric``; erl_lite's own names refused."""
    logged = mean_metrics(reducer.gather(reward_log.take_metrics()))
    clash = sorted(k for k in logged if describe(k) is not None)
    if clash:
        raise RewardFunctionError(f"log_metric name(s) {clash} are metrics erl_lite logs itself; pick other names")
    return logged


def generator_for(model: Any, tokenizer: Any, config: ERLConfig, rank: int = 0) -> Any:
    """The sampler ``config.generation_backend`` names, sized and seeded from ``config``."""
    if config.generation_backend == "generate":
        return HFGenerator(model, tokenizer)
    if config.generation_backend == "continuous":
        return ContinuousGenerator(model, tokenizer, cache_tokens=cache_tokens_for(config), seed=config.seed, rank=rank)
    from erl_lite.integrations.vllm import VLLMGenerator

    return VLLMGenerator(
        model, tokenizer, cache_tokens=cache_tokens_for(config), seed=config.seed, rank=rank, config=config
    )
