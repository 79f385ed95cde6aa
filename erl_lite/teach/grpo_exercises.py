"""Check functions for notebook 05's GRPO exercises: advantages, the clipped loss and its curve,
internalization weights. Each ``check_*`` recomputes the answer with the library's own functions,
prints one message (the hint names the usual mistake a wrong answer matches) and returns a bool.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

from erl_lite.config import ERLConfig
from erl_lite.config.field_types import float_or_none
from erl_lite.core.advantages import group_advantages, grouped_advantages, internalization_weights, per_group
from erl_lite.teach.answers import NO_ANSWER, close, missing, numbers_of, ok, rounding_hint, wrong


def _population_std_advantages(rewards: list[float], eps: float = 1e-6) -> list[float]:
    """The common mistake: dividing by n instead of n - 1."""
    if len(rewards) == 1:
        return list(rewards)  # the singleton rule is not this mistake
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + eps) for r in rewards]


def check_advantages(rewards: Sequence[float], answer: Any, tol: float = 1e-3) -> bool:
    """Check GRPO advantages of one group: ``A = (r - mean) / (std + 1e-6)``, unbiased std.

    Example:
        >>> check_advantages([1.0, 0.0], [0.7071, -0.7071])
        ✓ Correct: [0.707, -0.707].
        True
    """
    if missing(answer):
        return wrong(NO_ANSWER, "one advantage per reward, in the same order.")
    values = numbers_of(answer)
    if values is None:
        return wrong(f"expected a list of numbers, got {answer!r}.", "one advantage per reward.")
    rewards = [float(r) for r in rewards]
    expected = group_advantages(rewards)
    if len(values) != len(expected):
        return wrong(
            f"you gave {len(values)} advantages for {len(expected)} rewards.",
            "every sequence of the group gets its own advantage.",
        )
    if close(values, expected, tol):
        return ok(f"Correct: {[round(a, 3) for a in expected]}.")
    if len(rewards) == 1:
        hint = (
            "a group of one has no baseline to compare with; erl_lite (like the reference code) "
            "uses mean 0 and std 1, so A = r."
        )
    elif all(r == rewards[0] for r in rewards):
        hint = "all rewards are equal: nothing to prefer inside the group, so every advantage is 0."
    elif close(values, _population_std_advantages(rewards), tol):
        hint = "use the unbiased standard deviation (divide the squared deviations by n - 1, as torch.std does)."
    elif close(values, [r - sum(rewards) / len(rewards) for r in rewards], tol):
        hint = "you subtracted the mean; now divide by the group's standard deviation (+ 1e-6)."
    elif close(values, [-a for a in expected], tol):
        hint = "the sign is flipped: rewards above the group mean get a positive advantage."
    else:
        hint = (
            rounding_hint(values, expected)
            or "A = (r - mean) / (std + 1e-6), with mean and (n - 1) std over this group only."
        )
    return wrong(f"Not quite: you gave {[round(v, 3) for v in values]}.", hint)


def check_grouped_advantages(
    rewards: Sequence[float], keys: Sequence[Hashable], answer: Any, tol: float = 1e-3
) -> bool:
    """Check advantages computed per group (e.g. per ``(task_id, role)``), order preserved."""
    if missing(answer):
        return wrong(NO_ANSWER, "one advantage per reward, in the same order.")
    rewards = [float(r) for r in rewards]
    if len(keys) != len(rewards):
        raise ValueError(f"check_grouped_advantages: {len(rewards)} rewards but {len(keys)} keys")
    values = numbers_of(answer)
    if values is None or len(values) != len(rewards):
        return wrong(f"expected {len(rewards)} numbers, got {answer!r}.", "one advantage per reward.")
    expected = grouped_advantages(rewards, keys)
    if close(values, expected, tol):
        return ok(f"Correct: {[round(a, 3) for a in expected]}.")
    mistakes = [
        (
            group_advantages(rewards),
            "you normalised over the whole batch; each group (same key) is normalised on its own — that "
            "is the bug ERL must avoid for reflections and second attempts.",
        ),
        (
            per_group(rewards, keys, lambda g: [0.0] if len(g) == 1 else group_advantages(g)),
            "a key that occurs once is a group of one: its advantage is its reward (mean 0, std 1), not 0.",
        ),
        (
            per_group(rewards, keys, _population_std_advantages),
            "inside each group use the unbiased standard deviation (n - 1), as torch.std does.",
        ),
        (
            per_group(rewards, keys, lambda g: g if len(g) == 1 else [r - sum(g) / len(g) for r in g]),
            "you subtracted each group's mean; now divide by the group's standard deviation (+ 1e-6).",
        ),
    ]
    hint = next(
        (h for v, h in mistakes if not close(v, expected, tol) and close(values, v, tol)),
        rounding_hint(values, expected)
        or "split the rewards by key, apply GRPO inside each group, put them back in order.",
    )
    return wrong(f"Not quite: you gave {[round(v, 3) for v in values]}.", hint)


EPS_LOW, EPS_HIGH, DUAL_CLIP = ERLConfig.epsilon, ERLConfig.epsilon_high, ERLConfig.dual_clip


def clipped_loss_value(
    ratio: float,
    advantage: float,
    epsilon_low: float = EPS_LOW,
    epsilon_high: float = EPS_HIGH,
    dual_clip: float | None = DUAL_CLIP,
) -> float:
    """The per-token loss of :func:`erl_lite.core.losses.clipped_policy_loss` at one ratio."""
    import torch

    from erl_lite.core.losses import clipped_policy_loss

    logp = torch.tensor([[math.log(ratio)]])
    loss, _ = clipped_policy_loss(
        logp,
        torch.zeros(1, 1),
        torch.tensor([float(advantage)]),
        torch.ones(1, 1),
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        dual_clip=dual_clip,
    )
    return float(loss)


def check_clipped_loss(
    ratio: float,
    advantage: float,
    answer: Any,
    epsilon_low: float = EPS_LOW,
    epsilon_high: float = EPS_HIGH,
    dual_clip: float | None = DUAL_CLIP,
    tol: float = 1e-3,
) -> bool:
    """Check the clipped per-token loss ``-min(r·A, clip(r, 1-ε_low, 1+ε_high)·A)``, dual-clipped."""
    if missing(answer):
        return wrong(NO_ANSWER, "one number: the loss of a single token.")
    value = float_or_none(answer)
    if value is None or isinstance(answer, bool):
        return wrong(f"expected a number, got {answer!r}.", "one number: the loss of a single token.")
    expected = clipped_loss_value(ratio, advantage, epsilon_low, epsilon_high, dual_clip)
    if math.isclose(value, expected, abs_tol=tol):
        return ok(f"Correct: at ratio {ratio:g} with A = {advantage:g} the loss is {expected:.3f}.")
    low, high = 1 - epsilon_low, 1 + epsilon_high
    bounded = min(max(ratio, low), high)
    mistakes = [
        (
            clipped_loss_value(ratio, advantage, epsilon_low, epsilon_high, None)
            if advantage < 0 and dual_clip is not None
            else None,
            f"with A < 0 the dual clip caps the loss at -A·c = {-advantage * (dual_clip or 0):g}.",
        ),
        (-ratio * advantage, "that is the unclipped surrogate -r·A; take the pessimistic min with the clipped ratio."),
        (-expected, "the sign: the loss is the *negative* objective, -min(r·A, clip(r)·A)."),
        (
            -bounded * advantage,
            "min(r·A, clip(r)·A) keeps the unclipped term when it is the smaller (pessimistic) one: "
            "clipping only ever removes an incentive, never adds one.",
        ),
        (
            clipped_loss_value(ratio, advantage, epsilon_low, epsilon_low, dual_clip),
            f"clip-higher: the upper bound is 1 + ε_high = {high:g}, not 1 + ε_low = {1 + epsilon_low:g}.",
        ),
        (
            clipped_loss_value(ratio, advantage, epsilon_high, epsilon_high, dual_clip),
            f"the clip is asymmetric: the lower bound is 1 - ε_low = {low:g}, not 1 - ε_high = {1 - epsilon_high:g}.",
        ),
    ]
    hint = next(
        (
            h
            for v, h in mistakes
            if v is not None and not math.isclose(v, expected, abs_tol=tol) and math.isclose(value, v, abs_tol=tol)
        ),
        rounding_hint([value], [expected])
        or f"clip the ratio to [{low:g}, {high:g}], take the smaller of r·A and clip(r)·A, negate; "
        "for A < 0 cap the result at -A·c.",
    )
    return wrong(f"Not quite: you said {value:.3f}.", hint)


def loss_curve_landmarks(
    epsilon_low: float = EPS_LOW, epsilon_high: float = EPS_HIGH, dual_clip: float | None = DUAL_CLIP
) -> dict[str, float | None]:
    """Where the per-token loss curves bend: the clip bounds and the dual clip (``capped_above``: None without one);
    tests/test_exercises.py checks them against :func:`clipped_loss_value` on a grid of ratios."""
    return {
        "flat_above": round(1 + epsilon_high, 6),
        "flat_below": round(1 - epsilon_low, 6),
        "capped_above": dual_clip,
    }


def check_loss_curve_prediction(flat_above: Any, flat_below: Any, capped_above: Any, tol: float = 0.011) -> bool:
    """Check a prediction of the clipped-loss plot, made *before* drawing it (see :func:`loss_curve_landmarks`)."""
    answers = {"flat_above": flat_above, "flat_below": flat_below, "capped_above": capped_above}
    if any(missing(a) for a in answers.values()):
        return wrong(NO_ANSWER, "three ratios, read off the formula before you draw the plot.")
    values = {k: float_or_none(a) for k, a in answers.items()}
    bad = [k for k, v in values.items() if v is None or isinstance(answers[k], bool)]
    if bad:
        return wrong(f"expected numbers, got {', '.join(f'{k}={answers[k]!r}' for k in bad)}.", "three ratios.")
    truth = loss_curve_landmarks()
    off = [k for k in truth if truth[k] is not None and not math.isclose(values[k], truth[k], abs_tol=tol)]
    if not off:
        return ok(
            f"Correct: flat above {truth['flat_above']:g} for A > 0, flat below {truth['flat_below']:g} "
            f"and capped above {truth['capped_above']:g} for A < 0."
        )
    hints = {
        "flat_above": {
            1 + EPS_LOW: "clip-higher: the upper bound is 1 + ε_high, not 1 + ε_low.",
            1 - EPS_LOW: "for A > 0 the pessimistic min keeps the *unclipped* term below 1 - ε_low: "
            "the curve keeps falling there; it goes flat at the upper bound.",
        },
        "flat_below": {
            1 - EPS_HIGH: "the clip is asymmetric: the lower bound is 1 - ε_low, not 1 - ε_high.",
            1 + EPS_HIGH: "for A < 0 the upper bound does not flatten the curve: the min keeps r·A "
            "there, so the loss keeps rising until the dual clip.",
        },
        "capped_above": {
            1 + EPS_HIGH: "for A < 0 the min keeps the unclipped r·A above 1 + ε_high: the loss keeps "
            "rising until the dual clip caps it at -A·c, i.e. at ratio c."
        },
    }
    first = off[0]
    hint = next(
        (h for v, h in hints.get(first, {}).items() if math.isclose(values[first], v, abs_tol=tol)),
        rounding_hint([values[k] for k in off], [truth[k] for k in off])
        or "write the loss at a few ratios with the formula -min(r·A, clip(r)·A), capped at -A·c for A < 0.",
    )
    return wrong(f"Not quite: {', '.join(f'{k} = {values[k]:g}' for k in off)}.", hint)


def check_internalization_weights(
    r2: Sequence[float], answer: Any, mode: str = ERLConfig.internalization_mode, tol: float = 1e-3
) -> bool:
    """Check internalization weights: ``max(r2, 0)`` (``raft``) or ``1[r2 > 0]`` (``nll``)."""
    if missing(answer):
        return wrong(NO_ANSWER, "one weight per second attempt.")
    r2 = [float(r) for r in r2]
    values = numbers_of(answer)
    if values is None or len(values) != len(r2):
        return wrong(f"expected {len(r2)} numbers, got {answer!r}.", "one weight per second attempt.")
    expected = internalization_weights(r2, mode)
    if close(values, expected, tol):
        return ok(f"Correct: {expected}.")
    other = "nll" if mode == "raft" else "raft"
    mistakes = [
        (
            internalization_weights(r2, other),
            f"that is the {other!r} rule; mode {mode!r} uses "
            + ("max(r2, 0)." if mode == "raft" else "the indicator 1[r2 > 0]."),
        ),
        (r2, "a failed second attempt is not pushed *down*: negative r2 gets weight 0 (max(r2, 0))."),
        (group_advantages(r2), "internalization has no group baseline: the weight depends on r2 alone."),
        ([1.0] * len(r2), "only successful second attempts are internalized: r2 = 0 gets weight 0."),
    ]
    hint = next(
        (h for v, h in mistakes if not close(v, expected, tol) and close(values, v, tol)),
        rounding_hint(values, expected) or "raft: max(r2, 0); nll: 1 if r2 > 0 else 0.",
    )
    return wrong(f"Not quite: you gave {[round(v, 3) for v in values]}.", hint)
