"""FrozenLake as a text game with abstract letters: reach the goal, avoid the holes.

Maps are n×n (n in 2..9), each cell frozen with probability p in [0.6, 0.85), re-drawn until a path
of at most 6 moves exists. Moves are deterministic (gymnasium's non-slippery ``FrozenLakeEnv``).

Departures from the paper: none in the rules. The generator is ours (same distribution, not the same maps:
``source="paper"`` plays those); generated splits never share a map, the paper's do (15 of 97). The trace names the
letter stepped on (``hint``; the reference's does not: ``presets.PAPER_GAMES``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import DOWN, LEFT, RIGHT, UP, FrozenLakeEnv
from gymnasium.utils import seeding

from erl_lite.config.checks import check_share, check_sizes, check_whole
from erl_lite.envs.grid import ACTIONS, PROMPTS, GridEpisode, GridGame, render_rows, shortest_moves

DEFAULT_SYMBOLS = {"agent": "A", "goal": "B", "hole": "C", "frozen": "D", "agent_in_hole": "E", "agent_on_goal": "F"}
COMMENTS, FEEDBACK = (dict(PROMPTS["frozenlake"][texts]) for texts in ("comments", "feedback"))  # by event, outcome
_GYM_ACTION = {"Up": UP, "Down": DOWN, "Left": LEFT, "Right": RIGHT}


def solve_frozenlake(rows: list[str], limit: int | None = None) -> list[str] | None:
    """Fewest moves from S to G never entering a hole H (None if unreachable within ``limit``)."""
    n_rows, n_cols = len(rows), len(rows[0])
    start = next((r, c) for r in range(n_rows) for c in range(n_cols) if rows[r][c] == "S")

    def moves(cell: tuple[int, int]) -> Iterable[tuple[str, tuple[int, int]]]:
        for name, (dr, dc) in ACTIONS.items():
            r, c = cell[0] + dr, cell[1] + dc
            if 0 <= r < n_rows and 0 <= c < n_cols and rows[r][c] != "H":  # a hole ends the episode
                yield name, (r, c)

    return shortest_moves(start, moves, lambda cell: rows[cell[0]][cell[1]] == "G", limit)


def generate_map(
    seed: int, sizes: tuple[int, int] = (2, 9), frozen_prob: tuple[float, float] = (0.6, 0.85), max_shortest: int = 6
) -> dict[str, Any]:
    """One random solvable map ``{"map": rows of S/G/H/F, "size": n, "p": p, "shortest": moves}``."""
    rng, _ = seeding.np_random(seed)
    size = int(rng.integers(sizes[0], sizes[1] + 1))
    p = float(rng.uniform(*frozen_prob))
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p])
        start, goal = rng.choice(size * size, 2, replace=False)
        board[divmod(int(start), size)] = "S"
        board[divmod(int(goal), size)] = "G"
        rows = ["".join(row) for row in board]
        path = solve_frozenlake(rows, limit=max_shortest)
        if path is not None:
            return {"map": rows, "size": size, "p": p, "shortest": len(path)}


class FrozenLakeEpisode(GridEpisode):
    """One FrozenLake game. ``info["event"]`` is one of ``COMMENTS`` or ``"invalid"``."""

    def _load(self, data: dict[str, Any]) -> None:
        self.rows = list(data["map"])
        self._gym = FrozenLakeEnv(desc=self.rows, is_slippery=False)
        state, _ = self._gym.reset(seed=0)  # the start is unique, so the seed changes nothing
        self.pos = divmod(int(state), len(self.rows[0]))

    def _letter(self, r: int, c: int) -> str:
        """The letter of the tile at row ``r``, column ``c`` (the agent left out)."""
        return self.symbols[{"H": "hole", "G": "goal"}.get(self.rows[r][c], "frozen")]

    def _render(self) -> str:
        cells = [[self._letter(r, c) for c in range(len(row))] for r, row in enumerate(self.rows)]
        r, c = self.pos
        cells[r][c] = self.symbols[{"H": "agent_in_hole", "G": "agent_on_goal"}.get(self.rows[r][c], "agent")]
        return render_rows(cells)

    def _move(self, action: str) -> tuple[str, str, float, bool]:
        state, reward, terminated, _, _ = self._gym.step(_GYM_ACTION[action])
        new_pos = divmod(int(state), len(self.rows[0]))
        moved, self.pos = new_pos != self.pos, new_pos
        cell = self.rows[new_pos[0]][new_pos[1]]
        event = "goal" if cell == "G" else "hole" if cell == "H" else "safe" if moved else "blocked"
        comment = COMMENTS[event].format(tile=self._letter(*new_pos))
        return event, comment if self.hint else comment.split(": ", 1)[-1], float(reward), bool(terminated)

    def _verdict(self) -> tuple[str, str]:
        if self.events[-1] in ("goal", "hole"):
            category = self.events[-1]
        else:
            category = "no_valid_action" if set(self.events) == {"invalid"} else "step_limit"
        text = FEEDBACK[category].format(n=self.actions_taken, budget=self.max_actions)
        invalid = self.events.count("invalid")
        if invalid and category != "no_valid_action":
            text += f" {invalid} of the replies had no valid action and did not move the agent."
        return category, text


class FrozenLake(GridGame):
    """FrozenLake with abstract letters, seeded splits and the paper's maps.

    ``source`` is ``"generated"`` (seeded splits) or ``"paper"`` (the paper's maps); ``sizes``, the
    inclusive range of the side n; the rest (``hint``: the tile letters) as in :class:`~erl_lite.envs.grid.GridGame`.

    Example:
        >>> env = FrozenLake()
        >>> episode = env.new_episode()
        >>> obs = episode.reset(env.test_tasks(1)[0])
        >>> episode.step("```\\nUp\\n```")[3]["event"] in ("blocked", "safe", "hole", "goal")
        True
    """

    name = "frozenlake"
    default_symbols = DEFAULT_SYMBOLS
    episode_class = FrozenLakeEpisode
    layout_field = "map"

    def __init__(
        self,
        source: str = "generated",
        seed: int = 0,
        n_train: int = 10_000,
        n_test: int = 100,
        sizes: tuple[int, int] = (2, 9),
        frozen_prob: tuple[float, float] = (0.6, 0.85),
        max_shortest: int = 6,
        max_actions: int = 8,
        symbols: dict[str, str] | None = None,
        symbol_seed: int | None = None,
        compact: bool = False,
        **style: Any,
    ) -> None:
        owner = type(self).__name__
        check_sizes(owner, sizes, 2)
        check_whole(owner, "max_shortest", max_shortest, minimum=1)
        if not (isinstance(frozen_prob, (tuple, list)) and len(frozen_prob) == 2):
            raise ValueError(f"{owner}: frozen_prob must be a (low, high) pair, got {frozen_prob!r}")
        for p in frozen_prob:
            check_share(owner, "frozen_prob", p)
        if frozen_prob[0] > frozen_prob[1]:
            raise ValueError(f"{owner}: frozen_prob must be (low, high) with low <= high, got {frozen_prob!r}")
        make = partial(generate_map, sizes=sizes, frozen_prob=frozen_prob, max_shortest=max_shortest)
        super().__init__(make, source, seed, n_train, n_test, max_actions, symbols, symbol_seed, compact, **style)

    @classmethod
    def small(cls, **overrides: Any) -> "FrozenLake":
        """A CPU-sized variant: 2×2 to 4×4 maps and compact prompts."""
        return cls(**{"sizes": (2, 4), "compact": True, **overrides})
