"""Is it learning? Health checks that name the silent failures of small-GPU RL and of ERL: :mod:`~.checks` (the
rules on each step's record), :mod:`~.preflight` (before the first step), :mod:`~.monitor` (a live run: print, log,
stop). The report on a run's folder (``erl-lite doctor``) is :mod:`erl_lite.run.report`.
"""

from erl_lite.diagnostics.checks import CHECKS, CHECKS_BY_NAME, Check, Finding, RunFacts, scan
from erl_lite.diagnostics.monitor import DiagnosticError, Monitor

__all__ = ["CHECKS", "CHECKS_BY_NAME", "Check", "DiagnosticError", "Finding", "Monitor", "RunFacts", "scan"]
