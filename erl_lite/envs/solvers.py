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

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from erl_lite.envs.grid import ACTIONS
from erl_lite.envs.sokoban import Level, apply_move
from erl_lite.records import Task

State = TypeVar("State", bound=Hashable)


def _bfs(start: State, moves: Callable[[State], Iterable[tuple[str, State]]],
         is_goal: Callable[[State], bool]) -> list[str] | None:
    """Shortest list of action names from ``start`` to a goal state, or None if none exists.

    ``moves(state)`` yields ``(action, next_state)``; states must be hashable.
    """
    parent: dict[Any, tuple[Any, str] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        state = frontier.popleft()
        if is_goal(state):
            path: list[str] = []
            while parent[state] is not None:
                state, action = parent[state]
                path.append(action)
            return path[::-1]
        for action, nxt in moves(state):
            if nxt not in parent:
                parent[nxt] = (state, action)
                frontier.append(nxt)
    return None


def solve_frozenlake(rows: list[str]) -> list[str] | None:
    """Fewest moves from S to G that never enter a hole H (None if G is unreachable).

    Example:
        >>> solve_frozenlake(["SH", "FG"])
        ['Down', 'Right']
        >>> solve_frozenlake(["SH", "HG"]) is None
        True
    """
    n_rows, n_cols = len(rows), len(rows[0])
    start = next((r, c) for r in range(n_rows) for c in range(n_cols) if rows[r][c] == "S")

    def moves(cell: tuple[int, int]) -> Iterable[tuple[str, tuple[int, int]]]:
        if rows[cell[0]][cell[1]] == "H":
            return  # a hole ends the episode: nothing follows it
        for name, (dr, dc) in ACTIONS.items():
            r, c = cell[0] + dr, cell[1] + dc
            if 0 <= r < n_rows and 0 <= c < n_cols and rows[r][c] != "H":
                yield name, (r, c)

    return _bfs(start, moves, lambda cell: rows[cell[0]][cell[1]] == "G")


def solve_sokoban(layout: list[str]) -> list[str] | None:
    """Fewest moves that push the box onto the goal (None if it cannot be done).

    States are (player, box) pairs; moves follow :func:`erl_lite.envs.sokoban.apply_move`.

    Example:
        >>> solve_sokoban(["######", "#@$ .#", "######"])
        ['Right', 'Right']
    """
    level = Level.parse(layout)

    def moves(state: tuple[Any, Any]) -> Iterable[tuple[str, tuple[Any, Any]]]:
        for name, delta in ACTIONS.items():
            player, box, _ = apply_move(level.walls, state[0], state[1], delta)
            yield name, (player, box)

    return _bfs((level.player, level.box), moves, lambda state: state[1] == level.goal)


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
