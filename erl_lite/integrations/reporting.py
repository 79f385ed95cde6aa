"""Experiment trackers: the run's history sent to TensorBoard, Trackio or Weights & Biases.

``ERLConfig.report_to`` names the trackers, ``logging_steps`` how often (TRL's meanings); train records
go averaged since the last send, with a ``samples`` table, eval records as they come. Not transformers'
tracker callbacks (they log no tables), but their run folder, ``train/global_step`` and ``WANDB_PROJECT``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from typing import Any, Protocol

from erl_lite.config import ERLConfig
from erl_lite.config.checks import REPORT_TO_BACKENDS
from erl_lite.metric_names import STEP
from erl_lite.metrics import is_point_in_time
from erl_lite.records import Attempt, StepRecord, retry_of_first

#: The table (markdown text in TensorBoard) sent with each train send, one row per first attempt.
SAMPLES_TABLE = "samples"
SAMPLE_COLUMNS = ["step", "task_id", "index", "r1", "first_attempt", "reflection", "r2", "second_attempt", "memory"]
DEFAULT_PROJECT = "erl-lite"


def _installed(name: str) -> bool:
    if name in sys.modules:  # imported already (or replaced by a test double)
        return sys.modules[name] is not None
    return importlib.util.find_spec(name) is not None


def resolve_report_to(report_to: list[str]) -> list[str]:
    """The trackers of ``report_to`` (``["all"]``: every installed one); ImportError for one not installed."""
    if report_to == ["all"]:
        return [name for name in REPORT_TO_BACKENDS if _installed(name)]
    for name in report_to:
        if not _installed(name):
            raise ImportError(
                f"ERLConfig.report_to names {name!r}, which is not installed: "
                f"pip install 'erl-lite[{name}]' (or pip install {name})"
            )
    return list(report_to)


def logging_interval(logging_steps: int | float, max_steps: int) -> int:
    """Iterations between two sends: ``logging_steps``, or that fraction of ``max_steps`` when below 1 (rounded up)."""
    if logging_steps < 1:
        return max(1, math.ceil(logging_steps * max_steps))
    return int(logging_steps)


class Tracker(Protocol):
    def log_scalars(self, values: dict[str, float], step: int) -> None: ...

    def log_table(self, name: str, columns: list[str], rows: list[list[Any]], step: int) -> None: ...

    def close(self) -> None: ...


class TensorBoardTracker:
    """Scalars with ``add_scalar``; the table as markdown with ``add_text``."""

    def __init__(self, config: ERLConfig) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations.integration_utils import default_logdir

        log_dir = os.getenv("TENSORBOARD_LOGGING_DIR")
        if log_dir is None and config.output_dir:
            log_dir = os.path.join(config.output_dir, default_logdir())
        self.writer = SummaryWriter(log_dir=log_dir)  # None: SummaryWriter's ./runs/<date>_<host>

    def log_scalars(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_table(self, name: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        self.writer.add_text(name, markdown_rows(columns, rows), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

    def reopen(self) -> None:
        """Write on in the same run folder after :meth:`close`: the SummaryWriter opens a new event file there."""


class WandbTracker:
    """``wandb.log`` at ``train/global_step``; reuses a user's run (left open), else finishes and resumes its own."""

    def __init__(self, config: ERLConfig) -> None:
        import wandb

        self.wandb, self.config = wandb, config
        self.owned, self.run_id = False, None  # a run erl_lite started, and its id (to resume it)
        self.reopen()

    def reopen(self) -> None:
        """Start the run, or continue it after :meth:`close` (the next ``train()`` of the trainer)."""
        wandb, config = self.wandb, self.config
        if wandb.run is None:
            resume = {"id": self.run_id, "resume": "allow"} if self.run_id else {}
            run = wandb.init(
                project=project_name(config, "WANDB_PROJECT"), name=_run_name(config), config=config.to_dict(), **resume
            )
            self.owned, self.run_id = True, getattr(run if run is not None else wandb.run, "id", None)
        else:
            wandb.config.update(config.to_dict(), allow_val_change=True)
        wandb.define_metric("train/global_step")
        wandb.define_metric("*", step_metric="train/global_step", step_sync=True)

    def log_scalars(self, values: dict[str, float], step: int) -> None:
        self.wandb.log({**values, "train/global_step": step})

    def log_table(self, name: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        self.wandb.log({name: self.wandb.Table(dataframe=_frame(columns, rows)), "train/global_step": step})

    def close(self) -> None:
        if self.owned and self.wandb.run is not None:
            self.wandb.finish()


class TrackioTracker:
    """``trackio.log`` at the record's step; tables as ``trackio.Table``."""

    def __init__(self, config: ERLConfig) -> None:
        import trackio

        self.trackio, self.config, self.name = trackio, config, _run_name(config)
        self.reopen()

    def reopen(self) -> None:
        """Start the run, or continue it under the same name after :meth:`close`."""
        run = self.trackio.init(
            project=project_name(self.config, "TRACKIO_PROJECT"),
            name=self.name,
            config=self.config.to_dict(),
            resume="allow",
        )
        self.name = self.name or getattr(run, "name", None)  # Trackio names an unnamed run itself

    def log_scalars(self, values: dict[str, float], step: int) -> None:
        self.trackio.log(values, step=step)

    def log_table(self, name: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        # Trackio reads column names from a DataFrame only (its ``columns=`` is ignored)
        self.trackio.log({name: self.trackio.Table(dataframe=_frame(columns, rows))}, step=step)

    def close(self) -> None:
        self.trackio.finish()


def project_name(config: ERLConfig, variable: str) -> str:
    """The tracker project: ``config.project``, else the environment ``variable``, else :data:`DEFAULT_PROJECT`."""
    return config.project or os.getenv(variable) or DEFAULT_PROJECT


TRACKERS: dict[str, type] = {"tensorboard": TensorBoardTracker, "trackio": TrackioTracker, "wandb": WandbTracker}


def _run_name(config: ERLConfig) -> str | None:
    return os.path.basename(os.path.normpath(config.output_dir)) if config.output_dir else None


def _frame(columns: list[str], rows: list[list[Any]]) -> Any:
    import pandas as pd  # a dependency of datasets

    return pd.DataFrame(rows, columns=columns)


def conversation(attempt: Attempt) -> str:
    """An attempt's turns after the system prompt, one ``role: text`` block each."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in attempt.messages if m["role"] != "system")


def sample_rows(record: StepRecord) -> list[list[Any]]:
    """The rows of the ``samples`` table (columns :data:`SAMPLE_COLUMNS`) of one iteration."""
    memory = "\n---\n".join(record.memory_after)
    return [
        [
            record.step,
            a.task_id,
            a.index,
            a.reward,
            conversation(a),
            r.reflection.text if r is not None and r.reflection is not None else "",
            r.second.reward if r is not None else None,
            conversation(r.second) if r is not None else "",
            memory,
        ]
        for a, r in zip(record.first_attempts, retry_of_first(record.first_attempts, record.retries))
    ]


def markdown_rows(columns: list[str], rows: list[list[Any]]) -> str:
    """Rows as markdown for TensorBoard's Text tab; long texts as indented code blocks."""
    return "\n\n---\n\n".join("\n\n".join(map(_markdown_cell, columns, row)) for row in rows)


def _markdown_cell(name: str, value: Any) -> str:
    text = "" if value is None else str(value)
    if "\n" in text or len(text) > 80:
        return f"**{name}**:\n\n" + "\n".join("    " + line for line in text.split("\n"))
    return f"**{name}**: {text}"


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items() if k not in (STEP, "kind") and isinstance(v, (int, float))}


def _window(records: list[dict[str, float]]) -> dict[str, float]:
    """Each key's mean over the records that have it (the latest for point-in-time keys)."""
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for r in records for k in r):
        values = [r[key] for r in records if key in r]
        out[key] = values[-1] if is_point_in_time(key) else math.fsum(values) / len(values)
    return out


class Reporter:
    """Forwards history records to the named trackers, every ``logging_steps`` iterations."""

    def __init__(self, config: ERLConfig, names: list[str], trackers: dict[str, type] | None = None) -> None:
        self.config, self.names = config, list(names)
        self._kinds = trackers or TRACKERS
        self.trackers: list[Tracker] = []
        self._pending: list[dict[str, float]] = []
        self._pending_step = 0
        self._closed: dict[str, Tracker] = {}  # closed trackers by name, reopened on the next send

    def log(self, record: dict[str, Any], step_record: StepRecord | None = None) -> None:
        """Take one history record (with its ``kind`` and ``step``) and send what is due."""
        step = int(record.get(STEP, 0))
        if record.get("kind", "train") != "train":
            self._send(_scalars(record), step)
            return
        self._pending.append(_scalars(record))
        self._pending_step = step
        interval = logging_interval(self.config.logging_steps, self.config.max_steps)
        if step % interval == 0 or step >= self.config.max_steps:
            self._send(_window(self._pending), step)
            self._pending = []
            if step_record is not None:
                rows = sample_rows(step_record)
                for tracker in self._open():
                    tracker.log_table(SAMPLES_TABLE, SAMPLE_COLUMNS, rows, step)

    def close(self) -> None:
        """Send what is pending and close the trackers; the next send reopens them on their run."""
        self._send(_window(self._pending), self._pending_step)  # nothing pending: nothing sent, nothing reopened
        self._pending = []
        for tracker in self.trackers:
            tracker.close()
        self._closed = dict(zip(self.names, self.trackers))
        self.trackers = []

    def _send(self, values: dict[str, float], step: int) -> None:
        if values:
            for tracker in self._open():
                tracker.log_scalars(values, step)

    def _open(self) -> list[Tracker]:
        if not self.trackers:
            self.trackers = [self._reopened(name) for name in self.names]
        return self.trackers

    def _reopened(self, name: str) -> Tracker:
        """Tracker ``name``: the one :meth:`close` closed, reopened on its run, else a new one."""
        old = self._closed.pop(name, None)
        if old is not None and hasattr(old, "reopen"):
            old.reopen()
            return old
        return self._kinds[name](self.config)
