"""The games and tasks: the paper's three (FrozenLake, Sokoban, an offline HotpotQA analogue), a single-turn
arithmetic task, dataset rows as tasks and several environments in one run. Exported lazily: importing this loads
neither gymnasium nor BM25.

Example:
    >>> from erl_lite.envs import FrozenLake
    >>> FrozenLake.small().max_turns
    8
"""

from __future__ import annotations

from erl_lite import lazy_exports

_EXPORTS = {
    "FrozenLake": "frozenlake",
    "Sokoban": "sokoban",
    "parse_action": "grid",
    "MultiHopQA": "qa",
    "BM25Search": "qa",
    "load_hotpotqa": "qa",
    "score_answer": "qa",
    "hotpotqa_paper_questions": "paper_tasks",
    "make_arithmetic_dataset": "arithmetic",
    "small_arithmetic_dataset": "arithmetic",
    "arithmetic_reward": "arithmetic",
    "arithmetic_feedback": "arithmetic",
    "MultiEnvironment": "multi",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
