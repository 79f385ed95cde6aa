"""Teacher policies and the synthetic corpus the embedded tiny model is trained on.

The embedded model plays a small FrozenLake whose hole and frozen letters are drawn per run
from a pool (:data:`LETTER_POOL`), so no model can know in advance which letter is the hole;
within a run the pair is fixed, so a rulebook that names the hole transfers across episodes.
Its corpus teaches the three ERL roles with imperfect skill, so that RL has room to improve:

* **act** (initial prompt): every reply states a hypothesis, what lies ahead, and a move:
  ``"Avoid E. Down G ok, Right E no.\\n```Down```"``. With no rulebook the player mostly
  suspects nothing (``"Avoid nothing."``: it walks a plain shortest path and falls into a
  hole in the way about half the time) and rarely (3% of episodes) suspects one of the
  grid's two unknown letters at random (kept for the whole episode): right, it walks around
  the holes; wrong, it fears the ice and walks over the holes. RL alone rarely samples the
  right letter; a reflection reads it from the trace. (The rate is kept low on purpose: the
  more often random guesses hit the hole letter, the less a reflection has to add.)
* **reflect**: writes a rulebook in ``<prompt>…</prompt>`` naming the agent, the goal, the hole
  (read from the trace's fatal step), the safe letter and a strategy; with no fatal step it
  keeps the base rulebook (memory) when it names a hole, else writes a generic one. A few
  reflections name the wrong letter.
* **act under a rulebook**: avoid the letter the rulebook calls a hole (guess if it names none).

Every example is produced by erl_lite's own phases (:func:`erl_lite.phases.erl_step`) with a
:class:`~erl_lite.generation.ScriptedGenerator` in place of the model, so the training text
is byte-identical to what the trainer will later show the model: chat template, glue between
turns, the reflection request and the second attempt's system prompt.

Departures from the paper: the paper starts from instruction-tuned LLMs; this corpus exists
only because no small pretrained chat model ships offline. The hypothesis sentence in each
reply is a miniature chain of thought, which makes the hole letter a visible token that RL
and internalization can move.

Example:
    >>> from erl_lite.testing import tiny_tokenizer
    >>> examples = generate_corpus(tiny_tokenizer(), runs=1, tasks_per_run=4, seed=0)
    >>> sorted({e.role for e in examples}) <= ["first", "reflection", "second"]
    True
"""

from __future__ import annotations

import heapq
import random
import re
from dataclasses import dataclass
from typing import Any

from erl_lite.config import ERLConfig
from erl_lite.envs.frozenlake import FrozenLake, FrozenLakeEpisode, generate_map
from erl_lite.envs.grid import ACTIONS
from erl_lite.generation import ScriptedGenerator
from erl_lite.memory import ReflectionMemory
from erl_lite.phases import PhaseContext, erl_step
from erl_lite.envs.splits import SeededSplits
from erl_lite.prompts import REFLECTION_SYSTEM

AGENT, GOAL = "A", "B"
#: Letters the hole and the frozen tile are drawn from, per run.
LETTER_POOL = "CDEFGH"
#: Fixed markers, seen only in traces: the agent in a hole, the agent on the goal.
IN_HOLE, ON_GOAL = "X", "Z"
#: ERLConfig values that fit the embedded model: its replies are at most 16 tokens per turn,
#: its rulebooks about 45 tokens, and its episodes and reflection requests well under 1024.
DEMO_CONFIG: dict[str, Any] = dict(
    max_completion_length=24, max_episode_length=1024, max_reflection_length=64,
    max_reflection_prompt_length=1024, temperature=0.7, reflection_temperature=0.5,
    reflection_top_p=0.9, eval_temperature=0.7,
)
#: Letters of a demo world before the run's pair is drawn.
DEMO_SYMBOLS = {"agent": AGENT, "goal": GOAL, "hole": "C", "frozen": "D",
                "agent_in_hole": IN_HOLE, "agent_on_goal": ON_GOAL}

_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?=<\|im_end\|>|<\|im_start\|>|$)", re.DOTALL)
_ROW = re.compile(r"^[A-Z]( [A-Z])*$")
_HYPOTHESIS = re.compile(r"Avoid ([A-Z]|nothing)\.")
#: The hypothesis of a player who does not suspect any letter.
NO_BELIEF = "nothing"
_HOLE_RULE = re.compile(r"\b([A-Z]) is a hole\b")
_FATAL = re.compile(r"stepped on ([A-Z]): moved into a hole")


def letter_pair(run_seed: int) -> tuple[str, str]:
    """The run's (hole, frozen) letters, drawn from :data:`LETTER_POOL` by ``run_seed``.

    Example:
        >>> letter_pair(0) == letter_pair(0) and len(set(letter_pair(0))) == 2
        True
    """
    hole, frozen = random.Random(run_seed).sample(LETTER_POOL, 2)
    return hole, frozen


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
    """
    rng = random.Random(seed)
    easy_ok = rng.random() < keep_easy
    for attempt in range(10_000):
        m = generate_map(seed + 7_919 * attempt, sizes, frozen_prob, max_shortest)
        if easy_ok or hole_in_the_way(m["map"]):
            return m
    raise RuntimeError("no map with a hole in the way; raise the hole probability")


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
    """A :class:`DemoLake` whose hole and frozen tiles are drawn as ``hole`` and ``frozen``."""
    return DemoLake(seed=seed, symbols={"hole": hole, "frozen": frozen}, **overrides)


# --- rulebooks ---------------------------------------------------------------------------------


def rulebook(hole: str | None, safe: str | None) -> str:
    """The rulebook a good reflection writes (``hole=None``: nothing learned about holes yet).

    Example:
        >>> rulebook("E", "G")
        'A is you. B is the goal. E is a hole: stepping on E ends the game. G is safe ice. Reach B and never step on E.'
    """
    parts = [f"{AGENT} is you.", f"{GOAL} is the goal."]
    if hole is not None:
        parts.append(f"{hole} is a hole: stepping on {hole} ends the game.")
    if safe is not None:
        parts.append(f"{safe} is safe ice.")
    parts.append(f"Reach {GOAL} and never step on {hole}." if hole else f"Reach {GOAL} in few moves.")
    return " ".join(parts)


def named_hole(text: str) -> str | None:
    """The letter a rulebook calls a hole, if any (the last one named)."""
    found = _HOLE_RULE.findall(text)
    return found[-1] if found else None


# --- grids and moves ---------------------------------------------------------------------------


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


def _find(grid: list[list[str]], letter: str) -> tuple[int, int] | None:
    return next(((r, c) for r, row in enumerate(grid) for c, x in enumerate(row) if x == letter), None)


def _neighbour(grid: list[list[str]], cell: tuple[int, int], action: str) -> tuple[int, int] | None:
    r, c = cell[0] + ACTIONS[action][0], cell[1] + ACTIONS[action][1]
    return (r, c) if 0 <= r < len(grid) and 0 <= c < len(grid[0]) else None


def best_moves(grid: list[list[str]], avoid: str | None) -> list[str]:
    """First moves of the best paths from A to B for a player who believes ``avoid`` is a hole.

    Paths are ranked by how many ``avoid`` cells they step on, then by length: a path that
    never steps on ``avoid`` is taken when one exists; otherwise the player takes the route
    that crosses the fewest cells it fears (so a wrong belief walks it over the real holes).
    Empty when A or B is not on the grid.

    Example:
        >>> best_moves([["A", "H"], ["F", "B"]], avoid="H")
        ['Down']
        >>> best_moves([["A", "H"], ["F", "B"]], avoid="F")
        ['Right']
    """
    start, goal = _find(grid, AGENT), _find(grid, GOAL)
    if start is None or goal is None:
        return []
    cost = {goal: (0, 0)}  # cell -> (feared cells stepped on, moves) from the cell to the goal
    frontier = [(0, 0, goal)]
    while frontier:  # Dijkstra from the goal; entering a cell costs (1 if feared, 1 move)
        fear, steps, cell = heapq.heappop(frontier)
        if (fear, steps) > cost[cell]:
            continue
        enter = (int(grid[cell[0]][cell[1]] == avoid), 1)
        for action in ACTIONS:
            prev = _neighbour(grid, cell, action)
            if prev is None:
                continue
            total = (fear + enter[0], steps + enter[1])
            if prev not in cost or total < cost[prev]:
                cost[prev] = total
                heapq.heappush(frontier, (total[0], total[1], prev))
    options = {}  # first move -> (feared cells, moves) of the best path that starts with it
    for action in ACTIONS:
        n = _neighbour(grid, start, action)
        if n is not None:
            options[action] = (cost[n][0] + int(grid[n[0]][n[1]] == avoid), cost[n][1] + 1)
    best = min(options.values())
    return [a for a, c in options.items() if c == best]


def unknown_letters(grid: list[list[str]]) -> list[str]:
    """Letters on the grid other than the agent and the goal, sorted."""
    return sorted({x for row in grid for x in row} - {AGENT, GOAL})


def closer_tiles(grid: list[list[str]]) -> list[tuple[str, str]]:
    """(direction, letter) of each tile one step away that brings the agent closer to the goal.

    Example:
        >>> closer_tiles([["A", "H"], ["F", "B"]])
        [('Down', 'F'), ('Right', 'H')]
    """
    start, goal = _find(grid, AGENT), _find(grid, GOAL)
    if start is None or goal is None:
        return []
    gap = abs(start[0] - goal[0]) + abs(start[1] - goal[1])
    tiles = []
    for action in ACTIONS:
        n = _neighbour(grid, start, action)
        if n is not None and abs(n[0] - goal[0]) + abs(n[1] - goal[1]) < gap:
            tiles.append((action, grid[n[0]][n[1]]))
    return tiles


def describe_ahead(grid: list[list[str]], avoid: str | None) -> str:
    """What lies one step away in each direction that brings the agent closer to the goal,
    and whether the player's belief allows stepping there (``ok``) or not (``no``).

    Example:
        >>> describe_ahead([["A", "H"], ["F", "B"]], avoid="H")
        'Down F ok, Right H no.'
    """
    seen = [f"{action} {letter} {'no' if letter == avoid else 'ok'}" for action, letter in closer_tiles(grid)]
    return ", ".join(seen) + "." if seen else "."


# --- the teacher -------------------------------------------------------------------------------


@dataclass
class TeacherSkill:
    """How imperfect the teacher is (the model imitates it, so RL has room above it).

    Attributes:
        action_noise: chance that a move is uniformly random instead of planned.
        reflection_error: chance that a rulebook names the safe letter as the hole.
        guess_rate: chance that a player without a rulebook suspects one of the grid's
            letters (either one, at random) rather than none.
    """

    action_noise: float = 0.05
    reflection_error: float = 0.08
    guess_rate: float = 0.03


def chat_turns(prompt_text: str) -> list[tuple[str, str]]:
    """(role, content) of every turn of a ChatML-rendered prompt; the open last turn has ''."""
    return [(role, content) for role, content in _TURN.findall(prompt_text)]


class Teacher:
    """A scripted player of all three roles: ``Teacher(seed)(prompt_text) -> reply text``.

    Plug it into :class:`~erl_lite.generation.ScriptedGenerator`; the prompt is the decoded
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
        earlier = [m.group(1) for r in replies if (m := _HYPOTHESIS.search(r))]
        belief = earlier[0] if earlier else (named_hole(system) or self.guess(grid))
        avoid = None if belief == NO_BELIEF else belief
        moves = best_moves(grid, avoid) or list(ACTIONS)
        if self.rng.random() < self.skill.action_noise:
            moves = list(ACTIONS)
        return f"Avoid {belief}. {describe_ahead(grid, avoid)}\n```{self.rng.choice(sorted(moves))}```"

    def guess(self, grid: list[list[str]]) -> str:
        """An uninformed player's hypothesis: mostly none, sometimes one of the grid's letters."""
        options = unknown_letters(grid)
        if options and self.rng.random() < self.skill.guess_rate:
            return self.rng.choice(options)
        return NO_BELIEF

    def reflect(self, request: str) -> str:
        """A rulebook from the fatal step of the trace, else the base rulebook, else a generic one."""
        base = _section(request, "Current instructions")
        fatal = _FATAL.findall(request)
        if not fatal:
            text = base if named_hole(base) else rulebook(None, None)
            return f"<prompt>{text}</prompt>"
        hole = fatal[-1]
        others = [x for x in unknown_letters(parse_grid(_section(request, "Task"))) if x not in (hole, IN_HOLE, ON_GOAL)]
        safe = others[0] if len(others) == 1 else None
        if safe is not None and self.rng.random() < self.skill.reflection_error:
            hole, safe = safe, hole  # the imperfect reflector blames the wrong letter
        return f"<prompt>{rulebook(hole, safe)}</prompt>"


def _section(request: str, title: str) -> str:
    """The body of a ``## title`` section of the reflection request."""
    match = re.search(rf"## {re.escape(title)}\n(.*?)(?=\n\n## |\Z)", request, re.DOTALL)
    return match.group(1).strip() if match else ""


# --- the corpus --------------------------------------------------------------------------------


@dataclass
class CorpusExample:
    """One supervised sequence: a context and the tokens after it (loss where the mask is 1)."""

    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    run: int

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


def corpus_config(**overrides: Any) -> ERLConfig:
    """The phase settings the corpus is rolled out with: the demo's budgets, G = 2."""
    return ERLConfig.preset("cpu", **{**DEMO_CONFIG, "num_generations": 2, "progress_bar": False, **overrides})


def generate_corpus(tokenizer: Any, runs: int, tasks_per_run: int, seed: int = 0,
                    skill: TeacherSkill | None = None, batch_tasks: int = 8,
                    config: ERLConfig | None = None, **world: Any) -> list[CorpusExample]:
    """Roll the teacher through ERL steps on ``runs`` worlds and keep every role's tokens.

    Run ``r`` uses the ``r``-th (hole, frozen) letter pair (cycling through all ordered pairs
    of :data:`LETTER_POOL`, so every letter is a hole as often as it is safe), its own map
    seed, and memory on for even ``r`` and off for odd ``r`` (so reflections see both the
    initial prompt and remembered rulebooks as their base instructions).

    Args:
        tokenizer: renders and tokenizes exactly as the trainer will.
        runs, tasks_per_run: how many worlds, and training maps from each.
        seed: seeds the teacher and the map splits.
        skill: the teacher's noise levels.
        batch_tasks: tasks per ERL step (memory is updated between steps).
        config: phase settings (default :func:`corpus_config`).
        world: :class:`DemoLake` arguments (``sizes``, ``frozen_prob``, ``keep_easy``, ...).
    """
    pairs = [(h, f) for h in LETTER_POOL for f in LETTER_POOL if h != f]
    random.Random(seed).shuffle(pairs)
    teacher = Teacher(seed, skill)
    examples: list[CorpusExample] = []
    for r in range(runs):
        hole, frozen = pairs[r % len(pairs)]
        env = make_world(hole, frozen, seed=1_000_003 * (seed + 1) + r, n_train=tasks_per_run, n_test=8, **world)
        cfg = (config or corpus_config()).replace(use_memory=(r % 2 == 0))
        ctx = PhaseContext(ScriptedGenerator(tokenizer, teacher), tokenizer, env, cfg)
        memory = ReflectionMemory()
        tasks = env.train_tasks(tasks_per_run)
        for i in range(0, len(tasks), batch_tasks):
            out = erl_step(ctx, tasks[i:i + batch_tasks], memory)
            examples += [CorpusExample(a.role, a.prompt_ids, a.completion_ids, a.completion_mask, r)
                         for a in out.first + out.second]
            examples += [CorpusExample("reflection", x.prompt_ids, x.completion_ids, [1] * len(x.completion_ids), r)
                         for x in out.reflections]
    return examples
