"""The embedded model's world: a small FrozenLake with two kinds of hole, its letters drawn per run. A failed trace
names only the hole stepped on, so a rulebook naming both holes is built across episodes (memory).

Departures from the paper: the paper's FrozenLake has one fixed hole letter and larger maps; here maps are 3x3 with a
hole in the way and no dead end (:func:`trap_map`), holes come in two letters drawn per run, prompts are compact, and
each observation adds an ``ahead:`` line (:class:`DemoLakeEpisode`) for a 0.4 M-parameter model.
"""

from __future__ import annotations

import functools
import random
import re
import statistics
from typing import Any

from erl_lite.config import DEFAULT_SEED
from erl_lite.config.checks import check_choice, check_flag, check_share
from erl_lite.envs.frozenlake import COMMENTS, FrozenLake, FrozenLakeEpisode, generate_map
from erl_lite.envs.grid import ACTIONS, resolve_symbols
from erl_lite.envs.splits import SeededSplits

AGENT, GOAL = "A", "B"
#: Letters the two holes and the frozen tile are drawn from, per run.
LETTER_POOL = "CDEFGH"
#: Fixed markers, seen only in traces: the agent in a hole, the agent on the goal.
IN_HOLE, ON_GOAL = "X", "Z"
#: Letters of a demo world before the run's are drawn (``hole2``: the second kind of hole).
DEMO_SYMBOLS = {
    "agent": AGENT,
    "goal": GOAL,
    "hole": "C",
    "hole2": "E",
    "frozen": "D",
    "agent_in_hole": IN_HOLE,
    "agent_on_goal": ON_GOAL,
}
#: Map cell of the second kind of hole (``H`` is the first); the move rule sees both as ``H``.
SECOND_HOLE = "K"

_ROW = re.compile(r"^[A-Z]( [A-Z])*$")


def run_letters(run_seed: int) -> tuple[str, str, str]:
    hole, hole2, frozen = random.Random(run_seed).sample(LETTER_POOL, 3)
    return hole, hole2, frozen


def hole_letters(world: Any) -> tuple[str, ...]:
    """The letters of the holes on ``world``'s maps: two, or one where it has one kind (``hole_kinds=1``)."""
    return (world.symbols["hole"], world.symbols["hole2"])[: world.hole_kinds]


# The trace sentence of a fall, up to its ";" ("stepped on F: moved into a hole"), with the letter captured.
_FATAL = re.compile(re.escape(COMMENTS["hole"].split(";")[0]).replace(re.escape("{tile}"), "([A-Z])"))


def fatal_letter(trace: str) -> str | None:
    """The letter of the hole a trace's agent fell into (the last one named), or ``None``.

    Example:
        >>> fatal_letter("Action 1: Down -> stepped on F: moved into a hole; the episode is over.")
        'F'
    """
    found = _FATAL.findall(trace)
    return found[-1] if found else None


def parse_grid(text: str) -> list[list[str]]:
    """The last grid drawn in ``text`` (rows of space-separated capital letters)."""
    rows: list[list[str]] = []
    grid: list[list[str]] = []
    for line in text.splitlines():
        if _ROW.match(line.strip()):
            rows.append(line.split())
        elif rows:
            grid, rows = rows, []
    return rows or grid


def find_letter(grid: list[list[str]], letter: str) -> tuple[int, int] | None:
    return next(((r, c) for r, row in enumerate(grid) for c, x in enumerate(row) if x == letter), None)


def closer_tiles(grid: list[list[str]]) -> list[tuple[str, str]]:
    """(direction, letter) of each tile one step away that brings the agent closer to the goal."""
    start, goal = find_letter(grid, AGENT), find_letter(grid, GOAL)
    if start is None or goal is None:
        return []
    return [(action, grid[r][c]) for action, (r, c) in _closer_moves(grid, start, goal)]


def _closer_moves(rows: Any, cell: tuple[int, int], goal: tuple[int, int]) -> list[tuple[str, tuple[int, int]]]:
    """(action, cell) of each move from ``cell`` that gets closer to ``goal`` (``rows``: strings or lists)."""
    gap = abs(cell[0] - goal[0]) + abs(cell[1] - goal[1])
    moves = [(a, (cell[0] + dr, cell[1] + dc)) for a, (dr, dc) in ACTIONS.items()]
    return [
        (a, (r, c))
        for a, (r, c) in moves
        if 0 <= r < len(rows) and 0 <= c < len(rows[0]) and abs(r - goal[0]) + abs(c - goal[1]) < gap
    ]


def _ends(rows: list[str]) -> tuple[tuple[int, int], tuple[int, int]]:
    where = {ch: (r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch in "SG"}
    return where["S"], where["G"]


def hole_in_the_way(rows: list[str]) -> bool:
    """Whether a hole lies in the rectangle spanned by start and goal (on some shortest route)."""
    (r0, c0), (r1, c1) = _ends(rows)
    return any(
        rows[r][c] == "H" for r in range(min(r0, r1), max(r0, r1) + 1) for c in range(min(c0, c1), max(c0, c1) + 1)
    )


def holes_in_the_way(kinds: list[str]) -> set[str]:
    """The kinds of hole (``H``, :data:`SECOND_HOLE`) a player who only steps closer to the goal can step on.

    Example:
        >>> sorted(holes_in_the_way(["SHF", "KFF", "FFG"]))
        ['H', 'K']
    """
    return {tile for _, closer in _closer_walk(kinds) for _, tile in closer if tile in ("H", SECOND_HOLE)}


def _closer_walk(rows: list[str]) -> list[tuple[tuple[int, int], list[tuple[tuple[int, int], str]]]]:
    """Each safe cell reached from ``S`` by only stepping closer to ``G`` (goal left out), with its closer tiles."""
    start, goal = _ends(rows)
    walk, frontier, seen = [], [start], set()
    while frontier:
        cell = frontier.pop()
        if cell == goal or cell in seen:
            continue
        seen.add(cell)
        closer = [(n, rows[n[0]][n[1]]) for _, n in _closer_moves(rows, cell, goal)]
        walk.append((cell, closer))
        frontier += [n for n, tile in closer if tile in "SGF"]
    return walk


def blind_success(rows: list[str]) -> float:
    """The chance that a player blind to holes, stepping to a random closer tile, reaches the goal.

    Example:
        >>> blind_success(["SH", "FG"]), blind_success(["SF", "FG"]), blind_success(["SHF", "FFH", "HFG"])
        (0.5, 1.0, 0.125)
    """
    start, goal = _ends(rows)

    @functools.cache  # memoised over the cells
    def reach(cell: tuple[int, int]) -> float:  # the recursion ends at G
        if cell == goal:
            return 1.0
        if rows[cell[0]][cell[1]] == "H":
            return 0.0
        return statistics.mean(reach(n) for _, n in _closer_moves(rows, cell, goal))

    return reach(start)


def assign_kinds(rows: list[str], rng: random.Random) -> list[str]:
    """``rows`` with each hole marked as the first (``H``) or second (``K``) kind; two or more holes: both kinds."""
    holes = [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "H"]
    rng.shuffle(holes)
    (r0, c0), (r1, c1) = _ends(rows)
    holes.sort(key=lambda h: not (min(r0, r1) <= h[0] <= max(r0, r1) and min(c0, c1) <= h[1] <= max(c0, c1)))
    kind = {cell: rng.choice("H" + SECOND_HOLE) for cell in holes}
    if len(holes) >= 2:  # which of the two gets which kind is drawn too: neither kind blocks more often
        kind[holes[0]], kind[holes[1]] = rng.sample("H" + SECOND_HOLE, 2)
    return ["".join(kind.get((r, c), ch) for c, ch in enumerate(row)) for r, row in enumerate(rows)]


def no_dead_end(rows: list[str]) -> bool:
    """Whether a player who knows every hole reaches the goal by any safe closer tile (``ahead:`` suffices)."""
    return all(any(tile in "SGF" for _, tile in closer) for _, closer in _closer_walk(rows))


def trap_map(
    seed: int,
    sizes: tuple[int, int],
    frozen_prob: tuple[float, float],
    max_shortest: int,
    keep_easy: float,
    both_kinds: float = 0.0,
    max_blind: float = 1.0,
) -> dict[str, Any]:
    """A map with a hole in the way (except for a ``keep_easy`` share) and no dead end; for a ``both_kinds`` share of
    the others, holes of both kinds in the way; a blind player's chance (:func:`blind_success`) at most ``max_blind``.
    ``kinds`` marks each hole's kind, ``map`` keeps ``H`` for both (the move rule's view)."""
    rng = random.Random(seed)
    easy_ok = rng.random() < keep_easy
    need_both = not easy_ok and rng.random() < both_kinds
    for attempt in range(10_000):
        m = generate_map(seed + 7_919 * attempt, sizes, frozen_prob, max_shortest)
        if (easy_ok or hole_in_the_way(m["map"])) and no_dead_end(m["map"]) and blind_success(m["map"]) <= max_blind:
            kinds = assign_kinds(m["map"], rng)
            if not need_both or holes_in_the_way(kinds) == {"H", SECOND_HOLE}:
                return {**m, "kinds": kinds}
    raise RuntimeError("no map with the holes asked for and no dead end; raise the hole probability")


def lined_map(seed: int, size: int, frozen_prob: tuple[float, float]) -> dict[str, Any]:
    """A map from one corner to the opposite one with a hole on the other branch of every fork of one shortest route.

    A fork is a cell with two moves closer to the goal; the route passes ``2 size - 3`` of them, so a player blind to
    holes, stepping to a random closer tile, wins ``0.5 ** (2 size - 3)`` (1/128 on 5x5), and one who knows the holes
    always. Drawn, not searched for as :func:`trap_map` does. Off the route, ice has probability ``p``
    (``frozen_prob``)."""
    rng = random.Random(seed)
    p = rng.uniform(*frozen_prob)
    grid = [["F" if rng.random() < p else "H" for _ in range(size)] for _ in range(size)]
    steps = rng.sample([(1, 0), (0, 1)] * (size - 2), 2 * size - 4) + rng.sample([(1, 0), (0, 1)], 2)
    r = c = 0
    for k, (dr, dc) in enumerate(steps):  # every cell but the goal's neighbour is a fork: a hole on the other branch
        grid[r][c] = "F"
        if k < len(steps) - 1:
            grid[r + dc][c + dr] = "H"
        r, c = r + dr, c + dc
    grid[0][0], grid[-1][-1] = "S", "G"
    for _ in range(rng.randrange(4)):  # the start's corner, drawn: a quarter turn at a time
        grid = [list(row) for row in zip(*grid[::-1])]
    rows = ["".join(row) for row in grid]
    return {"map": rows, "kinds": assign_kinds(rows, rng), "size": size, "p": p, "shortest": 2 * size - 2}


class DemoLakeEpisode(FrozenLakeEpisode):
    """A FrozenLake episode with two kinds of hole, whose observation adds ``ahead: Up F, Right E``
    (the tiles one step closer to the goal; never what they are) unless ``hints=False``."""

    def __init__(self, max_actions: int, symbols: dict[str, str], compact: bool = False, hints: bool = True) -> None:
        super().__init__(max_actions, symbols, compact)
        self.hints = hints

    def _load(self, data: dict[str, Any]) -> None:
        super()._load(data)
        self.kinds = list(data.get("kinds", data["map"]))

    def _letter(self, r: int, c: int) -> str:  # the kind of hole, in the trace too: not always the first kind
        return self.symbols[{"H": "hole", SECOND_HOLE: "hole2", "G": "goal"}.get(self.kinds[r][c], "frozen")]

    def _hint(self) -> str:
        if not self.hints:
            return ""
        tiles = closer_tiles(parse_grid(self._render()))
        return f"ahead: {', '.join(f'{a} {x}' for a, x in tiles)}" if tiles else ""


class DemoLake(FrozenLake):
    """FrozenLake on small maps with holes of two letters (one with ``hole_kinds=1``), where ignoring them is mostly
    fatal (:func:`trap_map`, or :func:`lined_map` with ``lined=True``).

    Example:
        >>> lake = DemoLake(symbols={"hole": "E", "hole2": "H", "frozen": "G"})
        >>> task = lake.test_tasks(1)[0]
        >>> task.data["size"] == 3 and hole_in_the_way(task.data["map"])
        True
    """

    def __init__(
        self,
        keep_easy: float = 0.25,
        both_kinds: float = 0.6,
        seed: int = 0,
        n_train: int = 10_000,
        n_test: int = 100,
        sizes: tuple[int, int] = (3, 3),
        frozen_prob: tuple[float, float] = (0.5, 0.7),
        max_shortest: int = 6,
        max_actions: int = 8,
        symbols: dict[str, str] | None = None,
        compact: bool = True,
        hints: bool = True,
        max_blind: float = 1.0,
        lined: bool = False,
        hole_kinds: int = 2,
    ) -> None:
        for name, share in (("keep_easy", keep_easy), ("both_kinds", both_kinds), ("max_blind", max_blind)):
            check_share("DemoLake", name, share)
        for name, flag in (("hints", hints), ("lined", lined)):
            check_flag("DemoLake", name, flag)
        if hole_kinds not in (1, 2) or (lined and (sizes[0] != sizes[1] or sizes[0] < 2)):
            raise ValueError(
                f"DemoLake: hole_kinds must be 1 or 2 (got {hole_kinds!r}), and lined maps one size >= 2 "
                f"(got sizes={sizes!r})"
            )
        super().__init__(
            seed=seed,
            n_train=n_train,
            n_test=n_test,
            sizes=sizes,
            frozen_prob=frozen_prob,
            max_shortest=max_shortest,
            max_actions=max_actions,
            compact=compact,
        )
        # FrozenLake knows one kind of hole; the second kind's letter is resolved here.
        self.symbols = resolve_symbols(DEMO_SYMBOLS, symbols)
        self.keep_easy, self.both_kinds, self.hints, self.hole_kinds = keep_easy, both_kinds, hints, hole_kinds

        def make(task_seed: int) -> dict[str, Any]:
            m = (
                lined_map(task_seed, sizes[0], frozen_prob)
                if lined
                else trap_map(task_seed, sizes, frozen_prob, max_shortest, keep_easy, both_kinds, max_blind)
            )
            return m if hole_kinds == 2 else {**m, "kinds": m["map"]}

        self._splits = SeededSplits(make, lambda d: "/".join(d["kinds"]), self.name, seed, n_train, n_test)

    def new_episode(self) -> FrozenLakeEpisode:
        return DemoLakeEpisode(self.max_turns, self.symbols, self.compact, self.hints)


def make_world(hole: str, hole2: str, frozen: str, seed: int = 0, **overrides: Any) -> DemoLake:
    return DemoLake(seed=seed, symbols={"hole": hole, "hole2": hole2, "frozen": frozen}, **overrides)


#: The embedded model's worlds (:class:`DemoLake` settings), all in the same feedback and rulebook words. ``demo``:
#: 3x3 maps where a blind first attempt often succeeds. ``sparse``: 5x5 maps where a player blind to the holes wins
#: at most one time in ten. ``hard``: 5x5 maps of one hole letter lining a route (:func:`lined_map`), a blind win
#: 1/128: the paper's Sokoban regime, where reward alone rarely says anything. The model was not trained on it.
WORLDS: dict[str, dict[str, Any]] = {
    "demo": {},
    "sparse": {"sizes": (5, 5), "max_shortest": 10, "max_actions": 14, "keep_easy": 0.0, "max_blind": 0.1},
    "hard": {"sizes": (5, 5), "max_actions": 14, "lined": True, "hole_kinds": 1},
}


def world_settings(world: str) -> dict[str, Any]:
    check_choice("embedded world", world, sorted(WORLDS))
    return dict(WORLDS[world])


def demo_world(run_seed: int = DEFAULT_SEED, world: str = "demo", **overrides: Any) -> DemoLake:
    """One run's ``world`` (of :data:`WORLDS`): letters (:func:`run_letters`) and splits seeded by ``run_seed``.

    Example:
        >>> w = demo_world(3, n_test=10)
        >>> len(w.test_tasks()), len({w.symbols[k] for k in ("hole", "hole2", "frozen")})
        (10, 3)
        >>> demo_world(3, "sparse", n_test=2).test_tasks()[0].data["size"]
        5
    """
    values = {"seed": run_seed, "n_train": 2_000, **world_settings(world), **overrides}
    return make_world(*run_letters(run_seed), **values)
