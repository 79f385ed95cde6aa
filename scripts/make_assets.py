"""Regenerate every figure and table the README shows, into ``erl_lite/assets/``.

Runs, in order:

1. ``benchmarks/embedded_bands.py`` -> ``erl_lite/assets/bands.json``, ``erl_lite/assets/bands_sparse.json`` and
   ``erl_lite/assets/bands_hard.json`` (the untrained model's bands on each world);
2. ``erl-lite demo --out erl_lite/assets/demo`` -> the demo's figures, ``report.md`` and history;
3. ``scripts/compare_modes.py --match samples`` on each world's declared held-out seeds
   (``HELD_OUT_SEEDS``) -> ``erl_lite/assets/compare_samples_*``, ``erl_lite/assets/compare_sparse_samples_*`` and
   ``erl_lite/assets/compare_hard_samples_*`` (ERL vs RLVR, the ablations and the step-matched control, matched as the
   paper matches them, with the efficiency columns);
4. ``scripts/render_docs.py``: the findings and bands blocks of README.md and docs/.

The timings of the last full run are in docs/EMBEDDED.md.

Usage:
    OMP_NUM_THREADS=1 python scripts/make_assets.py [--jobs 2] [--skip bands demo compare ...]
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
    "bands": [sys.executable, "benchmarks/embedded_bands.py", "--json", "erl_lite/assets/bands.json"],
    "bands_sparse": [
        sys.executable,
        "benchmarks/embedded_bands.py",
        "--world",
        "sparse",
        "--json",
        "erl_lite/assets/bands_sparse.json",
    ],
    "bands_hard": [
        sys.executable,
        "benchmarks/embedded_bands.py",
        "--world",
        "hard",
        "--json",
        "erl_lite/assets/bands_hard.json",
    ],
    "demo": [sys.executable, "-m", "erl_lite.cli", "demo", "--out", "erl_lite/assets/demo"],
    # The seeds are each world's declared held-out seeds (compare_modes.HELD_OUT_SEEDS), never chosen here.
    **{
        f"compare{'' if world == 'demo' else '_' + world}": [
            sys.executable,
            "scripts/compare_modes.py",
            "--world",
            world,
            "--match",
            "samples",
            "--out",
            "erl_lite/assets",
        ]
        for world in ("demo", "sparse", "hard")
    },
    "render_docs": [sys.executable, "scripts/render_docs.py"],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=arg_types.whole(1), default=1, help="parallel runs in the comparison")
    p.add_argument("--skip", nargs="*", default=[], choices=list(STEPS))
    args = p.parse_args()
    # PYTHONPATH: the scripts import this checkout's erl_lite, not an installed copy elsewhere.
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "ERL_LITE_STATIC": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
    }
    os.makedirs(os.path.join(ROOT, "erl_lite", "assets"), exist_ok=True)
    steps = [(name, cmd) for name, cmd in STEPS.items() if name not in args.skip]
    # The bands are three single-process measurements: up to --jobs of them at once; the comparisons
    # parallelise inside themselves.
    bands = [s for s in steps if s[0].startswith("bands")]
    for i in range(0, len(bands), args.jobs):
        _run(bands[i : i + args.jobs], env)
    for name, cmd in steps:
        if not name.startswith("bands"):
            _run([(name, [*cmd, "--jobs", str(args.jobs)] if name.startswith("compare") else cmd)], env)


def _run(steps: list[tuple[str, list[str]]], env: dict[str, str]) -> None:
    """Run ``steps`` side by side, each timed; the first that fails stops the whole."""
    start = time.perf_counter()
    for name, cmd in steps:
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
    running = [(name, subprocess.Popen(cmd, cwd=ROOT, env=env)) for name, cmd in steps]
    for name, proc in running:
        if proc.wait():
            raise SystemExit(f"== {name} failed (exit {proc.returncode})")
        print(f"== {name} done in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
