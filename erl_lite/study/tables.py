"""The study's tables and its findings paragraph, rendered from run records (:mod:`erl_lite.study.runs`).

Every comparison is paired by seed: ERL against each other variant on the seeds both ran, as the mean of the
per-seed differences with its interval and the exact sign-flip test's p-value (:mod:`erl_lite.study.stats`); a
variant is named ahead only where that test rejects. Reaching a level is sustained, and a level at or below a
seed's starting evaluation is not measured (reaching it takes no learning). Runs that never reach a level are
counted ("k of n reached") and compared only by order: on a seed where one run got there and the other had
spent at least as much without getting there, the first is known to be faster; a sign test is run on those seeds.
"""

from __future__ import annotations

import statistics

from erl_lite.study.runs import (
    COSTS,
    SIGNAL_STEPS,
    by_variant,
    censored_median,
    cost_at,
    cost_to_reach,
    eval_at,
    eval_auc,
    first_crossing,
    reach_step,
)
from erl_lite.study.stats import ALPHA, COVERAGE, sign_flip_p, t_interval, verdict

#: The first-attempt evaluations whose cost the tables give; the findings speak of the last.
LEVELS = (0.5, 0.9)
#: The iteration compared besides the end: the paper claims learning efficiency as well as final scores.
EARLY = 10
#: The variant every other is compared with, and the share of its second attempts above which an ablation's
#: score starts to measure the length limit rather than the ablation.
REFERENCE, CUT_LIMIT = "ERL", 0.10
#: What the paired comparisons measure: name -> a record's value (higher is better).
MEASURES = {
    "final evaluation": lambda r: r["eval_final"],
    f"evaluation at iteration {EARLY}": lambda r: eval_at(r, EARLY),
    "mean evaluation over iterations": lambda r: eval_auc(r["eval_curve"]),
}
INTERVALS = (
    f"Intervals: {COVERAGE:.0%} Student t over seeds; p: the exact sign-flip test over the seeds both ran, "
    f"a variant named ahead only where p < {ALPHA:.2f}."
)


def _ci(values: list[float], fmt: str = "{:.2f}", low: float = 0.0, high: float = 1.0) -> str:
    """Mean [interval], the interval cut to the range the value lies in (evaluations in [0, 1], their differences
    in [-1, 1]), which cannot lower its coverage."""
    mean, lo, hi = t_interval(values)
    if len(values) < 2:  # one seed: no interval
        return fmt.format(mean)
    return "{} [{}, {}]".format(*(fmt.format(x) for x in (mean, max(lo, low), min(hi, high))))


def _joined(values: list, fmt: str = "{:.2f}") -> str:
    return " / ".join("-" if v is None else "never" if v is False else fmt.format(v) for v in values)


def _seeds(n: int) -> str:
    return f"{n} seed{'s' * (n != 1)}"


def _variants(results: list[dict], variants: list[str] | None) -> dict[str, dict[int, dict]]:
    by = by_variant(results)
    return {v: by[v] for v in (variants or by) if v in by}


def summary_table(results: list[dict], variants: list[str] | None = None) -> str:
    """Per variant: iterations, optimizer steps, samples, rollouts and seconds (means over seeds), the evaluation
    before and after (mean with its interval, and per seed), the mean evaluation over iterations (the area under
    the curve, with its interval) and, per seed, the share of second attempts cut."""
    lines = [
        "| variant | seeds | iterations (mean) | optimizer steps (mean) | samples (mean) | rollouts (mean) | "
        f"seconds (mean) | evaluation before | evaluation after [{COVERAGE:.0%} t interval] | after, per seed | "
        "mean evaluation over iterations | second attempts cut, per seed |",
        "|---" * 12 + "|",
    ]
    for v, runs in _variants(results, variants).items():
        rs = list(runs.values())
        mean = lambda key: "-" if any(key not in r for r in rs) else f"{statistics.fmean(r[key] for r in rs):.0f}"
        cells = [mean("steps"), mean("optim_steps"), mean("samples"), mean("rollouts"), mean("train_seconds")]
        lines.append(
            f"| {v} | {len(rs)} | " + " | ".join(cells) + f" | {statistics.fmean(r['eval_start'] for r in rs):.2f} | "
            f"{_ci([r['eval_final'] for r in rs])} | {_joined([r['eval_final'] for r in rs])} | "
            f"{_ci([eval_auc(r['eval_curve']) for r in rs])} | {_joined([r.get('second_truncated') for r in rs])} |"
        )
    return "\n".join(lines) + "\n"


def level_at_start(results: list[dict], level: float) -> str | None:
    """Why ``level`` is not measured (some seed starts at or above it), or None when every seed starts below."""
    starts = {r["seed"]: r["eval_start"] for r in results if r["eval_start"] >= level}
    if not starts:
        return None
    return (
        f"An evaluation of {level:.2f} is not measured: it is at or below the starting evaluation on seeds "
        f"{', '.join(map(str, sorted(starts)))} ({min(starts.values()):.2f}-{max(starts.values()):.2f}), "
        "so reaching it takes no learning."
    )


def efficiency_table(results: list[dict], variants: list[str] | None = None, levels=LEVELS) -> str:
    """Per level: how many runs of each variant reached it (sustained), the median cost of getting there where
    the runs that never did cannot change it (:func:`~erl_lite.study.runs.censored_median`; "-" elsewhere), and
    per seed the iteration it was reached at and the iteration it was first touched at."""
    lines = []
    for level in levels:
        skipped = level_at_start(results, level)
        if skipped:
            lines += ["", skipped]
            continue
        lines += [
            "",
            f"What it took to reach a first-attempt evaluation of {level:.2f} and stay at or above it to the end: "
            'the median over seeds ("-" where runs that never got there leave it unknown). A run that never got '
            "there is counted, not averaged; the first crossing is the first evaluation at the level, held or not.",
            "",
            "| variant | reached | " + " | ".join(COSTS) + " | reached at, per seed | first crossing, per seed |",
            "|---" * (len(COSTS) + 4) + "|",
        ]
        for v, runs in _variants(results, variants).items():
            rs = list(runs.values())
            costs = [cost_to_reach(r, level) for r in rs]
            spent = [cost_at(r, r["progress"][-1][0]) if r.get("progress") else None for r in rs]
            if None in spent:  # records without cost rows (older results): reach only
                medians = ["-"] * len(COSTS)
            else:
                medians = [censored_median([c and c[n] for c in costs], [s[n] for s in spent]) for n in COSTS]
                medians = ["-" if m is None else f"{m:.0f}" for m in medians]
            reached = [reach_step(r["eval_curve"], level) or False for r in rs]
            crossed = [first_crossing(r["eval_curve"], level) or False for r in rs]
            lines.append(
                f"| {v} | {sum(map(bool, reached))} of {len(rs)} | " + " | ".join(medians) + " | "
                f"{_joined(reached, '{}')} | {_joined(crossed, '{}')} |"
            )
    return "\n".join(lines) + "\n"


def paired(erl: dict[int, dict], other: dict[int, dict], measure) -> tuple[list[int], list[float]]:
    """(seeds, ERL - other per seed) of ``measure`` over the seeds both ran and measured."""
    seeds = [s for s in erl if s in other and measure(erl[s]) is not None and measure(other[s]) is not None]
    return seeds, [measure(erl[s]) - measure(other[s]) for s in seeds]


def difference(erl: dict[int, dict], other: dict[int, dict], measure, names: tuple[str, str]) -> str | None:
    """ERL - other of ``measure``, paired by seed: the mean difference [interval]: the verdict (None: no pairs)."""
    _, diffs = paired(erl, other, measure)
    return f"{_ci(diffs, '{:+.2f}', -1.0)}: {verdict(names, diffs)}" if diffs else None


def reach_order(erl: dict, other: dict, level: float, cost: str = "rollouts") -> int | None:
    """+1 where ERL reached ``level`` (sustained) for less ``cost`` than the other run, -1 where the other did,
    0 for a tie; None where the order is unknown (neither got there, or the one that did not had spent less
    than the other's cost of getting there)."""
    mine, theirs = cost_to_reach(erl, level), cost_to_reach(other, level)
    if mine and theirs:
        return (mine[cost] < theirs[cost]) - (mine[cost] > theirs[cost])
    if mine:
        return 1 if cost_at(other, other["progress"][-1][0])[cost] >= mine[cost] else None
    if theirs:
        return -1 if cost_at(erl, erl["progress"][-1][0])[cost] >= theirs[cost] else None
    return None


def reach_comparison(names: tuple[str, str], erl: dict[int, dict], other: dict[int, dict], level: float) -> str:
    """Who reached ``level`` first, in rollouts, on the seeds both ran, with the sign test over the known orders;
    where every run of both got there, the paired difference of the rollouts it took too."""
    orders = [reach_order(erl[s], other[s], level) for s in erl if s in other]
    known = [o for o in orders if o]
    text = f"{names[0]} first on {known.count(1)} of {_seeds(len(orders))}, {names[1]} on {known.count(-1)}"
    text += f" ({len(orders) - len(known)} unknown or tied)" if len(known) < len(orders) else ""
    costs = [(cost_to_reach(erl[s], level), cost_to_reach(other[s], level)) for s in erl if s in other]
    if costs and all(a and b for a, b in costs):  # none censored: the difference itself
        rollouts = _ci([a["rollouts"] - b["rollouts"] for a, b in costs], "{:+.0f}", -float("inf"), float("inf"))
        text += f", {names[0]} - {names[1]} {rollouts} rollouts"
    return f"{text}: {verdict(names, known, p=sign_flip_p(known))}"


def paired_table(results: list[dict], variants: list[str] | None = None, level: float = LEVELS[-1]) -> str:
    """ERL against each other variant, paired by seed: per measure the mean difference with its interval and
    the verdict, and who reached ``level`` first (in rollouts) with the sign test."""
    by = _variants(results, variants)
    if REFERENCE not in by or len(by) < 2:
        return ""
    reach = level_at_start(results, level) is None and all(r.get("progress") for rs in by.values() for r in rs.values())
    head = [*MEASURES, *([f"reaching {level:.2f} first (rollouts)"] if reach else [])]
    lines = [
        "",
        f"{REFERENCE} against each variant, paired by seed (the seeds both ran): the mean of the per-seed "
        f"differences {REFERENCE} - variant [{COVERAGE:.0%} t interval] and which is ahead. {INTERVALS}",
        "",
        "| against | seeds | " + " | ".join(head) + " |",
        "|---" * (len(head) + 2) + "|",
    ]
    for v, runs in by.items():
        if v == REFERENCE:
            continue
        cells = [difference(by[REFERENCE], runs, measure, (REFERENCE, v)) or "-" for measure in MEASURES.values()]
        if reach:
            cells.append(reach_comparison((REFERENCE, v), by[REFERENCE], runs, level))
        n = len([s for s in by[REFERENCE] if s in runs])
        lines.append(f"| {v} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def per_seed_table(results: list[dict], variants: list[str] | None, entry: str, intro: str, columns: dict) -> str:
    """Each variant's ``record[entry][key]`` per seed (``columns``: key -> header) under ``intro``; "-" where a run
    lacks it, and empty when no record carries ``entry``."""
    if not any(entry in r for r in results):
        return ""
    lines = ["", intro, "", "| variant | " + " | ".join(columns.values()) + " |", "|---" * (len(columns) + 1) + "|"]
    for v, runs in _variants(results, variants).items():
        cells = [_joined([r.get(entry, {}).get(key) for r in runs.values()]) for key in columns]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def signal_table(results: list[dict], variants: list[str] | None = None) -> str:
    """Where the early learning signal came from (:func:`~erl_lite.study.runs.learning_signal`), per seed."""
    return per_seed_table(
        results,
        variants,
        "signal",
        f"The early learning signal, per seed: first-attempt groups whose rewards differ (what GRPO learns "
        f"from) over iterations 1-{SIGNAL_STEPS[0]}, and the gated tasks' second attempts over iterations "
        f"1-{SIGNAL_STEPS[1]}: their success, and the share with a reply (or the episode) cut at its length budget.",
        {
            "groups_with_signal": "groups with signal",
            "second_success": "second attempts: success",
            "second_truncated": "a reply cut",
        },
    )


def tables(results: list[dict], variants: list[str] | None = None) -> str:
    """Every table above, in order."""
    return (
        summary_table(results, variants)
        + efficiency_table(results, variants)
        + paired_table(results, variants)
        + signal_table(results, variants)
    )


def cut_shares(name: str, runs: dict[int, dict]) -> str:
    """A variant's share of second attempts cut at a length limit on each seed, and the seeds above
    :data:`CUT_LIMIT`, where its score partly measures that limit, with the share over the first iterations
    (:func:`~erl_lite.study.runs.learning_signal`) to say when the cuts came ("" where none were played)."""
    shares = {s: r.get("second_truncated") for s, r in runs.items()}
    if None in shares.values():
        return ""
    early = lambda r: r.get("signal", {}).get("second_truncated")
    over = [
        f"{s} ({x:.2f}"
        + ("" if early(runs[s]) is None else f"; {early(runs[s]):.2f} in iterations 1-{SIGNAL_STEPS[1]}")
        + ")"
        for s, x in shares.items()
        if x > CUT_LIMIT
    ]
    text = f"{name}'s second attempts cut at the length limit, per seed: {_joined(list(shares.values()))}"
    if over:
        text += (
            f"; above {CUT_LIMIT:.2f} on seed{'s' * (len(over) > 1)} {', '.join(over)}, where its score partly "
            "measures the length limit rather than the ablation"
        )
    return text + "."


def findings(results: list[dict], title: str, controls: list[str], said: dict[str, str] | None = None) -> str:
    """The findings paragraph: ``title``, every variant's final evaluation, ERL against each of ``controls``
    paired by seed (each of :data:`MEASURES`, and who reached the last of :data:`LEVELS` first), and the cut share
    of each control that plays second attempts, per seed. ``said``: a variant's name in a sentence."""
    said = said or {}
    name = lambda v: said.get(v, v)
    by = by_variant(results)
    seeds = sorted(by[REFERENCE])
    controls = [c for c in controls if c in by]
    text = [
        f"{title}, {_seeds(len(seeds))} ({', '.join(map(str, seeds))}), compared paired by seed. Final first-attempt "
        "evaluation: "
        + ", ".join(
            f"{name(v)} {_ci([r['eval_final'] for r in rs.values()])}"
            + (f" ({_seeds(len(rs))})" * (rs.keys() != by[REFERENCE].keys()))
            for v, rs in by.items()
        )
    ]
    for v in controls:
        parts = [
            (label, difference(by[REFERENCE], by[v], measure, (REFERENCE, name(v))))
            for label, measure in MEASURES.items()
        ]
        parts = [f"{label} {text}" for label, text in parts if text]  # no pairs: runs never evaluated at EARLY
        n = len([s for s in seeds if s in by[v]])
        smallest = 2 / 2**n  # the test's smallest p: the all-positive and all-negative sign patterns
        few = f" (where the test's smallest p is {smallest:.3f}: it can call none ahead)" * (smallest >= ALPHA)
        text.append(f"{REFERENCE} - {name(v)}, over {_seeds(n)}{few}: " + "; ".join(parts))
    level = LEVELS[-1]
    skipped = level_at_start(results, level)
    if skipped:
        text.append(skipped.rstrip("."))
    elif all(r.get("progress") for rs in by.values() for r in rs.values()):
        reached = ", ".join(
            f"{name(v)} {sum(cost_to_reach(r, level) is not None for r in rs.values())} of {len(rs)}"
            for v, rs in by.items()
        )
        first = "; ".join(reach_comparison((REFERENCE, name(v)), by[REFERENCE], by[v], level) for v in controls)
        text.append(f"Reaching {level:.2f} and staying there: {reached}; first there, in rollouts: {first}")
    text += [cut_shares(name(v), by[v]).rstrip(".") for v in controls if cut_shares(v, by[v])]
    return ". ".join(text) + ". " + INTERVALS
