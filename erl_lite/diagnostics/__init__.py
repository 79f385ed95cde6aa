"""Is it learning? Health checks that name the silent failures of small-GPU RL and of ERL: :mod:`~.checks` (the
rules on each step's record), :mod:`~.preflight` (before the first step), :mod:`~.monitor` (a live run: print, log,
stop) and :mod:`~.report` (``erl-lite doctor``).
"""

from erl_lite.diagnostics.checks import CHECKS, CHECKS_BY_NAME, Check, Finding, RunFacts, scan
from erl_lite.diagnostics.monitor import DiagnosticError, Monitor
from erl_lite.diagnostics.report import Report, diagnose, doctor

__all__ = ["CHECKS", "CHECKS_BY_NAME", "Check", "DiagnosticError", "Finding", "Monitor", "Report", "RunFacts",
           "diagnose", "doctor", "scan"]
