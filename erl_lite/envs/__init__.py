"""Environments: the protocol, the paper's three tasks (an offline analogue for HotpotQA), and a
single-turn example task. Each module's docstring says how it departs from the paper.

Names are imported lazily, so ``import erl_lite.envs.base`` does not pull in gymnasium or BM25.

Example:
    >>> from erl_lite.envs import FrozenLake
    >>> FrozenLake.small().max_turns
    8
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Environment": "base", "Episode": "base",
    "FrozenLake": "frozenlake", "Sokoban": "sokoban", "parse_action": "grid",
    "MultiHopQA": "qa", "BM25Search": "qa", "load_hotpotqa": "qa", "score_answer": "qa",
    "frozenlake_paper_tasks": "paper_tasks", "sokoban_paper_tasks": "paper_tasks",
    "hotpotqa_paper_questions": "paper_tasks",
    "make_arithmetic_dataset": "arithmetic", "small_arithmetic_dataset": "arithmetic",
    "arithmetic_reward": "arithmetic", "arithmetic_feedback": "arithmetic",
    "MultiEnvironment": "multi", "TRLEnvironment": "trl_adapter", "load_rows": "data_sources",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'erl_lite.envs' has no attribute {name!r}")
    return getattr(importlib.import_module(f"erl_lite.envs.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
