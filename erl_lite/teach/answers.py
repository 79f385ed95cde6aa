"""Reading and answering a notebook exercise: a ✓ or a ✗ with a hint (never an exception but for :func:`require`)."""

from __future__ import annotations

import contextlib
import io
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

#: The precision the numeric exercises ask for (a check accepts ±0.001).
DECIMALS = 3
NO_ANSWER = (
    f"No answer yet: replace the `None` (or `...`) with your answer, numbers to {DECIMALS} decimal places, "
    "and run the cell again."
)


def ok(message: str) -> bool:
    print(f"✓ {message}")
    return True


def wrong(message: str, hint: str) -> bool:
    print(f"✗ {message}\n  Hint: {hint}")
    return False


def require(check: Callable[..., bool], *args: Any, **kwargs: Any) -> None:
    """Run a ``check_*`` as a graded test (assignments/): silent when right, else AssertionError with its hint."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        if not check(*args, **kwargs):
            raise AssertionError(printed.getvalue().strip())


def missing(answer: Any) -> bool:
    """Whether the answer cell still holds its ``None`` or ``...`` placeholder."""
    return answer is None or answer is Ellipsis


def numbers_of(answer: Any) -> list[float] | None:
    """``answer`` as a list of floats, or None when it is not a sequence of numbers."""
    if hasattr(answer, "tolist"):  # a tensor or an array
        answer = answer.tolist()
    try:
        return [float(x) for x in answer]
    except (TypeError, ValueError):
        return None


def close(a: Sequence[float], b: Sequence[float], tol: float) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b))


def positions(answer: Any) -> tuple[list[int] | None, str]:
    """``answer`` as sorted positions, or (None, why not): a list, tuple, set or range of ints. Strict on purpose: a
    string, floats or booleans would otherwise slip through ``int()``."""
    if hasattr(answer, "tolist"):  # a tensor or an array of positions
        answer = answer.tolist()
    if isinstance(answer, (str, bytes)) or not isinstance(answer, (list, tuple, set, frozenset, range)):
        return None, f"expected a list of integer positions, got {type(answer).__name__} {answer!r}."
    for x in answer:
        if isinstance(x, bool):
            return None, (
                f"{x!r} is a boolean, not a position; list the positions themselves "
                "(a mask like [False, True] is not the answer)."
            )
        if not isinstance(x, numbers.Integral):
            return None, f"{x!r} is not an integer position."
        if x < 0:
            return None, f"{x!r} is negative; positions count from 0."
    picked = [int(x) for x in answer]
    if len(set(picked)) != len(picked):
        return None, f"{answer!r} names a position twice."
    return sorted(picked), ""


def rounding_hint(values: Sequence[float], expected: Sequence[float]) -> str | None:
    """The hint for a right method rounded too coarsely (0.63 for 0.625; 0 for 0.5 is another method), or None."""
    if len(values) != len(expected) or all(math.isclose(v, round(v)) for v in values):
        return None
    for places in range(DECIMALS - 1, 0, -1):
        half = 0.5 * 10**-places + 1e-6  # rounded to `places`: within half a unit (+ float32 slack of the losses)
        if all(math.isclose(v, round(v, places)) and abs(v - e) <= half for v, e in zip(values, expected)):
            return f"your method is right, only rounded: give {DECIMALS} decimal places."
    return None
