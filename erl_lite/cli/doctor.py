"""``erl-lite doctor RUN_DIR``: the health report on a run (:func:`erl_lite.diagnostics.doctor`). Exit code 0:
healthy (notes such as ``solved`` are not faults); 1: a check warned; 2: unreadable input, nothing to check,
or no erl_lite run (a TRL log or ``trainer_state.json``).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from erl_lite.cli.errors import usage_error, user_errors


def add_doctor_parser(sub: Any) -> None:
    p = sub.add_parser("doctor", help="which health checks fired on a run, when, and what to try")
    p.add_argument("run_dir", help="a run folder (output_dir / --out) holding history.jsonl, or that file")


def run_doctor(args: argparse.Namespace) -> int:
    from erl_lite.run.report import doctor

    try:
        with warnings.catch_warnings(record=True) as caught:  # a crash's torn last line: say so, read the rest
            warnings.simplefilter("always", UserWarning)
            report = doctor(args.run_dir)
    except user_errors() as e:
        return usage_error("doctor", e)
    for w in caught:
        print(f"erl-lite doctor: warning: {w.message}", file=sys.stderr)
    print(report)
    if report.unread is not None and not report.warnings:
        return usage_error("doctor", ValueError(f"{args.run_dir}: {report.unread}"))
    return 0 if report.healthy else 1
