"""Regenerate every figure and table the README shows, into ``assets/``.

Runs, in order (2,314 s on two CPU cores with ``--jobs 2`` and nothing else running, 2026-12-02, for the
steps of that day: the bands 59 s and 299 s, the demo 48 s, the comparisons 453 s and 1,454 s; the hard
world's comparison took 1,594 s on 2026-12-03):

1. ``benchmarks/embedded_bands.py`` -> ``assets/bands.json``, ``assets/bands_sparse.json`` and
   ``assets/bands_hard.json`` (the untrained model's bands on each world);
2. ``erl-lite demo --out assets/demo`` -> the demo's figures, ``report.md`` and history;
3. ``scripts/compare_modes.py`` -> ``assets/compare_*``, ``assets/compare_sparse_*`` and
   ``assets/compare_hard_*`` (ERL vs RLVR and ablations, equal CPU time, 3 seeds, on each world);
4. the same with ``--match samples`` (the paper's matching) -> ``assets/compare_samples_*``,
   ``assets/compare_sparse_samples_*`` and ``assets/compare_hard_samples_*``.

Usage:
    OMP_NUM_THREADS=1 python scripts/make_assets.py [--jobs 2] [--skip bands demo compare]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from erl_lite.cli import arg_types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = {
    "bands": [sys.executable, "benchmarks/embedded_bands.py", "--json", "assets/bands.json"],
    "bands_sparse": [sys.executable, "benchmarks/embedded_bands.py", "--world", "sparse",
                     "--json", "assets/bands_sparse.json"],
    "bands_hard": [sys.executable, "benchmarks/embedded_bands.py", "--world", "hard", "--json", "assets/bands_hard.json"],
    "demo": [sys.executable, "-m", "erl_lite.cli", "demo", "--out", "assets/demo"],
    "compare": [sys.executable, "scripts/compare_modes.py", "--seeds", "0", "1", "2", "--out", "assets"],
    "compare_sparse": [sys.executable, "scripts/compare_modes.py", "--world", "sparse", "--seeds", "0", "1", "2",
                       "--out", "assets"],
    # The hard world was defined after the others' comparisons had run: held-out seeds, none used in its design.
    "compare_hard": [sys.executable, "scripts/compare_modes.py", "--world", "hard", "--seeds", "11", "12", "13",
                     "--out", "assets"],
}
STEPS.update({f"{name}_samples": [*STEPS[name], "--match", "samples"] for name in ("compare", "compare_sparse", "compare_hard")})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=arg_types.whole(1), default=1, help="parallel runs in the comparison")
    p.add_argument("--skip", nargs="*", default=[], choices=list(STEPS))
    args = p.parse_args()
    # PYTHONPATH: the scripts import this checkout's erl_lite, not an installed copy elsewhere.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ERL_LITE_STATIC": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    os.makedirs(os.path.join(ROOT, "assets"), exist_ok=True)
    for name, cmd in STEPS.items():
        if name in args.skip:
            continue
        if name.startswith("compare"):
            cmd = [*cmd, "--jobs", str(args.jobs)]
        start = time.perf_counter()
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        print(f"== {name} done in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
