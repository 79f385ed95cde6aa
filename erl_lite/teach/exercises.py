"""Check functions for the gate and memory exercises of notebooks 02 and 04. Each ``check_*`` recomputes the
answer with the library's gate and memory, prints one message (a hint names the mistake matched) and returns a bool.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from erl_lite.config import ERLConfig
from erl_lite.config.field_types import float_or_none
from erl_lite.core.memory import ReflectionMemory
from erl_lite.core.phases import gate
from erl_lite.teach.answers import NO_ANSWER, missing, ok, positions, rounding_hint, wrong

#: τ of the gate and of memory: read from the config, the one home of the setting.
TAU = ERLConfig.reward_threshold


def gated_indices(rewards: Sequence[float], threshold: float = TAU) -> list[int]:
    """Positions of the attempts :func:`erl_lite.core.phases.gate` sends on (``r1 < τ``)."""
    scored = [SimpleNamespace(reward=float(r)) for r in rewards]  # the one field gate reads of an attempt
    kept = {id(a) for a in gate(scored, threshold)}  # type: ignore[arg-type]  # duck-typed: only .reward
    return [i for i, a in enumerate(scored) if id(a) in kept]


#: The usual wrong gates, as (rule, hint): each rule maps (rewards, τ) to the positions it would pick.
GATE_MISTAKES: list[tuple[Callable[[list[float], float], list[int]], str]] = [
    (
        lambda rs, t: [i for i, r in enumerate(rs) if r >= t],
        "you picked the successes; the gate sends on the attempts that did *not* succeed.",
    ),
    (
        lambda rs, t: [i for i, r in enumerate(rs) if r <= t],
        "the gate is strict: an attempt with r1 = τ succeeded and is not reflected on (r1 < τ, not r1 ≤ τ).",
    ),
    (  # before the zeros: on rewards with no partial credit it picks what they pick
        lambda rs, t: [i for i, r in enumerate(rs) if 0 <= r < t],
        "a negative reward is below τ too: it goes on (only r1 ≥ τ stops an attempt).",
    ),
    (
        lambda rs, t: [i for i, r in enumerate(rs) if r == 0],
        "partial credit is not success: any reward below τ goes on, not only zeros.",
    ),
    (lambda rs, t: [i + 1 for i, r in enumerate(rs) if r < t], "positions start at 0 in Python."),
    (
        lambda rs, t: [i for i, r in enumerate(rs) if r < 1.0],
        "τ is a parameter: compare with `threshold`, not with a fixed 1.",
    ),
]


def _gate_hint(rewards: list[float], picked: list[int], threshold: float) -> str:
    return next(
        (hint for rule, hint in GATE_MISTAKES if sorted(rule(rewards, threshold)) == picked),
        f"ERL reflects on failures only: an attempt goes on when r1 < τ (here τ = {threshold:g}). "
        "Reflecting on successes caused reward hacking in the paper's early runs.",
    )


def check_gated_indices(rewards: Sequence[float], answer: Any, threshold: float = TAU) -> bool:
    """Check which attempts (0-based positions in ``rewards``) go on to reflection.

    Example:
        >>> check_gated_indices([1.0, 0.0], [0])
        ✗ Not quite: you picked [0].
          Hint: you picked the successes; the gate sends on the attempts that did *not* succeed.
        False
    """
    if missing(answer):
        return wrong(NO_ANSWER, "list the positions i with rewards[i] < τ.")
    picked, why = positions(answer)
    if picked is None:
        return wrong(why, "e.g. [0, 3] for the first and the fourth attempt.")
    rewards = [float(r) for r in rewards]
    expected = gated_indices(rewards, threshold)
    if picked == expected:
        return ok(f"Correct: attempts {expected} go on to reflection (r1 < τ = {threshold:g}).")
    return wrong(f"Not quite: you picked {picked}.", _gate_hint(rewards, picked, threshold))


#: Hidden cases of :func:`check_gate_function`: (rewards, τ); they separate every rule of
#: :data:`GATE_MISTAKES` from the right one.
GATE_CASES: list[tuple[list[float], float]] = [
    ([1.0, 0.0, 0.5, 1.0], 1.0),
    ([0.5, 0.8, 0.2, 0.0], 0.5),
    ([1.0, 1.0], 1.0),
    ([0.0, -1.0, 2.0], 1.0),
    ([], 1.0),
]


def check_gate_function(fn: Any) -> bool:
    """Run a student's ``fn(rewards, threshold) -> positions`` on :data:`GATE_CASES`.

    Example:
        >>> check_gate_function(lambda rewards, threshold: [i for i, r in enumerate(rewards) if r <= threshold])
        ✗ Wrong on rewards [1.0, 0.0, 0.5, 1.0] with τ = 1: you returned [0, 1, 2, 3], the gate sends on [1, 2].
          Hint: the gate is strict: an attempt with r1 = τ succeeded and is not reflected on (r1 < τ, not r1 ≤ τ).
        False
    """
    if missing(fn) or not callable(fn):
        return wrong(
            NO_ANSWER if missing(fn) else f"expected a function, got {fn!r}.",
            "define `def my_gate(rewards, threshold): ...` returning a list of positions.",
        )
    for rewards, threshold in GATE_CASES:
        case = f"rewards {rewards} with τ = {threshold:g}"
        try:
            got = fn(list(rewards), threshold)
        except NotImplementedError:
            return wrong(NO_ANSWER, "replace `raise NotImplementedError` with your code.")
        except Exception as error:  # the student's code: report, never raise
            return wrong(
                f"your function raised {type(error).__name__}: {error} (on {case}).",
                "it receives a list of floats and a float, and returns a list of ints.",
            )
        if got is None:
            return wrong(f"your function returned None on {case}.", "did you forget `return`?")
        picked, why = positions(got)
        if picked is None:
            return wrong(f"on {case}: {why}", "return a list of 0-based positions, e.g. [1, 2].")
        expected = gated_indices(rewards, threshold)
        if picked != expected:
            return wrong(
                f"Wrong on {case}: you returned {picked}, the gate sends on {expected}.",
                _gate_hint(rewards, picked, threshold),
            )
    return ok(f"Correct on all {len(GATE_CASES)} hidden cases: your gate is the library's `r1 < τ`.")


def check_gate_rate(rewards: Sequence[float], answer: Any, threshold: float = TAU, tol: float = 1e-3) -> bool:
    """Check the gate rate: the fraction of first attempts sent on to reflection."""
    if missing(answer):
        return wrong(NO_ANSWER, "a number between 0 and 1.")
    value = float_or_none(answer)
    if value is None:
        return wrong(f"expected a number, got {answer!r}.", "a fraction between 0 and 1.")
    rewards = [float(r) for r in rewards]
    n = len(gated_indices(rewards, threshold))
    expected = n / len(rewards) if rewards else 0.0
    if math.isclose(value, expected, abs_tol=tol):
        return ok(f"Correct: {n} of {len(rewards)} attempts go on, a gate rate of {expected:.3f}.")
    share = (lambda rule: len(rule) / len(rewards)) if rewards else (lambda rule: 0.0)
    if math.isclose(value, n, abs_tol=tol) and n != expected:
        hint = "that is the number of gated attempts; divide by the number of attempts."
    elif math.isclose(value, 1 - expected, abs_tol=tol):
        hint = "that is the success rate; the gate rate counts the attempts that did *not* succeed."
    elif math.isclose(value, share([r for r in rewards if r <= threshold]), abs_tol=tol):
        hint = f"the gate is strict (r1 < τ): a reward of exactly {threshold:g} is a success."
    elif math.isclose(value, share([r for r in rewards if r == 0]), abs_tol=tol):
        hint = "partial credit is not success: count every reward below τ, not only the zeros."
    elif math.isclose(value, 100 * expected, abs_tol=100 * tol):
        hint = "give a fraction between 0 and 1, not a percentage."
    else:
        hint = rounding_hint([value], [expected]) or "count the rewards below τ and divide by the number of attempts."
    return wrong(f"Not quite: you said {value:.3f}.", hint)


def check_memory(
    rulebooks: Sequence[str],
    rewards: Sequence[float],
    answer: Any,
    kind: str = "single",
    size: int = 50,
    threshold: float = TAU,
) -> bool:
    """Check the rulebooks memory holds (oldest first) after storing ``rulebooks`` with their ``rewards``."""
    if missing(answer):
        return wrong(NO_ANSWER, "a list of the rulebooks memory holds, oldest first.")
    memory = ReflectionMemory(kind, size)
    for text, r in zip(rulebooks, rewards):
        memory.maybe_store(text, r, threshold)
    expected = memory.entries
    got = [answer] if isinstance(answer, str) else list(answer)  # one rulebook: a memory of one
    if got == expected:
        return ok(f"Correct: memory holds {expected}.")
    if not all(isinstance(t, str) for t in got):
        hint = "give the rulebooks' texts themselves (e.g. rulebooks[1]), not their positions."
    elif kind == "single" and len(got) > 1:
        hint = "the paper's memory has one slot: each successful rulebook overwrites the previous one."
    elif any(r < threshold and t in got for t, r in zip(rulebooks, rewards)):
        hint = f"a rulebook is stored only when its second attempt succeeded (r2 ≥ τ = {threshold:g})."
    elif kind == "single" and got and expected and got[0] != expected[0]:
        hint = "the slot is overwritten: the *last* successful rulebook wins."
    else:
        hint = f"go through the rulebooks in order; store one when r2 ≥ τ = {threshold:g}."
    return wrong(f"Not quite: you said {got}.", hint)
