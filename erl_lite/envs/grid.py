"""What the two grid games share: action parsing, letters, prompts, the turn loop, the splits and
the one shortest-path search. One action per turn, from the reply's last ``` block; an unparsable
reply does not move but spends one action. Each game supplies its move rule, drawing and generator.

Departures from the paper: the letters can be remapped per run (``symbols`` / ``symbol_seed``); the paper uses one
fixed assignment (the defaults). A language tag on the fence is tolerated. The prompts give only the output format;
``prompt_style="reference"``: the released code's, restated (data/grid_prompts.json; docs/REFERENCE.md).
"""

from __future__ import annotations

import json
import random
import re
import string
from abc import abstractmethod
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from importlib import resources
from typing import Any, TypeVar

from erl_lite.config.checks import check_choice, check_flag, check_whole
from erl_lite.core.env import Environment, Episode, StepOutput
from erl_lite.envs.paper_tasks import paper_game_tasks
from erl_lite.envs.splits import SeededSplits
from erl_lite.records import Task

#: Canonical action names and their (row, column) displacement.
ACTIONS: dict[str, tuple[int, int]] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
_BY_LOWER = {name.lower(): name for name in ACTIONS}
_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)
_TAG = re.compile(r"[A-Za-z0-9_+-]+")
State = TypeVar("State", bound=Hashable)
PROMPTS = json.loads(resources.files("erl_lite").joinpath("data/grid_prompts.json").read_text("utf-8"))


def parse_action(text: str) -> str | None:
    """The action word (any case) in the last triple-backtick block of ``text``, or None.

    Example:
        >>> parse_action("I think so.\\n```\\nleft\\n```")
        'Left'
    """
    blocks = _BLOCK.findall(text) if isinstance(text, str) else []
    if not blocks:
        return None
    body = blocks[-1]
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    tag_line = len(lines) == 2 and not body[:1].isspace() and lines[0].lower() not in _BY_LOWER
    if tag_line and _TAG.fullmatch(lines[0]):
        lines = lines[1:]  # ```text\nUp\n``` : the first line is a language tag
    if len(lines) != 1:
        return None
    return _BY_LOWER.get(lines[0].lower())


def shortest_moves(
    start: State,
    moves: Callable[[State], Iterable[tuple[str, State]]],
    is_goal: Callable[[State], bool],
    limit: int | None = None,
) -> list[str] | None:
    """Shortest list of action names from ``start`` to a goal state (breadth-first search); ``moves(state)`` yields
    ``(action, next_state)`` in a fixed order; None past ``limit`` moves. Ours: the state spaces are implicit."""
    parent: dict[Any, tuple[Any, str] | None] = {start: None}
    frontier = deque([(start, 0)])  # (state, its depth)
    while frontier:
        state, depth = frontier.popleft()
        if is_goal(state):
            path: list[str] = []
            while parent[state] is not None:
                state, action = parent[state]
                path.append(action)
            return path[::-1]
        if limit is not None and depth >= limit:
            continue  # a goal beyond this state would be over the limit
        for action, nxt in moves(state):
            if nxt not in parent:
                parent[nxt] = (state, action)
                frontier.append((nxt, depth + 1))
    return None


def resolve_symbols(
    defaults: Mapping[str, str], symbols: Mapping[str, str] | None = None, seed: int | None = None
) -> dict[str, str]:
    """The letter of each role: ``defaults``, or with ``seed`` distinct random capitals; then ``symbols``."""
    chosen = dict(defaults)
    if seed is not None:
        letters = random.Random(seed).sample(string.ascii_uppercase, len(chosen))
        chosen = dict(zip(sorted(chosen), letters))
    for role, letter in (symbols or {}).items():
        if role not in chosen:
            raise ValueError(f"unknown symbol role {role!r}; known: {sorted(chosen)}")
        chosen[role] = letter
    for role, letter in chosen.items():
        if len(letter) != 1 or letter.isspace() or letter == "`":
            raise ValueError(f"symbol for {role!r} must be one visible character, got {letter!r}")
    if len(set(chosen.values())) != len(chosen):
        raise ValueError(f"symbols must be distinct, got {chosen}")
    return chosen


def render_rows(cells: list[list[str]]) -> str:
    """Draw a grid one row per line, cells separated by spaces (one token per cell)."""
    return "\n".join(" ".join(row) for row in cells)


def grid_system_prompt(max_actions: int, compact: bool = False) -> str:
    """The initial system prompt of the grid games: the output format, never the rules."""
    return "\n".join(PROMPTS["plain"]["compact" if compact else "system"]).format(max_actions=max_actions)


def action_reminder_text() -> str:
    """The reminder of the action format appended to a reflected rulebook."""
    return PROMPTS["plain"]["reminder"][0]


class GridEpisode(Episode):
    """The turn loop of the grid games (subclasses implement the four abstract methods); ``turns``: see GridGame."""

    def __init__(
        self,
        max_actions: int,
        symbols: dict[str, str],
        compact: bool = False,
        turns: dict[str, Any] | None = None,
        hint: bool = True,
    ) -> None:
        self.max_actions, self.symbols, self.compact, self.turns, self.hint = max_actions, symbols, compact, turns, hint
        self.task: Task | None = None

    @abstractmethod
    def _load(self, data: dict[str, Any]) -> None:
        """Set the game state from a task's data."""

    @abstractmethod
    def _render(self) -> str:
        """The current grid in letters."""

    @abstractmethod
    def _move(self, action: str) -> tuple[str, str, float, bool]:
        """Apply a parsed action: (event, trace comment, reward, done)."""

    @abstractmethod
    def _verdict(self) -> tuple[str, str]:
        """The finished episode's outcome: (category, feedback sentence)."""

    def reset(self, task: Task) -> str:
        self.task = task
        self._load(task.data)
        self.reward, self.done = 0.0, False
        self.actions_taken = 0
        self.events: list[str] = []
        self._last_grid = self._render()
        self._lines = ["Start:", self._last_grid]
        return self._observation(note="")

    def _hint(self) -> str:
        """An extra observation line after the grid ("" = none); variants of a game override it."""
        return ""

    def _observation(self, note: str) -> str:
        left = self.max_actions - self.actions_taken
        grid = self._render() + (f"\n{hint}" if (hint := self._hint()) else "")
        if self.turns is not None:  # the board, not solved yet, how the last action went, what is left
            t, last = self.turns, self.events[-1] if self.events else None
            how = t["stuck"] if last in t["stuck_events"] else t["worked"] if last else ""
            parts = (t["head"].format(k=self.actions_taken), grid, t["ask"], how, t["left"].format(left=left))
            return "\n".join(filter(None, parts))  # an empty part (no action yet, FrozenLake's "worked") is left out
        if self.compact:
            return f"{note}{grid}\nleft: {left}"
        return f"{note}Grid:\n{grid}\nActions left: {left}."

    def step(self, action: str) -> StepOutput:
        if self.task is None or self.done:
            raise RuntimeError("step() called on an episode that is not running; call reset() first")
        self.actions_taken += 1
        parsed = parse_action(action)
        if parsed is None:
            event, comment, reward, done = "invalid", "no valid action in the reply; did not move", 0.0, False
            shown = _excerpt(action)
        else:
            event, comment, reward, done = self._move(parsed)
            shown = parsed
        self.events.append(event)
        grid = self._render()  # an unchanged grid is not drawn again: the reflector's context stays short
        self._lines += [
            f"Action {self.actions_taken}: {shown} -> {comment}.",
            "(grid unchanged)" if grid == self._last_grid else grid,
        ]
        self._last_grid = grid
        done = done or self.actions_taken >= self.max_actions
        self.reward, self.done = (reward if done else 0.0), done
        info = {
            "action": parsed,
            "valid": parsed is not None,
            "event": event,
            "actions_left": self.max_actions - self.actions_taken,
        }
        if done:
            info["outcome"] = self.outcome
            return None, self.reward, True, info
        note = "" if parsed is not None else "(No valid action found in your reply; nothing happened.)\n"
        return self._observation(note), 0.0, False, info

    def _result(self) -> tuple[str, str]:
        return self._verdict() if self.done else ("running", "The episode is still running.")

    @property
    def outcome(self) -> str:
        """Category of the finished episode (see the game's ``FEEDBACK`` table)."""
        return self._result()[0]

    def feedback(self) -> str:
        return self._result()[1]

    def trace(self) -> str:
        return "\n".join(self._lines + [f"Outcome: {self.feedback()}"])


def _excerpt(text: Any, limit: int = 60) -> str:
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")


class GridGame(Environment):
    """What FrozenLake and Sokoban share: the ``source`` switch, letters, prompts, seeded splits. Subclasses set the
    class attributes (``layout_field``: the data field naming a board) and pass ``make`` (seed -> data). ``seed``,
    ``n_train``, ``n_test``: split seed and sizes (paper: 10,000 / 100); ``symbols``, ``symbol_seed``: see
    :func:`resolve_symbols`; ``compact``: tiny models; ``prompt_style``: ``plain``/``reference``; ``hint``: per game."""

    default_symbols: dict[str, str]
    episode_class: type[GridEpisode]
    layout_field: str

    def __init__(
        self,
        make: Callable[[int], dict[str, Any]],
        source: str,
        seed: int,
        n_train: int,
        n_test: int,
        max_actions: int,
        symbols: Mapping[str, str] | None,
        symbol_seed: int | None,
        compact: bool,
        prompt_style: str = "plain",
        hint: bool = True,
    ) -> None:
        check_choice("source", source, ("generated", "paper"))
        if prompt_style not in ("plain", "reference") or (compact and prompt_style != "plain"):
            raise ValueError(f"prompt_style must be 'plain' or 'reference' (compact: 'plain'), got {prompt_style!r}")
        owner = type(self).__name__
        check_whole(owner, "max_actions", max_actions, minimum=1)
        for name, flag in (("compact", compact), ("hint", hint)):
            check_flag(owner, name, flag)
        if symbol_seed is not None:
            check_whole(owner, "symbol_seed", symbol_seed)
        self.source, self.max_turns, self.compact, self.hint = source, max_actions, compact, hint
        self.symbols = resolve_symbols(self.default_symbols, symbols, symbol_seed)
        ref = PROMPTS["reference"]  # data/grid_prompts.json
        self.prompt_style, self.turns = prompt_style, ref["turns"][self.name] if prompt_style != "plain" else None
        self.system_prompt, self.action_reminder = grid_system_prompt(max_actions, compact), action_reminder_text()
        if self.turns is not None:  # reason in a fixed shape, then act; the game's reminder (Sokoban's too) ends it
            self.action_reminder = ref["reminders"].get(self.name, ref["reminders"]["grid"])
            self.system_prompt = "\n\n".join(
                dict.fromkeys([ref["system"], ref["reminders"]["grid"], self.action_reminder])
            )
        self._splits = SeededSplits(make, lambda d: "/".join(d[self.layout_field]), self.name, seed, n_train, n_test)

    def new_episode(self) -> GridEpisode:
        return self.episode_class(self.max_turns, self.symbols, self.compact, self.turns, self.hint)

    def train_tasks(self, n: int | None = None) -> list[Task]:
        return self._tasks("train", n)

    def test_tasks(self, n: int | None = None) -> list[Task]:
        return self._tasks("test", n)

    def train_pool(self) -> Sequence[Task]:
        return self._splits.pool("train") if self.source == "generated" else self.train_tasks()

    def _tasks(self, split: str, n: int | None) -> list[Task]:
        if self.source == "paper":
            return paper_game_tasks(self.name, split, n)
        return self._splits.tasks(split, n)
