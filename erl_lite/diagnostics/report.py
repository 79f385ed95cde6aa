"""A report on a finished or crashed run: which checks fired, when, and what to try.

:func:`diagnose` replays :data:`~erl_lite.diagnostics.checks.CHECKS` over a history (the same
judges a live run uses) and adds the pre-flight findings the run recorded; :func:`load_run`
reads a run folder for ``erl-lite doctor``. Departures from the paper: none.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from erl_lite.diagnostics.checks import CHECKS_BY_NAME, NOTE, WARNING, Finding, RunFacts, scan, train_records
from erl_lite.diagnostics.monitor import DIAGNOSTIC_KIND
from erl_lite.metric_names import DIAGNOSTICS_PREFIX, EVAL_SUCCESS


@dataclass
class Report:
    """What :func:`diagnose` found: ``findings`` (episodes, warnings and notes), the steps read, the run's end."""

    findings: list[Finding]
    steps: int
    max_steps: int | None = None
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, eval/success)
    source: str = ""
    settings_found: bool = True

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == WARNING]

    @property
    def healthy(self) -> bool:
        """No warning (notes, like ``solved``, are not faults)."""
        return not self.warnings

    def __str__(self) -> str:
        lines = [f"erl_lite doctor{': ' + self.source if self.source else ''}", self._summary()]
        if not self.settings_found:
            lines.append("  (no training_args.json or checkpoint found: the checks used the default settings)")
        for title, level in (("Warnings", WARNING), ("Notes", NOTE)):
            found = [f for f in self.findings if f.level == level]
            if found:
                lines.append(f"{title}:")
                lines += [_line(f) for f in found]
        if self.healthy:
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
        name = next((k[len(DIAGNOSTICS_PREFIX):] for k in r if k.startswith(DIAGNOSTICS_PREFIX)), None)
        if name is not None and name not in CHECKS_BY_NAME:
            step = int(r.get("step", 0))
            out.append(Finding(name, str(r.get("level", WARNING)), step, str(r.get("saw", r.get("message", ""))),
                               str(r.get("means", "")), str(r.get("tries", "")), step))
    return out


def diagnose(history: Any, settings: Any = None, source: str = "", settings_found: bool = True) -> Report:
    """The checks over a :class:`~erl_lite.history.History` (or its records); ``settings``: the run's config.

    Example:
        >>> from erl_lite.history import History
        >>> h = History()
        >>> for step in range(1, 5):
        ...     h.log({"step": step, "reflection/parse_rate": 0.0, "truncated/reflection": 1.0})
        >>> [(f.name, f.step, f.last_step) for f in diagnose(h).warnings]
        [('parse_rate', 3, 4), ('truncation', 3, 4)]
    """
    records = list(getattr(history, "records", history))
    facts = RunFacts.of(settings)
    train = train_records(records)
    evals = [(int(r["step"]), float(r[EVAL_SUCCESS])) for r in records
             if r.get("kind") == "eval" and isinstance(r.get(EVAL_SUCCESS), (int, float))]
    findings = recorded_preflight(records) + scan(records, facts)
    return Report(findings, len(train), facts.max_steps if settings is not None else None, evals, source,
                  settings_found)


def load_run(run_dir: str | os.PathLike) -> tuple[Any, dict[str, Any] | None, str]:
    """A run folder's history, settings (of the checkpoint :func:`~erl_lite.checkpoint.find_run` picks, else
    ``training_args.json``) and find_run's line."""
    from erl_lite.checkpoint import find_run
    from erl_lite.history import History

    folder = os.fspath(run_dir)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no run folder at {folder}")
    history, choice = History.load(folder), find_run(folder)
    args_file = os.path.join(folder, "training_args.json")
    if choice.state is not None:
        return history, choice.state.run["config"], choice.line
    if os.path.isfile(args_file):
        with open(args_file, encoding="utf-8") as f:
            return history, json.load(f), choice.line
    return history, None, choice.line


def doctor(run_dir: str | os.PathLike) -> Report:
    """:func:`diagnose` on a run folder (what ``erl-lite doctor RUN_DIR`` prints)."""
    history, settings, line = load_run(run_dir)
    return diagnose(history, settings, source=line, settings_found=settings is not None)
