"""Whether two run folders hold the same run: their histories and samples equal once the wall-clock keys are
dropped (``time/*``, ``tokens/per_second``, ``memory/peak_gpu_gb``), and their figures byte for byte.

Used to show that a change that moves code leaves behaviour alone: run ``erl-lite demo --out A`` before it and
``--out B`` after it, on the same machine, then

    python scripts/same_run.py A B

Exit code 0 when the runs match; otherwise the first difference is printed and the code is 1.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's erl_lite
from erl_lite.metric_names import current_names  # noqa: E402

CLOCK_KEYS = ("tokens/per_second", "memory/peak_gpu_gb")


def _without_clock(value):
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items() if not k.startswith("time/") and k not in CLOCK_KEYS}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    return value


def _records(path: str) -> list:
    """The file's records without wall-clock keys, keys an older erl_lite wrote in today's names (a rename is not
    a change of behaviour)."""
    with open(path, encoding="utf-8") as f:
        return [_without_clock(current_names(json.loads(line))) for line in f if line.strip()]


def differences(a: str, b: str) -> list[str]:
    found = []
    for name in ("history.jsonl", "samples.jsonl"):
        left, right = _records(os.path.join(a, name)), _records(os.path.join(b, name))
        if len(left) != len(right):
            found.append(f"{name}: {len(left)} records against {len(right)}")
        found += [f"{name}: record {i} differs" for i, (x, y) in enumerate(zip(left, right)) if x != y][:1]
    for name in sorted(f for f in os.listdir(a) if f.endswith(".png")):
        with open(os.path.join(a, name), "rb") as x, open(os.path.join(b, name), "rb") as y:
            if x.read() != y.read():
                found.append(f"{name}: the figures differ")
    return found


def main() -> int:
    a, b = sys.argv[1:3]
    found = differences(a, b)
    print("\n".join(found) if found else f"same run: {a} and {b} (histories, samples and figures)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
