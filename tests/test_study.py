"""erl_lite.study: paired statistics whose coverage and error rates are measured here, sustained reach, censored
runs counted rather than averaged, levels at the start not measured, and the findings' verdicts only where the
test rejects."""

from __future__ import annotations

import random
import statistics

import pytest

from erl_lite.history import History
from erl_lite.study.runs import (
    censored_median,
    cost_to_reach,
    eval_auc,
    first_crossing,
    reach_step,
    read_results,
    run_record,
)
from erl_lite.study.stats import sign_flip_p, t_interval, t_quantile, verdict
from erl_lite.study.tables import (
    efficiency_table,
    findings,
    level_at_start,
    paired_table,
    reach_comparison,
    reach_order,
    summary_table,
    tables,
)

STUDY_SEEDS = 10  # the sparse and hard worlds' headline variants


def _coverage(draw, mean: float, n: int, interval, trials: int = 3000) -> float:
    """The share of ``trials`` samples of ``n`` paired differences (seeded) whose interval holds ``mean``."""
    rng = random.Random(0)
    hits = 0
    for _ in range(trials):
        _, low, high = interval([draw(rng) for _ in range(n)])
        hits += low <= mean <= high
    return hits / trials


def _percentile_bootstrap(values: list[float], draws: int = 400) -> tuple[float, float, float]:
    """The interval the study used before: a 95% percentile bootstrap of the mean over seeds."""
    rng = random.Random(1)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(draws))
    return statistics.fmean(values), means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def test_the_t_interval_covers_95_percent_at_the_study_s_seed_count_and_the_old_bootstrap_does_not():
    # Normal paired differences (sd 0.3 around +0.2): the t interval's coverage at ten and at five seeds is
    # within simulation error (3,000 trials: sd 0.004) of 0.95, so >= 0.93 holds with room.
    normal = lambda rng: rng.gauss(0.2, 0.3)
    assert _coverage(normal, 0.2, STUDY_SEEDS, t_interval) >= 0.93
    assert _coverage(normal, 0.2, 5, t_interval) >= 0.93
    # The negative control: the percentile bootstrap over 3 seeds is close to [min, max], and covers about 0.75.
    assert _coverage(normal, 0.2, 3, _percentile_bootstrap, trials=1000) < 0.85
    # Where the interval is weaker, as stats.py says: one seed in five in a far cluster (a run stuck at the start
    # beside runs that learned), coverage about 0.88 at ten seeds; one in ten, about 0.64 (most samples hold no
    # stuck seed at all). Bounds: +-0.03, several simulation sds.
    for share, expected in ((0.2, 0.88), (0.1, 0.64)):
        cluster = lambda rng, q=share: (0.95 if rng.random() < q else 0.0) + rng.gauss(0, 0.02)
        assert abs(_coverage(cluster, 0.95 * share, STUDY_SEEDS, t_interval) - expected) < 0.03, share


def test_the_sign_flip_test_is_exact_holds_its_level_under_the_null_and_finds_a_real_difference():
    assert sign_flip_p([0.1] * 5) == 2 / 32 and sign_flip_p([0.1] * 10) == 2 / 1024
    assert sign_flip_p([0.3, -0.1]) == 1.0 and sign_flip_p([]) == 1.0
    # |sum| >= 5.5: the observed pattern, the one with -0.5 flipped (6.5), and both mirrored: 4 of 16.
    assert sign_flip_p([1.0, 2.0, 3.0, -0.5]) == 4 / 16
    rng = random.Random(2)
    null = [sign_flip_p([rng.gauss(0, 1) for _ in range(STUDY_SEEDS)]) < 0.05 for _ in range(600)]
    assert sum(null) / len(null) <= 0.06  # at most its level (0.05), within simulation error
    shifted = [sign_flip_p([rng.gauss(1, 1) for _ in range(STUDY_SEEDS)]) < 0.05 for _ in range(300)]
    assert sum(shifted) / len(shifted) > 0.7  # a shift of one sd at ten seeds is found most of the time
    # Above 16 seeds the patterns are sampled; the p-value stays close to the exact one.
    assert abs(sign_flip_p([0.1] * 18) - 2 / 2**18) < 1e-3


def test_student_t_quantiles_and_the_interval():
    # Table values of Student's t (two-sided 95%): df 1, 4, 9, 29; the normal's 1.960 as df grows.
    for df, value in ((1, 12.706), (4, 2.776), (9, 2.262), (29, 2.045), (1000, 1.962)):
        assert abs(t_quantile(0.975, df) - value) < 2e-3, df
    mean, low, high = t_interval([0.1, 0.3, 0.2, 0.4])
    assert mean == pytest.approx(0.25) and low < mean < high and high - mean == pytest.approx(mean - low)
    assert t_interval([0.5]) == (0.5, 0.5, 0.5)


def test_a_verdict_names_the_better_variant_only_where_the_test_rejects():
    assert verdict(("ERL", "RLVR"), [0.3] * 10) == "ERL ahead of RLVR (p = 0.002)"
    assert verdict(("ERL", "RLVR"), [-0.3] * 10) == "RLVR ahead of ERL (p = 0.002)"
    assert verdict(("ERL", "RLVR"), [-5.0] * 10, higher=False) == "ERL ahead of RLVR (p = 0.002)"  # a cost
    assert verdict(("ERL", "RLVR"), [0.9] * 5) == "no difference shown (p = 0.062)"  # five seeds cannot tell
    assert verdict(("ERL", "RLVR"), [0.3, -0.3] * 5) == "no difference shown (p = 1.000)"


def _curve(evals: dict[int, float], per_step: float = 2.0) -> list[list[float]]:
    return [[s, s * per_step, v] for s, v in sorted(evals.items())]


def _record(variant, seed, evals, per_step=(2.0, 10, 100, 2), **extra):
    """A run's record: ``evals`` {iteration: evaluation}; every iteration costs ``per_step`` = (seconds, rollouts,
    sampled tokens, optimizer steps)."""
    last = max(evals)
    return {
        "variant": variant,
        "seed": seed,
        "steps": last,
        "train_seconds": last * per_step[0],
        "eval_start": evals[0],
        "eval_final": evals[last],
        "eval_curve": _curve(evals, per_step[0]),
        "progress": [[s, *(s * c for c in per_step)] for s in range(1, last + 1)],
        **extra,
    }


def test_reach_is_sustained_and_the_first_crossing_is_kept_apart():
    # The sparse seed 42: at 0.91 at iteration 6, 0.22 at 20, 0.52 at the end: it never reached 0.9.
    blip = _record("ERL", 42, {0: 0.0, 6: 0.91, 20: 0.22, 30: 0.52})
    assert reach_step(blip["eval_curve"], 0.9) is None and first_crossing(blip["eval_curve"], 0.9) == 6
    assert cost_to_reach(blip, 0.9) is None
    held = _record("ERL", 1, {0: 0.6, 2: 0.4, 4: 0.95, 6: 0.89, 8: 0.93, 10: 0.97})
    assert reach_step(held["eval_curve"], 0.9) == 8 and first_crossing(held["eval_curve"], 0.9) == 4
    assert reach_step(held["eval_curve"], 0.5) == 4  # the starting model's 0.6 does not count
    assert cost_to_reach(held, 0.9) == {
        "iterations": 8,
        "rollouts": 80,
        "sampled tokens": 800,
        "optimizer steps": 16,
        "seconds": 16.0,
    }
    # Mean evaluation over the iterations (trapezoids): (0.5*2 + 0.675*2 + 0.92*2 + 0.91*2 + 0.95*2) / 10.
    assert eval_auc(held["eval_curve"]) == pytest.approx((1.0 + 1.35 + 1.84 + 1.82 + 1.9) / 10)


def test_a_censored_median_is_given_only_where_the_runs_that_never_got_there_cannot_move_it():
    assert censored_median([4, 6, None], [30, 30, 30]) == 6  # the censored run lies above 6
    assert censored_median([4, None, None], [30, 30, 30]) is None  # most never got there
    assert censored_median([4, 6, None], [30, 30, 5]) is None  # it stopped at 5: it may lie below 6
    assert censored_median([3, 1, 2, 4], [9] * 4) == 2  # the lower middle of an even count


def _world(erl_finals, other_finals, other="RLVR", start=0.01, reach_other=True):
    """ERL and ``other`` on one seed each per final, evaluated at 0, 10 and 30."""
    rows = []
    for seed, (a, b) in enumerate(zip(erl_finals, other_finals)):
        rows.append(_record("ERL", seed, {0: start, 4: 0.95, 10: a, 30: a}, second_truncated=0.0))
        late = {0: start, 4: start, 10: b, 30: b} if reach_other else {0: start, 10: b, 30: min(b, 0.5)}
        rows.append(_record(other, seed, late, per_step=(2.0, 25, 100, 1)))
    return rows


def test_the_tables_count_runs_that_never_got_there_and_never_average_them():
    results = _world([0.97] * 5, [0.95, 0.95, 0.3, 0.3, 0.3])
    table = efficiency_table(results, levels=(0.9,))
    # ERL holds 0.9 from iteration 4 on every seed; RLVR from 10 on two seeds, never on three: the median is
    # unknown ("-"), the three are counted as "never", and nothing is averaged over them.
    assert "| ERL | 5 of 5 | 4 | 40 | 400 | 8 | 8 | 4 / 4 / 4 / 4 / 4 | 4 / 4 / 4 / 4 / 4 |" in table
    assert "| RLVR | 2 of 5 | - | - | - | - | - | 10 / 10 / never / never / never |" in table
    assert ">=" not in table
    summary = summary_table(results)
    assert "| ERL | 5 | 30 |" in summary and "| 0.97 / 0.97 / 0.97 / 0.97 / 0.97 | 0.9" in summary
    assert summary.splitlines()[2].endswith("| 0.00 / 0.00 / 0.00 / 0.00 / 0.00 |")  # ERL's cut share, per seed


def test_a_level_at_or_below_the_start_is_not_measured():
    results = _world([0.97] * 3, [0.5] * 3, start=0.52)
    assert "not measured" in level_at_start(results, 0.5) and "0.52-0.52" in level_at_start(results, 0.5)
    assert level_at_start(results, 0.9) is None
    table = efficiency_table(results)
    assert "An evaluation of 0.50 is not measured" in table and "reach a first-attempt evaluation of 0.90" in table
    assert "Reaching 0.50" not in findings(results, "Demo", ["RLVR"])


def test_reaching_first_is_compared_by_order_and_censored_runs_never_make_a_winner():
    erl = _record("ERL", 0, {0: 0.0, 4: 0.95, 30: 0.97})
    late = _record("RLVR", 0, {0: 0.0, 20: 0.95, 30: 0.95}, per_step=(2.0, 25, 100, 1))
    never = _record("RLVR", 0, {0: 0.0, 30: 0.3}, per_step=(2.0, 25, 100, 1))
    short = _record("RLVR", 0, {0: 0.0, 1: 0.3}, per_step=(2.0, 25, 100, 1))  # stopped after 25 rollouts
    assert reach_order(erl, late, 0.9) == 1 and reach_order(late, erl, 0.9) == -1
    # Where every run got there the difference itself is given: ERL 4 iterations x 10 rollouts, RLVR 20 x 25.
    assert "ERL first on 1 of 1 seed, RLVR on 0, ERL - RLVR -460 rollouts:" in reach_comparison(
        ("ERL", "RLVR"), {0: erl}, {0: late}, 0.9
    )
    assert "rollouts:" not in reach_comparison(("ERL", "RLVR"), {0: erl}, {0: never}, 0.9)  # censored: order only
    assert reach_order(erl, never, 0.9) == 1  # it played 750 rollouts without getting there; ERL needed 40
    assert reach_order(erl, short, 0.9) is None  # 25 rollouts say nothing against ERL's 40
    both_never = _record("ERL", 0, {0: 0.0, 30: 0.4})
    assert reach_order(both_never, never, 0.9) is None
    # Ten seeds where neither reached 0.9: no order is known, so no verdict, whatever the run lengths.
    stuck = [_record("ERL", s, {0: 0.0, 30: 0.4}) for s in range(10)]
    stuck += [_record("RLVR", s, {0: 0.0, 30: 0.3}, per_step=(2.0, 25, 100, 1)) for s in range(10)]
    text = findings(stuck, "Hard world", ["RLVR"])
    assert "ERL 0 of 10, RLVR 0 of 10" in text and "first on 0 of 10 seeds, RLVR on 0 (10 unknown" in text
    assert "ERL ahead" not in text.split("Reaching")[1]


def test_the_findings_give_paired_differences_and_a_verdict_only_where_p_is_small():
    ahead = findings(_world([0.97] * 10, [0.3, 0.4] * 5), "Hard world", ["RLVR"])
    assert ahead.startswith("Hard world, 10 seeds (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), compared paired by seed.")
    assert "ERL - RLVR, over 10 seeds: final evaluation +0.62 [" in ahead
    assert "final evaluation +0.62 [+0.58, +0.66]: ERL ahead of RLVR (p = 0.002)" in ahead
    assert "first on 10 of 10 seeds, RLVR on 0: ERL ahead of RLVR (p = 0.002)" in ahead
    behind = findings(_world([0.3] * 10, [0.97] * 10), "Hard world", ["RLVR"])
    assert "RLVR ahead of ERL (p = 0.002)" in behind and "ERL ahead" not in behind
    # Five seeds: the same differences, no verdict, and the reason said.
    five = findings(_world([0.97] * 5, [0.3] * 5), "Sparse world", ["RLVR"])
    assert "over 5 seeds (where the test's smallest p is 0.062: it can call none ahead)" in five
    assert "ahead of" not in five and "smallest p" not in ahead  # ten seeds: no such note
    # A variant run on fewer seeds than ERL says so beside its figure, and is compared on the seeds both ran.
    fewer = findings(
        _world([0.97] * 10, [0.3] * 10) + _world([0.97] * 5, [0.5] * 5, other="ERL w/o memory")[1::2],
        "Hard world",
        ["RLVR", "ERL w/o memory"],
    )
    assert "ERL w/o memory 0.50 [0.50, 0.50] (5 seeds)" in fewer and "RLVR 0.30 [0.30, 0.30]," in fewer
    assert "ERL - ERL w/o memory, over 5 seeds (where" in fewer and "ERL ahead of RLVR (p = 0.002)" in fewer
    # A mixed sign: no verdict at ten seeds either.
    mixed = findings(_world([0.97, 0.3] * 5, [0.3, 0.97] * 5), "Hard world", ["RLVR"])
    assert "final evaluation +0.00 [" in mixed and "ahead of" not in mixed.split("Reaching")[0]


def test_each_seed_s_cut_share_is_reported_and_a_seed_above_the_limit_is_named():
    results = _world([0.97] * 5, [0.9] * 5, other="ERL w/o reflection")
    shares = [0.09, 0.125, 0.02, 0.10, 0.06]
    for r in results:
        if r["variant"] == "ERL w/o reflection":
            r["second_truncated"] = shares[r["seed"]]
    text = findings(results, "Hard world", ["ERL w/o reflection"])
    assert "second attempts cut at the length limit, per seed: 0.09 / 0.12 / 0.02 / 0.10 / 0.06" in text
    assert "above 0.10 on seed 1 (0.12), where its score partly measures the length limit" in text
    for r in results:  # with the share over its first iterations, the findings say when the cuts came
        r["signal"] = {"second_truncated": 0.0}
    text = findings(results, "Hard world", ["ERL w/o reflection"])
    assert "above 0.10 on seed 1 (0.12; 0.00 in iterations 1-10), where" in text
    results = [{**r, "second_truncated": 0.05} if r["variant"] != "ERL" else r for r in results]
    assert "above 0.10" not in findings(results, "Hard world", ["ERL w/o reflection"])


def test_the_paired_table_compares_erl_with_every_variant_on_the_seeds_both_ran():
    results = _world([0.97] * 10, [0.3] * 10) + [
        _record("ERL w/o memory", s, {0: 0.01, 10: 0.9, 30: 0.96}) for s in range(5)
    ]
    table = paired_table(results)
    assert "| RLVR | 10 | +0.67 [+0.67, +0.67]: ERL ahead of RLVR (p = 0.002) |" in table
    assert "| ERL w/o memory | 5 | +0.01 [" in table and "ERL ahead of ERL w/o memory" not in table
    assert paired_table([r for r in results if r["variant"] == "RLVR"]) == ""  # no ERL: nothing to pair


def _history(evals: dict[int, float], steps: int = 4) -> History:
    history = History()
    for step in range(1, steps + 1):
        history.log(
            {
                "step": step,
                "time/step": 1.5,
                "optim/steps": 2,
                "samples/first": 16,
                "samples/second": 4,
                "samples/reflection": 4,
                "tokens/first": 100,
                "tokens/reflection": 50,
                "tokens/second": 30,
                "truncated/second": 0.25 if step == 1 else 0.0,
                "frac_reward_zero_std/first": 0.5,
            }
        )
        if step in evals:
            history.log({"step": step, "eval/success": evals[step]}, kind="eval")
    history.records.insert(0, {"kind": "eval", "step": 0, "eval/success": evals[0]})
    return history


def test_a_run_record_is_read_from_its_history():
    record = run_record(_history({0: 0.1, 2: 0.6, 4: 0.9}), "ERL", 3)
    assert record["variant"] == "ERL" and record["seed"] == 3 and record["steps"] == 4
    assert record["eval_curve"] == [[0, 0.0, 0.1], [2, 3.0, 0.6], [4, 6.0, 0.9]]  # seconds: time/step, summed
    assert record["progress"][-1] == [4, 6.0, 80, 720, 8] and record["rollouts"] == 80 and record["samples"] == 96
    assert record["second_truncated"] == pytest.approx(0.0625) and record["signal"]["groups_with_signal"] == 0.5
    cpu = run_record(_history({0: 0.1, 4: 0.9}), "ERL", 3, spent_at={0: 0.0, 1: 1, 2: 2, 3: 3, 4: 10.0})
    assert cpu["train_seconds"] == 10.0 and cpu["eval_curve"][-1] == [4, 10.0, 0.9]
    with pytest.raises(ValueError, match="logged no eval/success"):
        run_record(History(), "RLVR", 0)
    assert read_results([record], "r.json") == [record]
    with pytest.raises(ValueError, match=r"r.json: run 0 is not a comparison's run .*'seed'"):
        read_results([{**record, "seed": "3"}], "r.json")


def test_every_table_renders_for_a_full_comparison():
    text = tables(_world([0.97] * 5, [0.3] * 5))
    for part in ("| variant | seeds |", "reach a first-attempt evaluation of 0.50", "mean evaluation over", "paired"):
        assert part in text
