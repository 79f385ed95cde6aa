"""Reflection memory: rulebooks that worked, written when a second attempt reached ``r2 >= τ`` and read only by the
reflector, as the base instructions it improves on (past :data:`MAX_RULEBOOK_CHARS`, cut).

Departures from the paper: ``r2 >= τ``, not its literal ``r2 > τ`` (which never fires with 0/1 rewards and τ = 1);
the ``fifo`` kind, the per-environment :class:`MemoryBank` and the reference's :class:`SlotMemory` are additions.
"""

from __future__ import annotations

import warnings
from collections import deque
from typing import Any, Callable, Sequence

from erl_lite.config.checks import check_choice
from erl_lite.core.prompts import cut_middle
from erl_lite.records import succeeded

#: The most characters a rulebook keeps (more than a reflection of any preset's max_reflection_length writes);
#: a longer one, as a hand-edited ``memory.json`` can hold, is cut in its middle with a warning naming it.
MAX_RULEBOOK_CHARS = 32_000
#: A ReflectionMemory's kinds (ERLConfig's memory_type "slots" is a SlotMemory).
MEMORY_KINDS = ("single", "fifo")


def _bounded(rulebook: str, index: int) -> str:
    if len(rulebook) > MAX_RULEBOOK_CHARS:
        warnings.warn(
            f"memory entries[{index}]: a rulebook of {len(rulebook):,} characters, cut in its middle to "
            f"MAX_RULEBOOK_CHARS={MAX_RULEBOOK_CHARS:,}",
            UserWarning,
            stacklevel=3,
        )
    return cut_middle(rulebook, MAX_RULEBOOK_CHARS)


class ReflectionMemory:
    """Holds successful rulebooks: ``single`` is the paper's one slot; ``fifo`` shows the ``top_k`` newest.

    Example:
        >>> mem = ReflectionMemory()
        >>> mem.maybe_store("A is you. C is a hole.", reward=1.0, threshold=1.0)
        True
        >>> mem.context()
        'A is you. C is a hole.'
    """

    def __init__(self, kind: str = "single", size: int = 50, top_k: int = 3) -> None:
        check_choice("memory kind", kind, MEMORY_KINDS)
        if size < 1 or top_k < 1:
            raise ValueError("memory size and top_k must be >= 1")
        self.kind = kind
        self.size = 1 if kind == "single" else size
        self.top_k = 1 if kind == "single" else top_k
        self._entries: deque[str] = deque(maxlen=self.size)
        self.total_writes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> list[str]:
        """Stored rulebooks, oldest first."""
        return list(self._entries)

    def maybe_store(self, rulebook: str, reward: float, threshold: float) -> bool:
        """Store ``rulebook`` if its second attempt reached the threshold (``r2 >= τ``)."""
        if not succeeded(reward, threshold) or not rulebook.strip():
            return False
        self._entries.append(_bounded(rulebook, min(len(self), self.size - 1)))
        self.total_writes += 1
        return True

    def context(self) -> str | None:
        """What the reflector sees as its base instructions, or None when empty (``fifo``: numbered)."""
        if not self._entries:
            return None
        recent = list(self._entries)[-self.top_k :]
        if len(recent) == 1:
            return recent[0]
        return "\n\n".join(f"[Rulebook {i + 1}]\n{r}" for i, r in enumerate(recent))

    def for_task(self, task_id: str, index: int = 0) -> "ReflectionMemory":
        """The memory serving rollout ``index`` of ``task_id``: this one (others pick per environment or slot)."""
        return self

    def state_dict(self) -> dict[str, Any]:
        """The memory as plain JSON-able values (saved in checkpoints)."""
        return {
            "kind": self.kind,
            "size": self.size,
            "top_k": self.top_k,
            "entries": self.entries,
            "total_writes": self.total_writes,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; a malformed state raises, naming the field."""
        check_memory_state(state)
        if state.get("kind") == "bank":
            raise ValueError(
                f"checkpoint memory keeps one memory per environment ({sorted(state['memories'])}); this run keeps one"
            )
        if state["kind"] != self.kind:
            raise ValueError(f"checkpoint memory is {state['kind']!r}, this run uses {self.kind!r}")
        if len(state["entries"]) > self.size:
            raise ValueError(
                f"memory entries: {len(state['entries'])} rulebooks, more than this run's memory holds ({self.size})"
            )
        self._entries = deque((_bounded(e, i) for i, e in enumerate(state["entries"])), maxlen=self.size)
        self.total_writes = state["total_writes"]


class MemoryBank:
    """One :class:`ReflectionMemory` per environment in ``names``; ``env_of`` maps a task id to its name."""

    def __init__(
        self,
        names: Sequence[str],
        kind: str = "single",
        size: int = 50,
        top_k: int = 3,
        env_of: Callable[[str], str] | None = None,
    ) -> None:
        if not names or len(set(names)) != len(names):
            raise ValueError(f"MemoryBank needs distinct environment names, got {list(names)}")
        if env_of is None:
            raise ValueError("MemoryBank needs env_of: a function from task id to environment name")
        self.memories = {name: ReflectionMemory(kind, size, top_k) for name in names}
        self.kind, self.env_of = kind, env_of

    def for_task(self, task_id: str, index: int = 0) -> ReflectionMemory:
        name = self.env_of(task_id)
        if name not in self.memories:
            raise KeyError(
                f"task {task_id!r} belongs to environment {name!r}, which has no memory "
                f"here (environments: {sorted(self.memories)})"
            )
        return self.memories[name]

    def __len__(self) -> int:
        return sum(len(m) for m in self.memories.values())

    @property
    def total_writes(self) -> int:
        """Rulebooks written to any of the memories since the run started."""
        return sum(m.total_writes for m in self.memories.values())

    @property
    def entries(self) -> list[str]:
        """Every stored rulebook, each prefixed with ``[environment]`` (for display and records)."""
        return [f"[{name}] {e}" for name, m in self.memories.items() for e in m.entries]

    def context(self) -> str | None:
        """Not defined for a bank: each task reads its own environment's memory."""
        raise TypeError("a MemoryBank keeps one memory per environment: use bank.for_task(task_id).context()")

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "bank", "memories": {name: m.state_dict() for name, m in self.memories.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a bank saved with the same environment names."""
        check_memory_state(state)
        if state.get("kind") != "bank":
            raise ValueError(
                f"checkpoint memory is one {state.get('kind')!r} memory; this run keeps one "
                f"memory per environment ({sorted(self.memories)})"
            )
        if set(state["memories"]) != set(self.memories):
            raise ValueError(
                f"checkpoint memory covers environments {sorted(state['memories'])}, this run {sorted(self.memories)}"
            )
        trial = {name: ReflectionMemory(m.kind, m.size, m.top_k) for name, m in self.memories.items()}
        for name, saved in state["memories"].items():  # all or nothing: load copies, then swap them in
            try:
                trial[name].load_state_dict(saved)
            except ValueError as e:
                raise ValueError(f"memories[{name!r}]: {e}") from e
        self.memories = trial


class SlotMemory(MemoryBank):
    """The reference code's memory: ``size`` slots dealt to rollouts in turn, never reset (saved as a bank; a resume
    deals from slot 0), so a rollout reads and writes only its own.

    Example:
        >>> mem = SlotMemory(2); mem.deal([("t", 0), ("u", 0), ("v", 0)]); mem.dealt[("v", 0)]  # in turn: 0, 1, 0
        '0'
    """

    def __init__(self, size: int = 1024) -> None:
        super().__init__([str(i) for i in range(size)], env_of=str)
        self.kind, self.cursor, self.dealt = "slots", 0, {}

    def deal(self, rollouts: Sequence[Any]) -> None:
        """Give each rollout (an Attempt, or a ``(task_id, index)`` pair), in order, the next slot."""
        keys = [r if isinstance(r, tuple) else (r.task_id, r.index) for r in rollouts]
        self.dealt = {key: str((self.cursor + i) % len(self.memories)) for i, key in enumerate(keys)}
        self.cursor = (self.cursor + len(keys)) % len(self.memories)

    def for_task(self, task_id: str, index: int = 0) -> ReflectionMemory:
        """The slot dealt to rollout ``index`` of ``task_id`` this step (KeyError: none was)."""
        return self.memories[self.dealt[(task_id, index)]]


def check_memory_state(state: Any) -> None:
    """Refuse a memory state (a checkpoint's ``memory.json``) that no memory could have written."""
    if not isinstance(state, dict):
        raise ValueError(
            f"memory state must be an object with kind, entries and total_writes, got "
            f"{type(state).__name__} {state!r:.60}"
        )
    if state.get("kind") == "bank":
        memories = state.get("memories")
        if not isinstance(memories, dict):
            raise ValueError(f"memory memories must map environment names to memories, got {memories!r:.60}")
        for name, saved in memories.items():
            try:
                check_memory_state(saved)
            except ValueError as e:
                raise ValueError(f"memories[{name!r}]: {e}") from e
        return
    check_choice("memory kind", state.get("kind"), MEMORY_KINDS)
    entries = state.get("entries")
    if not isinstance(entries, list):
        raise ValueError(
            f"memory entries must be a list of rulebooks (strings), got {type(entries).__name__} {entries!r:.60}"
        )
    for i, entry in enumerate(entries):
        if not isinstance(entry, str):
            raise ValueError(
                f"memory entries[{i}] must be a string (a rulebook), got {type(entry).__name__} {entry!r:.60}"
            )
    writes = state.get("total_writes")
    if not (isinstance(writes, int) and not isinstance(writes, bool) and writes >= len(entries)):
        raise ValueError(f"memory total_writes must be a whole number >= the {len(entries)} entries, got {writes!r}")
