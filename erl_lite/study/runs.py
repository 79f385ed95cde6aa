"""Runs as the study reads them: one record per run (:func:`run_record`, from its history), what it had spent at
each iteration, and when it reached an evaluation level.

Reach is sustained: a run reaches a level at the first evaluation after training began from which every later
evaluation stays at or above it (:func:`reach_step`), so a run that touches the level and falls back has not
reached it; :func:`first_crossing` keeps the first touch as a separate figure. A run that never reaches a level is
censored: its cost is only known to exceed what it spent, so it is counted ("k of n reached"), never averaged.
"""

from __future__ import annotations

import math
from typing import Any

from erl_lite.metric_names import (
    EVAL_SUCCESS,
    OPTIM_STEPS,
    SAMPLES_KEYS,
    SUCCESS_SECOND,
    TIME_STEP,
    TOKENS_FIRST,
    TOKENS_REFLECTION,
    TOKENS_SECOND,
    TRUNCATED_SECOND,
    ZERO_STD_FIRST,
)

#: What a level's cost is counted in, and its column in a record's ``progress`` rows (0: the iteration).
#: Seconds are training CPU seconds in the study's runs, the logged ``time/step`` in a run read by itself.
COSTS = {"iterations": 0, "rollouts": 2, "sampled tokens": 3, "optimizer steps": 4, "seconds": 1}
#: The early iterations :func:`learning_signal` reads: first-attempt groups over the first SIGNAL_STEPS[0], second
#: attempts over the first SIGNAL_STEPS[1] (first attempts settle sooner than the gate empties).
SIGNAL_STEPS = (5, 10)
#: What every record holds, and the type of each (a results file of another shape is refused).
RESULT_FIELDS = {
    "variant": str,
    "seed": int,
    "steps": int,
    "eval_start": (int, float),
    "eval_final": (int, float),
    "eval_curve": list,
}


def run_record(history: Any, variant: str, seed: int, spent_at: dict[int, float] | None = None) -> dict[str, Any]:
    """One run's record: its counts, evaluations (``eval_curve``: [step, seconds, success] each), cost after each
    iteration (``progress``) and share of second attempts cut at a length limit. ``spent_at``: {step: training
    seconds up to it} (the study's CPU seconds); by default the history's ``time/step``, summed."""
    train = history.of_kind("train")
    if spent_at is None:
        spent_at, total = {0: 0.0}, 0.0
        for row in train:
            total += row.get(TIME_STEP) or 0.0
            spent_at[row["step"]] = total
    steps, values = history.series(EVAL_SUCCESS, kind="eval")
    if not values:
        raise ValueError(f"the {variant} run of seed {seed} logged no {EVAL_SUCCESS}: evaluate it (eval_steps > 0)")
    count = lambda *keys: int(sum(row.get(k) or 0 for row in train for k in keys))
    cut = [row[TRUNCATED_SECOND] for row in train if row.get(TRUNCATED_SECOND) is not None]  # over the run
    return {
        "variant": variant,
        "seed": seed,
        "steps": train[-1]["step"] if train else 0,
        "train_seconds": spent_at[max(spent_at)],
        "optim_steps": count(OPTIM_STEPS),
        "samples": count(*SAMPLES_KEYS.values()),
        "rollouts": count(SAMPLES_KEYS["first"], SAMPLES_KEYS["second"]),  # episodes: first and second attempts
        "eval_start": values[0],
        "eval_final": values[-1],
        "eval_curve": [[s, spent_at.get(s, spent_at[max(spent_at)]), v] for s, v in zip(steps, values)],
        "progress": cost_progress(train, spent_at),
        "second_truncated": _mean(cut),
        "signal": learning_signal(train),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def learning_signal(train: list[dict]) -> dict[str, float | None]:
    """Where the early learning signal came from: the share of first-attempt groups whose rewards differ (the
    groups GRPO learns from) over the first iterations, and the success of second attempts and their share cut
    at the length budget over the first that had any (None where none did: RLVR)."""
    values = lambda rows, key: [r[key] for r in rows if r.get(key) is not None]
    zero_std = _mean(values(train[: SIGNAL_STEPS[0]], ZERO_STD_FIRST))
    early = train[: SIGNAL_STEPS[1]]
    return {
        "groups_with_signal": None if zero_std is None else 1 - zero_std,
        "second_success": _mean(values(early, SUCCESS_SECOND)),
        "second_truncated": _mean(values(early, TRUNCATED_SECOND)),
    }


def cost_progress(train: list[dict], spent_at: dict[int, float]) -> list[list[float]]:
    """[iteration, seconds, rollouts, sampled tokens, optimizer steps] after each iteration, each counted from the
    start: rollouts are the episodes played (first and second attempts), sampled tokens every generated token."""
    rows, total = [], [0.0, 0.0, 0.0]
    for r in train:
        total[0] += (r.get(SAMPLES_KEYS["first"]) or 0) + (r.get(SAMPLES_KEYS["second"]) or 0)
        total[1] += sum(r.get(k) or 0 for k in (TOKENS_FIRST, TOKENS_REFLECTION, TOKENS_SECOND))
        total[2] += r.get(OPTIM_STEPS) or 0
        rows.append([r["step"], spent_at.get(r["step"], 0.0), *total])
    return rows


def read_results(rows: Any, path: str) -> list[dict]:
    """``rows`` read from the results file ``path``, refused (naming the file and the row) unless a list of
    records with :data:`RESULT_FIELDS`."""
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
    """Records of several comparisons as one, seed by seed, ERL first: a (variant, seed) found twice is an error.

    Example:
        >>> [r["seed"] for r in merge_seeds([{"variant": "ERL", "seed": 1}, {"variant": "ERL", "seed": 0}])]
        [0, 1]
    """
    seen = [(r["variant"], r["seed"]) for r in results]
    twice = sorted({k for k in seen if seen.count(k) > 1})
    if twice:
        raise ValueError(f"results to merge hold these (variant, seed) twice: {twice}")
    return sorted(results, key=lambda r: (r["seed"], r["variant"] != "ERL"))


def by_variant(results: list[dict]) -> dict[str, dict[int, dict]]:
    """{variant: {seed: record}}, variants in the order they first appear."""
    out: dict[str, dict[int, dict]] = {}
    for r in results:
        out.setdefault(r["variant"], {})[r["seed"]] = r
    return out


def reach_step(curve: list[list[float]], level: float) -> int | None:
    """The first evaluation after training began (step > 0) from which the run stays at or above ``level`` to its
    end; None when it never does. The starting model is not counted: a level is reached by a trained model.

    Example:
        >>> curve = [[0, 0, 0.0], [6, 9, 0.91], [20, 30, 0.22], [25, 38, 0.93], [30, 45, 0.95]]
        >>> reach_step(curve, 0.9), first_crossing(curve, 0.9), reach_step(curve, 0.96)
        (25, 6, None)
    """
    trained = [(s, v) for s, _, v in curve if s > 0]
    return next((s for i, (s, _) in enumerate(trained) if all(v >= level for _, v in trained[i:])), None)


def first_crossing(curve: list[list[float]], level: float) -> int | None:
    """The first evaluation after training began at or above ``level``, held or not (None: never)."""
    return next((s for s, _, v in curve if s > 0 and v >= level), None)


def cost_at(record: dict, step: int) -> dict[str, float]:
    """What a run had spent (:data:`COSTS`) by the end of iteration ``step``."""
    row = next(p for p in record["progress"] if p[0] == step)
    return {name: row[col] for name, col in COSTS.items()}


def cost_to_reach(record: dict, level: float) -> dict[str, float] | None:
    """What a run had spent when it reached ``level`` (sustained, :func:`reach_step`); None when it never did."""
    step = reach_step(record["eval_curve"], level)
    return None if step is None else cost_at(record, step)


def eval_at(record: dict, step: int) -> float | None:
    """The run's evaluation at iteration ``step`` (None where it did not evaluate)."""
    return next((v for s, _, v in record["eval_curve"] if s == step), None)


def eval_auc(curve: list[list[float]]) -> float:
    """The area under a run's evaluation curve over its iterations, divided by their number: the mean evaluation
    over the run (trapezoids between the points measured; the last evaluation for a run that never trained)."""
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, _, v0), (s1, _, v1) in zip(curve, curve[1:]))
    return area / (curve[-1][0] - curve[0][0]) if curve[-1][0] > curve[0][0] else curve[-1][2]


def censored_median(costs: list[float | None], bounds: list[float]) -> float | None:
    """The median (the lower one for an even count) of costs where some runs never got there (None, known only to
    exceed their ``bounds``, what they spent): it is the k-th smallest observed cost when at least k runs got there
    and every censored run had spent at least that much, so each censored cost lies above it; else None.

    Example:
        >>> censored_median([4, 6, None], [30, 30, 30]), censored_median([4, None, None], [30, 30, 30])
        (6, None)
    """
    k = math.ceil(len(costs) / 2)
    seen = sorted(c for c in costs if c is not None)
    if len(seen) < k:
        return None
    candidate = seen[k - 1]
    return candidate if all(b >= candidate for c, b in zip(costs, bounds) if c is None) else None
