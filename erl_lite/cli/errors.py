"""How the ``erl-lite`` commands report an error a user can fix (one paragraph, exit 2) and read a run folder."""

from __future__ import annotations

import sys
import warnings
from typing import Any


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors a command prints as one paragraph instead of a traceback (a function: no torch on import)."""
    from erl_lite.run.state import CheckpointError

    return CheckpointError, ValueError, OSError


def read_run(command: str, path: str) -> Any:
    """:func:`erl_lite.run.checkpoint.find_run` on ``path``: its line first, then its warnings, on stderr."""
    from erl_lite.run.checkpoint import find_run

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        choice = find_run(path)
    for text in [choice.line] + [f"warning: {w.message}" for w in caught]:
        print(f"erl-lite {command}: {text}", file=sys.stderr)
    return choice


def usage_error(command: str, error: BaseException) -> int:
    """Print ``error`` as one paragraph, without a traceback; the exit code 2 (as argparse's)."""
    print(f"erl-lite {command}: error: {error}", file=sys.stderr)
    return 2
