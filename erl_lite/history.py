"""The run's history: ``history.jsonl`` (one record per step and evaluation, keyed as
:data:`erl_lite.metrics.METRIC_GLOSSARY`) and ``samples.jsonl`` (every ``sample_every``-th StepRecord)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from erl_lite.config.field_types import expand_path, float_or_none
from erl_lite.jsonio import read_jsonl
from erl_lite.metric_names import current_names


@dataclass
class History:
    """Metrics records in order, optionally mirrored to ``<out_dir>/history.jsonl``."""

    records: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    out_dir: str | None = None
    reporter: Any = field(default=None, repr=False, compare=False)  # gets reporter.log(record, step_record)

    def log(self, metrics: dict[str, Any], kind: str = "train", step_record: Any = None) -> None:
        """Append one record (to ``history.jsonl`` too when ``out_dir`` is set) and hand it to the reporter."""
        record = {"kind": kind, **metrics}
        self.records.append(record)
        self._append("history.jsonl", record)
        if self.reporter is not None:
            self.reporter.log(record, step_record)

    def close_reporter(self) -> None:
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
        """Steps and values of ``key`` over the records of ``kind`` where it is a number, not NaN (a gap, as in the
        plots); a record without ``"step"`` counts by its place among them."""
        steps, values = [], []
        for i, row in enumerate(self.of_kind(kind), start=1):
            if (value := _number(row.get(key))) is not None:
                step = _number(row.get("step"))
                steps.append(int(step) if step is not None else i)
                values.append(value)
        return steps, values

    def last(self, key: str, kind: str = "train", default: float | None = None) -> float | None:
        _, values = self.series(key, kind)
        return values[-1] if values else default

    def rewrite(self) -> None:
        """Write both files anew from memory (after a resume or a rollback)."""
        if self.out_dir is None:
            return
        os.makedirs(self.out_dir, exist_ok=True)
        for name, rows in (("history.jsonl", self.records), ("samples.jsonl", self.samples)):
            path = os.path.join(self.out_dir, name)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(row) + "\n" for row in rows)
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename replaces the old file
            os.replace(path + ".tmp", path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "History":
        """Load from a run folder or a ``history.jsonl``; a last line a crash cut off is dropped with a warning.
        Keys an older erl_lite wrote read in today's names (:func:`~erl_lite.metric_names.current_names`)."""
        p = Path(expand_path(path))
        if not p.exists():  # else "run/typo" would read run/history.jsonl, another run's
            raise FileNotFoundError(f"no run folder or history file at {p}")
        folder = p if p.is_dir() else p.parent
        hist_file = p if p.is_file() else folder / "history.jsonl"
        if not hist_file.exists():
            raise FileNotFoundError(f"no history.jsonl at {hist_file}")
        samples_file = folder / "samples.jsonl"
        samples = read_jsonl(samples_file, "warn", _not_an_object) if samples_file.exists() else []
        records = read_jsonl(hist_file, "warn", record_problem)
        return cls(records=[current_names(r) for r in records], samples=[current_names(r) for r in samples])


def _not_an_object(row: Any) -> str | None:
    return None if isinstance(row, dict) else f"a record must be a JSON object, got {type(row).__name__} {row!r:.40}"


def record_problem(row: Any) -> str | None:
    """What keeps ``row`` from being a history record (an object with a whole-number ``step``), or None."""
    step = row.get("step") if isinstance(row, dict) else None
    if isinstance(row, dict) and not (isinstance(step, int) and not isinstance(step, bool)):
        return f"a record needs a whole-number 'step', got {step!r:.40}"
    return _not_an_object(row)


def _number(value: Any) -> float | None:
    x = float_or_none(value)
    return None if x is None or math.isnan(x) else x
