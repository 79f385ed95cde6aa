"""ERL vs RLVR (and the ablations) on one of the embedded worlds at equal CPU time, over several seeds.

``--world demo`` (default), ``--world sparse`` (5x5 maps where a first attempt rarely
succeeds) or ``--world hard`` (5x5 maps where a blind first attempt wins 1/128;
:data:`erl_lite.embedded.world.WORLDS`).

For every seed, ERL trains for the demo's default number of steps; its training CPU seconds (the
process's CPU time inside its training steps, evaluation excluded) become the budget of every other
variant, which trains until it has spent the same CPU time. CPU time, not the wall-clock of
``time/step``: each run is one process on one thread, so a run that shares its core with other work
is not charged for the time it waited (an earlier version charged it, and a comparison run beside
other jobs gave the later variants less compute than ERL had had). Each run evaluates first attempts at the start,
every ``eval_steps`` and at the end on the same test tasks. Writes to ``--out`` (default
``assets/``, the README's table and figures come from here): ``compare_results.json``,
``compare_table.md`` (per-seed figures, the CPU seconds each run took to reach an evaluation of
0.9, and the targets below, each marked met or missed),
``compare_eval.png`` (evaluation over the shared budget, every seed) and ``compare_rewards.png``
(seed 0's ERL rewards per phase with RLVR overlaid). Each run's ``history.jsonl`` goes to
``--runs``.

The targets on the demo world (the ordering of the paper's Table 1, at toy scale), over the
seeds' means: ERL - RLVR >= +0.10 in final evaluation; ERL - "w/o memory" >= +0.05; "w/o
reflection" the lowest; and ERL reaches RLVR's final evaluation within 0.6x RLVR's CPU time.
On the sparse and hard worlds (:data:`SPARSE_TARGETS`): ERL >= 0.60; RLVR and the step-matched control
<= 0.30; "w/o reflection" the lowest; and memory judged by speed, as the paper reports it: ERL
reaches half its final evaluation in <= 0.7x the CPU seconds "w/o memory" needs. A difference target
whose baseline ends within its margin of a success of 1 is marked unreachable at that budget
(no run can be that far ahead), so a reader can tell it from one ERL merely missed.
Besides the paper's four variants it runs erl_lite's own ablation, "ERL w/o internalization",
and the step-matched control, "RLVR, ERL's optimizer steps": the demo uses the reference's
mini-batch rule, under which ERL's failures give it more optimizer steps per iteration than
RLVR's one, so per seed this control takes the mean number of optimizer steps per iteration ERL
took on that seed, rounded up. Fixed-step controls, "RLVR, 2 optimizer steps" and "RLVR, 4
optimizer steps", run when ``--variants`` names them. The table counts each run's optimizer
steps and samples (sequences in the RL batches). Controls stay out of the ordering targets.

``--match samples`` runs the paper's own comparison instead of equal CPU time: every variant trains
for ERL's number of iterations, ERL with 4 rollouts a task and RLVR with 10 (the released code's
scripts: close in rollouts per iteration, not in optimizer steps), and the table counts each run's
rollouts (first and second attempts played). The step-matched control runs beside it as before.
Its files are ``compare_samples_*`` (``compare_sparse_samples_*`` on the sparse world).

    OMP_NUM_THREADS=1 python scripts/compare_modes.py --match samples --jobs 2   # the held-out seeds
    OMP_NUM_THREADS=1 python scripts/compare_modes.py --world sparse --seeds 0 1 2 --jobs 2
    OMP_NUM_THREADS=1 python scripts/compare_modes.py --seeds 0 --jobs 2   # two runs at a time
    OMP_NUM_THREADS=1 python scripts/compare_modes.py --model /tmp/emb --out /tmp/cmp  # a trial build

The demo world's files are ``compare_*``, the sparse world's ``compare_sparse_*`` (both in
``--out``). ``--model DIR`` runs every variant on another build of the embedded model
(``scripts/build_embedded_model.py --out DIR``); its table names the build.

Efficiency, as the paper reports it beside final scores: per variant, what it took to reach a first-attempt
evaluation of 0.5 and of 0.9 (iterations, rollouts, sampled tokens, optimizer steps, CPU seconds) and the mean
evaluation over iterations, each a mean over seeds with a bootstrap interval (:func:`efficiency_table`).
Evaluation runs every ``--eval-steps`` and after every second iteration of the first ten (:data:`EARLY_EVALS`).
The main table gives each variant's share of second attempts cut at a length limit beside its score.
The seeds default to the world's declared held-out seeds (:data:`HELD_OUT_SEEDS`). ``--render-docs``
re-renders the findings blocks of README.md and docs/ from the results files they name (:func:`findings`), and
each committed results file's ``findings.md``, which a comparison writes beside its table.

Toy scale: the numbers show ERL's mechanisms on a tiny model, not the paper's results.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import multiprocessing as mp
import os
import re
import statistics
import time
from typing import Any

import torch

from erl_lite.cli import arg_types
from erl_lite.jsonio import read_json
from erl_lite.metric_names import (
    OPTIM_STEPS,
    SAMPLES_KEYS,
    TOKENS_FIRST,
    TOKENS_REFLECTION,
    TOKENS_SECOND,
    TRUNCATED_SECOND,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {
    "ERL": dict(mode="erl"),
    "RLVR": dict(mode="rlvr", num_generations=10),
    "ERL w/o memory": dict(mode="erl", use_memory=False),
    "ERL w/o reflection": dict(mode="erl", use_reflection=False),
    # Not in the paper's Table 1: erl_lite's extra ablation (no self-distillation of second attempts).
    "ERL w/o internalization": dict(mode="erl", use_internalization=False),
}
#: Controls for the optimizer steps, by steps per iteration: under the reference's mini-batch
#: rule ERL's failures give it about two optimizer steps per iteration and RLVR one. They are
#: RLVR variants, kept out of the ordering targets; the table counts each run's steps.
STEP_CONTROLS = {"RLVR, 2 optimizer steps": 2, "RLVR, 4 optimizer steps": 4}
VARIANTS.update(
    {name: dict(mode="rlvr", num_generations=10, steps_per_generation=k) for name, k in STEP_CONTROLS.items()}
)
#: The step-matched control: per seed, RLVR takes the mean number of optimizer steps per
#: iteration that ERL took on that seed, rounded up (:func:`matched_steps`).
MATCHED = "RLVR, ERL's optimizer steps"
VARIANTS[MATCHED] = dict(mode="rlvr", num_generations=10)
#: RLVR variants that control for the optimizer steps: kept out of the ordering targets.
CONTROLS = {*STEP_CONTROLS, MATCHED}
#: What runs without ``--variants``: the paper's four, erl_lite's ablation and the step-matched
#: control (which supersedes the fixed-step controls; those run when ``--variants`` names them).
DEFAULT_VARIANTS = [v for v in VARIANTS if v not in STEP_CONTROLS]


#: The held-out seeds of the study, per world, declared before any comparison ran on them and never chosen by
#: a result: every seed used before is left out (demo and sparse 0-2, hard 11-13, and the seeds the embedded
#: model's bands and build use). 41-45 were declared on 2026-12-03; 46-50 on 2026-12-07, before any run on
#: them, as the next five integers after 45 (no result looked at), so that the sparse and hard worlds have ten.
#: ``--seeds`` defaults to the world's.
HELD_OUT_SEEDS = {"demo": [41, 42, 43], "sparse": list(range(41, 51)), "hard": list(range(41, 51))}
#: The first-attempt evaluations whose cost the efficiency tables give (:func:`cost_to_reach`).
LEVELS = (0.5, 0.9)
#: Evaluated besides every ``--eval-steps``: every second iteration of the first ten, where the curves part.
EARLY_EVALS = frozenset(range(2, 11, 2))
#: What a level's cost is counted in, and the column of :func:`cost_progress`'s rows it reads (0: the iteration).
COSTS = {"iterations": 0, "rollouts": 2, "sampled tokens": 3, "optimizer steps": 4, "CPU s": 1}
#: Draws of the bootstrap over seeds (:func:`bootstrap_mean`), and the interval's coverage.
BOOTSTRAP_DRAWS, COVERAGE = 4000, 0.95


def matched_steps(erl: dict) -> int:
    """Optimizer steps per iteration for the step-matched control: ERL's mean on that seed, rounded up.

    Example:
        >>> matched_steps({"optim_steps": 41, "steps": 20}), matched_steps({"optim_steps": 0, "steps": 5})
        (3, 1)
    """
    return max(1, math.ceil(erl["optim_steps"] / max(erl["steps"], 1)))


#: (label, minimum) of each target; ``check_targets`` computes the values.
TARGETS = {"ERL - RLVR": 0.10, "ERL - ERL w/o memory": 0.05}
#: ERL must reach RLVR's final evaluation within this share of RLVR's CPU time.
REACH_SHARE = 0.6
#: The table's speed column: CPU seconds until a variant's evaluation first reaches this.
REACH_LEVEL = 0.9
#: The sparse world's targets: (variant, "min" or "max", bound) on the seeds' mean final evaluation.
SPARSE_TARGETS = [("ERL", "min", 0.60), ("RLVR", "max", 0.30), (MATCHED, "max", 0.30)]
#: Sparse world: ERL must reach half its final evaluation within this share of the CPU seconds
#: "w/o memory" needs to reach the same level.
MEMORY_SPEED_SHARE = 0.7


def output_path(out: str, world: str, name: str) -> str:
    """Where a world's output ``name`` (``"results.json"``, ``"table.md"``, ...) goes in ``out``.

    Example:
        >>> output_path("assets", "demo", "table.md"), output_path("assets", "sparse", "table.md")
        ('assets/compare_table.md', 'assets/compare_sparse_table.md')
    """
    return os.path.join(out, f"compare_{name}" if world == "demo" else f"compare_{world}_{name}")


def file_key(world: str, match: str = "cpu") -> str:
    """The name part of a comparison's files: the world's, with ``samples`` for ``--match samples``.

    Example:
        >>> file_key("demo"), file_key("demo", "samples"), file_key("sparse", "samples")
        ('demo', 'samples', 'sparse_samples')
    """
    return world if match == "cpu" else "samples" if world == "demo" else f"{world}_{match}"


def world_key(args: argparse.Namespace) -> str:
    """:func:`file_key` of the command line's ``--world`` and ``--match``."""
    return file_key(args.world, args.match)


def match_of(results: list[dict]) -> str:
    """How ``results`` were matched: ``cpu`` (equal CPU time) or ``samples`` (equal iterations)."""
    matches = {r.get("match", "cpu") for r in results}
    if len(matches) != 1:
        raise ValueError(f"results mix --match {sorted(matches)}: compare one way at a time")
    return matches.pop()


def world_of(results: list[dict]) -> str:
    """The one world ``results`` were measured on (``"demo"`` for results that predate ``--world``)."""
    worlds = {r.get("world", "demo") for r in results}
    if len(worlds) != 1:
        raise ValueError(f"results mix worlds {sorted(worlds)}: compare one world at a time")
    return worlds.pop()


def run(
    variant: str,
    seed: int,
    budget: float | None,
    steps: int,
    runs: str,
    eval_steps: int = 5,
    model_dir: str | None = None,
    overrides: dict | None = None,
    world: str = "demo",
    curriculum: list[int] | None = None,
):
    """One training run; stops after ``steps`` (ERL) or once ``budget`` seconds are spent.
    ``model_dir``: a build other than the shipped embedded model (recorded in the result);
    ``overrides``: settings on top of the variant's (the step-matched control's steps);
    ``world``: which of the embedded worlds; ``curriculum``: map sizes to train on in turn
    (:func:`apply_curriculum`)."""
    from erl_lite.embedded import demo_trainer

    # Every variant of a seed starts from the same LoRA initialisation and world (demo_trainer seeds both).
    name = f"{variant}-{seed}" if world == "demo" else f"{world}-{variant}-{seed}"
    run_dir = os.path.join(runs, name.replace(" ", "_").replace("/", "").replace("'", ""))
    # Each run's folder is this script's own: a rerun replaces the previous comparison's run there.
    trainer = demo_trainer(
        seed,
        output_dir=run_dir,
        overwrite_output_dir=True,
        model_dir=model_dir,
        world=world,
        max_steps=steps if budget is None else 10_000,
        eval_steps=eval_steps,
        **{**VARIANTS[variant], **(overrides or {})},
    )
    if curriculum:
        apply_curriculum(trainer, seed, world, curriculum, steps)
    spent_at = charge_cpu_time(trainer, budget)
    trainer.hf_callbacks.handler.add_callback(_early_evaluations())
    history = trainer.train()
    _, evals = history.series("eval/success", kind="eval")
    train = history.of_kind("train")
    return {
        "variant": variant,
        "seed": seed,
        "world": world,
        "run_dir": run_dir,
        "steps": trainer.step,
        "train_seconds": spent_at[trainer.step],
        "optim_steps": int(sum(r["optim/steps"] for r in history.of_kind("train"))),
        "samples": int(sum(r.get(k) or 0 for r in history.of_kind("train") for k in SAMPLES_KEYS.values())),
        # episodes played: first attempts and second attempts (each a row of its role's batch)
        "rollouts": int(
            sum(
                (r.get(SAMPLES_KEYS["first"]) or 0) + (r.get(SAMPLES_KEYS["second"]) or 0)
                for r in history.of_kind("train")
            )
        ),
        **({"overrides": overrides} if overrides else {}),
        **({"curriculum": curriculum} if curriculum else {}),
        "eval_start": evals[0],
        "eval_final": evals[-1],
        "eval_curve": eval_curve(history, spent_at),
        "progress": cost_progress(train, spent_at),
        # second attempts cut at a length limit, over the run: a low score can then be told from a prompt
        # the model cannot finish ("w/o reflection" on a model never shown its retry format)
        "second_truncated": _mean([r[TRUNCATED_SECOND] for r in train if r.get(TRUNCATED_SECOND) is not None]),
        **({"model": model_dir} if model_dir else {}),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _early_evaluations() -> Any:
    """A ``TrainerCallback`` asking for an evaluation after each iteration of :data:`EARLY_EVALS`."""
    from transformers import TrainerCallback

    class EarlyEvaluations(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            control.should_evaluate = state.global_step in EARLY_EVALS
            return control

    return EarlyEvaluations()


def cost_progress(train: list[dict], spent_at: dict[int, float]) -> list[list[float]]:
    """[iteration, training CPU s, rollouts, sampled tokens, optimizer steps] after each iteration, each
    counted from the start: rollouts are the episodes played (first and second attempts), sampled tokens
    every generated token (attempts and reflections)."""
    rows, total = [], [0.0, 0.0, 0.0]
    for r in train:
        total[0] += (r.get(SAMPLES_KEYS["first"]) or 0) + (r.get(SAMPLES_KEYS["second"]) or 0)
        total[1] += sum(r.get(k) or 0 for k in (TOKENS_FIRST, TOKENS_REFLECTION, TOKENS_SECOND))
        total[2] += r[OPTIM_STEPS]
        rows.append([r["step"], spent_at.get(r["step"], 0.0), *total])
    return rows


def apply_curriculum(trainer: Any, seed: int, world: str, sizes: list[int], steps: int) -> None:
    """Make ``trainer`` draw its tasks from maps of ``sizes[0]`` x ``sizes[0]`` first, then of each next
    size, in equal shares of ``steps`` iterations (ERL's; a variant that runs longer stays on the last).
    The last size must be the world's own; an earlier stage is the same world (letters, actions, holes in
    the way) at its size with no bound on blind success. Evaluation stays on the world's own test maps.

    Example:
        >>> class T:
        ...     train_tasks = "world's own"
        ...     def _batch(self, step): return self.train_tasks
        >>> t = T(); apply_curriculum(t, 0, "sparse", [3, 5], steps=4)
        >>> [len(t._batch(s)) for s in (1, 2)], t._batch(3), t._batch(9)
        ([2000, 2000], "world's own", "world's own")
    """
    from erl_lite.embedded.world import demo_world

    check_curriculum(world, sizes, steps)
    pools = [demo_world(seed, world, sizes=(n, n), max_blind=1.0).train_pool() for n in sizes[:-1]]
    pools.append(trainer.train_tasks)
    batch = trainer._batch

    def staged(step: int) -> Any:
        trainer.train_tasks = pools[min(len(pools) - 1, (step - 1) * len(pools) // steps)]
        return batch(step)

    trainer._batch = staged


def check_curriculum(world: str, sizes: list[int], steps: int | None = None) -> None:
    """Refuse a curriculum that does not end on ``world``'s own map size, holds a size outside 2..that size,
    or has more sizes than ERL's ``steps`` (a stage would get no iteration: ERL might never see the world's maps)."""
    from erl_lite.embedded.world import world_settings

    if steps is not None and len(sizes) > steps:
        raise ValueError(f"{len(sizes)} sizes need at least {len(sizes)} steps, one per stage; got --steps {steps}")

    own = world_settings(world).get("sizes", (3, 3))[0]
    if not sizes or sizes[-1] != own:
        raise ValueError(f"a curriculum must end on the {world} world's own size {own}, not {sizes[-1:] or 'nothing'}")
    wrong = [n for n in sizes if not 2 <= n <= own]
    if wrong:
        raise ValueError(f"curriculum sizes must lie in 2..{own} on the {world} world, got {wrong}")


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


def eval_curve(history, spent_at: dict[int, float]) -> list[list[float]]:
    """[step, training CPU seconds spent before it, eval success] for every evaluation."""
    steps, values = history.series("eval/success", kind="eval")
    return [[s, spent_at.get(s, max(spent_at.values())), v] for s, v in zip(steps, values)]


def _run(job: tuple) -> dict:
    torch.set_num_threads(1)
    return run(*job)


def _strip(r: dict) -> str:
    return json.dumps({k: v for k, v in r.items() if k != "eval_curve"})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from erl_lite.embedded.world import WORLDS

    p.add_argument(
        "--world",
        choices=sorted(WORLDS),
        default="demo",
        help="demo: 3x3 maps; sparse: 5x5 maps where first attempts rarely succeed (default: demo)",
    )
    p.add_argument(
        "--seeds",
        type=arg_types.seed,
        nargs="+",
        default=None,
        help="run seeds (default: the world's declared held-out seeds, HELD_OUT_SEEDS)",
    )
    p.add_argument("--steps", type=arg_types.whole(1), default=None, help="ERL steps (default: the demo's)")
    p.add_argument(
        "--variants",
        nargs="+",
        default=DEFAULT_VARIANTS,
        choices=list(VARIANTS),
        help="which to run (default: all but the fixed-step RLVR controls)",
    )
    p.add_argument(
        "--out",
        type=arg_types.folder,
        default="assets",
        help="where the table, figures and results go (file names by --world)",
    )
    p.add_argument("--runs", type=arg_types.folder, default="runs/compare", help="where each run's history goes")
    p.add_argument(
        "--model",
        type=arg_types.embedded_build,
        default=None,
        metavar="DIR",
        help="compare a build other than the shipped embedded model "
        "(scripts/build_embedded_model.py --out DIR); the table names it",
    )
    p.add_argument(
        "--eval-steps",
        type=arg_types.whole(1),
        default=5,
        help="evaluate every this many steps (not counted in the budget)",
    )
    p.add_argument(
        "--curriculum",
        type=arg_types.whole(1),
        nargs="+",
        default=None,
        metavar="SIZE",
        help="map sizes to train on in turn, each for an equal share of ERL's steps, ending on "
        "the world's own (e.g. 3 4 5 on the sparse world); evaluation stays on the world's maps",
    )
    p.add_argument(
        "--jobs",
        type=arg_types.whole(1),
        default=1,
        help="runs at a time, one CPU thread each (keep <= cores: budgets are CPU seconds)",
    )
    p.add_argument(
        "--match",
        choices=["cpu", "samples"],
        default="cpu",
        help="cpu: every variant gets ERL's CPU seconds; samples: ERL's iterations, as the paper's "
        "ERL n=4 vs RLVR n=10, rollouts counted (default: cpu)",
    )
    p.add_argument(
        "--replot",
        action="store_true",
        help="only rebuild the table and figures from --out's results file (and --merge's)",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        default=[],
        metavar="JSON",
        help="with --replot: add these results files (other seeds of the same world and settings)",
    )
    p.add_argument(
        "--render-docs",
        action="store_true",
        help="only re-render the findings blocks in README.md and docs/*.md from the results they name",
    )
    args = p.parse_args()
    if args.render_docs:
        docs = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
        print("\n".join(f"re-rendered {x}" for x in render_docs(docs)) or "every findings block is current")
        return
    args.seeds = args.seeds or HELD_OUT_SEEDS[args.world]
    for flag in ("seeds", "variants"):  # a repeat would run twice, and its table count a (variant, seed) twice
        arg_types.distinct(getattr(args, flag), f"--{flag}", p)
    from erl_lite.embedded import DEMO_SETTINGS

    if args.merge and not args.replot:  # a run would replace the results, merging nothing
        p.error("argument --merge: --merge only goes with --replot (it adds results files to a replotted table)")
    if args.replot:
        results = []
        for path in [output_path(args.out, world_key(args), "results.json"), *args.merge]:
            if not os.path.isfile(path):
                p.error(f"argument --replot: no results to replot at {path} (run the comparison first)")
            try:  # read_json names the file, line and column of bad JSON; read_results a row of the wrong shape
                results += read_results(read_json(path), path)
            except ValueError as err:
                p.error(f"argument --replot: {err}")
        try:  # seeds twice, two worlds, results of an older version
            write_outputs(merge_seeds(results), args.variants, args.out, world_key(args))
        except ValueError as err:
            p.error(f"argument --replot: {err}")
        return

    steps = args.steps or DEMO_SETTINGS["max_steps"]
    if args.curriculum:
        try:
            check_curriculum(args.world, args.curriculum, steps)
        except ValueError as err:  # before any run starts
            p.error(f"argument --curriculum: {err}")
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.jobs) as pool:

        def job(variant: str, seed: int, budget: float | None, overrides: dict | None = None) -> tuple:
            return (
                variant,
                seed,
                budget,
                steps,
                args.runs,
                args.eval_steps,
                args.model,
                overrides,  # run()'s
                args.world,
                args.curriculum,
            )

        # ERL first (its seconds set the budget), then every other variant on the same budget.
        erl = pool.map(_run, [job("ERL", seed, None) for seed in args.seeds])
        for r in erl:
            print(_strip(r), flush=True)
        others = [
            job(
                v,
                r["seed"],
                r["train_seconds"] if args.match == "cpu" else None,
                {"steps_per_generation": matched_steps(r)} if v == MATCHED else None,
            )
            for r in erl
            for v in args.variants
            if v != "ERL"
        ]
        rest = []
        for r in pool.imap(_run, others):
            print(_strip(r), flush=True)
            rest.append(r)
    results = [{**r, "match": args.match} for r in erl + rest]
    write_outputs(results, args.variants, args.out, world_key(args))
    print(f"total {time.perf_counter() - start:.0f} s")


#: What every row of a results file holds, and the type of each.
RESULT_FIELDS = {
    "variant": str,
    "seed": int,
    "steps": int,
    "eval_start": (int, float),
    "eval_final": (int, float),
    "eval_curve": list,
}


def read_results(rows: Any, path: str) -> list[dict]:
    """``rows`` read from the results file ``path``, refused (naming the file and the row) unless a list of
    runs with :data:`RESULT_FIELDS`."""
    if not isinstance(rows, list):
        raise ValueError(f"{path}: a results file holds a list of runs, not {type(rows).__name__}")
    for i, row in enumerate(rows):
        wrong = [
            k for k, kind in RESULT_FIELDS.items() if not isinstance(row, dict) or not isinstance(row.get(k), kind)
        ]
        if wrong:
            raise ValueError(f"{path}: run {i} is not a comparison's run (missing or of the wrong type: {wrong})")
    return rows


def merge_seeds(results: list[dict]) -> list[dict]:
    """``results`` of several runs of the script as one: a (variant, seed) found twice is an error.

    Example:
        >>> len(merge_seeds([{"variant": "ERL", "seed": 0}, {"variant": "ERL", "seed": 1}]))
        2
    """
    seen = [(r["variant"], r["seed"]) for r in results]
    twice = sorted({k for k in seen if seen.count(k) > 1})
    if twice:
        raise ValueError(f"results to merge hold these (variant, seed) twice: {twice}")
    world_of(results), match_of(results)  # one world, one way of matching
    return sorted(results, key=lambda r: (r["seed"], r["variant"] != "ERL"))


def write_outputs(results: list[dict], variants: list[str], out: str, key: str | None = None) -> None:
    """compare_results.json, compare_table.md, compare_eval.png and compare_rewards.png in ``out``
    (named by :func:`file_key`; ``key``, when given, must be the results' own)."""
    for r in results:
        if r["eval_curve"] and len(r["eval_curve"][0]) == 2:  # results of an older version: no seconds
            raise ValueError("compare_results.json predates per-evaluation seconds; rerun the comparison")
    add_knowledge(results)
    add_signal(results)
    world = file_key(world_of(results), match_of(results))
    if key is not None and key != world:
        raise ValueError(f"these results are {world!r} ones (--world, --match), not {key!r}")
    with open(output_path(out, world, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    table = (
        summarize(results, variants)
        + efficiency_table(results, variants)
        + knowledge_table(results, variants)
        + signal_table(results, variants)
    )
    with open(output_path(out, world, "table.md"), "w") as f:
        f.write(table)
    with open(output_path(out, world, "findings.md"), "w") as f:
        f.write(findings(results) + "\n")
    print(table)
    plot(results, variants, output_path(out, world, "eval.png"))
    plot_pair(results, output_path(out, world, "rewards.png"))


def add_knowledge(results: list[dict]) -> None:
    """Give each result without one a ``knowledge`` entry read from its run's ``samples.jsonl``
    (when the run folder is still there): over all sampled reflections, how many were written
    and the shares naming both holes and stating a hole twice; over the last sampled step's
    first attempts, the shares whose plan names a letter, names both holes, and is unreadable (see
    :func:`erl_lite.embedded.demo.knowledge_timeline`). Kept in compare_results.json, so a
    ``--replot`` without the runs keeps it."""
    from erl_lite.embedded.demo import knowledge_timeline
    from erl_lite.embedded.world import demo_world, hole_letters
    from erl_lite.history import History

    for r in results:
        path = os.path.join(r["run_dir"], "history.jsonl")
        if "knowledge" in r or not os.path.isfile(path):
            continue
        holes = hole_letters(demo_world(r["seed"], r.get("world", "demo")))  # its maps are drawn only when read
        rows = knowledge_timeline(History.load(path), holes)
        if not rows:
            continue
        r["knowledge"] = {
            "reflections": sum(row["reflections"] for row in rows),
            "both": _over_reflections(rows, "both"),
            "repeated": _over_reflections(rows, "repeated"),
            **{key: rows[-1][key] for key in ("first_named", "first_both", "first_unreadable")},
        }


def _over_reflections(rows: list[dict], key: str) -> float | None:
    """A timeline share over the whole run: each sampled step's ``key`` weighted by the
    reflections it was taken over (None when the run wrote none)."""
    n = sum(row["reflections"] for row in rows)
    return sum(row[key] * row["reflections"] for row in rows if row["reflections"]) / n if n else None


def per_seed_table(results: list[dict], variants: list[str], entry: str, intro: str, columns: dict[str, str]) -> str:
    """A markdown table of each variant's ``result[entry][key]`` per seed (``columns``: key -> header),
    under ``intro``; "-" where a run lacks it, and empty when no result carries ``entry``."""
    if not any(entry in r for r in results):
        return ""
    cell = lambda rs, key: " / ".join(
        "-" if entry not in r or r[entry][key] is None else f"{r[entry][key]:.2f}" for r in rs
    )
    lines = ["", intro, "", "| variant | " + " | ".join(columns.values()) + " |", "|---" * (len(columns) + 1) + "|"]
    for v in variants:
        rs = [r for r in results if r["variant"] == v]
        if rs:
            lines.append(f"| {v} | " + " | ".join(cell(rs, key) for key in columns) + " |")
    return "\n".join(lines) + "\n"


def knowledge_table(results: list[dict], variants: list[str]) -> str:
    """Where each variant's runs knew the holes (:func:`add_knowledge`), per seed."""
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


#: The early steps :func:`add_signal` reads: groups with signal over the first SIGNAL_STEPS[0] steps,
#: second attempts over the first SIGNAL_STEPS[1] (first attempts settle sooner than the gate empties).
SIGNAL_STEPS = (5, 10)


def add_signal(results: list[dict]) -> None:
    """Give each result without one a ``signal`` entry read from its run's ``history.jsonl`` (when the
    run folder is still there): the mean share of first-attempt groups whose rewards differ (the
    groups GRPO learns from, ``1 - frac_reward_zero_std/first``) over its first training steps, and
    the mean success of second attempts and their share with a reply or the episode cut at its
    length budget (``truncated/second``), over the first steps that had any (None
    where no step did: RLVR). Kept in the results file, as :func:`add_knowledge`'s entry is."""
    from erl_lite.history import History
    from erl_lite.metric_names import SUCCESS_SECOND, TRUNCATED_SECOND, ZERO_STD_FIRST

    def mean(rows: list[dict], key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return sum(values) / len(values) if values else None

    for r in results:
        path = os.path.join(r["run_dir"], "history.jsonl")
        if "signal" in r or not os.path.isfile(path):
            continue
        train = History.load(path).of_kind("train")
        zero_std = mean(train[: SIGNAL_STEPS[0]], ZERO_STD_FIRST)
        early = train[: SIGNAL_STEPS[1]]
        r["signal"] = {
            "groups_with_signal": None if zero_std is None else 1 - zero_std,
            "second_success": mean(early, SUCCESS_SECOND),
            "second_truncated": mean(early, TRUNCATED_SECOND),
        }


def signal_table(results: list[dict], variants: list[str]) -> str:
    """Where the early learning signal came from (:func:`add_signal`), per seed."""
    return per_seed_table(
        results,
        variants,
        "signal",
        f"The early learning signal, per seed: first-attempt groups whose rewards differ (what GRPO learns "
        f"from) over steps 1-{SIGNAL_STEPS[0]}, and the gated tasks' second attempts over steps "
        f"1-{SIGNAL_STEPS[1]}: their success, and the share with a reply (or the episode) cut at its length budget.",
        {
            "groups_with_signal": "groups with signal",
            "second_success": "second attempts: success",
            "second_truncated": "a reply cut",
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
    fig.axes[0].set_title(
        f"{world_of(results).capitalize()} world, seed {seed}: ERL (solid) vs RLVR (dashed), "
        f"same CPU time;\niterations in it: ERL {steps['ERL']}, RLVR {steps['RLVR']}"
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")


def reach_seconds(curve: list[list[float]], level: float) -> float | None:
    """CPU seconds at the first evaluation *after training began* (step > 0) of ``curve`` that
    reaches ``level`` (None: never). The starting model is not counted, so a baseline that never
    rose above its start is still "reached" only by a trained model.

    >>> reach_seconds([[0, 0.0, 0.7], [5, 15.0, 0.6], [10, 30.0, 0.9]], 0.65)
    30.0
    """
    return next((sec for step, sec, v in curve if step > 0 and v >= level), None)


def cost_to_reach(result: dict, level: float) -> dict[str, float] | None:
    """What a run had spent (:data:`COSTS`) at its first evaluation after training began that reached
    ``level``; None when none did."""
    step = next((s for s, _, v in result["eval_curve"] if s > 0 and v >= level), None)
    if step is None:
        return None
    row = next(p for p in result["progress"] if p[0] == step)
    return {name: row[col] for name, col in COSTS.items()}


def eval_auc(curve: list[list[float]]) -> float:
    """The area under a run's evaluation curve over its iterations, divided by their number: the mean
    evaluation over the run (trapezoids between the points measured; 1 for a run at 1 from the start)."""
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, _, v0), (s1, _, v1) in zip(curve, curve[1:]))
    return area / (curve[-1][0] - curve[0][0]) if curve[-1][0] > curve[0][0] else curve[-1][2]


def bootstrap_mean(values: list[float], seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` (one per seed) and its percentile bootstrap interval of
    :data:`COVERAGE`, from :data:`BOOTSTRAP_DRAWS` resamples of the seeds (seeded: a replot gives the same)."""
    import random

    rng, n = random.Random(seed), len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(BOOTSTRAP_DRAWS))
    tail = (1 - COVERAGE) / 2
    return statistics.mean(values), means[int(tail * BOOTSTRAP_DRAWS)], means[int((1 - tail) * BOOTSTRAP_DRAWS) - 1]


def efficiency_table(results: list[dict], variants: list[str]) -> str:
    """Per level of :data:`LEVELS`, what each variant spent to reach it, and the mean evaluation over
    iterations, each a mean over seeds with its bootstrap interval. A run that never reached a level counts
    at its whole run, and the cell says ">=": the mean is then a lower bound. Empty for results without
    cost records (older versions)."""
    runs = {v: [r for r in results if r["variant"] == v and r.get("progress")] for v in variants}
    runs = {v: rs for v, rs in runs.items() if rs}
    if not runs:
        return ""
    ci = lambda xs, fmt="{:.0f}": "{} [{}, {}]".format(*(fmt.format(x) for x in bootstrap_mean(xs)))
    lines = []
    for level in LEVELS:
        lines += [
            "",
            f"What it took to reach a first-attempt evaluation of {level:.2f}: mean over seeds "
            f"[{COVERAGE:.0%} bootstrap interval]; a run that never got there counts at its whole run (>=).",
            "",
            "| variant | seeds that got there | " + " | ".join(COSTS) + " | iterations, per seed |",
            "|---" * (len(COSTS) + 3) + "|",
        ]
        for v, rs in runs.items():
            reached = [cost_to_reach(r, level) for r in rs]
            spent = [c or {n: r["progress"][-1][col] for n, col in COSTS.items()} for c, r in zip(reached, rs)]
            mark = "" if all(reached) else ">= "
            cells = [mark + ci([c[name] for c in spent]) for name in COSTS]
            per_seed = " / ".join("never" if c is None else f"{c['iterations']:.0f}" for c in reached)
            lines.append(
                f"| {v} | {sum(c is not None for c in reached)}/{len(rs)} | " + " | ".join(cells) + f" | {per_seed} |"
            )
    lines += [
        "",
        f"Mean evaluation over iterations (area under the curve), and the final evaluation: mean over "
        f"seeds [{COVERAGE:.0%} bootstrap interval].",
        "",
        "| variant | mean evaluation over iterations | per seed | final evaluation |",
        "|---|---|---|---|",
    ]
    for v, rs in runs.items():
        aucs = [eval_auc(r["eval_curve"]) for r in rs]
        lines.append(
            f"| {v} | {ci(aucs, '{:.2f}')} | {' / '.join(f'{a:.2f}' for a in aucs)} | "
            f"{ci([r['eval_final'] for r in rs], '{:.2f}')} |"
        )
    return "\n".join(lines) + "\n"


#: How the findings name each matching.
MATCH_WORDS = {
    "samples": "matched by samples (every variant trains for ERL's iterations; ERL plays 4 rollouts a task, RLVR 10)",
    "cpu": "matched by CPU time (every variant trains for ERL's training CPU seconds)",
}
#: A findings block in a markdown file: the results file it renders, its text, its end.
FINDINGS_BLOCK = re.compile(r"(<!-- findings (\S+) -->)\n(.*?)\n?(<!-- /findings -->)", re.DOTALL)
#: A bands table in markdown: ``<!-- bands assets/bands.json ... -->``, one column per report named.
BANDS_BLOCK = re.compile(r"(<!-- bands ([^>]+?) -->)\n(.*?)\n?(<!-- /bands -->)", re.DOTALL)


def bands_table(paths: list[str]) -> str:
    """``benchmarks/embedded_bands.py``'s table of the bands reports at ``paths`` (relative to the repository)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "embedded_bands", os.path.join(ROOT, "benchmarks", "embedded_bands.py")
    )
    module = sys.modules.setdefault("embedded_bands", importlib.util.module_from_spec(spec))
    if not hasattr(module, "bands_table"):
        spec.loader.exec_module(module)
    reports = [read_json(os.path.join(ROOT, p)) for p in paths]
    return module.bands_table({f"{r['world']} world": r for r in reports})


#: The findings' name of a variant where the table's would read badly in a sentence.
SAID = {MATCHED: "step-matched RLVR"}


def _ci(values: list[float], fmt: str = "{:.2f}") -> str:
    return "{} [{}, {}]".format(*(fmt.format(x) for x in bootstrap_mean(values)))


def _ahead(names: tuple[str, str], values: tuple[list[float], list[float]], higher: bool = True) -> str:
    """Which of two variants is ahead: only where their bootstrap intervals do not overlap."""
    (_, lo_a, hi_a), (_, lo_b, hi_b) = (bootstrap_mean(v) for v in values)
    names = tuple(SAID.get(n, n) for n in names)
    a, b = names
    if (lo_a > hi_b) if higher else (lo_b > hi_a):
        return f"{a} ahead of {b}"
    if (lo_b > hi_a) if higher else (lo_a > hi_b):
        return f"{b} ahead of {a}"
    return f"{names[0]} and {names[1]} tied within their intervals"


def findings(results: list[dict]) -> str:
    """The study's findings on one world and one matching, as sentences rendered from its results: every
    variant's final evaluation with its interval (and its share of second attempts cut), who is ahead of whom
    at the end and at iteration 10, and (where the runs carry cost records) what reaching 0.9 took. A variant
    is named ahead only where the intervals do not overlap; README.md and docs/ hold these blocks
    (:func:`render_docs`), and a test holds them to the committed results."""
    by = {v: sorted((r for r in results if r["variant"] == v), key=lambda r: r["seed"]) for v in VARIANTS}
    by = {v: rs for v, rs in by.items() if rs}
    seeds = [r["seed"] for r in by["ERL"]]

    def cut(rs: list[dict]) -> str:  # older results hold the share over iterations 1-10 only
        if all(r.get("second_truncated") is not None for r in rs):
            return f" (second attempts cut {statistics.mean(r['second_truncated'] for r in rs):.2f})"
        early = [r.get("signal", {}).get("second_truncated") for r in rs]
        return "" if None in early else f" (second attempts cut {statistics.mean(early):.2f} in iterations 1-10)"

    text = [
        f"{world_of(results).capitalize()} world, {MATCH_WORDS[match_of(results)]}, {len(seeds)} seeds "
        f"({', '.join(map(str, seeds))}). Final first-attempt evaluation: "
        + ", ".join(f"{SAID.get(v, v)} {_ci([r['eval_final'] for r in rs])}{cut(rs)}" for v, rs in by.items())
        + "."
    ]
    pairs = [(a, b) for a, b in (("ERL", "RLVR"), ("ERL", MATCHED)) if a in by and b in by]
    finals = lambda v: [r["eval_final"] for r in by[v]]
    text.append("At the end: " + "; ".join(_ahead(p, (finals(p[0]), finals(p[1]))) for p in pairs) + ".")
    at = {v: [next((e for s, _, e in r["eval_curve"] if s == 10), None) for r in rs] for v, rs in by.items()}
    if all(None not in at[v] for p in pairs for v in p):
        text.append(
            "At iteration 10: "
            + ", ".join(f"{SAID.get(v, v)} {_ci(at[v])}" for v in dict.fromkeys(sum(pairs, ())))
            + "; "
            + "; ".join(_ahead(p, (at[p[0]], at[p[1]])) for p in pairs)
            + "."
        )
    if all(r.get("progress") for p in pairs for v in p for r in by[v]):
        level = LEVELS[-1]
        cost = {
            v: [cost_to_reach(r, level) or {n: r["progress"][-1][c] for n, c in COSTS.items()} for r in by[v]]
            for v in dict.fromkeys(sum(pairs, ()))
        }
        never = {v: "" if all(cost_to_reach(r, level) for r in by[v]) else ">= " for v in cost}
        text.append(
            f"To reach {level:.2f}: "
            + ", ".join(
                f"{SAID.get(v, v)} {never[v]}{_ci([c[n] for c in cost[v]], '{:.0f}')} {n}"
                for v in cost
                for n in ("iterations", "rollouts")
            )
            + "; per rollout, "
            + "; ".join(_ahead(p, tuple([c["rollouts"] for c in cost[v]] for v in p), higher=False) for p in pairs)
            + "."
        )
    return " ".join(text) + f" Intervals: {COVERAGE:.0%} bootstrap over seeds."


def render_docs(paths: list[str], write: bool = True) -> list[str]:
    """Re-render every findings block in ``paths`` from the results file it names, and each committed
    ``assets/compare_*results.json``'s ``findings.md`` beside it (notebook 06 shows those); returns what was
    stale (``path: results``, or the findings file), rewriting it when ``write``."""
    stale = []
    for results in sorted(glob.glob(os.path.join(ROOT, "assets", "compare_*results.json"))):
        path = results[: -len("results.json")] + "findings.md"
        body = findings(read_results(read_json(results), results)) + "\n"
        if not os.path.isfile(path) or open(path, encoding="utf-8").read() != body:
            stale.append(os.path.relpath(path, ROOT))
            if write:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(body)
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()

        def fresh(m: re.Match) -> str:
            body = findings(read_results(read_json(os.path.join(ROOT, m.group(2))), m.group(2)))
            if body != m.group(3):
                stale.append(f"{path}: {m.group(2)}")
            return f"{m.group(1)}\n{body}\n{m.group(4)}"

        def fresh_bands(m: re.Match) -> str:
            body = bands_table(m.group(2).split())
            if body != m.group(3):
                stale.append(f"{path}: {m.group(2)}")
            return f"{m.group(1)}\n{body}\n{m.group(4)}"

        new = BANDS_BLOCK.sub(fresh_bands, FINDINGS_BLOCK.sub(fresh, text))
        if write and new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    return stale


def check_targets(results: list[dict]) -> list[tuple[str, str, bool]]:
    """(target, measured with per-seed figures, met) for each of the comparison's targets on its world."""
    return sparse_targets(results) if world_of(results) in ("sparse", "hard") else demo_targets(results)


def _per_seed(results: list[dict]) -> tuple[dict, list[int], Any]:
    """(results by (variant, seed), ERL's seeds, a variant's mean final evaluation over those seeds)."""
    by = {(r["variant"], r["seed"]): r for r in results}
    seeds = sorted({r["seed"] for r in results if r["variant"] == "ERL"})
    return by, seeds, lambda v: statistics.mean(by[(v, s)]["eval_final"] for s in seeds)


def _lowest_target(by: dict, seeds: list[int], mean) -> list[tuple[str, str, bool]]:
    """ "w/o reflection" the lowest of the non-control variants (when it ran)."""
    if not all(("ERL w/o reflection", s) in by for s in seeds):
        return []
    variants = sorted({v for v, _ in by} - CONTROLS)
    lowest = min(variants, key=mean)
    return [("ERL w/o reflection lowest", f"lowest: {lowest} ({mean(lowest):.3f})", lowest == "ERL w/o reflection")]


def sparse_targets(results: list[dict]) -> list[tuple[str, str, bool]]:
    """The sparse world's targets (:data:`SPARSE_TARGETS`, the lowest, memory's speed)."""
    by, seeds, mean = _per_seed(results)
    out = []
    for variant, side, bound in SPARSE_TARGETS:
        if all((variant, s) in by for s in seeds):
            finals = " / ".join(f"{by[(variant, s)]['eval_final']:.2f}" for s in seeds)
            met = mean(variant) >= bound if side == "min" else mean(variant) <= bound
            out.append(
                (
                    f"{variant} {'>=' if side == 'min' else '<='} {bound:.2f} (final eval)",
                    f"{mean(variant):.3f} (per seed {finals})",
                    met,
                )
            )
    out += _lowest_target(by, seeds, mean)
    if all(("ERL w/o memory", s) in by for s in seeds):
        out.append(memory_speed_target([by[("ERL", s)] for s in seeds], [by[("ERL w/o memory", s)] for s in seeds]))
    return out


def memory_speed_target(erl: list[dict], no_memory: list[dict]) -> tuple[str, str, bool]:
    """ERL reaches half its final evaluation in <= :data:`MEMORY_SPEED_SHARE` x the CPU seconds
    "w/o memory" needs, per seed, then over the seeds' sums. A "w/o memory" run that never gets
    there is counted at its whole budget (a lower bound on what it needs), so the share shown is
    at most what longer runs would give.

    Example:
        >>> e = {"eval_final": 0.8, "eval_curve": [[0, 0.0, 0.0], [5, 10.0, 0.5]]}
        >>> m = {"train_seconds": 40.0, "eval_curve": [[0, 0.0, 0.0], [5, 10.0, 0.1], [10, 20.0, 0.35]]}
        >>> memory_speed_target([e], [m])[1:]
        ('ERL 10 s / w/o memory never (>= 40 s) per seed; share 0.25', True)
    """
    mine, theirs, texts = [], [], []
    for e, m in zip(erl, no_memory):
        level = e["eval_final"] / 2
        t_erl = reach_seconds(e["eval_curve"], level)
        t_mem = reach_seconds(m["eval_curve"], level)
        mine.append(e["train_seconds"] if t_erl is None else t_erl)
        theirs.append(m["train_seconds"] if t_mem is None else t_mem)
        texts.append(
            f"ERL {mine[-1]:.0f} s / w/o memory "
            + (f"{t_mem:.0f} s" if t_mem is not None else f"never (>= {theirs[-1]:.0f} s)")
        )
    share = sum(mine) / sum(theirs) if sum(theirs) else float("inf")
    return (
        f"ERL reaches half its final eval in <= {MEMORY_SPEED_SHARE}x the CPU s of w/o memory",
        f"{'; '.join(texts)} per seed; share {share:.2f}",
        share <= MEMORY_SPEED_SHARE,
    )


def demo_targets(results: list[dict]) -> list[tuple[str, str, bool]]:
    """The demo world's targets (:data:`TARGETS`, the lowest, ERL's speed to RLVR's final evaluation)."""
    by, seeds, mean = _per_seed(results)
    out = []
    for label, minimum in TARGETS.items():
        other = label.split(" - ", 1)[1]
        if not all((other, s) in by for s in seeds):
            continue
        diffs = [by[("ERL", s)]["eval_final"] - by[(other, s)]["eval_final"] for s in seeds]
        d = statistics.mean(diffs)
        measured = f"{d:+.3f} (per seed {' / '.join(f'{x:+.2f}' for x in diffs)})"
        if mean(other) > 1.0 - minimum:  # success is at most 1: no ERL run could be that far ahead
            measured += (
                f"; unreachable at this budget: {other} ends at {mean(other):.2f}, "
                f"less than {minimum:.2f} below the ceiling of 1"
            )
        out.append((f"{label} >= +{minimum:.2f} (final eval)", measured, d >= minimum))
    out += _lowest_target(by, seeds, mean)
    if all(("RLVR", s) in by for s in seeds):
        shares = []
        for s in seeds:
            rlvr = by[("RLVR", s)]
            t = reach_seconds(by[("ERL", s)]["eval_curve"], rlvr["eval_final"])
            shares.append(None if t is None else t / rlvr["train_seconds"])
        text = " / ".join("never" if x is None else f"{x:.2f}" for x in shares)
        known = [x for x in shares if x is not None]
        met = len(known) == len(shares) and statistics.mean(known) <= REACH_SHARE
        out.append(
            (
                f"ERL reaches RLVR's final eval in <= {REACH_SHARE}x RLVR's CPU time",
                f"share per seed {text}" + (f", mean {statistics.mean(known):.2f}" if known else ""),
                met,
            )
        )
    return out


def summarize(results: list[dict], variants: list[str]) -> str:
    models = sorted({r["model"] for r in results if r.get("model")})
    lines = [f"Model: {', '.join(f'`{m}`' for m in models)} (not the shipped embedded model).", ""] if models else []
    stages = sorted({tuple(r["curriculum"]) for r in results if r.get("curriculum")})
    lines += [
        f"Curriculum: training maps of sizes {' then '.join(map(str, c))} in equal shares of ERL's "
        "iterations; evaluation on the world's own maps.\n"
        for c in stages
    ]
    if match_of(results) == "samples":
        lines += [
            "Matched as the paper's runs: every variant trains for ERL's iterations (ERL 4 rollouts a "
            "task, RLVR 10); rollouts = first and second attempts played.",
            "",
        ]
    lines += [
        "| variant | steps (mean) | optimizer steps (mean) | samples (mean) | rollouts (mean) | "
        "train CPU s (mean) | eval success before | eval success after (mean ± sd over seeds) | "
        f"after, per seed | CPU s to reach {REACH_LEVEL:.2f}, per seed | second attempts cut (mean) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        rs = [r for r in results if r["variant"] == v]
        if not rs:  # asked for but not in these results
            continue
        finals = [r["eval_final"] for r in rs]
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        lines.append(
            f"| {v} | {statistics.mean(r['steps'] for r in rs):.0f} | {_mean_of(rs, 'optim_steps')} | "
            f"{_mean_of(rs, 'samples')} | {_mean_of(rs, 'rollouts')} | "
            f"{statistics.mean(r['train_seconds'] for r in rs):.0f} | "
            f"{statistics.mean(r['eval_start'] for r in rs):.2f} | {statistics.mean(finals):.2f} ± {sd:.2f} | "
            f"{' / '.join(f'{x:.2f}' for x in finals)} | {_reach_text(rs)} | {_cut_text(rs)} |"
        )
    targets = check_targets(results)
    if targets:
        lines += ["", "| target | measured | met |", "|---|---|---|"]
        lines += [f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in targets]
    return "\n".join(lines) + "\n"


def _mean_of(runs: list[dict], key: str) -> str:
    """The runs' mean of ``key``, or "-" when a run lacks it (results of an older version)."""
    values = [r[key] for r in runs if key in r]
    return f"{statistics.mean(values):.0f}" if values and len(values) == len(runs) else "-"


def _cut_text(runs: list[dict]) -> str:
    """The runs' mean share of second attempts cut at a length limit ("-": none played, or older results)."""
    shares = [r.get("second_truncated") for r in runs]
    return "-" if None in shares else f"{statistics.mean(shares):.2f}"


def _reach_text(runs: list[dict]) -> str:
    """Per run, the CPU seconds at which evaluation first reached :data:`REACH_LEVEL` (or never)."""
    times = [reach_seconds(r["eval_curve"], REACH_LEVEL) for r in runs]
    return " / ".join("never" if t is None else f"{t:.0f}" for t in times)


def plot(results: list[dict], variants: list[str], path: str) -> None:
    from erl_lite.viz import plot_comparison

    title = (
        f"{world_of(results).capitalize()} world, equal "
        f"{'CPU time' if match_of(results) == 'cpu' else 'iterations'}, one line per seed"
    )
    stages = sorted({tuple(r["curriculum"]) for r in results if r.get("curriculum")})
    title += "".join(f"; curriculum of map sizes {' > '.join(map(str, c))}" for c in stages)
    plot_comparison(results, variants, title=title).savefig(path)


if __name__ == "__main__":
    main()
