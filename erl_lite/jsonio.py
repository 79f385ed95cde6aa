"""Reading JSON and JSON-lines files with errors that name the file, the line and the column.

``json.loads`` and ``datasets`` do not name the file; every JSON file erl_lite reads goes through here.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Literal


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in ``path``; ValueError ``"<path>:<line>:<column>: not valid JSON (...)"``."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{os.fspath(path)}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None


def read_jsonl(path: str | os.PathLike, torn_tail: Literal["error", "warn"] = "error") -> list[Any]:
    """One JSON value per non-blank line of ``path``; ValueError ``"<path>:<line>: not valid JSON (...)"``.

    ``torn_tail="warn"``: a last line without its newline (a crash cut it) is dropped with a warning."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    # split("\n") of text ending in "\n" ends with "": a non-empty last item lost its newline.
    torn = len(lines) if lines[-1].strip() else None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if number == torn and torn_tail == "warn":
                warnings.warn(f"{path}:{number}: the last line was cut off (a run stopped while writing it); "
                              "read without it", UserWarning, stacklevel=2)
                break
            raise ValueError(f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno})") from None
    return rows
