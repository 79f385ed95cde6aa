"""Reading JSON and JSON-lines files with errors that name the file, the line and the column, also for bytes
that are not UTF-8 and nesting too deep to parse (``json.loads`` and ``datasets`` name no file)."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Callable, Literal


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in ``path``; ValueError ``"<path>:<line>:<column>: not valid JSON (...)"``."""
    try:
        return json.loads(_text(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{os.fspath(path)}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise ValueError(f"{os.fspath(path)}: not valid JSON (nested too deep)") from None


def _text(path: str | os.PathLike) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{os.fspath(path)}: not UTF-8 text (byte {e.start}: {e.reason})") from None


def read_jsonl(
    path: str | os.PathLike,
    torn_tail: Literal["error", "warn"] = "error",
    check: Callable[[Any], str | None] = lambda row: None,
) -> list[Any]:
    """One JSON value per non-blank line of ``path``; ValueError ``"<path>:<line>: not valid JSON (...)"``.
    ``torn_tail="warn"``: a last line a crash cut off is dropped with a warning. ``check(row)``: what is wrong
    with a row, or None; ValueError ``"<path>:<line>: <what>"``."""
    path = os.fspath(path)
    lines = _text(path).split("\n")
    # split("\n") of text ending in "\n" ends with "": a non-empty last item lost its newline.
    torn = len(lines) if lines[-1].strip() else None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
            if (problem := check(rows[-1])) is not None:
                raise ValueError(f"{path}:{number}: {problem}")
        except json.JSONDecodeError as e:
            if number == torn and torn_tail == "warn":
                warnings.warn(
                    f"{path}:{number}: the last line was cut off (a run stopped while writing it); read without it",
                    UserWarning,
                    stacklevel=2,
                )
                break
            raise ValueError(f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno})") from None
        except RecursionError:
            raise ValueError(f"{path}:{number}: not valid JSON (nested too deep)") from None
    return rows
