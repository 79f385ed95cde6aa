"""Per-phase numbers of one iteration (the keys of :data:`erl_lite.history.METRIC_GLOSSARY`).

A metric that has no data this step (e.g. ``reward/second`` when nothing was gated) is
``None`` rather than 0, so plots show a gap instead of a false zero.

Departures from the paper: none; the paper reports the same quantities as curves.
"""

from __future__ import annotations

from typing import Any

from erl_lite.config import ERLConfig
from erl_lite.memory import ReflectionMemory
from erl_lite.records import Attempt


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def step_metrics(outcome: Any, memory: ReflectionMemory, config: ERLConfig) -> dict[str, Any]:
    """Rewards, gate, reflection, memory, token and timing metrics of a :class:`StepOutcome`."""
    first, second, refl = outcome.first, outcome.second, outcome.reflections
    failed = [a for a in first if not a.success]
    m: dict[str, Any] = {
        "reward/first": _mean([a.reward for a in first]),
        "success/first": _mean([float(a.success) for a in first]),
        "reward/second": _mean([a.reward for a in second]),
        "success/second": _mean([float(a.success) for a in second]),
        "gate/rate": len(failed) / len(first) if first and config.mode != "rlvr" else None,
        "reflection/parse_rate": _mean([float(r.parsed) for r in refl]),
        "reflection/reward": _mean([r.reward for r in refl]),
        "memory/size": float(len(memory)),
        "memory/writes": float(outcome.memory_writes),
        "memory/total_writes": float(memory.total_writes),
        "tokens/first": float(sum(a.num_generated_tokens for a in first)),
        "tokens/reflection": float(sum(len(r.completion_ids) for r in refl)),
        "tokens/second": float(sum(a.num_generated_tokens for a in second)),
        "turns/first": _mean([float(a.num_turns) for a in first]),
        "truncated/first": _mean([float(a.truncated) for a in first]),
    }
    m.update({f"time/{k}": v for k, v in outcome.seconds.items()})
    return m


def eval_metrics(attempts: list[Attempt]) -> dict[str, float]:
    """Mean reward and success rate of evaluation (first-attempt) rollouts."""
    return {
        "eval/reward": _mean([a.reward for a in attempts]) or 0.0,
        "eval/success": _mean([float(a.success) for a in attempts]) or 0.0,
        "eval/num_episodes": float(len(attempts)),
    }
