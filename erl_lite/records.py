"""Typed records that cross ERL's phase boundaries (dataclasses, so a notebook can stop after any
phase and see what the next one will), the role names (:data:`ROLES`) and the retry join.

Token layout of an attempt (one multi-turn episode is *one* sequence)::

    prompt_ids                      completion_ids
    [system + first observation +   [action_1 | glue_1 | action_2 | glue_2 | ... | action_T]
     generation prompt]              mask: 1..1   0..0    1..1     0..0          1..1

``glue_t`` (end of turn, next observation, next generation prompt) carries no loss;
internalization swaps ``prompt_ids`` and keeps ``completion_ids``."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

_TOKEN_FIELDS = ("prompt_ids", "completion_ids", "completion_mask", "sampled_logp")


def _without_tokens(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in fields(record) if f.name not in _TOKEN_FIELDS}


#: The ERL roles (three with a policy-gradient update, plus internalization).
ROLES = ("first", "reflection", "second", "internalization")
FIRST, REFLECTION, SECOND, INTERNALIZATION = ROLES
#: The roles whose rows carry a GRPO advantage (internalization rows carry a weight instead).
ADVANTAGE_ROLES = (FIRST, REFLECTION, SECOND)


@dataclass
class Task:
    """One task: a dataset row (single-turn) or an environment instance (multi-turn)."""

    task_id: str  # unique within a split: it keys the GRPO groups and the memory routing
    prompt: str | list[dict[str, str]] | None = None  # text or chat messages; None: the env renders its own
    data: dict[str, Any] = field(default_factory=dict)  # the other columns, reward functions' keywords (TRL)


def task_count(n: Any) -> int | None:
    """``n`` when it is None (all) or a whole number >= 0, as ``train_tasks(n)`` / ``test_tasks(n)`` take it;
    else a ValueError (a slice ``[:n]`` would read -1 as "all but the last")."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ValueError(f"the number of tasks must be None or a whole number >= 0, got {n!r}")
    return n


class TaskPool(Sequence):
    """A split of ``size`` tasks read by index, task ``i`` being ``draw(i)``, drawn when first read and then kept.

    A run reads a few hundred tasks of a 10,000-task split, and one task may take tens of milliseconds to draw.
    ``draw`` must be deterministic in ``i`` and give unique ids (:func:`check_unique_task_ids` trusts it).

    Example:
        >>> pool = TaskPool(lambda i: Task(f"t/{i}"), 10_000)
        >>> len(pool), pool[-1].task_id, [t.task_id for t in pool[2:4]], len(pool.drawn)
        (10000, 't/9999', ['t/2', 't/3'], 3)
    """

    def __init__(self, draw: Callable[[int], Task], size: int) -> None:
        self._draw, self._size = draw, size
        self.drawn: dict[int, Task] = {}

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        index = operator.index(index)  # a float or a string is a TypeError, as for a list
        i = index + self._size if index < 0 else index
        if not 0 <= i < self._size:
            raise IndexError(f"task {index} of a split of {self._size}")
        if i not in self.drawn:
            self.drawn[i] = self._draw(i)
        return self.drawn[i]

    def __repr__(self) -> str:
        return f"TaskPool({self._size} tasks, {len(self.drawn)} drawn)"


def check_unique_task_ids(tasks: Sequence[Task], where: str) -> Sequence[Task]:
    """``tasks``, after refusing two that share an id (naming it and both rows): they would share a GRPO group."""
    if isinstance(tasks, TaskPool):  # its maker vouches for its ids; reading them all would draw every task
        return tasks
    seen: dict[str, int] = {}
    for i, task in enumerate(tasks):
        first = seen.setdefault(task.task_id, i)
        if first != i:
            raise ValueError(
                f"{where}: task id {task.task_id!r} is given to rows {first} and {i}; ids must be "
                "unique within a split (they key the GRPO groups and the memory): give each row its "
                "own 'id' (e.g. prefix each source's ids before concatenating datasets), or drop the "
                "'id' column to number the rows"
            )
    return tasks


def tasks_by_id(tasks: list[Task]) -> dict[str, Task]:
    """``{task_id: task}`` of one step's tasks; the same task may be drawn twice, two may not share an id."""
    out: dict[str, Task] = {}
    for task in tasks:
        known = out.setdefault(task.task_id, task)
        if known is not task and known != task:
            raise ValueError(
                f"two different tasks share the id {task.task_id!r} in one step; their rollouts "
                "would share a GRPO group: give every task its own id"
            )
    return out


def succeeded(reward: float, threshold: float) -> bool:
    """The one test of success at τ (``ERLConfig.reward_threshold``): ``r ≥ τ``; the gate passes on the rest."""
    return reward >= threshold


@dataclass
class Attempt:
    """One rollout of a task (first or second attempt) with its tokens (the layout above) and outcome."""

    task_id: str
    role: str  # "first" or "second"
    index: int  # position in the task's group of G (a second attempt keeps its first attempt's)
    system_prompt: str  # what the attempt saw: the initial prompt, or a rulebook Δ
    messages: list[dict[str, str]]  # the whole conversation
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]  # 1 on generated tokens
    reward: float  # terminal reward (the gate reads it against τ)
    success: bool  # succeeded(reward, τ): what success/* and eval/success count
    feedback: str  # the environment's textual feedback f
    trace: str  # the step-by-step trace
    num_turns: int  # model turns taken
    truncated: bool = False  # a reply or the episode hit its token limit
    rewards: dict[str, float | None] = field(default_factory=dict)  # each reward function's raw value (None: n/a)
    extra: dict[str, Any] = field(default_factory=dict)  # the columns reward functions logged (TRL's log_extra)
    sampled_logp: list[float] | None = None  # the sampler's log-prob per completion token (NaN on glue)

    @property
    def num_generated_tokens(self) -> int:
        return int(sum(self.completion_mask))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form without token ids (for histories and notebooks)."""
        d = _without_tokens(self)
        d["messages"] = [dict(m) for m in self.messages]
        d["num_generated_tokens"] = self.num_generated_tokens
        return d


@dataclass
class Reflection:
    """A reflection Δ written after a failed first attempt (``task_id``, ``index``)."""

    task_id: str
    index: int
    base_prompt: str  # the instructions it improves (memory content, else the initial prompt)
    text: str  # the raw reflection
    rulebook: str  # its <prompt>…</prompt> content, or base_prompt when the tags were missing
    parsed: bool  # whether the tags were found
    prompt_ids: list[int]
    completion_ids: list[int]
    reward: float = 0.0  # r̃, its credit (phases.reflection_credits): r2 under its rulebook, else 0
    truncated: bool = False  # cut by its token limit
    sampled_logp: list[float] | None = None  # the sampler's log-prob per completion token

    def to_dict(self) -> dict[str, Any]:
        return _without_tokens(self)


@dataclass
class TrainSample:
    """One sequence of the RL batch, under the context its role prescribes."""

    role: str  # one of ROLES
    prompt_ids: list[int]  # the context (no loss)
    completion_ids: list[int]
    completion_mask: list[int]  # 1 where a token carries loss
    advantage: float  # broadcast over the completion (for internalization: its weight)
    task_id: str = ""
    temperature: float | None = None  # scored at the temperature it was sampled at (None: the run's)
    sampled_logp: list[float] | None = None  # the sampler's log-prob per completion token, if it reported them


@dataclass
class Retry:
    """One gated first attempt (``r1 < τ``), the reflection Δ on it (None in "w/o reflection"), and its retry."""

    first: Attempt
    reflection: Reflection | None
    second: Attempt

    @property
    def task_id(self) -> str:
        return self.first.task_id

    @property
    def index(self) -> int:
        return self.first.index


@dataclass
class StepRecord:
    """Everything one ERL iteration produced (:func:`erl_lite.core.phases.erl_step`), completed by the trainer.

    ``to_dict`` writes each retry as ``{"first": position in first_attempts, "reflection": ..., "second":
    ...}``; the RL batch (``samples``), ``memory_writes`` and ``seconds`` are not saved.

    Example:
        >>> record = StepRecord(first_attempts=[], seconds={"first": 0.5})
        >>> record.second_attempts, sorted(record.to_dict())[:3]
        ([], ['first_attempts', 'memory_after', 'memory_before'])
    """

    step: int = 0  # the training iteration (set by the trainer)
    tasks: list[Task] = field(default_factory=list)
    first_attempts: list[Attempt] = field(default_factory=list)
    retries: list[Retry] = field(default_factory=list)
    memory_before: list[str] = field(default_factory=list)
    memory_after: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    samples: list[TrainSample] = field(default_factory=list)  # the RL batch
    memory_writes: int = 0  # rulebooks the step stored in memory
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase

    @property
    def reflections(self) -> list[Reflection]:
        return [r.reflection for r in self.retries if r.reflection is not None]

    @property
    def second_attempts(self) -> list[Attempt]:
        return [r.second for r in self.retries]

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "task_ids": [t.task_id for t in self.tasks],
            "first_attempts": [a.to_dict() for a in self.first_attempts],
            "retries": [
                {
                    "first": p,
                    "reflection": None if r.reflection is None else r.reflection.to_dict(),
                    "second": r.second.to_dict(),
                }
                for p, r in zip(_first_positions(self.first_attempts, self.retries), self.retries)
            ],
            "memory_before": list(self.memory_before),
            "memory_after": list(self.memory_after),
            "metrics": dict(self.metrics),
        }


# --- the retry join: a retry's first attempt as an object, or as its position (StepRecord.to_dict) ---
def _first_positions(first_attempts: list[Attempt], retries: list[Retry]) -> list[int]:
    position = {id(a): i for i, a in enumerate(first_attempts)}
    missing = [i for i, r in enumerate(retries) if id(r.first) not in position]
    if missing:
        raise ValueError(
            f"retry {missing[0]} (task {retries[missing[0]].task_id!r}) retries a first attempt "
            "that is not in first_attempts"
        )
    return [position[id(r.first)] for r in retries]


def retry_of_first(first_attempts: list[Attempt], retries: list[Retry]) -> list[Retry | None]:
    """For each first attempt, in order, the retry played on it (None where the gate did not fire)."""
    out: list[Retry | None] = [None] * len(first_attempts)
    for p, r in zip(_first_positions(first_attempts, retries), retries):
        out[p] = r
    return out


def retries_by_first(sample: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """A saved step record's retries, joined: first attempt's position -> ``{"first": its dict, ...}``."""
    firsts = sample.get("first_attempts", [])
    joined = {}
    for n, r in enumerate(sample.get("retries", [])):
        p = r.get(FIRST)
        if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < len(firsts):
            raise ValueError(
                f"step {sample.get('step')!r}, retry {n}: 'first' must be the position of a first "
                f"attempt (0..{len(firsts) - 1}), got {p!r}"
            )
        joined[p] = {**r, FIRST: firsts[p]}
    return joined
