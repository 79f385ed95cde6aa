"""Range-checked ``type=`` functions for command-line numbers and folders, shared by ``erl-lite`` and the scripts: a
bare ``type=int`` lets ``--steps 0`` through to code that fails minutes later; these refuse it while the arguments
are parsed, and argparse names the flag (exit code 2).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any, Callable

from erl_lite.config.checks import MAX_SEED
from erl_lite.config.field_types import expand_path


def _ranged(convert: Callable[[str], Any], kind: str, wanted: str, fits: Callable[[Any], bool]) -> Callable[[str], Any]:
    """A ``type=`` function: ``convert(text)`` when it ``fits``, else argparse's error naming ``wanted``."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not fits(value):
            raise argparse.ArgumentTypeError(f"must be a {kind} {wanted}, got {text!r}")
        return value

    parse.__name__ = kind
    return parse


def whole(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number in ``minimum..maximum`` (no upper end when ``maximum`` is None)."""
    wanted = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
    return _ranged(int, "whole number", wanted, lambda v: minimum <= v and (maximum is None or v <= maximum))


def number(minimum: float = 0.0, maximum: float | None = None, above: bool = False) -> Callable[[str], float]:
    """A finite number >= ``minimum`` (> it when ``above``), and <= ``maximum`` when given."""
    low = f"> {minimum:g}" if above else f">= {minimum:g}"
    wanted = low if maximum is None else f"{low} and <= {maximum:g}"
    fits = lambda v: math.isfinite(v) and (v > minimum if above else v >= minimum) and (maximum is None or v <= maximum)
    return _ranged(float, "number", wanted, fits)


def folder(text: str) -> str:
    """A folder to write into: not an existing file, and under a folder that exists or can be made. Nothing is
    created here (argparse also converts string defaults); :func:`erl_lite.run.checkpoint.ensure_writable` probes it."""
    text = expand_path(text)
    path = os.path.abspath(text)
    if os.path.exists(path) and not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
    above = os.path.dirname(path)
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder: {above!r} above it is a file")
    if not os.access(above, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {above!r} is not writable")
    return text


def embedded_build(text: str) -> str:
    """A folder holding a build of the embedded model (``scripts/build_embedded_model.py --out DIR``)."""
    from erl_lite.embedded.loading import check_build

    try:
        check_build(text)
    except FileNotFoundError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


#: A run's seed: what numpy, torch and ``transformers.set_seed`` all accept (0 .. 2**32 - 1).
seed = whole(0, MAX_SEED)
#: A share of something: a number in 0..1.
share = number(0.0, 1.0)


def distinct(values: list, flag: str, parser: argparse.ArgumentParser) -> list:
    """``values`` of a list flag (``--seeds 0 1 2``) when none repeats; else the parser's usage error."""
    twice = sorted({v for v in values if values.count(v) > 1}, key=str)
    if twice:
        parser.error(f"argument {flag}: each value once, got {' '.join(map(str, twice))} more than once")
    return values
