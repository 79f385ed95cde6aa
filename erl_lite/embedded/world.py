"""The embedded model's world: a small FrozenLake whose hole and frozen letters are drawn per run.

The letters come from a pool (:data:`LETTER_POOL`) by the run's seed (:func:`letter_pair`), so
no model can know in advance which letter is the hole; within a run the pair is fixed, so a
rulebook that names the hole transfers across episodes (memory and internalization have
something to carry). :func:`demo_world` is the world of ``erl-lite demo``; :func:`make_world`
builds one with a chosen pair (the corpus builder uses it).

Departures from the paper: the paper's FrozenLake has fixed letters and larger maps; here maps
are 3x3 by default, re-drawn until a hole lies in the way (:func:`trap_map`), prompts are
compact, and each observation adds an ``ahead:`` line (:class:`DemoLakeEpisode`) so that a
0.4 M-parameter model is not defeated by reading a flattened grid.

Example:
    >>> world = demo_world(run_seed=0)
    >>> world.symbols["agent"], world.max_turns
    ('A', 8)
"""

from __future__ import annotations

import random
import re
from typing import Any

from erl_lite.envs.frozenlake import FrozenLake, FrozenLakeEpisode, generate_map
from erl_lite.envs.grid import ACTIONS
from erl_lite.envs.splits import SeededSplits

AGENT, GOAL = "A", "B"
#: Letters the hole and the frozen tile are drawn from, per run.
LETTER_POOL = "CDEFGH"
#: Fixed markers, seen only in traces: the agent in a hole, the agent on the goal.
IN_HOLE, ON_GOAL = "X", "Z"
#: Letters of a demo world before the run's pair is drawn.
DEMO_SYMBOLS = {"agent": AGENT, "goal": GOAL, "hole": "C", "frozen": "D",
                "agent_in_hole": IN_HOLE, "agent_on_goal": ON_GOAL}

_ROW = re.compile(r"^[A-Z]( [A-Z])*$")


def letter_pair(run_seed: int) -> tuple[str, str]:
    """The run's (hole, frozen) letters, drawn from :data:`LETTER_POOL` by ``run_seed``.

    Example:
        >>> letter_pair(0) == letter_pair(0) and len(set(letter_pair(0))) == 2
        True
    """
    hole, frozen = random.Random(run_seed).sample(LETTER_POOL, 2)
    return hole, frozen


# --- reading a drawn grid ----------------------------------------------------------------------


def parse_grid(text: str) -> list[list[str]]:
    """The last grid drawn in ``text`` (rows of space-separated capital letters).

    Example:
        >>> parse_grid("A E\\nG B\\nleft: 8")
        [['A', 'E'], ['G', 'B']]
    """
    rows: list[list[str]] = []
    grid: list[list[str]] = []
    for line in text.splitlines():
        if _ROW.match(line.strip()):
            rows.append(line.split())
        elif rows:
            grid, rows = rows, []
    return rows or grid


def find_letter(grid: list[list[str]], letter: str) -> tuple[int, int] | None:
    """(row, column) of the first cell holding ``letter``, or ``None``."""
    return next(((r, c) for r, row in enumerate(grid) for c, x in enumerate(row) if x == letter), None)


def neighbour(grid: list[list[str]], cell: tuple[int, int], action: str) -> tuple[int, int] | None:
    """The cell one ``action`` away from ``cell``, or ``None`` off the grid."""
    r, c = cell[0] + ACTIONS[action][0], cell[1] + ACTIONS[action][1]
    return (r, c) if 0 <= r < len(grid) and 0 <= c < len(grid[0]) else None


def closer_tiles(grid: list[list[str]]) -> list[tuple[str, str]]:
    """(direction, letter) of each tile one step away that brings the agent closer to the goal.

    Example:
        >>> closer_tiles([["A", "H"], ["F", "B"]])
        [('Down', 'F'), ('Right', 'H')]
    """
    start, goal = find_letter(grid, AGENT), find_letter(grid, GOAL)
    if start is None or goal is None:
        return []
    gap = abs(start[0] - goal[0]) + abs(start[1] - goal[1])
    tiles = []
    for action in ACTIONS:
        n = neighbour(grid, start, action)
        if n is not None and abs(n[0] - goal[0]) + abs(n[1] - goal[1]) < gap:
            tiles.append((action, grid[n[0]][n[1]]))
    return tiles


# --- maps --------------------------------------------------------------------------------------


def hole_in_the_way(rows: list[str]) -> bool:
    """Whether a hole lies in the rectangle spanned by start and goal (``S``/``G``/``H`` rows).

    Every cell of that rectangle is on some shortest route, so a player who ignores the
    letters may step into the hole.

    Example:
        >>> hole_in_the_way(["SH", "FG"]), hole_in_the_way(["SF", "HF", "GF"])
        (True, True)
        >>> hole_in_the_way(["SG", "HH"])
        False
    """
    where = {ch: (r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch in "SG"}
    (r0, c0), (r1, c1) = where["S"], where["G"]
    return any(rows[r][c] == "H" for r in range(min(r0, r1), max(r0, r1) + 1)
               for c in range(min(c0, c1), max(c0, c1) + 1))


def trap_map(seed: int, sizes: tuple[int, int], frozen_prob: tuple[float, float], max_shortest: int,
             keep_easy: float) -> dict[str, Any]:
    """A solvable map with a hole in the way, except for a ``keep_easy`` share of maps.

    Draws :func:`~erl_lite.envs.frozenlake.generate_map` maps from seeds derived from ``seed``
    until one qualifies, so it stays deterministic in ``seed``.

    Example:
        >>> hole_in_the_way(trap_map(1, (3, 3), (0.6, 0.8), 6, keep_easy=0.0)["map"])
        True
    """
    rng = random.Random(seed)
    easy_ok = rng.random() < keep_easy
    for attempt in range(10_000):
        m = generate_map(seed + 7_919 * attempt, sizes, frozen_prob, max_shortest)
        if easy_ok or hole_in_the_way(m["map"]):
            return m
    raise RuntimeError("no map with a hole in the way; raise the hole probability")


# --- the environment ---------------------------------------------------------------------------


class DemoLakeEpisode(FrozenLakeEpisode):
    """A FrozenLake episode whose observation adds one line, ``ahead: Up F, Right E``: the
    letter one step away in each direction that brings the agent closer to the goal.

    The line says where the tiles are, never what they are: whether ``F`` is ice or a hole is
    still learned only from feedback. It spares a 0.4 M-parameter model from reading the
    neighbours of a cell out of a flattened grid, so that what decides an episode is the
    unknown hole, not a perception slip.
    """

    def _hint(self) -> str:
        tiles = closer_tiles(parse_grid(self._render()))
        return f"ahead: {', '.join(f'{a} {x}' for a, x in tiles)}" if tiles else ""


class DemoLake(FrozenLake):
    """FrozenLake on small maps where, mostly, ignoring the holes can be fatal.

    Same rules, prompts, feedback and traces as :class:`FrozenLake`; only the map generator
    differs: maps are re-drawn until a hole lies between start and goal, except for a
    ``keep_easy`` share (see :func:`trap_map`). The paper's maps are often solved by walking
    straight at the goal, which would leave nothing for reflection to fix.

    Defaults differ from :class:`FrozenLake`: 3x3 maps (the embedded model is trained on
    them; ``sizes=(3, 4)`` plays larger ones), holes a little denser
    (frozen probability in [0.6, 0.8)), compact prompts, and the letters of
    :data:`DEMO_SYMBOLS` (``symbols`` overrides some of them).

    Example:
        >>> lake = DemoLake(symbols={"hole": "E", "frozen": "G"})
        >>> task = lake.test_tasks(1)[0]
        >>> task.data["size"] == 3 and hole_in_the_way(task.data["map"])
        True
    """

    def __init__(self, keep_easy: float = 0.25, seed: int = 0, n_train: int = 10_000, n_test: int = 100,
                 sizes: tuple[int, int] = (3, 3), frozen_prob: tuple[float, float] = (0.6, 0.8),
                 max_shortest: int = 6, max_actions: int = 8, symbols: dict[str, str] | None = None,
                 compact: bool = True, hints: bool = True) -> None:
        super().__init__(seed=seed, n_train=n_train, n_test=n_test, sizes=sizes, frozen_prob=frozen_prob,
                         max_shortest=max_shortest, max_actions=max_actions,
                         symbols={**DEMO_SYMBOLS, **(symbols or {})}, compact=compact)
        self.keep_easy, self.hints = keep_easy, hints

        def make(task_seed: int) -> dict[str, Any]:
            return trap_map(task_seed, sizes, frozen_prob, max_shortest, keep_easy)

        self._splits = SeededSplits(make, lambda d: "/".join(d["map"]), self.name, seed, n_train, n_test)

    def new_episode(self) -> FrozenLakeEpisode:
        if not self.hints:
            return super().new_episode()
        return DemoLakeEpisode(self.max_turns, self.symbols, self.compact)


def make_world(hole: str, frozen: str, seed: int = 0, **overrides: Any) -> DemoLake:
    """A :class:`DemoLake` whose hole and frozen tiles are drawn as ``hole`` and ``frozen``.

    Example:
        >>> make_world("E", "G").symbols["hole"]
        'E'
    """
    return DemoLake(seed=seed, symbols={"hole": hole, "frozen": frozen}, **overrides)


def demo_world(run_seed: int = 0, **overrides: Any) -> DemoLake:
    """The embedded model's environment for one run: letters drawn by ``run_seed``.

    The hole and frozen letters come from :func:`letter_pair`; the task splits are seeded by
    ``run_seed`` too. ``overrides`` go to :class:`DemoLake` (``n_train``, ``n_test``,
    ``sizes``, ...).

    Example:
        >>> w = demo_world(3, n_test=10)
        >>> len(w.test_tasks()), w.symbols["hole"] != w.symbols["frozen"]
        (10, True)
    """
    hole, frozen = letter_pair(run_seed)
    values = {"seed": run_seed, "n_train": 2_000, **overrides}
    return make_world(hole, frozen, **values)
