"""Shared pieces of the two grid games: action parsing, letter symbols, prompts, episode loop.

FrozenLake and Sokoban are played the same way: one action per model turn, the action is
the content of the *last* triple-backtick block of the reply (Up/Down/Left/Right, any case),
an unparsable reply leaves the agent where it is but still spends one of the action budget,
and the grid is drawn with abstract letters whose meaning the model is never told.
:class:`GridEpisode` holds that loop; each game supplies only its move rule and its drawing.

Departures from the paper: the letters can be remapped per run (``symbols`` / ``symbol_seed``)
so that a run can hide what each letter means; the paper uses one fixed assignment (the
defaults here). A language tag on the opening fence (```` ```text ````) is tolerated.
"""

from __future__ import annotations

import random
import re
import string
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from erl_lite.envs.base import Episode, StepOutput
from erl_lite.records import Task

#: Canonical action names and their (row, column) displacement.
ACTIONS: dict[str, tuple[int, int]] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
_BY_LOWER = {name.lower(): name for name in ACTIONS}
_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)
_TAG = re.compile(r"[A-Za-z0-9_+-]+")


def parse_action(text: str) -> str | None:
    """The action named in the last triple-backtick block of ``text``, or None.

    The block must hold exactly one action word (optionally after a language tag on the
    fence line); anything else is no action.

    Example:
        >>> parse_action("I think so.\\n```\\nleft\\n```")
        'Left'
        >>> parse_action("```Up``` then ```down```")
        'Down'
        >>> parse_action("Up") is None
        True
    """
    if not isinstance(text, str):
        return None
    blocks = _BLOCK.findall(text)
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


def resolve_symbols(
    defaults: Mapping[str, str], symbols: Mapping[str, str] | None = None, seed: int | None = None
) -> dict[str, str]:
    """The letter drawn for each cell kind: defaults, or a seeded random draw, then overrides.

    Args:
        defaults: role -> letter, e.g. ``{"agent": "A", "goal": "B", ...}``.
        symbols: explicit overrides for some or all roles.
        seed: when given, every role first gets a distinct random capital letter.

    Example:
        >>> resolve_symbols({"agent": "A", "goal": "B"}, {"goal": "Z"})
        {'agent': 'A', 'goal': 'Z'}
    """
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
    if compact:
        return (
            f"Grid game shown as letters. Each turn reply with one action, Up, Down, Left or "
            f"Right, inside a final ``` block. At most {max_actions} actions."
        )
    return (
        "You are playing a game on a small grid. Every cell is drawn as a letter and your "
        "agent is one of them; what the letters mean and how the game works is for you to "
        "find out. Each turn, choose one action: Up, Down, Left or Right. End your reply "
        "with the action alone in a triple-backtick block, like this:\n```\nRight\n```\n"
        f"You may take at most {max_actions} actions. The grid is shown again after each action."
    )


def action_reminder_text() -> str:
    return "Reply with one action (Up, Down, Left or Right) alone in a final ``` block."


class GridEpisode(Episode):
    """The turn loop shared by the grid games; subclasses define moves and drawing.

    Subclasses implement :meth:`_load`, :meth:`_render`, :meth:`_move` and :meth:`_verdict`.
    ``_move`` returns ``(event, comment, reward, done)``; events are the keys of the game's
    comment table and end up in ``info["event"]``.
    """

    def __init__(self, max_actions: int, symbols: dict[str, str], compact: bool = False) -> None:
        self.max_actions = max_actions
        self.symbols = symbols
        self.compact = compact
        self.task: Task | None = None

    # --- game-specific -------------------------------------------------------------
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

    # --- the shared loop -----------------------------------------------------------
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
        grid = self._render()
        # An unchanged grid is not drawn again: it keeps the reflector's context short.
        self._lines += [f"Action {self.actions_taken}: {shown} -> {comment}.",
                        "(grid unchanged)" if grid == self._last_grid else grid]
        self._last_grid = grid
        if not done and self.actions_taken >= self.max_actions:
            done = True
        self.reward, self.done = (reward if done else 0.0), done
        info = {"action": parsed, "valid": parsed is not None, "event": event,
                "actions_left": self.max_actions - self.actions_taken}
        if done:
            info["outcome"] = self._verdict()[0]
            return None, self.reward, True, info
        note = "" if parsed is not None else "(No valid action found in your reply; nothing happened.)\n"
        return self._observation(note), 0.0, False, info

    @property
    def outcome(self) -> str:
        """Category of the finished episode (see the game's ``FEEDBACK`` table)."""
        return self._verdict()[0]

    def feedback(self) -> str:
        return self._verdict()[1]

    def trace(self) -> str:
        return "\n".join(self._lines + [f"Outcome: {self.feedback()}"])


def _excerpt(text: Any, limit: int = 60) -> str:
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")
