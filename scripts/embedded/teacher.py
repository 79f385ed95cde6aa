"""The build-time teacher: a scripted, deliberately imperfect player of ERL's three roles.

``scripts/build_embedded_model.py`` rolls it through erl_lite's own phases
(:func:`embedded.corpus.generate_corpus`) to make the corpus the embedded model is trained on.
It lives beside the build script, outside the installed package: nothing that runs at demo time
needs it. It plays the demo world (:mod:`erl_lite.embedded.world`) with imperfect skill, so that
RL has room to improve:

* **act** (initial prompt): every reply states a hypothesis, what lies ahead, and a move:
  ``"Avoid E or H. Down G ok, Right E no.\n```Down```"``. With no rulebook the player mostly
  suspects nothing (``"Avoid nothing."``: it walks a plain shortest path and often falls into
  a hole in the way) and rarely (6% of episodes) suspects one or two of the grid's unknown
  letters at random (kept for the whole episode). RL alone rarely samples the right letters; a
  reflection reads them from the trace, and memory carries them across episodes. The two-letter
  guesses matter for internalization: a two-hole plan is then a form the model already writes
  without a rulebook, so distilling second attempts moves its letters instead of teaching a new
  shape (with one-letter guesses only, the tiny model garbled internalized two-hole plans).
* **reflect**: writes a rulebook in ``<prompt>…</prompt>`` that builds on the current
  instructions (memory, when the run has one): it names the hole the trace's fatal step names
  first, then copies the holes the instructions name, in their order, except any the trace
  walked on safely and the one already written (so adding what the trace shows never depends
  on noticing that it is new: the first fact is always the trace's).
  A failure reveals only the hole stepped on, so only a rulebook built on memory names both of
  the world's holes. Rulebooks state holes only (no "safe" facts), so no letter ever gets two
  meanings. A few reflections blame a wrong letter for the fall.
* **act under a rulebook**: avoid every letter the rulebook calls a hole (guess if it names none).
* **act on a plain retry** (the paper's "w/o reflection" ablation: the first attempt's trace and
  feedback in the system prompt, no rulebook): avoid the letter the trace's fatal step names, misread
  as often as a reflection blames a wrong letter, so the ablation is played in the corpus's own words
  and measures the missing rulebook, not a prompt the model has never seen.

Departures from the paper: the paper starts from instruction-tuned LLMs; this teacher exists
only because no small pretrained chat model ships offline. The hypothesis sentence in each
reply is a miniature chain of thought, which makes the hole letter a visible token that RL
and internalization can move.

Example:
    >>> best_moves([["A", "H"], ["F", "B"]], avoid=["H"])
    ['Down']
"""

from __future__ import annotations

import heapq
import random
import re
from dataclasses import dataclass
from typing import Collection

from erl_lite.core.prompts import REFLECTION_SYSTEM, RETRY_HEADER
from erl_lite.embedded.rulebooks import named_holes, plan_sentence, planned_holes, rulebook
from erl_lite.embedded.world import AGENT, GOAL, IN_HOLE, ON_GOAL, closer_tiles, find_letter, parse_grid
from erl_lite.envs.grid import ACTIONS

_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?=<\|im_end\|>|<\|im_start\|>|$)", re.DOTALL)
_FATAL = re.compile(r"stepped on ([A-Z]): moved into a hole")
_SAFE_STEP = re.compile(r"stepped on ([A-Z]): moved to a safe tile")


def neighbour(grid: list[list[str]], cell: tuple[int, int], action: str) -> tuple[int, int] | None:
    """The cell one ``action`` away from ``cell``, or ``None`` off the grid."""
    r, c = cell[0] + ACTIONS[action][0], cell[1] + ACTIONS[action][1]
    return (r, c) if 0 <= r < len(grid) and 0 <= c < len(grid[0]) else None


def _fears(avoid: Collection[str] | str | None) -> set[str]:
    """The letters a player fears: ``None`` none, a letter itself, else the collection's."""
    return set() if avoid is None else {avoid} if isinstance(avoid, str) else set(avoid)


# --- moves -------------------------------------------------------------------------------------


def best_moves(grid: list[list[str]], avoid: Collection[str] | str | None) -> list[str]:
    """First moves of the best paths from A to B for a player who believes the ``avoid``
    letters are holes.

    Paths are ranked by how many ``avoid`` cells they step on, then by length: a path that
    never steps on ``avoid`` is taken when one exists; otherwise the player takes the route
    that crosses the fewest cells it fears (so a wrong belief walks it over the real holes).
    Empty when A or B is not on the grid.

    Example:
        >>> best_moves([["A", "H"], ["F", "B"]], avoid=["H"])
        ['Down']
        >>> best_moves([["A", "H"], ["F", "B"]], avoid="F")
        ['Right']
        >>> best_moves([["A", "H"], ["F", "B"]], avoid=["F", "H"])
        ['Down', 'Right']
    """
    fears = _fears(avoid)
    start, goal = find_letter(grid, AGENT), find_letter(grid, GOAL)
    if start is None or goal is None:
        return []
    cost = {goal: (0, 0)}  # cell -> (feared cells stepped on, moves) from the cell to the goal
    frontier = [(0, 0, goal)]
    while frontier:  # Dijkstra from the goal; entering a cell costs (1 if feared, 1 move)
        fear, steps, cell = heapq.heappop(frontier)
        if (fear, steps) > cost[cell]:
            continue
        enter = (int(grid[cell[0]][cell[1]] in fears), 1)
        for action in ACTIONS:
            prev = neighbour(grid, cell, action)
            if prev is None:
                continue
            total = (fear + enter[0], steps + enter[1])
            if prev not in cost or total < cost[prev]:
                cost[prev] = total
                heapq.heappush(frontier, (total[0], total[1], prev))
    options = {}  # first move -> (feared cells, moves) of the best path that starts with it
    for action in ACTIONS:
        n = neighbour(grid, start, action)
        if n is not None:
            options[action] = (cost[n][0] + int(grid[n[0]][n[1]] in fears), cost[n][1] + 1)
    best = min(options.values())
    return [a for a, c in options.items() if c == best]


def unknown_letters(grid: list[list[str]]) -> list[str]:
    """Letters on the grid other than the agent and the goal, sorted."""
    return sorted({x for row in grid for x in row} - {AGENT, GOAL})


def describe_ahead(grid: list[list[str]], avoid: Collection[str] | str | None) -> str:
    """What lies one step away in each direction that brings the agent closer to the goal,
    and whether the player's belief allows stepping there (``ok``) or not (``no``).

    Example:
        >>> describe_ahead([["A", "H"], ["F", "B"]], avoid=["H"])
        'Down F ok, Right H no.'
    """
    fears = _fears(avoid)
    seen = [f"{action} {letter} {'no' if letter in fears else 'ok'}" for action, letter in closer_tiles(grid)]
    return ", ".join(seen) + "." if seen else "."


# --- the teacher -------------------------------------------------------------------------------


@dataclass
class TeacherSkill:
    """How imperfect the teacher is (the model imitates it, so RL has room above it).

    Attributes:
        action_noise: chance that a move is uniformly random instead of planned.
        reflection_error: chance that a reflection blames another letter of the grid for the
            fall instead of the one the trace names.
        guess_rate: chance that a player without a rulebook suspects some of the grid's
            letters (at random) rather than none.
        guess_two_share: of those guesses, the share that suspects two letters, so that a
            two-hole plan (``"Avoid E or H."``) is already a form the model writes without a
            rulebook, and internalization has to move its letters, not invent its shape.
    """

    action_noise: float = 0.05
    reflection_error: float = 0.08
    guess_rate: float = 0.06
    guess_two_share: float = 0.5


def chat_turns(prompt_text: str) -> list[tuple[str, str]]:
    """(role, content) of every turn of a ChatML-rendered prompt; the open last turn has ''."""
    return [(role, content) for role, content in _TURN.findall(prompt_text)]


class Teacher:
    """A scripted player of all three roles: ``Teacher(seed)(prompt_text) -> reply text``.

    Plug it into :class:`~erl_lite.engine.generation.ScriptedGenerator`; the prompt is the decoded
    ChatML context, from which the teacher reads its role, the rulebook, the current grid and
    its own earlier replies (to keep one hypothesis per episode).

    Example:
        >>> t = Teacher(seed=0)
        >>> prompt = ("<|im_start|>system\\nE is a hole.<|im_end|>\\n<|im_start|>user\\n"
        ...           "A E\\nG B\\nleft: 8<|im_end|>\\n<|im_start|>assistant\\n")
        >>> t(prompt)
        'Avoid E. Down G ok, Right E no.\\n```Down```'
    """

    def __init__(self, seed: int = 0, skill: TeacherSkill | None = None) -> None:
        self.rng = random.Random(seed)
        self.skill = skill or TeacherSkill()

    def __call__(self, prompt_text: str) -> str:
        turns = chat_turns(prompt_text)
        system = next((c for r, c in turns if r == "system"), "")
        if system.strip() == REFLECTION_SYSTEM:
            user = next(c for r, c in turns if r == "user")
            return self.reflect(user)
        users = [c for r, c in turns if r == "user"]
        replies = [c for r, c in turns if r == "assistant" and c]
        return self.act(system, users[-1] if users else "", replies)

    def act(self, system: str, observation: str, replies: list[str]) -> str:
        """One move: keep the episode's hypothesis, else take the rulebook's, else guess.

        The reply names the hypothesis, then what lies one step away in each direction that
        gets closer to the goal and whether the hypothesis allows it, then the move: a short
        chain of thought that splits the choice into steps a tiny model can learn.
        """
        grid = parse_grid(observation)
        earlier = [p for r in replies if (p := planned_holes(r)) is not None]
        avoid = earlier[0] if earlier else (named_holes(system) or self.read_trace(system, grid) or self.guess(grid))
        moves = best_moves(grid, avoid) or list(ACTIONS)
        if self.rng.random() < self.skill.action_noise:
            moves = list(ACTIONS)
        return f"{plan_sentence(avoid)} {describe_ahead(grid, avoid)}\n```{self.rng.choice(sorted(moves))}```"

    def read_trace(self, system: str, grid: list[list[str]]) -> list[str]:
        """On a plain retry, the letter its trace's fatal step names (rarely another of the grid's letters,
        as a reflection rarely blames one); none on any other prompt."""
        fatal = _FATAL.findall(system) if RETRY_HEADER in system else []
        if not fatal:
            return []
        others = [x for x in unknown_letters(grid) if x != fatal[-1]]
        if others and self.rng.random() < self.skill.reflection_error:
            return [self.rng.choice(others)]
        return [fatal[-1]]

    def guess(self, grid: list[list[str]]) -> list[str]:
        """An uninformed player's suspects: mostly none, sometimes one or two of the grid's letters."""
        options = unknown_letters(grid)
        if options and self.rng.random() < self.skill.guess_rate:
            if len(options) > 1 and self.rng.random() < self.skill.guess_two_share:
                return self.rng.sample(options, 2)
            return [self.rng.choice(options)]
        return []

    def reflect(self, request: str) -> str:
        """A rulebook built on the current instructions and the trace (see the module docstring).

        Holes: the fatal step's letter (rarely a wrongly blamed one), then those the instructions
        name, in order, minus any the trace stepped on safely and the letter already written.
        """
        base = _section(request, "Current instructions")
        trace = _section(request, "What the agent did")
        stepped_safe = set(_SAFE_STEP.findall(trace))
        fatal = _FATAL.findall(trace)
        blamed = fatal[-1] if fatal else None
        if blamed is not None:
            grid = unknown_letters(parse_grid(_section(request, "Task")))
            others = [x for x in grid if x not in (blamed, IN_HOLE, ON_GOAL, *named_holes(base))]
            if others and self.rng.random() < self.skill.reflection_error:
                blamed = self.rng.choice(others)  # the imperfect reflector blames the wrong letter
        # First what the trace shows (the letter blamed for the fall), then what memory got right
        # (not a letter walked on safely, not the one just written): the newest fact comes first,
        # so writing it is the same skill with or without a memory.
        kept = [h for h in named_holes(base) if h not in stepped_safe and h != blamed]
        return f"<prompt>{rulebook(([blamed] if blamed else []) + kept)}</prompt>"


def _section(request: str, title: str) -> str:
    """The body of a ``## title`` section of the reflection request."""
    match = re.search(rf"## {re.escape(title)}\n(.*?)(?=\n\n## |\Z)", request, re.DOTALL)
    return match.group(1).strip() if match else ""
