"""Does reflection help the embedded model before any RL? The three bands of issue 4, measured.

For each run seed (its own hole/frozen letters and test maps) this plays the demo world's
test tasks with the embedded model as shipped (no RL), through erl_lite's own phases, and
prints:

* first-attempt success (band: 0.2–0.7) — what evaluation measures;
* reflection parse rate (band: >= 0.9) and how often the rulebook names the run's hole;
* on the failed tasks: success of a second attempt under the model's *own* reflection versus
  a plain fresh retry (band: own >= retry + 0.15), and two controls — a reflection written
  for another failed task of the same run (it should transfer: same letters) and the own
  reflection with the hole and frozen letters exchanged (same words, wrong content; the gain
  must vanish if the reflection's information is what helps).

Sampling is seeded; expect a few points of drift across machines and torch versions.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/embedded_bands.py [--run-seeds 0 1 2] [--tasks 128] [--samples 2]
        [--model DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from erl_lite.embedded import EMBEDDED_DIR, Bands, demo_world, measure_bands
from erl_lite.models import load_policy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BANDS = {"first_success": (0.2, 0.7), "parse_rate": (0.9, 1.0), "reflection_gain": (0.15, 1.0)}


def pooled(results: list[Bands]) -> dict[str, float]:
    """Rates over all runs, each weighted by how many attempts it rests on."""
    first = sum(b.num_first for b in results)
    failed = sum(b.num_failed for b in results)
    out = {"first_success": sum(b.first_success * b.num_first for b in results) / first,
           "num_first": first, "num_failed": failed}
    for key in ("parse_rate", "names_hole_rate", "second_success", "retry_success", "shuffled_success",
                "swapped_success"):
        out[key] = sum(getattr(b, key) * b.num_failed for b in results) / max(failed, 1)
    out["reflection_gain"] = out["second_success"] - out["retry_success"]
    return out


def verdicts(row: dict[str, float]) -> dict[str, bool]:
    return {k: lo <= row[k] <= hi for k, (lo, hi) in BANDS.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=str(EMBEDDED_DIR))
    p.add_argument("--run-seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--tasks", type=int, default=128)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args()
    torch.set_num_threads(1)
    model, tok = load_policy(args.model, peft="none", device="cpu")
    rows, results = {}, []
    header = f"{'run':>6} {'letters':>8} {'first':>6} {'parse':>6} {'hole':>6} {'failed':>6} " \
             f"{'own':>6} {'retry':>6} {'gain':>6} {'shuf':>6} {'swap':>6} {'sec':>5}"
    print(header)
    for run in args.run_seeds:
        world = demo_world(run, n_test=args.tasks)
        t0 = time.time()
        b = measure_bands(model, tok, world, num_tasks=args.tasks, samples=args.samples, seed=args.seed)
        results.append(b)
        rows[str(run)] = {"hole": world.symbols["hole"], "frozen": world.symbols["frozen"], **b.to_dict()}
        print(f"{run:>6} {world.symbols['hole'] + '/' + world.symbols['frozen']:>8} {b.first_success:6.3f} "
              f"{b.parse_rate:6.3f} {b.names_hole_rate:6.3f} {b.num_failed:6d} {b.second_success:6.3f} "
              f"{b.retry_success:6.3f} {b.reflection_gain:+6.3f} {b.shuffled_success:6.3f} "
              f"{b.swapped_success:6.3f} {time.time() - t0:5.0f}", flush=True)
    total = pooled(results)
    print(f"{'all':>6} {'':>8} {total['first_success']:6.3f} {total['parse_rate']:6.3f} "
          f"{total['names_hole_rate']:6.3f} {total['num_failed']:6d} {total['second_success']:6.3f} "
          f"{total['retry_success']:6.3f} {total['reflection_gain']:+6.3f} {total['shuffled_success']:6.3f} "
          f"{total['swapped_success']:6.3f}")
    checks = verdicts(total)
    print("bands:", ", ".join(f"{k} {'ok' if ok else 'MISSED'} (want {BANDS[k][0]}..{BANDS[k][1]})"
                              for k, ok in checks.items()))
    # Recorded relative to the repository, so the file does not carry this machine's paths.
    model_name = os.path.relpath(args.model, ROOT) if os.path.isabs(str(args.model)) else str(args.model)
    report = {"model": model_name, "tasks": args.tasks, "samples": args.samples, "seed": args.seed,
              "runs": rows, "pooled": total, "bands_met": checks}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print(json.dumps({"pooled": total, "bands_met": checks}))


if __name__ == "__main__":
    main()
