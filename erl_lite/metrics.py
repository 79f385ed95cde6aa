"""Metric names, their glossary, and the per-phase numbers of one iteration.

Every logged key is a constant here with one line in :data:`METRIC_GLOSSARY` (a test checks both
directions). A metric without data this step is None, not 0, so plots show a gap. TRL's names
(:data:`TRL_NAMES`) describe the first attempts; where TRL logs 0 or NaN for an empty set, the value
here is None. Unlike TRL, a lone rollout counts as zero-std only when its reward is 0.
Departures from the paper: none; the paper reports the same quantities as curves.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Callable

from erl_lite.core.memory import ReflectionMemory
from erl_lite.records import FIRST, REFLECTION, SECOND, Attempt, TrainSample

# --- names ------------------------------------------------------------------------------------
STEP = "step"
REWARD_FIRST, REWARD_SECOND = "reward/first", "reward/second"
SUCCESS_FIRST, SUCCESS_SECOND = "success/first", "success/second"
GATE_RATE = "gate/rate"
REFLECTION_PARSE_RATE, REFLECTION_REWARD = "reflection/parse_rate", "reflection/reward"
MEMORY_SIZE, MEMORY_WRITES, MEMORY_TOTAL_WRITES = "memory/size", "memory/writes", "memory/total_writes"
TOKENS_FIRST, TOKENS_REFLECTION, TOKENS_SECOND = "tokens/first", "tokens/reflection", "tokens/second"
TURNS_FIRST, TRUNCATED_FIRST = "turns/first", "truncated/first"
TRUNCATED_REFLECTION, TRUNCATED_SECOND = "truncated/reflection", "truncated/second"
TIME_FIRST, TIME_REFLECT, TIME_SECOND = "time/first", "time/reflect", "time/second"
TIME_UPDATE, TIME_STEP = "time/update", "time/step"
TOKENS_PER_SECOND, PEAK_GPU_GB = "tokens/per_second", "memory/peak_gpu_gb"
LR = "lr"
ZERO_STD_FIRST = "frac_reward_zero_std/first"
ZERO_STD_REFLECTION = "frac_reward_zero_std/reflection"
ZERO_STD_SECOND = "frac_reward_zero_std/second"
#: The roles whose GRPO groups ``frac_reward_zero_std/<role>`` reports (internalization has no group).
ZERO_STD_KEYS = {FIRST: ZERO_STD_FIRST, REFLECTION: ZERO_STD_REFLECTION, SECOND: ZERO_STD_SECOND}
EVAL_REWARD, EVAL_SUCCESS, EVAL_NUM_EPISODES = "eval/reward", "eval/success", "eval/num_episodes"
EVAL_TRUNCATED = "eval/truncated"
# TRL 1.16's names (GRPOTrainer._generate_and_score_completions), for the first attempts.
TRL_REWARD, TRL_REWARD_STD, TRL_ZERO_STD = "reward", "reward_std", "frac_reward_zero_std"
LEN_MEAN, LEN_MIN, LEN_MAX = "completions/mean_length", "completions/min_length", "completions/max_length"
CLIPPED_RATIO = "completions/clipped_ratio"
TERM_MEAN, TERM_MIN, TERM_MAX = ("completions/mean_terminated_length", "completions/min_terminated_length",
                                 "completions/max_terminated_length")

#: Every key a history record may hold, with its meaning (the update's keys come from core.update).
METRIC_GLOSSARY: dict[str, str] = {
    STEP: "training iteration (1-based)",
    REWARD_FIRST: "mean reward of first attempts",
    REWARD_SECOND: "mean reward of second attempts (gated tasks only)",
    SUCCESS_FIRST: "fraction of first attempts the environment counts as solved",
    SUCCESS_SECOND: "fraction of second attempts the environment counts as solved",
    GATE_RATE: "fraction of first attempts sent on to reflection (r1 < tau)",
    REFLECTION_PARSE_RATE: "fraction of reflections with a parsable <prompt> block",
    REFLECTION_REWARD: "mean reward credited to reflections (r2 of their second attempt)",
    ZERO_STD_FIRST: "fraction of first-attempt groups (one per task) with all advantages 0 (no policy loss)",
    ZERO_STD_REFLECTION: "the same for the reflection groups (a task's gated rollouts, rewards r2)",
    ZERO_STD_SECOND: "the same for the second-attempt groups (a task's gated rollouts, rewards r2)",
    MEMORY_SIZE: "number of rulebooks memory holds after the step",
    MEMORY_WRITES: "rulebooks written to memory during the step",
    MEMORY_TOTAL_WRITES: "rulebooks written to memory since the run started",
    "loss/first": "policy loss contributed by first attempts",
    "loss/reflection": "policy loss contributed by reflections",
    "loss/second": "policy loss contributed by second attempts",
    "loss/distill": "internalization loss (second attempts under the initial context)",
    "loss/total": "sum of the above plus the KL term",
    "kl": "mean per-token k3 KL to the reference (adapter disabled)",
    "clip_ratio": "fraction of loss tokens whose ratio was clipped",
    "grad_norm": "gradient norm before clipping (last optimizer step taken in the iteration; 0 if none)",
    "advantage/first": "mean |A| over first-attempt sequences",
    "advantage/reflection": "mean |A| over reflection sequences",
    "advantage/second": "mean |A| over second-attempt sequences",
    "samples/first": "sequences of the role in the RL batch",
    "samples/reflection": "sequences of the role in the RL batch",
    "samples/second": "sequences of the role in the RL batch",
    "samples/distill": "sequences of the role in the RL batch",
    TOKENS_FIRST: "tokens generated by first attempts",
    TOKENS_REFLECTION: "tokens generated by reflections",
    TOKENS_SECOND: "tokens generated by second attempts",
    TURNS_FIRST: "mean number of model turns of a first attempt",
    TRUNCATED_FIRST: "fraction of first attempts cut at max_completion_length or max_episode_length",
    TRUNCATED_REFLECTION: "fraction of reflections cut at max_reflection_length (no stop token)",
    TRUNCATED_SECOND: "the same as truncated/first for second attempts",
    TIME_FIRST: "seconds spent on first attempts",
    TIME_REFLECT: "seconds spent writing reflections",
    TIME_SECOND: "seconds spent on second attempts",
    TIME_UPDATE: "seconds spent on the RL update",
    TIME_STEP: "seconds for the whole iteration",
    TOKENS_PER_SECOND: "generated tokens of the step (all roles) per second of the sampling phases",
    PEAK_GPU_GB: "peak CUDA memory allocated by torch during the step, GiB (None on CPU)",
    "optim/steps": "optimizer steps taken this iteration",
    "optim/skipped_steps": "optimizer steps skipped this iteration: their loss or gradient was not finite",
    LR: "learning rate",
    EVAL_REWARD: "mean first-attempt reward on the evaluation tasks (eval records)",
    EVAL_SUCCESS: "first-attempt success rate on the evaluation tasks (eval records)",
    EVAL_NUM_EPISODES: "evaluation episodes played (tasks x samples; eval records)",
    EVAL_TRUNCATED: "fraction of evaluation episodes with a cut reply or out of budget (eval records)",
    TRL_REWARD: "TRL's name: mean reward of first attempts (= reward/first)",
    TRL_REWARD_STD: "TRL's name: unbiased std of first-attempt rewards (None below two)",
    TRL_ZERO_STD: "TRL's name: frac_reward_zero_std/first",
    LEN_MEAN: "TRL's name: mean generated tokens of a first attempt",
    LEN_MIN: "TRL's name: fewest generated tokens of a first attempt",
    LEN_MAX: "TRL's name: most generated tokens of a first attempt",
    CLIPPED_RATIO: "TRL's name: fraction of first attempts truncated (= truncated/first)",
    TERM_MEAN: "TRL's name: mean generated tokens of the first attempts not truncated (None: none)",
    TERM_MIN: "TRL's name: fewest generated tokens of a first attempt not truncated (None: none)",
    TERM_MAX: "TRL's name: most generated tokens of a first attempt not truncated (None: none)",
}

#: TRL's metric names logged next to ERL's (see the module docstring).
TRL_NAMES = (TRL_REWARD, TRL_REWARD_STD, TRL_ZERO_STD, LEN_MEAN, LEN_MIN, LEN_MAX, CLIPPED_RATIO,
             TERM_MEAN, TERM_MIN, TERM_MAX)


#: Metric families, one key per environment of a multi-environment run (``<env>``: its name).
ENV_FAMILY_SUFFIX = "/<env>"
METRIC_FAMILIES: dict[str, str] = {
    REWARD_FIRST + ENV_FAMILY_SUFFIX: "mean reward of the environment's first attempts",
    REWARD_SECOND + ENV_FAMILY_SUFFIX: "mean reward of the environment's second attempts",
    SUCCESS_FIRST + ENV_FAMILY_SUFFIX: "fraction of the environment's first attempts solved",
    SUCCESS_SECOND + ENV_FAMILY_SUFFIX: "fraction of the environment's second attempts solved",
    GATE_RATE + ENV_FAMILY_SUFFIX: "fraction of the environment's first attempts sent on to reflection",
    MEMORY_SIZE + ENV_FAMILY_SUFFIX: "number of rulebooks the environment's own memory holds after the step",
    EVAL_REWARD + ENV_FAMILY_SUFFIX: "mean first-attempt reward on the environment's evaluation tasks",
    EVAL_SUCCESS + ENV_FAMILY_SUFFIX: "first-attempt success rate on the environment's evaluation tasks",
}


#: TRL's per-reward-function family (``<func>``: the function's TRL name), and its second-attempt twin.
REWARD_FUNC_PREFIX = "rewards/"
REWARD_FUNC_FAMILIES: dict[str, str] = {
    "rewards/<func>/mean": "TRL's name: mean of the reward function's values on first attempts (None rows left out)",
    "rewards/<func>/std": "TRL's name: unbiased std of the reward function's values on first attempts",
    "rewards/<func>/second/mean": "mean of the reward function's values on second attempts",
    "rewards/<func>/second/std": "unbiased std of the reward function's values on second attempts",
}


def reward_func_family(key: str) -> str | None:
    """The :data:`REWARD_FUNC_FAMILIES` entry of ``key`` (``rewards/acc/mean`` -> ``rewards/<func>/mean``), or None."""
    if not key.startswith(REWARD_FUNC_PREFIX):
        return None
    for suffix in ("/second/mean", "/second/std", "/mean", "/std"):
        if key.endswith(suffix) and len(key) > len(REWARD_FUNC_PREFIX) + len(suffix):
            return f"rewards/<func>{suffix}"
    return None


def describe(key: str) -> str | None:
    """The glossary line of ``key`` (a plain metric or a family member), or None if undocumented.

    Example:
        >>> describe("rewards/accuracy_reward/std")
        "TRL's name: unbiased std of the reward function's values on first attempts"
        >>> describe("reward/third") is None
        True
    """
    if key in METRIC_GLOSSARY:
        return METRIC_GLOSSARY[key]
    if reward_func_family(key):
        return REWARD_FUNC_FAMILIES[reward_func_family(key)]
    head, _, name = key.rpartition("/")
    return METRIC_FAMILIES.get(head + ENV_FAMILY_SUFFIX) if name else None


#: State after a step, not events during it: a report over several steps takes the latest value, not the mean.
POINT_IN_TIME: frozenset[str] = frozenset({LR, MEMORY_SIZE, MEMORY_TOTAL_WRITES})


def is_measurement(key: str) -> bool:
    """Whether ``key`` is a wall-clock or device measurement, which comparisons of histories leave out.

    Example:
        >>> [is_measurement(k) for k in ("time/step", "tokens/per_second", "tokens/first")]
        [True, True, False]
    """
    return key.startswith("time/") or key in (TOKENS_PER_SECOND, PEAK_GPU_GB)


def is_point_in_time(key: str) -> bool:
    """Whether ``key`` is a :data:`POINT_IN_TIME` value or a member of one's family (``memory/size/<env>``)."""
    return key in POINT_IN_TIME or key.rpartition("/")[0] in POINT_IN_TIME


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _std(values: list[float]) -> float | None:
    """The unbiased (n - 1) std, as TRL's ``nanstd``; None below two values (TRL: NaN)."""
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def reward_func_metrics(attempts: list[Attempt], suffix: str = "") -> dict[str, float | None]:
    """``rewards/<name>{suffix}/mean|std`` of each reward function that scored ``attempts``.

    Example:
        >>> a = [Attempt("t", "first", i, "", [], [], [], [], 0.0, False, "", "", 1, rewards={"acc": r})
        ...      for i, r in enumerate([0.0, 1.0, None])]
        >>> reward_func_metrics(a)
        {'rewards/acc/mean': 0.5, 'rewards/acc/std': 0.7071067811865476}
    """
    names = sorted({name for a in attempts for name in a.rewards})
    m: dict[str, float | None] = {}
    for name in names:
        values = [a.rewards[name] for a in attempts if a.rewards.get(name) is not None]
        m[f"{REWARD_FUNC_PREFIX}{name}{suffix}/mean"] = _mean(values)
        m[f"{REWARD_FUNC_PREFIX}{name}{suffix}/std"] = _std(values)
    return m


def trl_metrics(first: list[Attempt], zero_std_first: float | None) -> dict[str, float | None]:
    """TRL's names for the first attempts (:data:`TRL_NAMES`), from the same records as ERL's."""
    lengths = [float(a.num_generated_tokens) for a in first]
    ended = [float(a.num_generated_tokens) for a in first if not a.truncated]
    return {
        TRL_REWARD: _mean([a.reward for a in first]),
        TRL_REWARD_STD: _std([a.reward for a in first]),
        TRL_ZERO_STD: zero_std_first,
        LEN_MEAN: _mean(lengths), LEN_MIN: min(lengths, default=None), LEN_MAX: max(lengths, default=None),
        CLIPPED_RATIO: _mean([float(a.truncated) for a in first]),
        TERM_MEAN: _mean(ended), TERM_MIN: min(ended, default=None), TERM_MAX: max(ended, default=None),
    }


def frac_reward_zero_std(samples: list[TrainSample], role: str) -> float | None:
    """Fraction of ``role``'s per-task GRPO groups in ``samples`` whose advantages are all 0; None without one.

    Example:
        >>> batch = [TrainSample("first", [], [], [], A, t)
        ...          for A, t in [(0.0, "a"), (0.0, "a"), (0.7, "b"), (-0.7, "b")]]
        >>> frac_reward_zero_std(batch, "first")  # task a: equal rewards
        0.5
    """
    silent: dict[str, bool] = {}
    for s in samples:
        if s.role == role:
            silent[s.task_id] = silent.get(s.task_id, True) and s.advantage == 0.0
    return _mean([float(v) for v in silent.values()])


def step_metrics(outcome: Any, memory: ReflectionMemory | None, mode: str) -> dict[str, Any]:
    """The metrics of a :class:`~erl_lite.records.StepRecord`; ``memory`` None (no memory kept) gives 0s."""
    first, retries = outcome.first_attempts, outcome.retries
    second = [r.second for r in retries]
    refl = [r.reflection for r in retries if r.reflection is not None]
    m: dict[str, Any] = {
        REWARD_FIRST: _mean([a.reward for a in first]),
        SUCCESS_FIRST: _mean([float(a.success) for a in first]),
        REWARD_SECOND: _mean([a.reward for a in second]),
        SUCCESS_SECOND: _mean([float(a.success) for a in second]),
        GATE_RATE: len(retries) / len(first) if first and mode != "rlvr" else None,
        REFLECTION_PARSE_RATE: _mean([float(r.parsed) for r in refl]),
        REFLECTION_REWARD: _mean([r.reward for r in refl]),
        MEMORY_SIZE: float(len(memory)) if memory is not None else 0.0,
        MEMORY_WRITES: float(outcome.memory_writes),
        MEMORY_TOTAL_WRITES: float(memory.total_writes) if memory is not None else 0.0,
        TOKENS_FIRST: float(sum(a.num_generated_tokens for a in first)),
        TOKENS_REFLECTION: float(sum(len(r.completion_ids) for r in refl)),
        TOKENS_SECOND: float(sum(a.num_generated_tokens for a in second)),
        TURNS_FIRST: _mean([float(a.num_turns) for a in first]),
        TRUNCATED_FIRST: _mean([float(a.truncated) for a in first]),
        TRUNCATED_REFLECTION: _mean([float(r.truncated) for r in refl]),
        TRUNCATED_SECOND: _mean([float(a.truncated) for a in second]),
    }
    m.update({key: frac_reward_zero_std(outcome.samples, role) for role, key in ZERO_STD_KEYS.items()})
    m.update(trl_metrics(first, m[ZERO_STD_FIRST]))
    m.update(reward_func_metrics(first))
    m.update(reward_func_metrics(second, "/second"))
    m.update({f"time/{k}": v for k, v in outcome.seconds.items()})
    sampling_seconds = sum(outcome.seconds.values())  # first, reflect, second: the update is timed apart
    generated = m[TOKENS_FIRST] + m[TOKENS_REFLECTION] + m[TOKENS_SECOND]
    m[TOKENS_PER_SECOND] = generated / sampling_seconds if sampling_seconds > 0 else None
    return m


def cuda_device(model: Any) -> Any:
    """The CUDA device ``model``'s first parameter lives on, else None (CPU, meta, ...)."""
    param = next(model.parameters(), None)
    return param.device if param is not None and param.device.type == "cuda" else None


def reset_peak_gpu_memory(device: Any) -> None:
    """Start a new peak for :func:`peak_gpu_gb` (no-op without a CUDA device)."""
    if device is not None:
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def peak_gpu_gb(device: Any) -> float | None:
    """``torch.cuda.max_memory_allocated`` since the last reset, in GiB; None without CUDA."""
    if device is None:
        return None
    import torch

    return torch.cuda.max_memory_allocated(device) / 2 ** 30


def eval_metrics(attempts: list[Attempt]) -> dict[str, float]:
    """Mean reward and success rate of evaluation (first-attempt) rollouts."""
    return {
        EVAL_REWARD: _mean([a.reward for a in attempts]) or 0.0,
        EVAL_SUCCESS: _mean([float(a.success) for a in attempts]) or 0.0,
        EVAL_NUM_EPISODES: float(len(attempts)),
        EVAL_TRUNCATED: _mean([float(a.truncated) for a in attempts]) or 0.0,
    }


#: The step metrics reported per environment too, as ``<key>/<env>`` (:func:`env_step_metrics`).
ENV_STEP_KEYS = (REWARD_FIRST, SUCCESS_FIRST, REWARD_SECOND, SUCCESS_SECOND, GATE_RATE, MEMORY_SIZE)


def env_step_metrics(outcome: Any, env_of: Callable[[str], str], names: list[str], memory: Any,
                     mode: str) -> dict[str, Any]:
    """The per-environment families of one step (``reward/first/<env>``...); ``env_of`` maps a task id to
    its environment; ``memory`` is the run's :class:`~erl_lite.core.memory.MemoryBank` or None."""
    m: dict[str, Any] = {}
    for name in names:
        # The environment's slice of the step, read by step_metrics; timings and writes are per step.
        mine = SimpleNamespace(first_attempts=[a for a in outcome.first_attempts if env_of(a.task_id) == name],
                               retries=[r for r in outcome.retries if env_of(r.task_id) == name],
                               samples=[s for s in outcome.samples if env_of(s.task_id) == name],
                               memory_writes=0, seconds={})
        whole = step_metrics(mine, memory.memories[name] if memory is not None else None, mode)
        m.update({f"{key}/{name}": whole[key] for key in ENV_STEP_KEYS})
    return m


def env_eval_metrics(attempts: list[Attempt], env_of: Callable[[str], str], names: list[str]) -> dict[str, Any]:
    """``eval/reward/<env>`` and ``eval/success/<env>`` of evaluation rollouts (None: no task)."""
    m: dict[str, Any] = {}
    for name in names:
        mine = [a for a in attempts if env_of(a.task_id) == name]
        m[f"{EVAL_REWARD}/{name}"] = _mean([a.reward for a in mine])
        m[f"{EVAL_SUCCESS}/{name}"] = _mean([float(a.success) for a in mine])
    return m
