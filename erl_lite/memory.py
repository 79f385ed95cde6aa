"""Reflection memory: rulebooks that worked, carried across episodes.

Rules (paper Algorithm 2 and its released code):

* memory is written only when a second attempt *succeeded* (``r2 >= τ``; the paper's literal
  ``r2 > τ`` could never fire with 0/1 rewards and τ = 1, which is the peer package's bug);
* memory is read only by the reflector, as the base instructions it improves on — it is never
  shown to a first attempt, in training or evaluation;
* evaluation never writes to it (the trainer's ``evaluate`` does not receive it at all).

Two kinds: ``single`` — the paper's one plain-text slot, overwritten by the latest successful
rulebook; ``fifo`` — a queue of up to ``size`` rulebooks of which the ``top_k`` most recent
are shown (the peer package's scheme, offered for comparison).

Departures from the paper: the ``fifo`` kind is an addition; ``single`` is the default.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class ReflectionMemory:
    """Holds successful rulebooks.

    Example:
        >>> mem = ReflectionMemory()
        >>> mem.context() is None
        True
        >>> mem.maybe_store("A is you. C is a hole.", reward=1.0, threshold=1.0)
        True
        >>> mem.maybe_store("worse rulebook", reward=0.0, threshold=1.0)
        False
        >>> mem.context()
        'A is you. C is a hole.'
    """

    def __init__(self, kind: str = "single", size: int = 50, top_k: int = 3) -> None:
        if kind not in ("single", "fifo"):
            raise ValueError(f"memory kind must be 'single' or 'fifo', got {kind!r}")
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
        if reward < threshold or not rulebook.strip():
            return False
        self._entries.append(rulebook)
        self.total_writes += 1
        return True

    def context(self) -> str | None:
        """What the reflector sees as its base instructions, or None when empty.

        ``single``: the stored rulebook. ``fifo``: the ``top_k`` most recent, newest last,
        numbered so the reflector can tell them apart.
        """
        if not self._entries:
            return None
        if self.kind == "single":
            return self._entries[-1]
        recent = list(self._entries)[-self.top_k:]
        if len(recent) == 1:
            return recent[0]
        return "\n\n".join(f"[Rulebook {i + 1}]\n{r}" for i, r in enumerate(recent))

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "size": self.size, "top_k": self.top_k,
                "entries": self.entries, "total_writes": self.total_writes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["kind"] != self.kind:
            raise ValueError(f"checkpoint memory is {state['kind']!r}, this run uses {self.kind!r}")
        self._entries = deque(state["entries"], maxlen=self.size)
        self.total_writes = int(state["total_writes"])
