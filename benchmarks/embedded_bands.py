"""Does reflection help the embedded model before any RL, and does memory? Its bands, measured.

For each run seed (its own two hole letters, ice letter and test maps) this plays the demo
world's test tasks with the embedded model as shipped (no RL), through erl_lite's own phases,
and prints:

* first-attempt success (band: 0.2–0.7) — what evaluation measures;
* reflection parse rate (band: >= 0.95), how often a rulebook names a real hole and never the
  ice, and the share of self-contradicting rulebooks (band: <= 0.05; one letter called both
  a hole and safe, found by :func:`erl_lite.embedded.rulebooks.contradictions`);
* on the failed tasks: success of a second attempt under the model's *own* reflection versus
  a plain fresh retry (band: own >= retry + 0.25), and two controls — a reflection written
  for another failed task of the same run, and the own reflection with the revealed hole and
  the ice letter exchanged (same words, wrong content);
* the memory effect, on the failures where the unrevealed hole lies in the way: second attempts
  under a reflection written from a good memory (the other hole named) versus one written from
  the initial prompt (band: good >= initial + 0.15), and a wrong-memory control (a remembered
  rulebook that calls the ice a hole); ``both``: share of good-memory reflections naming both
  holes; ``kept``: share of reflections from a memory that already names both holes that
  still name both, each once (what keeps a run's memory from losing a hole).

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

from erl_lite.embedded import EMBEDDED_DIR, Bands, demo_world, load_embedded, measure_bands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BANDS = {"first_success": (0.2, 0.7), "parse_rate": (0.95, 1.0), "contradiction_rate": (0.0, 0.05),
         "reflection_gain": (0.25, 1.0), "memory_gain": (0.15, 1.0)}


def pooled(results: list[Bands]) -> dict[str, float]:
    """Rates over all runs, each weighted by how many attempts it rests on."""
    first = sum(b.num_first for b in results)
    failed = sum(b.num_failed for b in results)
    out = {"first_success": sum(b.first_success * b.num_first for b in results) / first,
           "num_first": first, "num_failed": failed}
    for key in ("parse_rate", "names_hole_rate", "contradiction_rate", "second_success", "retry_success",
                "shuffled_success", "swapped_success"):
        out[key] = sum(getattr(b, key) * b.num_failed for b in results) / max(failed, 1)
    out["reflection_gain"] = out["second_success"] - out["retry_success"]
    cases = sum(b.num_memory_cases for b in results)
    out["num_memory_cases"] = cases
    for key in ("initial_memory_success", "good_memory_success", "wrong_memory_success", "merged_rate", "kept_rate"):
        out[key] = sum(getattr(b, key) * b.num_memory_cases for b in results) / max(cases, 1)
    out["memory_gain"] = out["good_memory_success"] - out["initial_memory_success"]
    return out


def verdicts(row: dict[str, float]) -> dict[str, bool]:
    return {k: lo <= row[k] <= hi for k, (lo, hi) in BANDS.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=str(EMBEDDED_DIR), metavar="DIR",
                   help="a build of the embedded model (default: the shipped one)")
    p.add_argument("--run-seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--tasks", type=int, default=128)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args()
    torch.set_num_threads(1)
    model, tok = load_embedded(peft="none", model_dir=args.model, device="cpu")
    rows, results = {}, []
    header = f"{'run':>4} {'letters':>7} {'first':>5} {'parse':>5} {'hole':>5} {'contr':>5} {'failed':>6} " \
             f"{'own':>5} {'retry':>5} {'gain':>6} {'shuf':>5} {'swap':>5} | {'cases':>5} {'init':>5} " \
             f"{'good':>5} {'mgain':>6} {'wrong':>5} {'both':>5} {'kept':>5} {'sec':>4}"
    print(header)

    def line(name: str, letters: str, r: dict) -> str:
        return (f"{name:>4} {letters:>7} {r['first_success']:5.2f} {r['parse_rate']:5.2f} {r['names_hole_rate']:5.2f} "
                f"{r['contradiction_rate']:5.2f} {r['num_failed']:6d} {r['second_success']:5.2f} "
                f"{r['retry_success']:5.2f} {r['reflection_gain']:+6.2f} {r['shuffled_success']:5.2f} "
                f"{r['swapped_success']:5.2f} | {r['num_memory_cases']:5d} {r['initial_memory_success']:5.2f} "
                f"{r['good_memory_success']:5.2f} {r['memory_gain']:+6.2f} {r['wrong_memory_success']:5.2f} "
                f"{r['merged_rate']:5.2f} {r['kept_rate']:5.2f}")

    for run in args.run_seeds:
        world = demo_world(run, n_test=args.tasks)
        t0 = time.time()
        b = measure_bands(model, tok, world, num_tasks=args.tasks, samples=args.samples, seed=args.seed)
        results.append(b)
        s = world.symbols
        letters = f"{s['hole']}{s['hole2']}/{s['frozen']}"
        rows[str(run)] = {"holes": s["hole"] + s["hole2"], "frozen": s["frozen"], **b.to_dict()}
        print(line(str(run), letters, b.to_dict()) + f" {time.time() - t0:4.0f}", flush=True)
    total = pooled(results)
    print(line("all", "", total))
    checks = verdicts(total)
    print("bands:", ", ".join(f"{k} {'ok' if ok else 'MISSED'} (want {BANDS[k][0]}..{BANDS[k][1]})"
                              for k, ok in checks.items()))
    model_name = os.path.relpath(args.model, ROOT) if os.path.isabs(str(args.model)) else str(args.model)
    report = {"model": model_name, "tasks": args.tasks, "samples": args.samples, "seed": args.seed,
              "runs": rows, "pooled": total, "bands_met": checks}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print(json.dumps({"pooled": total, "bands_met": checks}))


if __name__ == "__main__":
    main()
