"""How the ``erl-lite`` commands report an error a user can fix: one paragraph, exit code 2."""

from __future__ import annotations

import sys


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors a command prints as one paragraph instead of a traceback (a function: no torch on import)."""
    from erl_lite.checkpoint import CheckpointError

    return CheckpointError, ValueError, OSError


def usage_error(command: str, error: BaseException) -> int:
    """Print ``error`` as one paragraph, without a traceback; the exit code 2 (as argparse's)."""
    print(f"erl-lite {command}: error: {error}", file=sys.stderr)
    return 2
