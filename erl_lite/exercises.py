"""Check functions for the notebooks' exercises: type an answer, get a ✓ or a ✗ with a hint.

Each ``check_*`` function recomputes the answer with erl_lite's own implementation (the gate
rule, :mod:`erl_lite.advantages`, :mod:`erl_lite.losses`, :mod:`erl_lite.memory`), prints one
clear message and returns True or False, so a notebook cell never raises on a wrong answer.
A wrong answer is compared with the usual mistakes (``r1 <= τ`` instead of ``r1 < τ``, the
population standard deviation instead of the unbiased one, forgetting the singleton rule or
the dual clip, ...) and the hint names the mistake it matches.

Departures from the paper: none; these are teaching aids around the library's functions.

Example:
    >>> check_gated_indices([1.0, 0.0, 0.5], [1, 2])
    ✓ Correct: attempts [1, 2] go on to reflection (r1 < τ = 1).
    True
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

from erl_lite.advantages import distill_weights, group_advantages, grouped_advantages
from erl_lite.memory import ReflectionMemory

NO_ANSWER = "No answer yet: replace the `None` (or `...`) with your answer and run the cell again."


def _ok(message: str) -> bool:
    print(f"✓ {message}")
    return True


def _wrong(message: str, hint: str) -> bool:
    print(f"✗ {message}\n  Hint: {hint}")
    return False


def _missing(answer: Any) -> bool:
    return answer is None or answer is Ellipsis


def _number(answer: Any) -> float | None:
    """``answer`` as a float, or None when it is not a number."""
    try:
        return float(answer)
    except (TypeError, ValueError):
        return None


def _numbers(answer: Any) -> list[float] | None:
    """``answer`` as a list of floats, or None when it is not a sequence of numbers."""
    if hasattr(answer, "tolist"):  # a tensor or an array
        answer = answer.tolist()
    try:
        return [float(x) for x in answer]
    except (TypeError, ValueError):
        return None


def _close(a: Sequence[float], b: Sequence[float], tol: float) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b))


# --- the gate ------------------------------------------------------------------------------------


def gated_indices(rewards: Sequence[float], threshold: float = 1.0) -> list[int]:
    """Positions of the attempts the gate sends on (``r1 < τ``), the rule of :func:`erl_lite.phases.gate`.

    Example:
        >>> gated_indices([1.0, 0.0, 0.5, 1.0])
        [1, 2]
    """
    return [i for i, r in enumerate(rewards) if r < threshold]


def check_gated_indices(rewards: Sequence[float], answer: Any, threshold: float = 1.0) -> bool:
    """Check which attempts (0-based positions in ``rewards``) go on to reflection.

    Example:
        >>> check_gated_indices([1.0, 0.0], [0])
        ✗ Not quite: you picked [0].
          Hint: you picked the successes; the gate sends on the attempts that did *not* succeed.
        False
    """
    if _missing(answer):
        return _wrong(NO_ANSWER, "list the positions i with rewards[i] < τ.")
    try:
        picked = sorted(int(i) for i in answer)
    except (TypeError, ValueError):
        return _wrong(f"expected a list of integer positions, got {answer!r}.",
                      "e.g. [0, 3] for the first and the fourth attempt.")
    expected = gated_indices(rewards, threshold)
    if picked == expected:
        return _ok(f"Correct: attempts {expected} go on to reflection (r1 < τ = {threshold:g}).")
    if picked == [i for i, r in enumerate(rewards) if r <= threshold]:
        hint = (f"the gate is strict: an attempt with r1 = τ = {threshold:g} succeeded and is not "
                "reflected on (r1 < τ, not r1 ≤ τ).")
    elif picked == [i for i, r in enumerate(rewards) if r >= threshold]:
        hint = "you picked the successes; the gate sends on the attempts that did *not* succeed."
    elif picked == [i for i, r in enumerate(rewards) if r == 0]:
        hint = "partial credit is not success: any reward below τ goes on, not only zeros."
    elif picked and picked[0] >= 1 and [i - 1 for i in picked] == expected:
        hint = "positions start at 0 in Python."
    else:
        hint = (f"ERL reflects on failures only: an attempt goes on when r1 < τ (here τ = {threshold:g}). "
                "Reflecting on successes caused reward hacking in the paper's early runs.")
    return _wrong(f"Not quite: you picked {picked}.", hint)


def check_gate_rate(rewards: Sequence[float], answer: Any, threshold: float = 1.0, tol: float = 1e-3) -> bool:
    """Check the gate rate: the fraction of first attempts sent on to reflection.

    Example:
        >>> check_gate_rate([1.0, 0.0, 0.0, 1.0], 0.5)
        ✓ Correct: 2 of 4 attempts go on, a gate rate of 0.500.
        True
    """
    if _missing(answer):
        return _wrong(NO_ANSWER, "a number between 0 and 1.")
    value = _number(answer)
    if value is None:
        return _wrong(f"expected a number, got {answer!r}.", "a fraction between 0 and 1.")
    n = len(gated_indices(rewards, threshold))
    expected = n / len(rewards) if rewards else 0.0
    if math.isclose(value, expected, abs_tol=tol):
        return _ok(f"Correct: {n} of {len(rewards)} attempts go on, a gate rate of {expected:.3f}.")
    if math.isclose(value, n, abs_tol=tol) and n != expected:
        hint = "that is the number of gated attempts; divide by the number of attempts."
    elif math.isclose(value, 1 - expected, abs_tol=tol):
        hint = "that is the success rate; the gate rate counts the attempts that did *not* succeed."
    elif rewards and math.isclose(value, sum(r <= threshold for r in rewards) / len(rewards), abs_tol=tol):
        hint = f"the gate is strict (r1 < τ): a reward of exactly {threshold:g} is a success."
    elif math.isclose(value, 100 * expected, abs_tol=100 * tol):
        hint = "give a fraction between 0 and 1, not a percentage."
    else:
        hint = "count the rewards below τ and divide by the number of attempts."
    return _wrong(f"Not quite: you said {value:.3f}.", hint)


# --- advantages ----------------------------------------------------------------------------------


def _population_std_advantages(rewards: list[float], eps: float = 1e-6) -> list[float]:
    """The common mistake: dividing by n instead of n - 1."""
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
    if _missing(answer):
        return _wrong(NO_ANSWER, "one advantage per reward, in the same order.")
    values = _numbers(answer)
    if values is None:
        return _wrong(f"expected a list of numbers, got {answer!r}.", "one advantage per reward.")
    rewards = [float(r) for r in rewards]
    expected = group_advantages(rewards)
    if len(values) != len(expected):
        return _wrong(f"you gave {len(values)} advantages for {len(expected)} rewards.",
                      "every sequence of the group gets its own advantage.")
    if _close(values, expected, tol):
        return _ok(f"Correct: {[round(a, 3) for a in expected]}.")
    if len(rewards) == 1:
        hint = ("a group of one has no baseline to compare with; erl_lite (like the reference code) "
                "uses mean 0 and std 1, so A = r.")
    elif all(r == rewards[0] for r in rewards):
        hint = "all rewards are equal: nothing to prefer inside the group, so every advantage is 0."
    elif _close(values, _population_std_advantages(rewards), tol):
        hint = "use the unbiased standard deviation (divide the squared deviations by n - 1, as torch.std does)."
    elif _close(values, [r - sum(rewards) / len(rewards) for r in rewards], tol):
        hint = "you subtracted the mean; now divide by the group's standard deviation (+ 1e-6)."
    elif _close(values, [-a for a in expected], tol):
        hint = "the sign is flipped: rewards above the group mean get a positive advantage."
    else:
        hint = "A = (r - mean) / (std + 1e-6), with mean and (n - 1) std over this group only."
    return _wrong(f"Not quite: you gave {[round(v, 3) for v in values]}.", hint)


def check_grouped_advantages(rewards: Sequence[float], keys: Sequence[Hashable], answer: Any,
                             tol: float = 1e-3) -> bool:
    """Check advantages computed per group (e.g. per ``(task_id, role)``), order preserved.

    Example:
        >>> check_grouped_advantages([1.0, 0.0, 0.3], ["a", "a", "b"], [0.7071, -0.7071, 0.3])
        ✓ Correct: [0.707, -0.707, 0.3].
        True
    """
    if _missing(answer):
        return _wrong(NO_ANSWER, "one advantage per reward, in the same order.")
    values = _numbers(answer)
    if values is None or len(values) != len(rewards):
        return _wrong(f"expected {len(rewards)} numbers, got {answer!r}.", "one advantage per reward.")
    expected = grouped_advantages(rewards, keys)
    if _close(values, expected, tol):
        return _ok(f"Correct: {[round(a, 3) for a in expected]}.")
    if _close(values, group_advantages(rewards), tol):
        hint = ("you normalised over the whole batch; each group (same key) is normalised on its "
                "own — that is the bug ERL must avoid for reflections and second attempts.")
    elif 1 in Counter(keys).values():
        hint = "a key that occurs once is a group of one: its advantage is its reward (mean 0, std 1)."
    else:
        hint = "split the rewards by key, apply GRPO inside each group, put them back in order."
    return _wrong(f"Not quite: you gave {[round(v, 3) for v in values]}.", hint)


# --- the clipped loss ----------------------------------------------------------------------------


def clipped_loss_value(ratio: float, advantage: float, epsilon_low: float = 0.2, epsilon_high: float = 0.28,
                       dual_clip: float | None = 3.0) -> float:
    """The per-token loss of :func:`erl_lite.losses.clipped_policy_loss` at one ratio.

    Example:
        >>> round(clipped_loss_value(1.5, 1.0), 2), round(clipped_loss_value(5.0, -1.0), 2)
        (-1.28, 3.0)
    """
    import torch

    from erl_lite.losses import clipped_policy_loss

    logp = torch.tensor([[math.log(ratio)]])
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 1), torch.tensor([float(advantage)]), torch.ones(1, 1),
                                  epsilon_low=epsilon_low, epsilon_high=epsilon_high, dual_clip=dual_clip)
    return float(loss)


def check_clipped_loss(ratio: float, advantage: float, answer: Any, epsilon_low: float = 0.2,
                       epsilon_high: float = 0.28, dual_clip: float | None = 3.0, tol: float = 1e-3) -> bool:
    """Check the clipped per-token loss ``-min(r·A, clip(r, 1-ε_low, 1+ε_high)·A)``, dual-clipped.

    Example:
        >>> check_clipped_loss(1.5, 1.0, -1.28)
        ✓ Correct: at ratio 1.5 with A = 1 the loss is -1.280.
        True
    """
    if _missing(answer):
        return _wrong(NO_ANSWER, "one number: the loss of a single token.")
    value = _number(answer)
    if value is None:
        return _wrong(f"expected a number, got {answer!r}.", "one number: the loss of a single token.")
    expected = clipped_loss_value(ratio, advantage, epsilon_low, epsilon_high, dual_clip)
    if math.isclose(value, expected, abs_tol=tol):
        return _ok(f"Correct: at ratio {ratio:g} with A = {advantage:g} the loss is {expected:.3f}.")
    bounded = min(max(ratio, 1 - epsilon_low), 1 + epsilon_high)
    if dual_clip is not None and advantage < 0 and math.isclose(
            value, clipped_loss_value(ratio, advantage, epsilon_low, epsilon_high, None), abs_tol=tol):
        hint = f"with A < 0 the dual clip caps the loss at -A·c = {-advantage * dual_clip:g}."
    elif math.isclose(value, -ratio * advantage, abs_tol=tol):
        hint = "that is the unclipped surrogate -r·A; take the pessimistic min with the clipped ratio."
    elif math.isclose(value, -expected, abs_tol=tol):
        hint = "the sign: the loss is the *negative* objective, -min(r·A, clip(r)·A)."
    elif math.isclose(value, -bounded * advantage, abs_tol=tol):
        hint = "min(r·A, clip(r)·A) keeps the unclipped term when it is the smaller (pessimistic) one."
    elif math.isclose(value, clipped_loss_value(ratio, advantage, epsilon_low, epsilon_low, dual_clip), abs_tol=tol):
        hint = f"clip-higher: the upper bound is 1 + ε_high = {1 + epsilon_high:g}, not 1 + ε_low."
    else:
        hint = (f"clip the ratio to [{1 - epsilon_low:g}, {1 + epsilon_high:g}], take the smaller of r·A and "
                "clip(r)·A, negate; for A < 0 cap the result at -A·c.")
    return _wrong(f"Not quite: you said {value:.3f}.", hint)


# --- memory and internalization -------------------------------------------------------------------


def check_memory(rulebooks: Sequence[str], rewards: Sequence[float], answer: Any, kind: str = "single",
                 size: int = 50, threshold: float = 1.0) -> bool:
    """Check what memory holds after storing ``rulebooks`` in order with their second attempts' ``rewards``.

    ``answer`` is the list of stored rulebooks, oldest first (one at most for ``single``).

    Example:
        >>> check_memory(["x", "y"], [1.0, 0.0], ["x"])
        ✓ Correct: memory holds ['x'].
        True
    """
    if _missing(answer):
        return _wrong(NO_ANSWER, "a list of the rulebooks memory holds, oldest first.")
    if isinstance(answer, str):
        answer = [answer]
    memory = ReflectionMemory(kind, size)
    for text, r in zip(rulebooks, rewards):
        memory.maybe_store(text, r, threshold)
    expected = memory.entries
    got = list(answer)
    if got == expected:
        return _ok(f"Correct: memory holds {expected}.")
    if kind == "single" and len(got) > 1:
        hint = "the paper's memory has one slot: each successful rulebook overwrites the previous one."
    elif any(r < threshold and t in got for t, r in zip(rulebooks, rewards)):
        hint = f"a rulebook is stored only when its second attempt succeeded (r2 ≥ τ = {threshold:g})."
    elif kind == "single" and got and expected and got[0] != expected[0]:
        hint = "the slot is overwritten: the *last* successful rulebook wins."
    else:
        hint = f"go through the rulebooks in order; store one when r2 ≥ τ = {threshold:g}."
    return _wrong(f"Not quite: you said {got}.", hint)


def check_distill_weights(r2: Sequence[float], answer: Any, mode: str = "raft", tol: float = 1e-3) -> bool:
    """Check internalization weights: ``max(r2, 0)`` (``raft``) or ``1[r2 > 0]`` (``nll``).

    Example:
        >>> check_distill_weights([1.0, 0.0, 0.4], [1.0, 0.0, 0.4])
        ✓ Correct: [1.0, 0.0, 0.4].
        True
    """
    if _missing(answer):
        return _wrong(NO_ANSWER, "one weight per second attempt.")
    values = _numbers(answer)
    expected = distill_weights(r2, mode)
    if values is not None and _close(values, expected, tol):
        return _ok(f"Correct: {expected}.")
    other = "nll" if mode == "raft" else "raft"
    if values is not None and _close(values, distill_weights(r2, other), tol):
        hint = (f"that is the {other!r} rule; mode {mode!r} uses "
                + ("max(r2, 0)." if mode == "raft" else "the indicator 1[r2 > 0]."))
    elif values is not None and _close(values, group_advantages(r2), tol):
        hint = "internalization has no group baseline: the weight depends on r2 alone."
    else:
        hint = "raft: max(r2, 0); nll: 1 if r2 > 0 else 0."
    return _wrong(f"Not quite: you gave {answer!r}.", hint)
