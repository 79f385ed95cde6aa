"""Tests for erl_lite.exercises: right answers pass, wrong ones fail with the matching hint."""

from __future__ import annotations

import pytest

from erl_lite import exercises as ex

REWARDS = [1.0, 0.0, 0.5, 1.0, 0.0, 1.0]  # gated: 1, 2, 4


def _run(capsys, fn, *args, **kwargs) -> tuple[bool, str]:
    ok = fn(*args, **kwargs)
    return ok, capsys.readouterr().out


# --- gate -----------------------------------------------------------------------------------------

def test_gated_indices_matches_the_phase_gate():
    from erl_lite.phases import gate
    from erl_lite.records import Attempt

    attempts = [Attempt("t", "first", i, "", [], [], [], [], r, r >= 1.0, "", "", 1) for i, r in enumerate(REWARDS)]
    assert ex.gated_indices(REWARDS) == [a.index for a in gate(attempts, 1.0)] == [1, 2, 4]


def test_check_gated_indices_accepts_the_right_answer_in_any_order(capsys):
    ok, out = _run(capsys, ex.check_gated_indices, REWARDS, [4, 1, 2])
    assert ok and out.startswith("✓")


@pytest.mark.parametrize("answer, hint", [
    ([0, 3, 5], "successes"),
    ([1, 4], "partial credit"),
    ([2, 3, 5], "positions start at 0"),
    ([1], "failures only"),
])
def test_check_gated_indices_names_the_mistake(capsys, answer, hint):
    ok, out = _run(capsys, ex.check_gated_indices, REWARDS, answer)
    assert not ok and out.startswith("✗") and hint in out


def test_check_gated_indices_strict_threshold_hint(capsys):
    ok, out = _run(capsys, ex.check_gated_indices, [0.5, 0.8, 0.2], [0, 1, 2], threshold=0.5)
    assert ok is False and "strict" not in out  # [0,1,2] is not the <= set ([0, 2]); generic hint
    ok, out = _run(capsys, ex.check_gated_indices, [0.5, 0.8, 0.2], [0, 2], threshold=0.5)
    assert not ok and "strict" in out
    ok, _ = _run(capsys, ex.check_gated_indices, [0.5, 0.8, 0.2], [2], threshold=0.5)
    assert ok


@pytest.mark.parametrize("answer", [None, ..., "abc"])
def test_check_gated_indices_survives_missing_or_malformed_answers(capsys, answer):
    ok, out = _run(capsys, ex.check_gated_indices, REWARDS, answer)
    assert not ok and out.startswith("✗")


def test_check_gate_rate(capsys):
    assert _run(capsys, ex.check_gate_rate, REWARDS, 0.5)[0]
    for answer, hint in [(3, "number of gated"), (50, "not a percentage"), (None, "No answer")]:
        ok, out = _run(capsys, ex.check_gate_rate, REWARDS, answer)
        assert not ok and hint in out, out
    ok, out = _run(capsys, ex.check_gate_rate, [1.0, 0.0, 0.0, 0.0], 0.25)
    assert not ok and "success rate" in out


# --- advantages -----------------------------------------------------------------------------------

def test_check_advantages_right_answer(capsys):
    rewards = [1.0, 0.0, 0.0, 0.0]
    # mean 0.25; unbiased variance (0.75² + 3·0.25²) / 3 = 0.25, so std 0.5
    ok, out = _run(capsys, ex.check_advantages, rewards, [1.5, -0.5, -0.5, -0.5])
    assert ok and out.startswith("✓")


def test_check_advantages_accepts_a_tensor(capsys):
    torch = pytest.importorskip("torch")
    from erl_lite.advantages import group_advantages

    ok, _ = _run(capsys, ex.check_advantages, [1.0, 0.0], torch.tensor(group_advantages([1.0, 0.0])))
    assert ok


@pytest.mark.parametrize("rewards, answer, hint", [
    ([1.0, 0.0, 0.0, 0.0], ex._population_std_advantages([1.0, 0.0, 0.0, 0.0]), "n - 1"),
    ([1.0, 0.0, 0.0, 0.0], [0.75, -0.25, -0.25, -0.25], "divide by the group's standard deviation"),
    ([1.0, 0.0], [-0.7071, 0.7071], "sign"),
    ([0.0], [-1.0], "group of one"),
    ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], "every advantage is 0"),
    ([1.0, 0.0], [1.0], "2 rewards"),
])
def test_check_advantages_names_the_mistake(capsys, rewards, answer, hint):
    ok, out = _run(capsys, ex.check_advantages, rewards, answer)
    assert not ok and hint in out, out


def test_check_grouped_advantages(capsys):
    rewards, keys = [1.0, 0.0, 0.0, 1.0, 0.3], ["a", "a", "b", "b", "c"]
    right = [0.7071, -0.7071, -0.7071, 0.7071, 0.3]
    assert _run(capsys, ex.check_grouped_advantages, rewards, keys, right)[0]
    from erl_lite.advantages import group_advantages

    ok, out = _run(capsys, ex.check_grouped_advantages, rewards, keys, group_advantages(rewards))
    assert not ok and "whole batch" in out
    ok, out = _run(capsys, ex.check_grouped_advantages, rewards, keys, right[:4] + [0.0])
    assert not ok and "group of one" in out


# --- clipped loss ----------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio, adv, expected", [
    (1.0, 1.0, -1.0), (1.5, 1.0, -1.28), (0.5, 1.0, -0.5), (0.5, -1.0, 0.8), (1.5, -1.0, 1.5), (5.0, -1.0, 3.0),
])
def test_clipped_loss_value_matches_the_formula(ratio, adv, expected):
    assert ex.clipped_loss_value(ratio, adv) == pytest.approx(expected, abs=1e-5)


def test_check_clipped_loss(capsys):
    assert _run(capsys, ex.check_clipped_loss, 1.5, 1.0, -1.28)[0]
    for ratio, adv, answer, hint in [
        (1.5, 1.0, -1.5, "unclipped surrogate"),
        (1.5, 1.0, 1.28, "sign"),
        (0.5, 1.0, -0.8, "pessimistic"),
        (5.0, -1.0, 5.0, "dual clip"),
        (1.5, 1.0, -1.2, "clip-higher"),
        (1.5, 1.0, 7.0, "clip the ratio"),
    ]:
        ok, out = _run(capsys, ex.check_clipped_loss, ratio, adv, answer)
        assert not ok and hint in out, (ratio, adv, answer, out)


# --- memory and internalization -------------------------------------------------------------------

def test_check_memory(capsys):
    books, r2 = ["first", "second", "third"], [1.0, 1.0, 0.0]
    assert _run(capsys, ex.check_memory, books, r2, ["second"])[0]
    assert _run(capsys, ex.check_memory, books, r2, ["first", "second"], kind="fifo")[0]
    for answer, hint in [(["first", "second"], "one slot"), (["third"], "only when"), (["first"], "last")]:
        ok, out = _run(capsys, ex.check_memory, books, r2, answer)
        assert not ok and hint in out, out


def test_check_distill_weights(capsys):
    r2 = [1.0, 0.0, 0.4, -0.5]
    assert _run(capsys, ex.check_distill_weights, r2, [1.0, 0.0, 0.4, 0.0])[0]
    assert _run(capsys, ex.check_distill_weights, r2, [1, 0, 1, 0], mode="nll")[0]
    ok, out = _run(capsys, ex.check_distill_weights, r2, [1, 0, 1, 0])
    assert not ok and "'nll' rule" in out
    ok, out = _run(capsys, ex.check_distill_weights, r2, None)
    assert not ok and "No answer" in out
