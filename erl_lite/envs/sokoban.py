"""Sokoban with one box, drawn in abstract letters: push the box onto the goal. Rooms are n×n (n in 6..8) with
border walls only; a level is kept if solvable in at most 8 moves. Ours: gym-sokoban draws by reverse play, in pixels.

Departures from the paper: none in the rules; prompts state the real budget (the reference prompt claimed 64 moves).
Generated levels are not the paper's (``source="paper"`` plays those). A failure's feedback says when the box can no
longer reach the goal (``hint``; the reference's does not).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from erl_lite.config.checks import check_sizes, check_whole
from erl_lite.envs.grid import ACTIONS, PROMPTS, GridEpisode, GridGame, render_rows, shortest_moves

Cell = tuple[int, int]
DEFAULT_SYMBOLS = {
    "agent": "A",
    "box": "B",
    "box_on_goal": "b",
    "goal": "C",
    "wall": "E",
    "floor": "D",
    "agent_on_goal": "a",
}
COMMENTS, FEEDBACK = (dict(PROMPTS["sokoban"][texts]) for texts in ("comments", "feedback"))  # data/grid_prompts.json


@dataclass
class Level:
    """A parsed level: wall cells, player, box and goal positions, room shape."""

    walls: frozenset[Cell]
    player: Cell
    box: Cell
    goal: Cell
    shape: tuple[int, int]

    @classmethod
    def parse(cls, layout: list[str]) -> "Level":
        """Read ``#`` wall, space floor, ``$`` box, ``.`` goal, ``@`` player (``*``/``+``: on the goal)."""
        found: dict[str, Cell] = {}
        walls = set()
        for r, row in enumerate(layout):
            for c, ch in enumerate(row):
                if ch == "#":
                    walls.add((r, c))
                for role, chars in (("player", "@+"), ("box", "$*"), ("goal", ".*+")):
                    if ch in chars:
                        found[role] = (r, c)
        missing = {"player", "box", "goal"} - set(found)
        if missing:
            raise ValueError(f"layout lacks {sorted(missing)}: {layout}")
        shape = (len(layout), max(len(row) for row in layout))
        return cls(frozenset(walls), found["player"], found["box"], found["goal"], shape)


def apply_move(walls: frozenset[Cell], player: Cell, box: Cell, delta: tuple[int, int]) -> tuple[Cell, Cell, str]:
    """One move: (new player, new box, event in moved/pushed/wall/box_blocked)."""
    ahead = (player[0] + delta[0], player[1] + delta[1])
    if ahead in walls:
        return player, box, "wall"
    if ahead != box:
        return ahead, box, "moved"
    beyond = (box[0] + delta[0], box[1] + delta[1])
    if beyond in walls:
        return player, box, "box_blocked"
    return ahead, beyond, "pushed"


def solve_sokoban(layout: list[str] | Level, limit: int | None = None) -> list[str] | None:
    """Fewest moves that push the box onto the goal (None if impossible within ``limit``)."""
    level = layout if isinstance(layout, Level) else Level.parse(layout)

    def moves(state: tuple[Any, Any]) -> Iterable[tuple[str, tuple[Any, Any]]]:
        return ((name, apply_move(level.walls, state[0], state[1], delta)[:2]) for name, delta in ACTIONS.items())

    return shortest_moves((level.player, level.box), moves, lambda state: state[1] == level.goal, limit)


def generate_level(seed: int, sizes: tuple[int, int] = (6, 8), max_shortest: int = 8) -> dict[str, Any]:
    """One random level ``{"layout": rows, "size": n, "shortest": moves}``, 1..``max_shortest`` moves."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(sizes[0], sizes[1] + 1))
    inner = n - 2
    walls = frozenset((r, c) for r in range(n) for c in range(n) if r in (0, n - 1) or c in (0, n - 1))
    while True:
        player, box, goal = (divmod(int(i), inner) for i in rng.choice(inner * inner, 3, replace=False))
        player, box, goal = ((r + 1, c + 1) for r, c in (player, box, goal))
        path = solve_sokoban(Level(walls=walls, player=player, box=box, goal=goal, shape=(n, n)), limit=max_shortest)
        if path is not None:
            rows = [["#" if (r, c) in walls else " " for c in range(n)] for r in range(n)]
            for (r, c), ch in ((goal, "."), (box, "$"), (player, "@")):
                rows[r][c] = ch
            return {"layout": ["".join(row) for row in rows], "size": n, "shortest": len(path)}


class SokobanEpisode(GridEpisode):
    """One Sokoban game. ``info["event"]`` is one of ``COMMENTS`` or ``"invalid"``."""

    def _load(self, data: dict[str, Any]) -> None:
        self.level = Level.parse(data["layout"])
        self.player, self.box = self.level.player, self.level.box

    def _render(self) -> str:
        s, lv = self.symbols, self.level
        cells = [
            [s["wall"] if (r, c) in lv.walls else s["floor"] for c in range(lv.shape[1])] for r in range(lv.shape[0])
        ]
        cells[lv.goal[0]][lv.goal[1]] = s["goal"]
        cells[self.box[0]][self.box[1]] = s["box_on_goal" if self.box == lv.goal else "box"]
        cells[self.player[0]][self.player[1]] = s["agent_on_goal" if self.player == lv.goal else "agent"]
        return render_rows(cells)

    def _move(self, action: str) -> tuple[str, str, float, bool]:
        self.player, self.box, event = apply_move(self.level.walls, self.player, self.box, ACTIONS[action])
        if self.box == self.level.goal:
            return "solved", COMMENTS["solved"], 1.0, True
        return event, COMMENTS[event], 0.0, False

    def _verdict(self) -> tuple[str, str]:
        if self.events[-1] == "solved":
            return "solved", FEEDBACK["solved"].format(n=self.actions_taken)
        if set(self.events) == {"invalid"}:
            return "no_valid_action", FEEDBACK["no_valid_action"]
        count = {e: self.events.count(e) for e in ("moved", "pushed", "wall", "box_blocked", "invalid")}
        text = FEEDBACK["step_limit"].format(budget=self.max_actions) + (
            f" Actions: {count['moved']} moved, {count['pushed']} pushed the box, "
            f"{count['wall'] + count['box_blocked']} did not move (wall or blocked box)"
        )
        text += f", {count['invalid']} had no valid action." if count["invalid"] else "."
        stuck = Level(
            walls=self.level.walls, player=self.player, box=self.box, goal=self.level.goal, shape=self.level.shape
        )
        if self.hint and solve_sokoban(stuck) is None:
            text += " The box can no longer reach the goal from where it ended."
        return "step_limit", text


class Sokoban(GridGame):
    """One-box Sokoban with abstract letters, seeded splits and the paper's levels.

    ``source`` is ``"generated"`` or ``"paper"`` (the paper's levels); ``sizes``, the inclusive range
    of the room side, walls included; the rest (``hint``: dead ends) as in :class:`~erl_lite.envs.grid.GridGame`.

    Example:
        >>> env = Sokoban()
        >>> episode = env.new_episode()
        >>> obs = episode.reset(env.test_tasks(1)[0])
        >>> episode.step("```Left```")[3]["event"] in ("moved", "pushed", "wall", "box_blocked", "solved")
        True
    """

    name = "sokoban"
    default_symbols = DEFAULT_SYMBOLS
    episode_class = SokobanEpisode
    layout_field = "layout"

    def __init__(
        self,
        source: str = "generated",
        seed: int = 0,
        n_train: int = 10_000,
        n_test: int = 100,
        sizes: tuple[int, int] = (6, 8),
        max_shortest: int = 8,
        max_actions: int = 8,
        symbols: dict[str, str] | None = None,
        symbol_seed: int | None = None,
        compact: bool = False,
        **style: Any,
    ) -> None:
        check_sizes(type(self).__name__, sizes, 4)  # room for 3 cells
        check_whole(type(self).__name__, "max_shortest", max_shortest, minimum=1)
        make = partial(generate_level, sizes=sizes, max_shortest=max_shortest)
        super().__init__(make, source, seed, n_train, n_test, max_actions, symbols, symbol_seed, compact, **style)

    @classmethod
    def small(cls, **overrides: Any) -> "Sokoban":
        """A CPU-sized variant: 6×6 rooms (4×4 floor), levels of at most 5 moves, compact prompts."""
        return cls(**{"sizes": (6, 6), "max_shortest": 5, "compact": True, **overrides})
