"""ERL vs RLVR (and the ablations) on one of the embedded worlds, over several seeds: the toy study's runner.

``--world demo`` (default), ``sparse`` (5x5 maps where a first attempt rarely succeeds) or ``hard`` (5x5 maps where
a blind first attempt wins 1/128; :data:`erl_lite.embedded.world.WORLDS`). Every variant of a seed starts from the
same LoRA initialisation and plays the same tasks, so the analysis (:mod:`erl_lite.study`, which ``erl-lite
compare`` runs on any runs) compares them paired by seed.

``--match samples`` is the paper's own matching: every variant trains for ERL's iterations, ERL with 4 rollouts a
task and RLVR with 10. ``--match cpu`` (default) gives every other variant ERL's training CPU seconds instead (CPU
time, not wall-clock: one run per process on one thread, so waiting for a core is not charged). Besides the paper's
four variants run erl_lite's "ERL w/o internalization" and the step-matched control, "RLVR, ERL's optimizer steps":
under the reference's mini-batch rule ERL's failures give it more optimizer steps per iteration than RLVR's one, so
per seed this control takes ERL's mean on that seed, rounded up (:func:`matched_steps`). Evaluation runs every
``--eval-steps`` and after every second iteration of the first ten. Writes ``compare[_WORLD][_samples]_``
``results.json``, ``table.md``, ``findings.md`` (rendered into README.md and docs/ by ``scripts/render_docs.py``),
``eval.png`` and ``rewards.png`` to ``--out`` (default ``erl_lite/assets/``), each run's history to ``--runs``.

    OMP_NUM_THREADS=1 python scripts/compare_modes.py --world hard --match samples --jobs 2   # the held-out seeds
    OMP_NUM_THREADS=1 python scripts/compare_modes.py --world hard --match samples --seeds 46 --out /tmp/h46
    python scripts/compare_modes.py --world hard --match samples --replot \\
        --merge /tmp/h46/compare_hard_samples_results.json   # seed 46 added to erl_lite/assets/'s table

``--model DIR`` runs another build of the embedded model. Toy scale:
the numbers show ERL's mechanisms on a tiny model, not the paper's results.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import time
from typing import Any

import torch

from erl_lite.cli import arg_types
from erl_lite.jsonio import read_json
from erl_lite.study.runs import merge_seeds, read_results, run_record
from erl_lite.study.tables import findings as paired_findings
from erl_lite.study.tables import per_seed_table, tables

VARIANTS = {
    "ERL": dict(mode="erl"),
    "RLVR": dict(mode="rlvr", num_generations=10),
    "ERL w/o memory": dict(mode="erl", use_memory=False),
    "ERL w/o reflection": dict(mode="erl", use_reflection=False),
    # Not in the paper's Table 1: erl_lite's extra ablation (no self-distillation of second attempts).
    "ERL w/o internalization": dict(mode="erl", use_internalization=False),
}
#: The step-matched control: per seed, RLVR takes the mean number of optimizer steps per
#: iteration that ERL took on that seed, rounded up (:func:`matched_steps`).
MATCHED = "RLVR, ERL's optimizer steps"
VARIANTS[MATCHED] = dict(mode="rlvr", num_generations=10)
#: The variants the findings compare ERL with: on the sparse and hard worlds, each on all ten held-out seeds
#: (the other ablations on the first five).
HEADLINE = ["RLVR", MATCHED, "ERL w/o reflection"]
#: The findings' name of a variant where the table's would read badly in a sentence.
SAID = {MATCHED: "step-matched RLVR"}
#: The held-out seeds of the study, per world, declared before any comparison ran on them and never chosen by
#: a result: every seed used before is left out (demo and sparse 0-2, hard 11-13, and the seeds the embedded
#: model's bands and build use). 41-45 were declared on 2026-12-03; 46-50 on 2026-12-07, before any run on
#: them, as the next five integers after 45 (no result looked at), so that the sparse and hard worlds have ten.
#: ``--seeds`` defaults to the world's.
HELD_OUT_SEEDS = {"demo": [41, 42, 43], "sparse": list(range(41, 51)), "hard": list(range(41, 51))}
#: Evaluated besides every ``--eval-steps``: every second iteration of the first ten, where the curves part.
EARLY_EVALS = frozenset(range(2, 11, 2))
#: How the findings name each matching.
MATCH_WORDS = {
    "samples": "matched by samples (every variant trains for ERL's iterations; ERL plays 4 rollouts a task, RLVR 10)",
    "cpu": "matched by CPU time (every variant trains for ERL's training CPU seconds)",
}


def matched_steps(erl: dict) -> int:
    """Optimizer steps per iteration for the step-matched control: ERL's mean on that seed, rounded up.

    Example:
        >>> matched_steps({"optim_steps": 41, "steps": 20}), matched_steps({"optim_steps": 0, "steps": 5})
        (3, 1)
    """
    return max(1, math.ceil(erl["optim_steps"] / max(erl["steps"], 1)))


def output_path(out: str, world: str, name: str) -> str:
    """Where a world's output ``name`` (``"results.json"``, ``"table.md"``, ...) goes in ``out``.

    Example:
        >>> output_path("out", "demo", "table.md"), output_path("out", "sparse", "table.md")
        ('out/compare_table.md', 'out/compare_sparse_table.md')
    """
    return os.path.join(out, f"compare_{name}" if world == "demo" else f"compare_{world}_{name}")


def file_key(world: str, match: str = "cpu") -> str:
    """The name part of a comparison's files: the world's, with ``samples`` for ``--match samples``.

    Example:
        >>> file_key("demo"), file_key("demo", "samples"), file_key("sparse", "samples")
        ('demo', 'samples', 'sparse_samples')
    """
    return world if match == "cpu" else "samples" if world == "demo" else f"{world}_{match}"


def the_one(results: list[dict], key: str, default: str) -> str:
    """The one ``key`` (``"world"``, ``"match"``) of every record (``default`` where older results lack it): a table
    never mixes worlds or ways of matching."""
    values = {r.get(key, default) for r in results}
    if len(values) != 1:
        raise ValueError(f"results mix --{key} {sorted(values)}: compare one at a time")
    return values.pop()


def world_of(results: list[dict]) -> str:
    return the_one(results, "world", "demo")  # results from before --world: the demo world


def match_of(results: list[dict]) -> str:
    return the_one(results, "match", "cpu")  # results from before --match: equal CPU time


def run(variant: str, seed: int, budget: float | None, steps: int, runs: str, **settings: Any) -> dict:
    """One training run: ``steps`` iterations (ERL, and every variant under ``--match samples``) or until
    ``budget`` CPU seconds are spent. ``settings``: ``eval_steps``, ``model_dir`` (another build, named in the
    record), ``overrides`` (the step-matched control's steps) and ``world``."""
    from erl_lite.embedded import demo_trainer
    from erl_lite.embedded.demo import holes_known
    from erl_lite.embedded.world import demo_world, hole_letters

    world = settings.get("world", "demo")
    extra = {k: v for k, v in (("overrides", settings.get("overrides")), ("model", settings.get("model_dir"))) if v}
    name = f"{variant}-{seed}" if world == "demo" else f"{world}-{variant}-{seed}"
    run_dir = os.path.join(runs, name.replace(" ", "_").replace("/", "").replace("'", ""))
    # Every variant of a seed starts from the same LoRA initialisation and world (demo_trainer seeds both); each
    # run's folder is this script's own: a rerun replaces the previous comparison's run there.
    trainer = demo_trainer(
        seed,
        output_dir=run_dir,
        overwrite_output_dir=True,
        model_dir=settings.get("model_dir"),
        world=world,
        max_steps=steps if budget is None else 10_000,
        eval_steps=settings.get("eval_steps", 5),
        **{**VARIANTS[variant], **(settings.get("overrides") or {})},
    )
    spent_at = charge_cpu_time(trainer, budget)
    trainer.hf_callbacks.handler.add_callback(_early_evaluations())
    history = trainer.train()
    record = {**run_record(history, variant, seed, spent_at), "world": world, "run_dir": run_dir, **extra}
    if history.samples:  # where the run knew its world's holes
        record["knowledge"] = holes_known(history, hole_letters(demo_world(seed, world)))
    return record


def _early_evaluations() -> Any:
    """A ``TrainerCallback`` asking for an evaluation after each iteration of :data:`EARLY_EVALS`."""
    from transformers import TrainerCallback

    class EarlyEvaluations(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            control.should_evaluate = state.global_step in EARLY_EVALS
            return control

    return EarlyEvaluations()


def charge_cpu_time(trainer: Any, budget: float | None) -> dict[int, float]:
    """Wrap ``trainer.training_step`` to count this process's CPU seconds inside each step and end the
    run once they reach ``budget``; returns {step: CPU seconds spent up to it}, filled as it trains.
    CPU time, not wall-clock: one run per process on one thread, so waiting for a core costs nothing.

    Example:
        >>> class T:
        ...     step, args = 0, type("A", (), {"max_steps": 10})()
        ...     def training_step(self):
        ...         self.step += 1
        >>> t = T(); spent = charge_cpu_time(t, budget=0.0); t.training_step()
        >>> sorted(spent), t.args.max_steps
        ([0, 1], 1)
    """
    spent_at = {0: 0.0}
    step = trainer.training_step

    def timed() -> Any:
        start = time.process_time()
        record = step()
        spent_at[trainer.step] = spent_at[max(spent_at)] + time.process_time() - start
        if budget is not None and spent_at[trainer.step] >= budget:
            trainer.args.max_steps = trainer.step  # the loop ends after this step's evaluation
        return record

    trainer.training_step = timed
    return spent_at


def _run(job: dict) -> dict:
    torch.set_num_threads(1)
    return run(**job)


def _strip(r: dict) -> str:
    return json.dumps({k: v for k, v in r.items() if k != "eval_curve"})


def parser() -> argparse.ArgumentParser:
    from erl_lite.embedded.world import WORLDS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", choices=sorted(WORLDS), default="demo", help="which embedded world (default: demo)")
    p.add_argument("--seeds", type=arg_types.seed, nargs="+", default=None, help="default: the world's HELD_OUT_SEEDS")
    p.add_argument("--steps", type=arg_types.whole(1), default=None, help="ERL's iterations (default: the demo's)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), help="which to run")
    p.add_argument("--out", type=arg_types.folder, default="erl_lite/assets", help="tables, figures, results")
    p.add_argument("--runs", type=arg_types.folder, default="runs/compare", help="where each run's history goes")
    p.add_argument("--model", type=arg_types.embedded_build, metavar="DIR", help="another build of the model")
    p.add_argument("--eval-steps", type=arg_types.whole(1), default=5, help="evaluate every this many iterations")
    p.add_argument("--jobs", type=arg_types.whole(1), default=1, help="runs at a time, one CPU thread each")
    p.add_argument("--match", choices=["cpu", "samples"], default="cpu", help="ERL's CPU seconds or its iterations")
    p.add_argument("--replot", action="store_true", help="only rebuild the outputs from --out's results file")
    p.add_argument("--merge", nargs="+", default=[], metavar="JSON", help="with --replot: add these results files")
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    args.seeds = args.seeds or HELD_OUT_SEEDS[args.world]
    for flag in ("seeds", "variants"):  # a repeat would run twice, and its table count a (variant, seed) twice
        arg_types.distinct(getattr(args, flag), f"--{flag}", p)
    key = file_key(args.world, args.match)
    if args.merge and not args.replot:  # a run would replace the results, merging nothing
        p.error("argument --merge: --merge only goes with --replot (it adds results files to a replotted table)")
    if args.replot:
        results = []
        for path in [output_path(args.out, key, "results.json"), *args.merge]:
            if not os.path.isfile(path):
                p.error(f"argument --replot: no results to replot at {path} (run the comparison first)")
            try:  # read_json names the file, line and column of bad JSON; read_results a row of the wrong shape
                results += read_results(read_json(path), path)
            except ValueError as err:
                p.error(f"argument --replot: {err}")
        try:  # seeds twice, two worlds, results of an older version
            write_outputs(merge_seeds(results), args.variants, args.out, key)
        except ValueError as err:
            p.error(f"argument --replot: {err}")
        return
    from erl_lite.embedded import DEMO_SETTINGS

    steps = args.steps or DEMO_SETTINGS["max_steps"]
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    settings = {k: getattr(args, k) for k in ("runs", "eval_steps", "world")}
    settings.update(steps=steps, model_dir=args.model)
    with mp.get_context("spawn").Pool(args.jobs) as pool:
        # ERL first (its seconds set the budget, its optimizer steps the matched control's), then the others.
        erl = pool.map(_run, [dict(variant="ERL", seed=seed, budget=None, **settings) for seed in args.seeds])
        for r in erl:
            print(_strip(r), flush=True)
        others = [
            dict(
                variant=v,
                seed=r["seed"],
                budget=r["train_seconds"] if args.match == "cpu" else None,
                overrides={"steps_per_generation": matched_steps(r)} if v == MATCHED else None,
                **settings,
            )
            for r in erl
            for v in args.variants
            if v != "ERL"
        ]
        rest = []
        for r in pool.imap(_run, others):
            print(_strip(r), flush=True)
            rest.append(r)
    write_outputs([{**r, "match": args.match} for r in erl + rest], args.variants, args.out, key)
    print(f"total {time.perf_counter() - start:.0f} s")


def write_outputs(results: list[dict], variants: list[str], out: str, key: str | None = None) -> None:
    """The results, tables, findings and figures in ``out``, named by :func:`file_key` (``key``, when given, must
    be the results' own)."""
    for r in results:
        if r["eval_curve"] and len(r["eval_curve"][0]) == 2:  # results of an older version: no seconds
            raise ValueError("compare_results.json predates per-evaluation seconds; rerun the comparison")
    world = file_key(world_of(results), match_of(results))
    if key is not None and key != world:
        raise ValueError(f"these results are {world!r} ones (--world, --match), not {key!r}")
    with open(output_path(out, world, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    table = header(results) + tables(results, variants) + knowledge_table(results, variants)
    with open(output_path(out, world, "table.md"), "w") as f:
        f.write(table)
    with open(output_path(out, world, "findings.md"), "w") as f:
        f.write(findings(results) + "\n")
    print(table)
    plot(results, variants, output_path(out, world, "eval.png"))
    plot_pair(results, output_path(out, world, "rewards.png"))


def findings(results: list[dict]) -> str:
    """The study's findings on one world and one matching: ERL against the :data:`HEADLINE` variants, paired by
    seed (:func:`erl_lite.study.tables.findings`). README.md, docs/ and notebook 06 show them."""
    title = f"{world_of(results).capitalize()} world, {MATCH_WORDS[match_of(results)]}"
    return paired_findings(results, title, HEADLINE, SAID)


def header(results: list[dict]) -> str:
    """What stands above the tables: another build of the model, how the runs were matched."""
    models = sorted({r["model"] for r in results if r.get("model")})
    lines = [f"Model: {', '.join(f'`{m}`' for m in models)} (not the shipped embedded model).", ""] if models else []
    how = MATCH_WORDS[match_of(results)]
    lines += [f"{how[0].upper()}{how[1:]}; rollouts = first and second attempts played.", ""]
    return "\n".join(lines) + "\n"


def knowledge_table(results: list[dict], variants: list[str]) -> str:
    """Where each variant's runs knew the holes (:func:`erl_lite.embedded.demo.holes_known`), per seed."""
    return per_seed_table(
        results,
        variants,
        "knowledge",
        "Where the holes were known, per seed: sampled reflections over the whole run, and the first "
        "attempts of the last sampled step (their opening plan, `Avoid ...`).",
        {
            "both": "reflections naming both holes",
            "repeated": "reflections stating a hole twice",
            "first_named": "first attempts at the end naming a letter",
            "first_both": "naming both holes",
            "first_unreadable": "with no readable plan",
        },
    )


def plot_pair(results: list[dict], path: str) -> None:
    """The first seed's ERL run, rewards per phase, with its RLVR run overlaid (dashed)."""
    from erl_lite.history import History
    from erl_lite.viz import plot_rewards

    seed = results[0]["seed"]
    runs = {r["variant"]: r["run_dir"] for r in results if r["seed"] == seed}
    if "ERL" not in runs or "RLVR" not in runs:
        return
    if not all(os.path.isfile(os.path.join(runs[v], "history.jsonl")) for v in ("ERL", "RLVR")):
        print(f"skipped {path}: the runs' histories are not in {runs['ERL']} / {runs['RLVR']}")
        return
    load = lambda d: History.load(os.path.join(d, "history.jsonl"))
    fig = plot_rewards(load(runs["ERL"]), baseline=load(runs["RLVR"]))
    steps = {v: next(r["steps"] for r in results if r["seed"] == seed and r["variant"] == v) for v in ("ERL", "RLVR")}
    how = "same CPU time" if match_of(results) == "cpu" else "same iterations"
    fig.axes[0].set_title(
        f"{world_of(results).capitalize()} world, seed {seed}: ERL (solid) vs RLVR (dashed), {how};\n"
        f"iterations in it: ERL {steps['ERL']}, RLVR {steps['RLVR']}"
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")


def plot(results: list[dict], variants: list[str], path: str) -> None:
    from erl_lite.viz import plot_comparison

    title = (
        f"{world_of(results).capitalize()} world, equal "
        f"{'CPU time' if match_of(results) == 'cpu' else 'iterations'}: a panel per variant"
    )
    plot_comparison(results, variants, title=title).savefig(path)


if __name__ == "__main__":
    main()
