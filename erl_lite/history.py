"""The run's history: one metrics record per step, plus sampled full step records.

In the output folder: ``history.jsonl``, one object per training step (``"kind": "train"``) and per
evaluation (``"kind": "eval"``), keys as in :data:`erl_lite.metrics.METRIC_GLOSSARY`; and
``samples.jsonl``, every ``sample_every``-th :class:`~erl_lite.records.StepRecord` in full. Each
record also goes to :attr:`History.reporter` (the trackers of ``report_to``) when set.
Departures from the paper: none.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from erl_lite.jsonio import read_jsonl
from erl_lite.metrics import METRIC_GLOSSARY

#: Re-exported for readers of histories; its one home is :mod:`erl_lite.metrics`.
__all__ = ["History", "METRIC_GLOSSARY"]


@dataclass
class History:
    """Metrics records in order, optionally mirrored to ``<out_dir>/history.jsonl``.

    Example:
        >>> h = History()
        >>> h.log({"step": 1, "reward/first": 0.5})
        >>> h.log({"step": 1, "eval/success": 0.25}, kind="eval")
        >>> h.series("reward/first")
        ([1], [0.5])
        >>> h.series("eval/success", kind="eval")
        ([1], [0.25])
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    out_dir: str | None = None
    reporter: Any = field(default=None, repr=False, compare=False)
    """Receives every logged record: ``reporter.log(record, step_record)`` (see
    :class:`erl_lite.integrations.reporting.Reporter`); None sends nothing anywhere."""

    def log(self, metrics: dict[str, Any], kind: str = "train", step_record: Any = None) -> None:
        """Append one record (and one line to ``history.jsonl`` when ``out_dir`` is set), and
        hand it to the reporter with the iteration's :class:`~erl_lite.records.StepRecord`
        (whose texts make the trackers' sample tables), when there is one."""
        record = {"kind": kind, **metrics}
        self.records.append(record)
        self._append("history.jsonl", record)
        if self.reporter is not None:
            self.reporter.log(record, step_record)

    def close_reporter(self) -> None:
        """Send what the reporter still holds and close its trackers (the end of training)."""
        if self.reporter is not None:
            self.reporter.close()

    def log_sample(self, step_record: dict[str, Any]) -> None:
        """Keep a full step record (from :meth:`StepRecord.to_dict`)."""
        self.samples.append(step_record)
        self._append("samples.jsonl", step_record)

    def _append(self, name: str, obj: dict[str, Any]) -> None:
        if self.out_dir is None:
            return
        os.makedirs(self.out_dir, exist_ok=True)
        with open(os.path.join(self.out_dir, name), "a", encoding="utf-8") as f:
            f.write(json.dumps(obj) + "\n")

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("kind", "train") == kind]

    def series(self, key: str, kind: str = "train") -> tuple[list[int], list[float]]:
        """Steps and values of ``key`` over the records of ``kind`` that have it."""
        rows = [r for r in self.of_kind(kind) if r.get(key) is not None]
        return [int(r["step"]) for r in rows], [float(r[key]) for r in rows]

    def last(self, key: str, kind: str = "train", default: float | None = None) -> float | None:
        _, values = self.series(key, kind)
        return values[-1] if values else default

    def rewrite(self) -> None:
        """Write both files anew from memory (after a resume or a rollback)."""
        if self.out_dir is None:
            return
        os.makedirs(self.out_dir, exist_ok=True)
        for name, rows in (("history.jsonl", self.records), ("samples.jsonl", self.samples)):
            _write_jsonl(os.path.join(self.out_dir, name), rows)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "History":
        """Load from a run folder or from a ``history.jsonl`` file. A last line that a crash cut
        off is dropped with a warning naming the file and line; a damaged line elsewhere is a
        ValueError naming them (:func:`erl_lite.jsonio.read_jsonl`)."""
        p = Path(path)
        folder = p if p.is_dir() else p.parent
        hist_file = p if p.is_file() else folder / "history.jsonl"
        if not hist_file.exists():
            raise FileNotFoundError(f"no history.jsonl at {hist_file}")
        samples_file = folder / "samples.jsonl"
        return cls(
            records=_read_jsonl(hist_file),
            samples=_read_jsonl(samples_file) if samples_file.exists() else [],
        )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    # A run that crashed mid-write leaves its last line cut off: drop it with a warning, so the
    # history up to then can still be drawn; a damaged line elsewhere is an error naming it.
    return read_jsonl(path, torn_tail="warn")


def _write_jsonl(path: str, rows: Iterable[dict[str, Any]]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)
