"""Typed records that cross ERL's phase boundaries.

Every phase takes and returns these dataclasses, never loose dicts, so a notebook can stop
after any phase and look at exactly what the next one will see.

Token layout of an attempt (one multi-turn episode is *one* sequence)::

    prompt_ids                      completion_ids
    [system + first observation +   [action_1 | glue_1 | action_2 | glue_2 | ... | action_T]
     generation prompt]              mask: 1..1   0..0    1..1     0..0          1..1

``glue_t`` is the end-of-turn marker, the next observation (a user turn) and the next
generation prompt; it carries no loss. Re-contextualising an attempt (internalization)
swaps ``prompt_ids`` and keeps ``completion_ids`` untouched.

This module is also the one home of the role names (:data:`ROLES` and its constants) and of
the retry join (:func:`retry_of_first` for records, :func:`retries_by_first` for saved ones).

Departures from the paper: none; the paper does not fix a data layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

_TOKEN_FIELDS = ("prompt_ids", "completion_ids", "completion_mask")


def _without_tokens(record: Any) -> dict[str, Any]:
    """The record's fields as a dict, leaving out token-id lists (not copied, just skipped)."""
    return {f.name: getattr(record, f.name) for f in fields(record) if f.name not in _TOKEN_FIELDS}

#: The three ERL roles that receive a policy-gradient update, plus internalization: the one
#: home of the role names (everyone else imports these constants).
ROLES = ("first", "reflection", "second", "distill")
FIRST, REFLECTION, SECOND, DISTILL = ROLES
#: The roles whose rows carry a GRPO advantage (internalization rows carry a weight instead).
ADVANTAGE_ROLES = (FIRST, REFLECTION, SECOND)
#: The roles an attempt (an episode played in the environment) can have.
ATTEMPT_ROLES = (FIRST, SECOND)


@dataclass
class Task:
    """One task: a dataset row (single-turn) or an environment instance (multi-turn).

    Attributes:
        task_id: stable identifier, unique within a split: advantages are grouped by it and
            memory is routed by it (see :func:`check_unique_task_ids`).
        prompt: the dataset's prompt (a string or chat messages) for single-turn tasks,
            None for environments that render their own observations.
        data: every other column (answer, seed, map, ...). Passed to reward functions as
            keyword arguments, TRL-style.
    """

    task_id: str
    prompt: str | list[dict[str, str]] | None = None
    data: dict[str, Any] = field(default_factory=dict)


def check_unique_task_ids(tasks: list[Task], where: str) -> list[Task]:
    """``tasks``, after refusing two of them that share an id (naming the id and both rows).

    Two tasks with one id would share a GRPO group (their rewards compared as if they were
    rollouts of one prompt) and a memory route, silently. Returns ``tasks`` unchanged.

    Example:
        >>> try:
        ...     check_unique_task_ids([Task("a"), Task("b"), Task("a")], "train_dataset")
        ... except ValueError as err:
        ...     print(str(err)[:55])
        train_dataset: task id 'a' is given to rows 0 and 2; id
    """
    seen: dict[str, int] = {}
    for i, task in enumerate(tasks):
        first = seen.setdefault(task.task_id, i)
        if first != i:
            raise ValueError(f"{where}: task id {task.task_id!r} is given to rows {first} and {i}; ids must be "
                             "unique within a split (they key the GRPO groups and the memory): give each row its "
                             "own 'id' (e.g. prefix each source's ids before concatenating datasets), or drop the "
                             "'id' column to number the rows")
    return tasks


def tasks_by_id(tasks: list[Task]) -> dict[str, Task]:
    """``{task_id: task}`` of one step's tasks; the same task may be drawn twice (a small pool),
    two different tasks may not share an id (they would share a GRPO group).

    Example:
        >>> t = Task("a", "2+2=?")
        >>> list(tasks_by_id([t, t]))
        ['a']
    """
    out: dict[str, Task] = {}
    for task in tasks:
        known = out.setdefault(task.task_id, task)
        if known is not task and known != task:
            raise ValueError(f"two different tasks share the id {task.task_id!r} in one step; their rollouts "
                             "would share a GRPO group: give every task its own id")
    return out


@dataclass
class Attempt:
    """One rollout of a task (first or second attempt) with its tokens and outcome.

    Attributes:
        task_id: the task played.
        role: ``"first"`` or ``"second"``.
        index: position within the task's group of G rollouts (a second attempt keeps the
            index of the failed first attempt it retries).
        system_prompt: the system prompt the attempt saw (initial prompt, or a rulebook Δ).
        messages: the whole conversation as chat messages (system, user, assistant, ...).
        prompt_ids: token ids of the header (system + first observation + generation prompt).
        completion_ids: token ids after the header: actions and the glue between them.
        completion_mask: 1 for tokens the model generated (they carry loss), 0 for glue.
        reward: terminal reward of the episode.
        success: the environment's own notion of success, for reporting (see
            :attr:`Episode.success`). The gate does not read it: it compares ``reward`` with
            τ (``ERLConfig.reward_threshold``).
        feedback: the environment's textual feedback ``f``.
        trace: the step-by-step trace shown to the reflector.
        num_turns: model turns taken.
        truncated: True if a reply was cut at its token limit (no stop token) or the episode
            ran out of its token budget.
        rewards: per reward function (TRL's name), its unweighted value (None: not applicable);
            empty for environments that score themselves.
        extra: the columns reward functions logged for this row with TRL's ``log_extra``.
    """

    task_id: str
    role: str
    index: int
    system_prompt: str
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    reward: float
    success: bool
    feedback: str
    trace: str
    num_turns: int
    truncated: bool = False
    rewards: dict[str, float | None] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

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
    """A reflection Δ written after a failed first attempt.

    Attributes:
        task_id, index: the failed first attempt this reflects on.
        base_prompt: the instructions the reflector was asked to improve (memory content if
            memory held something, else the initial system prompt).
        text: the raw generated reflection.
        rulebook: the parsed ``<prompt>…</prompt>`` content, or ``base_prompt`` when the
            tags were missing (then ``parsed`` is False).
        prompt_ids, completion_ids: the reflection's own context and generated tokens.
        reward: r̃, the reward of the second attempt it produced (credited by
            :func:`erl_lite.core.phases.attempt_second` when that attempt is scored).
        truncated: True if ``max_reflection_length`` cut the reflection (no stop token).
    """

    task_id: str
    index: int
    base_prompt: str
    text: str
    rulebook: str
    parsed: bool
    prompt_ids: list[int]
    completion_ids: list[int]
    reward: float = 0.0
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return _without_tokens(self)


@dataclass
class TrainSample:
    """One sequence of the RL batch, under the context its role prescribes.

    Attributes:
        role: one of :data:`ROLES`.
        prompt_ids: context tokens (no loss).
        completion_ids: tokens after the context.
        completion_mask: 1 where a token carries loss.
        advantage: scalar broadcast over the masked tokens (for ``distill`` the weight
            ``max(r2, 0)`` or the indicator ``r2 > 0``, depending on the mode).
        task_id: for bookkeeping.
    """

    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    advantage: float
    task_id: str = ""


@dataclass
class Retry:
    """One gated first attempt, the reflection written on it, and the second attempt it led to.

    The join between the three is made once, where the second attempt is played
    (:func:`erl_lite.core.phases.attempt_second`), and every later consumer — advantages,
    internalization, memory, metrics, history samples, the attempt-pair view — reads it from
    here instead of matching lists by ``(task_id, index)`` again.

    Attributes:
        first: the failed first attempt (``r1 < τ``).
        reflection: Δ written on it, or None in the "w/o reflection" ablation. Its ``reward``
            is r̃ = r2, credited when the second attempt is scored.
        second: the replay of the same task under Δ (or under the raw retry prompt).
    """

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
    """Everything one ERL iteration produced: the input of notebooks and plots.

    ``to_dict`` writes each first attempt once and each retry as ``{"first": position in
    first_attempts, "reflection": ..., "second": ...}``, so a reader never re-joins lists.
    """

    step: int
    tasks: list[Task]
    first_attempts: list[Attempt]
    retries: list[Retry]
    memory_before: list[str]
    memory_after: list[str]
    metrics: dict[str, float]

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
            "retries": [{"first": p,
                         "reflection": None if r.reflection is None else r.reflection.to_dict(),
                         "second": r.second.to_dict()}
                        for p, r in zip(_first_positions(self.first_attempts, self.retries), self.retries)],
            "memory_before": list(self.memory_before),
            "memory_after": list(self.memory_after),
            "metrics": dict(self.metrics),
        }


# --- the retry join ------------------------------------------------------------------------------
# A retry holds its first attempt (objects) or that attempt's position in ``first_attempts``
# (StepRecord.to_dict). These three functions are the only places that turn one into the other.
def _first_positions(first_attempts: list[Attempt], retries: list[Retry]) -> list[int]:
    """Each retry's first attempt's position in ``first_attempts`` (matched by identity)."""
    position = {id(a): i for i, a in enumerate(first_attempts)}
    missing = [i for i, r in enumerate(retries) if id(r.first) not in position]
    if missing:
        raise ValueError(f"retry {missing[0]} (task {retries[missing[0]].task_id!r}) retries a first attempt "
                         "that is not in first_attempts")
    return [position[id(r.first)] for r in retries]


def retry_of_first(first_attempts: list[Attempt], retries: list[Retry]) -> list[Retry | None]:
    """For each first attempt, in order, the retry played on it (None where the gate did not fire).

    Example:
        >>> a, b = (Attempt("t", FIRST, i, "", [], [], [], [], float(i), bool(i), "", "", 1) for i in range(2))
        >>> retry = Retry(a, None, Attempt("t", SECOND, 0, "", [], [], [], [], 1.0, True, "", "", 1))
        >>> [r is retry for r in retry_of_first([a, b], [retry])], retry_of_first([a, b], [retry])[1]
        ([True, False], None)
    """
    out: list[Retry | None] = [None] * len(first_attempts)
    for p, r in zip(_first_positions(first_attempts, retries), retries):
        out[p] = r
    return out


def retries_by_first(sample: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """A saved step record's (:meth:`StepRecord.to_dict`) retries, joined: position of the first
    attempt -> ``{"first": that attempt's dict, "reflection": ..., "second": ...}``, in the
    retries' order.

    Example:
        >>> sample = {"step": 3, "first_attempts": [{"reward": 0.0}, {"reward": 1.0}],
        ...           "retries": [{"first": 0, "reflection": None, "second": {"reward": 1.0}}]}
        >>> retries_by_first(sample)
        {0: {'first': {'reward': 0.0}, 'reflection': None, 'second': {'reward': 1.0}}}
    """
    firsts = sample.get("first_attempts", [])
    joined = {}
    for n, r in enumerate(sample.get("retries", [])):
        p = r.get(FIRST)
        if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < len(firsts):
            raise ValueError(f"step {sample.get('step')!r}, retry {n}: 'first' must be the position of a first "
                             f"attempt (0..{len(firsts) - 1}), got {p!r}")
        joined[p] = {**r, FIRST: firsts[p]}
    return joined
