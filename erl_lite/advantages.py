"""Advantages for ERL's update: GRPO per (task, role) group, and internalization weights.

Plain Python numbers in, plain Python numbers out; the trainer broadcasts each sequence's
scalar over that sequence's generated tokens.

* :func:`group_advantages` — GRPO within one group, ``A = (r - mean) / (std + eps)`` with the
  unbiased sample standard deviation (what ``torch.std`` computes by default).
* :func:`grouped_advantages` — the same, applied separately to every key, e.g.
  ``(task_id, role)``: first attempts are compared with the task's other first attempts,
  reflections and second attempts only with those of the task's *failed* rollouts.
* :func:`distill_weights` — the weight of a second attempt replayed under the initial
  context (internalization).

Departures from the paper: the paper does not say what a group of one gets; like the
reference code we use mean 0 and std 1, so ``A = r`` (a lone gated rollout still gets a
signal). A group whose rewards are all equal gets exactly 0, not a rounding residue.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

#: Internalization weighting modes accepted by :func:`distill_weights`.
DISTILL_MODES = ("raft", "nll")


def _check_finite(rewards: Sequence[float]) -> list[float]:
    values = [float(r) for r in rewards]
    bad = [r for r in values if not math.isfinite(r)]
    if bad:
        raise ValueError(f"rewards must be finite numbers, got {bad[:3]}")
    return values


def group_advantages(rewards: Sequence[float], eps: float = 1e-6) -> list[float]:
    """GRPO advantages of one group of rewards.

    Args:
        rewards: the rewards of the group's sequences.
        eps: added to the standard deviation so a near-constant group does not explode.

    Returns:
        One advantage per reward, in the same order.

    Example:
        >>> [round(a, 4) for a in group_advantages([1.0, 0.0, 0.0, 1.0])]
        [0.866, -0.866, -0.866, 0.866]
        >>> group_advantages([0.5])
        [0.5]
        >>> group_advantages([1.0, 1.0])
        [0.0, 0.0]
    """
    values = _check_finite(rewards)
    if not values:
        return []
    if len(values) == 1:
        # Convention of the reference code: a lone sample has mean 0 and std 1.
        return [values[0]]
    if all(v == values[0] for v in values):
        # No contrast inside the group: no signal (avoids 1e-11 residues from float sums).
        return [0.0] * len(values)
    mean = math.fsum(values) / len(values)
    # Unbiased (n - 1) variance, as torch.std and TRL's GRPOTrainer use.
    var = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
    std = math.sqrt(var)
    return [(v - mean) / (std + eps) for v in values]


def grouped_advantages(
    rewards: Sequence[float], keys: Sequence[Hashable], eps: float = 1e-6
) -> list[float]:
    """GRPO advantages computed separately within each key's group, order preserved.

    Args:
        rewards: one reward per sequence.
        keys: one group key per sequence, e.g. ``(task_id, role)``.
        eps: see :func:`group_advantages`.

    Returns:
        One advantage per sequence, aligned with ``rewards``.

    Example:
        >>> keys = [("t1", "first"), ("t1", "first"), ("t2", "second")]
        >>> adv = grouped_advantages([1.0, 0.0, 0.3], keys)
        >>> [round(a, 4) for a in adv]
        [0.7071, -0.7071, 0.3]
    """
    if len(rewards) != len(keys):
        raise ValueError(f"got {len(rewards)} rewards but {len(keys)} keys")
    positions: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        positions.setdefault(key, []).append(i)
    out = [0.0] * len(rewards)
    for idx in positions.values():
        for i, a in zip(idx, group_advantages([rewards[i] for i in idx], eps=eps)):
            out[i] = a
    return out


def distill_weights(r2: Sequence[float], mode: str) -> list[float]:
    """Per-sequence weights for internalization (second attempts under the initial context).

    Args:
        r2: the second attempts' rewards.
        mode: ``"raft"`` — ``max(r2, 0)``, the reference code's advantage for its clipped
            policy loss (no group baseline; equals the F1 for partial-credit QA);
            ``"nll"`` — the paper's indicator ``1[r2 > 0]`` for a weighted NLL.

    Example:
        >>> distill_weights([1.0, 0.0, 0.4, -0.5], "raft")
        [1.0, 0.0, 0.4, 0.0]
        >>> distill_weights([1.0, 0.0, 0.4, -0.5], "nll")
        [1.0, 0.0, 1.0, 0.0]
    """
    if mode not in DISTILL_MODES:
        raise ValueError(f"distill mode must be one of {DISTILL_MODES}, got {mode!r}")
    values = _check_finite(r2)
    if mode == "raft":
        return [max(v, 0.0) for v in values]
    return [1.0 if v > 0 else 0.0 for v in values]
