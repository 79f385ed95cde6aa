"""The live side of the checks: after each step, print what began, log it, and stop the run if asked.

``ERLConfig.diagnostics``: ``warn`` prints each finding once per episode (above the progress bars, via ``tqdm.write``)
and logs it to ``history.jsonl`` as a ``diagnostic`` event (trackers get ``diagnostics/<name>``); ``raise`` does the
same, then raises :class:`DiagnosticError` for a warning (the trainer saves the finished step first); ``off``: nothing.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from erl_lite.diagnostics.checks import WARNING, Finding, RunFacts, fired_at

DIAGNOSTIC_KIND = "diagnostic"


class DiagnosticError(RuntimeError):
    """A check fired under ``ERLConfig(diagnostics="raise")``; ``findings`` holds what fired."""

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__("\n".join(f.message() for f in findings))
        self.findings = findings


def _print(text: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(text, file=sys.stderr)  # above any open bar, not inside it


class Monitor:
    """Runs the checks for one trainer; ``level`` is read at each call, so changing the setting later counts."""

    def __init__(
        self, level: Callable[[], str], facts: RunFacts, show: Callable[[str], None] = _print, is_main: bool = True
    ) -> None:
        self.level, self.facts, self.show, self.is_main = level, facts, show, is_main
        self.pending: list[Finding] = []  # pre-flight findings, logged when the run's history opens

    def preflight(self, findings: Callable[[], list[Finding]]) -> None:
        """Unless ``off``: compute and show the pre-flight findings (a warning raises under ``raise``); log at start."""
        if self.level() != "off":  # off: not even computed (they render the chat template)
            self.pending = findings()
            self._tell(self.pending)

    def start(self, history: Any) -> None:
        """Record the pre-flight findings in a fresh run's history (once)."""
        for finding in self.pending:
            history.log(finding.to_record(), kind=DIAGNOSTIC_KIND)
        self.pending = []

    def after_step(self, history: Any) -> list[Finding]:
        """The findings that begin at the newest step: logged, shown, and raised under ``raise``."""
        if self.level() == "off":
            return []
        found = fired_at(history.records, self.facts)
        for finding in found:
            history.log(finding.to_record(), kind=DIAGNOSTIC_KIND)
        self._tell(found)
        return found

    def _tell(self, found: list[Finding]) -> None:
        if self.is_main:  # DDP: every process judges the same global records; one prints
            for finding in found:
                self.show(finding.message())
        warnings = [f for f in found if f.level == WARNING]
        if warnings and self.level() == "raise":
            raise DiagnosticError(warnings)
