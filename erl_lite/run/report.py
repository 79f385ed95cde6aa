"""A report on a run: :func:`diagnose` replays :data:`~erl_lite.diagnostics.checks.CHECKS` (a live run's judges) over
a history with its pre-flight findings; :func:`load_run` reads a run folder, refusing a bad record or setting by name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from erl_lite.config.field_types import conform, expand_path, field_types
from erl_lite.diagnostics.checks import CHECKS_BY_NAME, NOTE, WARNING, Finding, RunFacts, scan, train_records
from erl_lite.diagnostics.monitor import DIAGNOSTIC_KIND
from erl_lite.history import History, record_problem
from erl_lite.jsonio import read_json
from erl_lite.metric_names import DIAGNOSTICS_PREFIX, EVAL_SUCCESS, GRAD_NORM, KL
from erl_lite.metrics import TRL_NAMES


@dataclass
class Report:
    """What :func:`diagnose` found: ``findings`` (episodes, warnings and notes), the steps read, the run's end."""

    findings: list[Finding]
    steps: int
    max_steps: int | None = None
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, eval/success)
    source: str = ""
    settings_found: bool = True
    unread: str | None = None  # why no check had anything to read (then the report is no clean bill)

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == WARNING]

    @property
    def healthy(self) -> bool:
        """No warning (notes, like ``solved``, are not faults), and the checks had something to read."""
        return not self.warnings and self.unread is None

    def __str__(self) -> str:
        lines = [f"erl_lite doctor{': ' + self.source if self.source else ''}", self._summary()]
        if not self.settings_found:
            lines.append("  (no training_args.json or checkpoint found: the checks used the default settings)")
        for title, level in (("Warnings", WARNING), ("Notes", NOTE)):
            found = [f for f in self.findings if f.level == level]
            if found:
                lines.append(f"{title}:")
                lines += [_line(f) for f in found]
        if self.unread is not None:
            lines.append(f"Not judged: {self.unread}.")
        elif self.healthy:
            lines.append(f"No warning: none of the {len(CHECKS_BY_NAME)} checks fired on {self.steps} steps.")
        return "\n".join(lines)

    def _summary(self) -> str:
        ran = f"{self.steps} training steps" + (f" of {self.max_steps}" if self.max_steps else "")
        if self.max_steps and self.steps < self.max_steps:
            ran += f" (it stopped, or is still running, at step {self.steps})"
        if self.evals:
            ran += f"; first-attempt eval success {self.evals[0][1]:.2f} (step {self.evals[0][0]})"
            ran += f" -> {self.evals[-1][1]:.2f} (step {self.evals[-1][0]})" if len(self.evals) > 1 else ""
        return "  " + ran


def _line(f: Finding) -> str:
    when = f"step {f.step}" if f.step == (f.last_step or f.step) else f"steps {f.step}-{f.last_step}"
    return f"  - {f.name} ({when}): {f.saw}. {f.means}. Try: {f.tries}."


def recorded_preflight(records: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """The pre-flight findings a run logged (diagnostic events that no step check names)."""
    out = []
    for r in records:
        if r.get("kind") != DIAGNOSTIC_KIND:
            continue
        name = next((k[len(DIAGNOSTICS_PREFIX) :] for k in r if k.startswith(DIAGNOSTICS_PREFIX)), None)
        if name is not None and name not in CHECKS_BY_NAME:
            step = int(r.get("step", 0))
            out.append(
                Finding(
                    name=name,
                    level=str(r.get("level", WARNING)),
                    step=step,
                    saw=str(r.get("saw", r.get("message", ""))),
                    means=str(r.get("means", "")),
                    tries=str(r.get("tries", "")),
                    last_step=step,
                )
            )
    return out


def diagnose(history: Any, settings: Any = None, source: str = "", settings_found: bool = True) -> Report:
    """The checks over a :class:`~erl_lite.history.History`, its records, or a run folder or ``history.jsonl``
    path (read with its settings by :func:`load_run`); ``settings``: the run's config.

    Example:
        >>> from erl_lite.history import History
        >>> h = History()
        >>> for step in range(1, 5):
        ...     h.log({"step": step, "reflection/parse_rate": 0.0, "truncated/reflection": 1.0})
        >>> [(f.name, f.step, f.last_step) for f in diagnose(h).warnings]
        [('parse_rate', 3, 4), ('truncation', 3, 4)]
    """
    if isinstance(history, (str, os.PathLike)):
        history, found, line = load_run(history)
        source = source or line
        settings, settings_found = (settings, True) if settings is not None else (found, found is not None)
    records = list(getattr(history, "records", history))
    for i, problem in enumerate(map(record_problem, records)):
        if problem is not None:
            raise ValueError(f"{source or 'history'} record {i + 1} (of {len(records)}): {problem}")
    facts = RunFacts.of(settings)
    train = train_records(records)
    evals = [
        (int(r["step"]), float(r[EVAL_SUCCESS]))
        for r in records
        if r.get("kind") == "eval" and isinstance(r.get(EVAL_SUCCESS), (int, float))
    ]
    unread = _unread(train)  # then the step checks judge nothing: kl alone may be any trainer's
    findings = recorded_preflight(records) + ([] if unread else scan(records, facts))
    return Report(
        findings=findings,
        steps=len(train),
        max_steps=facts.max_steps if settings is not None else None,
        evals=evals,
        source=source,
        settings_found=settings_found,
        unread=unread,
    )


def _unread(train: Sequence[Mapping[str, Any]]) -> str | None:
    """Why no check has anything to read in these training records, or None when one has."""
    shared = {KL, GRAD_NORM, *TRL_NAMES}  # TRL's trainers log these too: alone, they may be any trainer's
    own = {key for check in CHECKS_BY_NAME.values() for key in check.reads} - shared
    if any(isinstance(r.get(key), (int, float)) for r in train for key in own):
        return None
    keys = sorted({k for r in train for k in r} - {"kind"})
    return f"none of the {len(CHECKS_BY_NAME)} checks had anything to read: " + (
        f"the {len(train)} training records hold only {', '.join(keys[:8])} (not an erl_lite history)"
        if train
        else "the history has no training record"
    )


def load_run(run_dir: str | os.PathLike) -> tuple[Any, dict[str, Any] | None, str]:
    """A run folder's (or its ``history.jsonl``'s) history, settings (of the checkpoint
    :func:`~erl_lite.run.checkpoint.find_run` picks, else ``training_args.json``) and find_run's line."""
    from erl_lite.run.checkpoint import find_run

    path = expand_path(run_dir)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no run folder or history file at {path}")
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    trl_state = os.path.join(folder, "trainer_state.json")  # transformers' Trainer writes it, erl_lite never
    if os.path.isfile(trl_state) and (
        path.endswith("trainer_state.json")
        or os.path.isdir(path)
        and not os.path.exists(os.path.join(folder, "history.jsonl"))
    ):
        raise ValueError(
            f"{trl_state} is a transformers (or TRL) Trainer's record, not an erl_lite run: the "
            "doctor's checks read erl_lite's history.jsonl and its settings"
        )
    history, choice = History.load(path), find_run(folder)
    args_file = os.path.join(folder, "training_args.json")
    if choice.state is not None:
        return history, _settings(choice.state.run["config"], str(choice.state.path)), choice.line
    if os.path.isfile(args_file):
        return history, _settings(read_json(args_file), args_file), choice.line
    return history, None, choice.line


def _settings(value: Any, where: str) -> dict[str, Any]:
    """A run's saved settings, refused naming ``where`` and the field when one the checks read has the wrong kind."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: settings must be a JSON object of fields, got {type(value).__name__} {value!r:.40}")
    for name, hint in field_types(RunFacts).items():
        try:
            conform(name, value.get(name), hint | None, "settings")
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    return value


def doctor(run_dir: str | os.PathLike) -> Report:
    """:func:`diagnose` on a run folder (what ``erl-lite doctor RUN_DIR`` prints)."""
    return diagnose(run_dir)
