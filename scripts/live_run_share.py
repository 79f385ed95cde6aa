"""How often notebook 06's short live run shows what the full study measured: its setting over ten seeds.

Notebook 06 trains ERL and RLVR for a few steps, live (the two ablations on request), so a student sees the runs
set up and logged. A run that short is noisy: on some seeds it shows ERL behind. This script plays the notebook's
demo setting (the same ``teach.setup`` call, world, steps, tasks and evaluation) for ERL and RLVR on each of
:data:`SEEDS`, declared before any run and never chosen by a result, and writes to ``--out`` (default
``erl_lite/assets/live_run_share.json``) each seed's end-of-run evaluation per variant and the share of seeds on which
ERL ends above RLVR. The notebook prints that file beside its own run, so what it tells a student is measured.

    OMP_NUM_THREADS=1 python scripts/live_run_share.py [--jobs 2]

``tests/test_notebooks.py`` holds notebook 06's setting to :data:`SETTING` and :data:`WORLD` here.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this checkout's erl_lite

from erl_lite.cli import arg_types  # noqa: E402

#: Notebook 06's live-run setting on the demo preset (its SETTINGS["demo"] and WORLD; a test compares them).
SETTING = dict(steps=10, tasks_per_step=4, rlvr_generations=10, eval_tasks=32, eval_samples=1)
WORLD = "hard"
#: The seeds, declared (2026-12-03) before any run of this setting.
SEEDS = list(range(10))
VARIANTS = {"ERL": {}, "RLVR": dict(mode="rlvr", num_generations=SETTING["rlvr_generations"])}


def run(job: tuple[str, int]) -> dict:
    """One variant on one seed, as notebook 06's cell runs it: its evaluation at the start and the end."""
    import torch

    from erl_lite import ERLTrainer
    from erl_lite.teach import setup

    torch.set_num_threads(1)
    variant, seed = job
    s = SETTING
    model, tokenizer, env, config = setup(
        "demo",
        seed,
        world=WORLD,
        max_steps=s["steps"],
        num_tasks_per_step=s["tasks_per_step"],
        eval_steps=0,
        eval_num_generations=s["eval_samples"],
        progress_bar=False,
        output_dir=None,
        **VARIANTS[variant],
    )
    trainer = ERLTrainer(
        model=model, processing_class=tokenizer, args=config, env=env, eval_dataset=env.test_tasks(s["eval_tasks"])
    )
    torch.manual_seed(seed)
    start = trainer.evaluate()["eval/success"]
    t0 = time.process_time()
    trainer.train()
    seconds = time.process_time() - t0
    torch.manual_seed(seed)
    end = trainer.evaluate()["eval/success"]
    print(f"{variant:<5} seed {seed}: {start:.2f} -> {end:.2f} ({seconds:.0f} CPU s)", flush=True)
    return {"variant": variant, "seed": seed, "eval_start": start, "eval_end": end, "train_cpu_seconds": seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=arg_types.whole(1), default=1, help="runs at a time")
    p.add_argument("--out", default=os.path.join(ROOT, "erl_lite", "assets", "live_run_share.json"))
    args = p.parse_args()
    jobs = [(v, s) for s in SEEDS for v in VARIANTS]
    with mp.get_context("spawn").Pool(args.jobs) as pool:
        rows = pool.map(run, jobs, chunksize=1)
    end = {(r["variant"], r["seed"]): r["eval_end"] for r in rows}
    ahead = [s for s in SEEDS if end[("ERL", s)] > end[("RLVR", s)]]
    summary = {
        "world": WORLD,
        "setting": SETTING,
        "seeds": SEEDS,
        "erl_ahead_seeds": ahead,
        "erl_ahead_share": len(ahead) / len(SEEDS),
        "mean_end": {v: statistics.mean(end[(v, s)] for s in SEEDS) for v in VARIANTS},
        "runs": rows,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print(
        f"ERL ended above RLVR on {len(ahead)} of {len(SEEDS)} seeds; mean end evaluation "
        + ", ".join(f"{v} {m:.2f}" for v, m in summary["mean_end"].items())
    )


if __name__ == "__main__":
    main()
