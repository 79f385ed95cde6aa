"""Does reflection help the embedded model before any RL, and does memory? Its bands, measured.

For each run seed (its own hole letters, ice letter and test maps) this plays one embedded
world's test tasks (``--world demo``, ``sparse`` or ``hard``) with the embedded model as shipped (no RL),
through erl_lite's own phases, and prints:

* first-attempt success (band: 0.2–0.7 on the demo world, <= 0.10 on the others) — what
  evaluation measures;
* reflection parse rate (band: >= 0.95), how often a rulebook names a real hole and never the
  ice, and the share of self-contradicting rulebooks (band: <= 0.05; one letter called both
  a hole and safe, found by :func:`erl_lite.embedded.rulebooks.contradictions`);
* on the failed tasks: success of a second attempt under the model's *own* reflection versus
  a plain fresh retry (band: own >= retry + 0.25), and two controls — a reflection written
  for another failed task of the same run, and the own reflection with the revealed hole and
  the ice letter exchanged (same words, wrong content);
* the paper's "w/o reflection" retry on the same failures: no rulebook, the initial prompt plus the
  first attempt's whole trace and feedback (:func:`erl_lite.core.prompts.retry_system_prompt`); its
  success and the share of its episodes cut at a length limit (``trace``, ``cut``), so a low score can
  be told apart from a prompt the model cannot finish;
* the memory effect, on the failures where the unrevealed hole lies in the way: second attempts
  under a reflection written from a good memory (the other hole named) versus one written from
  the initial prompt (band: good >= initial + 0.15), and a wrong-memory control (a remembered
  rulebook that calls the ice a hole); ``both``: share of good-memory reflections naming both
  holes; ``kept``: share of reflections from a memory that already names both holes that
  still name both, each once (what keeps a run's memory from losing a hole).

Sampling is seeded; expect a few points of drift across machines and torch versions.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/embedded_bands.py [--world sparse] [--run-seeds 0 1 2] [--tasks 128]
        [--samples 2] [--model DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from erl_lite.cli import arg_types
from erl_lite.core.memory import ReflectionMemory
from erl_lite.core.phases import PhaseContext, attempt_first, attempt_second, gate, reflect
from erl_lite.embedded import EMBEDDED_DIR, demo_config, demo_world, load_embedded
from erl_lite.embedded.rulebooks import contradiction_rate, hole_facts, named_holes, rulebook
from erl_lite.embedded.world import SECOND_HOLE, WORLDS, fatal_letter, hole_letters, holes_in_the_way
from erl_lite.engine.generation import HFGenerator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BANDS = {
    "first_success": (0.2, 0.7),
    "parse_rate": (0.95, 1.0),
    "contradiction_rate": (0.0, 0.05),
    "reflection_gain": (0.25, 1.0),
    "memory_gain": (0.15, 1.0),
    # The "w/o reflection" ablation is fair only if its retry (trace and feedback, no rulebook) fits its budget.
    "trace_truncated": (0.0, 0.10),
}
#: Each world's bands: the sparse and hard worlds are built so that first attempts rarely succeed. The hard world
#: has one kind of hole, so there is no unrevealed hole for memory to name: no memory band.
_RARE = {**BANDS, "first_success": (0.0, 0.10)}
WORLD_BANDS = {"demo": BANDS, "sparse": _RARE, "hard": {k: v for k, v in _RARE.items() if k != "memory_gain"}}


@dataclass
class Bands:
    """What the reflect-and-retry loop does for a policy on one world (see :func:`measure_bands`).

    Attributes:
        first_success: success rate of first attempts (the evaluation metric).
        parse_rate: share of reflections with a ``<prompt>…</prompt>`` rulebook.
        names_hole_rate: share of reflections calling a hole of the run a hole, and never the ice.
        contradiction_rate: share of all rulebooks written here giving one letter two meanings.
        num_first, num_failed: first attempts played, and how many failed.
        second_success: on the failed tasks, second attempts under the own reflection.
        retry_success: on the same tasks, a plain fresh first attempt.
        trace_success, trace_truncated: on the same tasks, the "w/o reflection" retry (trace and
            feedback in the system prompt, no rulebook): its success, and its share cut at a length limit.
        shuffled_success: under a reflection written for another failed task of the run.
        swapped_success: under the own reflection with hole and ice letters exchanged (control).
        num_memory_cases: failures on one kind of hole where the other kind lies in the way.
        initial_memory_success, good_memory_success, wrong_memory_success: on those, second
            attempts under a reflection written from the initial prompt, from a memory naming the
            other hole, and from one calling the ice a hole (control).
        merged_rate: share of the good-memory reflections that name both holes.
        kept_rate: share of reflections from a memory naming both holes that still name each once.
    """

    first_success: float
    parse_rate: float
    names_hole_rate: float
    num_first: int
    num_failed: int
    second_success: float
    retry_success: float
    shuffled_success: float
    swapped_success: float
    contradiction_rate: float = 0.0
    num_memory_cases: int = 0
    initial_memory_success: float = 0.0
    good_memory_success: float = 0.0
    wrong_memory_success: float = 0.0
    merged_rate: float = 0.0
    kept_rate: float = 0.0
    trace_success: float = 0.0
    trace_truncated: float = 0.0

    @property
    def reflection_gain(self) -> float:
        """second_success - retry_success."""
        return self.second_success - self.retry_success

    @property
    def memory_gain(self) -> float:
        """good_memory_success - initial_memory_success."""
        return self.good_memory_success - self.initial_memory_success

    def to_dict(self) -> dict[str, float]:
        """Every field, plus ``reflection_gain`` and ``memory_gain``."""
        return {**asdict(self), "reflection_gain": self.reflection_gain, "memory_gain": self.memory_gain}


def measure_bands(
    model: Any,
    tokenizer: Any,
    world: Any,
    num_tasks: int = 100,
    samples: int = 2,
    seed: int = 0,
    config: Any = None,
    memory_cases: bool = True,
) -> Bands:
    """First attempts, reflections and second attempts of ``model`` on ``world``'s test tasks.

    Every phase is erl_lite's own, with the sampling settings of ``config`` (default: the demo's,
    :func:`~erl_lite.embedded.demo.demo_config`); sampling is seeded, so a call is reproducible
    on one machine. ``memory_cases=False`` skips the memory-effect measurement.
    """
    cfg = config or demo_config()
    ctx = PhaseContext(HFGenerator(model, tokenizer), tokenizer, world, cfg)
    tasks = world.test_tasks(num_tasks)
    by_id = {t.task_id: t for t in tasks}
    torch.manual_seed(seed)
    first = attempt_first(ctx, tasks, samples, temperature=cfg.eval_temperature)
    failed = gate(first, cfg.reward_threshold)
    if not failed:
        return Bands(1.0, 1.0, 1.0, len(first), 0, 0.0, 0.0, 0.0, 0.0)
    torch.manual_seed(seed + 1)
    own = reflect(ctx, failed, None)
    holes, frozen = hole_letters(world), world.symbols["frozen"]
    order = list(range(len(own)))
    random.Random(seed).shuffle(order)
    shuffled = [replace(r, rulebook=own[j].rulebook) for r, j in zip(own, order)]
    # The hole the trace revealed (else the first) trades places with the ice letter.
    swapped = [
        replace(r, rulebook=r.rulebook.translate(str.maketrans(h + frozen, frozen + h)))
        for a, r in zip(failed, own)
        for h in [fatal_letter(a.trace) or holes[0]]
    ]
    rates = []
    for k, reflections in enumerate([own, shuffled, swapped]):
        torch.manual_seed(seed + 2 + k)
        rates.append(_success([r.second for r in attempt_second(ctx, failed, by_id, reflections)]))
    torch.manual_seed(seed + 5)
    retry = attempt_first(ctx, [by_id[a.task_id] for a in failed], 1)
    torch.manual_seed(seed + 6)
    traced = [r.second for r in attempt_second(ctx, failed, by_id, None)]  # "w/o reflection": trace, no rulebook
    cases = _memory_cases(failed, own, by_id, holes)
    memo, written, kept = (
        _memory_effect(ctx, cases, by_id, holes, frozen, seed)
        if memory_cases and cases
        else ({"initial": [], "good": [], "wrong": []}, [], [])
    )
    good = memo["good"]
    return Bands(
        first_success=_success(first),
        parse_rate=sum(r.parsed for r in own) / len(own),
        names_hole_rate=sum(
            bool(set(named_holes(r.rulebook)) & set(holes)) and frozen not in named_holes(r.rulebook) for r in own
        )
        / len(own),
        num_first=len(first),
        num_failed=len(failed),
        second_success=rates[0],
        retry_success=_success(retry),
        shuffled_success=rates[1],
        swapped_success=rates[2],
        contradiction_rate=contradiction_rate([r.rulebook for r in own] + written),
        num_memory_cases=len(cases),
        initial_memory_success=_mean([s for s, _ in memo["initial"]]),
        good_memory_success=_mean([s for s, _ in good]),
        wrong_memory_success=_mean([s for s, _ in memo["wrong"]]),
        merged_rate=_mean([set(holes) <= set(named_holes(t)) for _, t in good]),
        kept_rate=_mean(kept),
        trace_success=_success(traced),
        trace_truncated=_mean([a.truncated for a in traced]),
    )


def _memory_cases(failed: list, own: list, by_id: dict, holes: tuple[str, str]) -> list[tuple[Any, Any]]:
    """(failed attempt, own reflection) of the failures on one kind of hole where the other kind
    lies in the way: the cases where memory can know what the trace cannot show."""
    if len(holes) < 2:  # a world with one kind of hole: a trace shows all there is to know
        return []
    kind = {holes[0]: "H", holes[1]: SECOND_HOLE}
    return [
        (a, r)
        for a, r in zip(failed, own)
        if (f := fatal_letter(a.trace)) in kind
        and ({"H", SECOND_HOLE} - {kind[f]}) <= holes_in_the_way(by_id[a.task_id].data["kinds"])
    ]


def _memory_effect(
    ctx: Any, cases: list, by_id: dict, holes: tuple[str, str], frozen: str, seed: int
) -> tuple[dict[str, list[tuple[bool, str]]], list[str], list[bool]]:
    """Second attempts on the memory ``cases`` under reflections written from the initial prompt,
    a good memory and a wrong one (``{name: [(success, rulebook)]}``); the rulebooks written; and
    whether reflections from a memory naming both holes kept both."""
    memo: dict[str, list[tuple[bool, str]]] = {}
    written: list[str] = []
    for k, name in enumerate(["initial", "good", "wrong"]):
        pairs = cases if name == "initial" else []  # (failed attempt, reflection)
        for other in holes if name != "initial" else []:  # grouped by the hole not revealed
            group = [a for a, _ in cases if fatal_letter(a.trace) != other]
            if group:
                memory = ReflectionMemory()
                memory.maybe_store(rulebook([other]) if name == "good" else rulebook([frozen]), 1.0, 0.0)
                torch.manual_seed(seed + 10 + k)
                pairs += list(zip(group, reflect(ctx, group, memory)))
                written += [r.rulebook for _, r in pairs[-len(group) :]]
        torch.manual_seed(seed + 20 + k)
        retries = attempt_second(ctx, [a for a, _ in pairs], by_id, [r for _, r in pairs])
        memo[name] = [(r.second.success, r.reflection.rulebook) for r in retries]
    kept: list[bool] = []
    for k, order in enumerate([list(holes), list(holes)[::-1]]):  # memory that knows both holes
        memory = ReflectionMemory()
        memory.maybe_store(rulebook(order), 1.0, 0.0)
        torch.manual_seed(seed + 30 + k)
        full = reflect(ctx, [a for a, _ in cases], memory)
        kept += [sorted(hole_facts(r.rulebook)) == sorted(holes) for r in full]
        written += [r.rulebook for r in full]
    return memo, written, kept


def _success(attempts: list) -> float:
    return sum(a.success for a in attempts) / len(attempts)


def _mean(xs: list) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def pooled(results: list[Bands]) -> dict[str, float]:
    """Rates over all runs, each weighted by how many attempts it rests on."""
    first = sum(b.num_first for b in results)
    failed = sum(b.num_failed for b in results)
    out = {
        "first_success": sum(b.first_success * b.num_first for b in results) / first,
        "num_first": first,
        "num_failed": failed,
    }
    for key in (
        "parse_rate",
        "names_hole_rate",
        "contradiction_rate",
        "second_success",
        "retry_success",
        "shuffled_success",
        "swapped_success",
        "trace_success",
        "trace_truncated",
    ):
        out[key] = sum(getattr(b, key) * b.num_failed for b in results) / max(failed, 1)
    out["reflection_gain"] = out["second_success"] - out["retry_success"]
    cases = sum(b.num_memory_cases for b in results)
    out["num_memory_cases"] = cases
    for key in ("initial_memory_success", "good_memory_success", "wrong_memory_success", "merged_rate", "kept_rate"):
        out[key] = sum(getattr(b, key) * b.num_memory_cases for b in results) / max(cases, 1)
    out["memory_gain"] = out["good_memory_success"] - out["initial_memory_success"]
    return out


def verdicts(row: dict[str, float], world: str = "demo") -> dict[str, bool]:
    """Whether each of ``world``'s bands holds for the pooled ``row``."""
    return {k: lo <= row[k] <= hi for k, (lo, hi) in WORLD_BANDS[world].items()}


#: The rows of the bands table in docs (:func:`bands_table`): (label, pooled key, count key or None).
TABLE_ROWS = [
    ("first-attempt success (what evaluation measures)", "first_success", "num_first"),
    ("reflection parse rate (a `<prompt>` block stating a rule)", "parse_rate", None),
    ("self-contradicting rulebooks", "contradiction_rate", None),
    ("reflections naming a real hole and not the ice", "names_hole_rate", None),
    ("failed tasks: second attempt under its own reflection", "second_success", "num_failed"),
    ("same tasks, plain fresh retry (no reflection)", "retry_success", None),
    ("**causal gain of reflection** (own − fresh retry)", "reflection_gain", None),
    ('same tasks, the paper\'s "w/o reflection" retry (trace and feedback, no rulebook)', "trace_success", None),
    ("… its share cut at a length limit", "trace_truncated", None),
    ("control: another failed task's reflection from the same run", "shuffled_success", None),
    ("control: own reflection, revealed hole and ice letters swapped", "swapped_success", None),
    ("memory cases: failures with the unrevealed hole in the way", None, "num_memory_cases"),
    ("second attempt, reflection from the initial prompt", "initial_memory_success", None),
    ("second attempt, reflection from a good memory (the other hole named)", "good_memory_success", None),
    ("**memory effect** (good memory − initial prompt)", "memory_gain", None),
    ("control: reflection from a wrong memory (the ice called a hole)", "wrong_memory_success", None),
    ("reflections from a memory naming both holes that keep both, once each", "kept_rate", None),
]


#: The memory rows: empty on a world with one kind of hole.
MEMORY_KEYS = {
    None,
    "initial_memory_success",
    "good_memory_success",
    "memory_gain",
    "wrong_memory_success",
    "kept_rate",
}


def bands_table(reports: dict[str, dict]) -> str:
    """The bands of each world's ``--json`` report (``{label: report}``) as one markdown table: the pooled value
    (per run in brackets for the headline rows) and each band's verdict, then the bands. Written into docs by
    ``scripts/render_docs.py``, so no figure of it is typed by hand."""
    per_run = {"first_success", "reflection_gain", "trace_truncated", "memory_gain", "kept_rate"}

    def cell(report: dict, key: str | None, count: str | None) -> str:
        pooled, runs = report["pooled"], list(report["runs"].values())
        if key in MEMORY_KEYS and not pooled.get("num_memory_cases"):
            return "–"  # one kind of hole: nothing for memory to add
        if key is None:
            return f"{pooled[count]}"
        fmt = "{:+.2f}" if key.endswith("gain") else "{:.2f}"
        text = fmt.format(pooled[key])
        if key in per_run and len({fmt.format(r[key]) for r in runs}) > 1:
            text += " (" + " / ".join(fmt.format(r[key]) for r in runs) + ")"
        text += f", n = {pooled[count]}" if count else ""
        met = report["bands_met"].get(key)
        return text + ("" if met is None else " ✓" if met else " ✗")

    def band(key: str | None) -> str:
        bands = {w: WORLD_BANDS[r["world"]][key] for w, r in reports.items() if key in WORLD_BANDS[r["world"]]}
        said = {
            f"{lo:g}–{hi:g}": [w for w, b in bands.items() if f"{b[0]:g}–{b[1]:g}" == f"{lo:g}–{hi:g}"]
            for lo, hi in bands.values()
        }
        return "; ".join(v if len(said) == 1 else f"{v} ({', '.join(ws)})" for v, ws in said.items())

    head = "| | " + " | ".join(reports) + " | band |\n|---|" + "---|" * (len(reports) + 1)
    return "\n".join(
        [
            head,
            *(
                f"| {label} | " + " | ".join(cell(r, key, count) for r in reports.values()) + f" | {band(key)} |"
                for label, key, count in TABLE_ROWS
            ),
        ]
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--model",
        type=arg_types.embedded_build,
        default=str(EMBEDDED_DIR),
        metavar="DIR",
        help="a build of the embedded model (default: the shipped one)",
    )
    p.add_argument("--world", choices=sorted(WORLDS), default="demo", help="which embedded world (default: demo)")
    p.add_argument("--run-seeds", type=arg_types.seed, nargs="+", default=[0, 1, 2])
    p.add_argument("--tasks", type=arg_types.whole(1), default=128)
    p.add_argument("--samples", type=arg_types.whole(1), default=2)
    p.add_argument("--seed", type=arg_types.seed, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument(
        "--hole-kinds",
        type=arg_types.whole(1, 2),
        default=None,
        help="the world with this many kinds of hole (how the hard world's one kind was chosen)",
    )
    args = p.parse_args()
    arg_types.distinct(args.run_seeds, "--run-seeds", p)  # a repeated run would count its tasks twice in the pool
    torch.set_num_threads(1)
    model, tok = load_embedded(peft="none", model_dir=args.model, device="cpu")
    rows, results = {}, []
    header = (
        f"{'run':>4} {'letters':>7} {'first':>5} {'parse':>5} {'hole':>5} {'contr':>5} {'failed':>6} "
        f"{'own':>5} {'retry':>5} {'gain':>6} {'shuf':>5} {'swap':>5} {'trace':>5} {'cut':>5} | "
        f"{'cases':>5} {'init':>5} {'good':>5} {'mgain':>6} {'wrong':>5} {'both':>5} {'kept':>5} {'sec':>4}"
    )
    print(header)

    def line(name: str, letters: str, r: dict) -> str:
        return (
            f"{name:>4} {letters:>7} {r['first_success']:5.2f} {r['parse_rate']:5.2f} {r['names_hole_rate']:5.2f} "
            f"{r['contradiction_rate']:5.2f} {r['num_failed']:6d} {r['second_success']:5.2f} "
            f"{r['retry_success']:5.2f} {r['reflection_gain']:+6.2f} {r['shuffled_success']:5.2f} "
            f"{r['swapped_success']:5.2f} {r['trace_success']:5.2f} {r['trace_truncated']:5.2f} | "
            f"{r['num_memory_cases']:5d} {r['initial_memory_success']:5.2f} "
            f"{r['good_memory_success']:5.2f} {r['memory_gain']:+6.2f} {r['wrong_memory_success']:5.2f} "
            f"{r['merged_rate']:5.2f} {r['kept_rate']:5.2f}"
        )

    kinds = {"hole_kinds": args.hole_kinds} if args.hole_kinds else {}  # the world's own unless asked
    for run in args.run_seeds:
        world = demo_world(run, args.world, n_test=args.tasks, **kinds)
        t0 = time.time()
        b = measure_bands(model, tok, world, num_tasks=args.tasks, samples=args.samples, seed=args.seed)
        results.append(b)
        s = world.symbols
        letters = f"{''.join(hole_letters(world))}/{s['frozen']}"
        rows[str(run)] = {"holes": "".join(hole_letters(world)), "frozen": s["frozen"], **b.to_dict()}
        print(line(str(run), letters, b.to_dict()) + f" {time.time() - t0:4.0f}", flush=True)
    total = pooled(results)
    print(line("all", "", total))
    checks, bands = verdicts(total, args.world), WORLD_BANDS[args.world]
    print(
        f"bands ({args.world} world):",
        ", ".join(f"{k} {'ok' if ok else 'MISSED'} (want {bands[k][0]}..{bands[k][1]})" for k, ok in checks.items()),
    )
    model_name = os.path.relpath(args.model, ROOT) if os.path.isabs(str(args.model)) else str(args.model)
    report = {
        "model": model_name,
        "world": args.world,
        "tasks": args.tasks,
        "samples": args.samples,
        "seed": args.seed,
        "runs": rows,
        "pooled": total,
        "bands_met": checks,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print(json.dumps({"pooled": total, "bands_met": checks}))


if __name__ == "__main__":
    main()
