"""Optimal solvers for the grid games: an expert for scripted tests and demos without a trained model."""

from __future__ import annotations

from erl_lite.envs.frozenlake import solve_frozenlake
from erl_lite.envs.sokoban import solve_sokoban
from erl_lite.records import Task

# The searches live with their games, which check that a generated board is solvable in bound.
__all__ = ["solve", "solve_frozenlake", "solve_sokoban"]


def solve(task: Task) -> list[str]:
    """The shortest solution (action names) of a FrozenLake or Sokoban task; ValueError if none."""
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
