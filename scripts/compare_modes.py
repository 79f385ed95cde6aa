"""ERL vs RLVR (and the ablations) on the demo world at equal wall-clock, over several seeds.

For every seed, ERL trains for the demo's default number of steps; its training seconds (the
sum of ``time/step``, evaluation excluded) become the budget of every other variant, which
trains until it has spent the same CPU time. Each run evaluates first attempts at the start,
every ``eval_steps`` and at the end on the same test tasks. Writes ``results.json``, a
Markdown table and ``compare_eval.png`` to ``--out`` (the README's table comes from here).

    OMP_NUM_THREADS=1 python scripts/compare_modes.py --seeds 0 1 2 --out assets/compare

Toy scale: the numbers show ERL's mechanisms on a tiny model, not the paper's results.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

VARIANTS = {
    "ERL": dict(mode="erl"),
    "RLVR": dict(mode="rlvr", num_generations=10),
    "ERL w/o memory": dict(mode="erl", use_memory=False),
    "ERL w/o reflection": dict(mode="erl", use_reflection=False),
}


def run(variant: str, seed: int, budget: float | None, steps: int, out: str):
    """One training run; stops after ``steps`` (ERL) or once ``budget`` seconds are spent."""
    from erl_lite.demo import DEMO_EVAL_TASKS, demo_config
    from erl_lite.embedded import demo_world, load_embedded
    from erl_lite.trainer import ERLTrainer

    max_steps = steps if budget is None else 10_000
    cfg = demo_config(seed=seed, max_steps=max_steps, output_dir=os.path.join(out, f"{variant}-{seed}"),
                      **VARIANTS[variant])
    env = demo_world(seed)
    model, tok = load_embedded()
    spent = {"s": 0.0}

    def stop_when_spent(trainer, record):
        spent["s"] += record.metrics["time/step"]
        if budget is not None and spent["s"] >= budget:
            trainer.args.max_steps = trainer.step  # the loop ends after this step's evaluation

    trainer = ERLTrainer(model=model, processing_class=tok, args=cfg, env=env,
                         eval_dataset=env.test_tasks(DEMO_EVAL_TASKS), callbacks=[stop_when_spent])
    history = trainer.train()
    _, evals = history.series("eval/success", kind="eval")
    return {"variant": variant, "seed": seed, "steps": trainer.step, "train_seconds": spent["s"],
            "eval_start": evals[0], "eval_final": evals[-1], "eval_curve": history.series("eval/success", kind="eval")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=None, help="ERL steps (default: the demo's)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--out", default="assets/compare")
    args = p.parse_args()
    from erl_lite.demo import DEMO_SETTINGS

    torch.set_num_threads(1)
    steps = args.steps or DEMO_SETTINGS["max_steps"]
    os.makedirs(args.out, exist_ok=True)
    results = []
    start = time.perf_counter()
    for seed in args.seeds:
        erl = run("ERL", seed, None, steps, args.out)
        results.append(erl)
        print(json.dumps({k: v for k, v in erl.items() if k != "eval_curve"}), flush=True)
        for variant in args.variants:
            if variant != "ERL":
                r = run(variant, seed, erl["train_seconds"], steps, args.out)
                results.append(r)
                print(json.dumps({k: v for k, v in r.items() if k != "eval_curve"}), flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    table = summarize(results, args.variants)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    print(table)
    plot(results, args.variants, os.path.join(args.out, "compare_eval.png"))
    print(f"total {time.perf_counter() - start:.0f} s")


def summarize(results: list[dict], variants: list[str]) -> str:
    lines = ["| variant | steps (mean) | eval success before | eval success after (mean ± sd over seeds) |",
             "|---|---|---|---|"]
    for v in variants:
        rs = [r for r in results if r["variant"] == v]
        finals = [r["eval_final"] for r in rs]
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        lines.append(f"| {v} | {statistics.mean(r['steps'] for r in rs):.0f} | "
                     f"{statistics.mean(r['eval_start'] for r in rs):.2f} | {statistics.mean(finals):.2f} ± {sd:.2f} |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict], variants: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for i, v in enumerate(variants):
        for j, r in enumerate(r for r in results if r["variant"] == v):
            steps, vals = r["eval_curve"]
            frac = [s / max(r["steps"], 1) for s in steps]  # fraction of the shared CPU budget
            ax.plot(frac, vals, color=f"C{i}", alpha=0.8, label=v if j == 0 else None, marker="o", ms=3)
    ax.set_xlabel("fraction of the shared CPU-time budget")
    ax.set_ylabel("eval first-attempt success (0-1)")
    ax.set_title("Demo world, equal wall-clock, one line per seed")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main()
