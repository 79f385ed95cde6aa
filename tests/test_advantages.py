"""GRPO advantages per (task, role) group and internalization weights."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from erl_lite.core.advantages import group_advantages, grouped_advantages, internalization_weights


def test_singleton_group_gets_its_reward():
    assert group_advantages([0.7]) == [0.7]
    assert group_advantages([0.0]) == [0.0]
    assert group_advantages([-2.0]) == [-2.0]


def test_identical_rewards_give_exact_zeros():
    # 0.1 * 3 does not sum to exactly 0.3: a naive formula leaves 1e-11 residues.
    assert group_advantages([0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0]
    assert group_advantages([1.0, 1.0, 1.0, 1.0]) == [0.0] * 4


def test_empty_group():
    assert group_advantages([]) == []


def test_hand_computed_group():
    # r = [1, 0, 0, 0]: mean 1/4, unbiased var = (9/16 + 3/16) / 3 = 1/4, std = 1/2.
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], eps=0.0)
    assert adv == pytest.approx([1.5, -0.5, -0.5, -0.5])
    # With the default eps the denominator is 0.5 + 1e-6.
    adv = group_advantages([1.0, 0.0, 0.0, 0.0])
    assert adv[0] == pytest.approx(0.75 / (0.5 + 1e-6), rel=1e-12)
    # Partial credit: r = [0.2, 0.6]: mean 0.4, unbiased std = sqrt(0.08) ≈ 0.2828.
    adv = group_advantages([0.2, 0.6], eps=0.0)
    assert adv == pytest.approx([-0.2 / math.sqrt(0.08), 0.2 / math.sqrt(0.08)])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=12))
def test_matches_torch_unbiased_std(rewards):
    r = torch.tensor(rewards, dtype=torch.float64)
    expected = (r - r.mean()) / (r.std() + 1e-6)  # torch.std is unbiased by default
    if torch.all(r == r[0]):
        expected = torch.zeros_like(r)
    got = torch.tensor(group_advantages(rewards), dtype=torch.float64)
    assert torch.allclose(got, expected, atol=1e-9)


def test_grouping_is_per_key_and_keeps_order():
    rewards = [1.0, 0.0, 0.5, 0.0, 1.0, 0.3]
    keys = [("a", "first"), ("b", "first"), ("a", "first"), ("a", "second"), ("b", "first"), ("b", "second")]
    adv = grouped_advantages(rewards, keys)
    a_first = group_advantages([1.0, 0.5])
    b_first = group_advantages([0.0, 1.0])
    assert adv == [a_first[0], b_first[0], a_first[1], 0.0, b_first[1], 0.3]
    # A pooled normalisation (the peer's bug) would give something else.
    assert adv != group_advantages(rewards)


def test_grouping_length_mismatch():
    with pytest.raises(ValueError, match="keys"):
        grouped_advantages([1.0, 0.0], ["a"])


def test_non_finite_rewards_rejected():
    with pytest.raises(ValueError, match="finite"):
        group_advantages([1.0, float("nan")])


def test_internalization_weights_binary_rewards():
    r2 = [1.0, 0.0, 1.0, 0.0]
    assert internalization_weights(r2, "raft") == [1.0, 0.0, 1.0, 0.0]
    assert internalization_weights(r2, "nll") == [1.0, 0.0, 1.0, 0.0]


def test_internalization_weights_partial_credit():
    r2 = [0.45, 0.0, 1.0, -0.2]
    assert internalization_weights(r2, "raft") == [0.45, 0.0, 1.0, 0.0]
    assert internalization_weights(r2, "nll") == [1.0, 0.0, 1.0, 0.0]


def test_internalization_weights_bad_mode():
    with pytest.raises(ValueError, match="raft"):
        internalization_weights([1.0], "sft")


@pytest.mark.parametrize(
    "rewards, keys",
    [
        ([1.0, 0.0, 0.6], ["a", "a", "b"]),  # b is a group of one
        ([0.0, 0.0, 1.0, 0.3], ["a", "a", "b", "c"]),  # two singletons beside a constant group
    ],
)
def test_a_singleton_has_mean_zero_and_the_scale_of_its_mode(rewards, keys):
    # What ERLConfig.scale_rewards documents: a group of one has mean 0, so it keeps A = r under
    # "group" (std 1 by convention) and "none", and under "batch" it is divided by the batch std
    # like every other advantage of the batch, so the batch stays on one scale.
    import statistics

    batch_std = statistics.stdev(rewards)  # n - 1, as torch.std
    lone = [i for i, k in enumerate(keys) if keys.count(k) == 1]
    by_mode = {mode: grouped_advantages(rewards, keys, scale=mode) for mode in ("group", "none", "batch")}
    for i in lone:
        assert by_mode["group"][i] == by_mode["none"][i] == rewards[i]
        assert by_mode["batch"][i] == pytest.approx(rewards[i] / (batch_std + 1e-6), rel=1e-12)  # float64


# --- one home for the choices --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["SCALE_REWARDS", "INTERNALIZATION_MODES"])
def test_the_choices_advantages_accept_are_the_configs(name):
    """config/checks.py is the one home of every enum: advantages checks against the same tuple."""
    import erl_lite.config.checks as checks
    import erl_lite.core.advantages as advantages

    assert getattr(advantages, name) is getattr(checks, name)
    assert not {"SCALE_MODES", "DISTILL_MODES"} & set(vars(advantages)), "a second copy of an enum"


@pytest.mark.parametrize(
    "call",
    [
        lambda: group_advantages([1.0, 0.0], scale="sum"),
        lambda: grouped_advantages([1.0], ["t"], scale="GROUP"),
        lambda: internalization_weights([1.0], mode="dpo"),
    ],
)
def test_an_unknown_choice_is_named_with_the_accepted_ones(call):
    with pytest.raises(ValueError, match=r"must be one of (group, batch, none|raft, nll), got '"):
        call()
