"""Optimal solvers for the grid games: a shortest action sequence by breadth-first search.

They play the role of an expert: scripted tests and demos use them to drive a first or
second attempt that is known to succeed, so every ERL phase can be shown on multi-turn
episodes without a trained model. Both solvers read a task's own data (``data["map"]`` for
FrozenLake, ``data["layout"]`` for Sokoban; generated and paper tasks share those fields)
and return action names as the games parse them (``"Up"``, ``"Down"``, ``"Left"``,
``"Right"``), so ``"```" + action + "```"`` is a valid reply for each turn.

Departures from the paper: none; the paper has no solver (it only states that every map is
solvable within a bound, which the environments check with the same searches).
"""

from __future__ import annotations

from erl_lite.envs.frozenlake import solve_frozenlake
from erl_lite.envs.sokoban import solve_sokoban
from erl_lite.records import Task

# The searches live with their games (one breadth-first search, grid.shortest_moves, for both):
# the games need them to check that a generated map or level is solvable within its bound.
__all__ = ["solve", "solve_frozenlake", "solve_sokoban"]


def solve(task: Task) -> list[str]:
    """The shortest solution of a FrozenLake or Sokoban task, from its data.

    Raises ValueError for a task that is neither game or that has no solution.

    Example:
        >>> from erl_lite.envs import FrozenLake
        >>> task = FrozenLake.small().test_tasks(1)[0]
        >>> len(solve(task)) == task.data["shortest"]
        True
    """
    data = task.data
    if "map" in data:
        actions = solve_frozenlake(list(data["map"]))
    elif "layout" in data:
        actions = solve_sokoban(list(data["layout"]))
    else:
        raise ValueError(f"task {task.task_id!r} is neither a FrozenLake map nor a Sokoban layout")
    if actions is None:
        raise ValueError(f"task {task.task_id!r} has no solution")
    return actions
