"""GRPO advantages ``A = (r - mean) / (std + eps)`` per (task, role) under ``scale_rewards``; internalization weights.

Departures from the paper: silent on a group of one; like the reference, A = r (mean 0, std 1). Equal rewards: A = 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

from erl_lite.config.checks import INTERNALIZATION_MODES, SCALE_REWARDS, check_choice


def _check_finite(rewards: Sequence[float]) -> list[float]:
    values = [float(r) for r in rewards]
    bad = [r for r in values if not math.isfinite(r)]
    if bad:
        raise ValueError(f"rewards must be finite numbers, got {bad[:3]}")
    return values


def _sample_std(values: list[float]) -> float:
    """Unbiased (n - 1) standard deviation, as torch.std and TRL's GRPOTrainer use; 0 below 2 values."""
    if len(values) < 2:
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def group_advantages(
    rewards: Sequence[float], eps: float = 1e-6, *, scale: str = "group", batch_std: float | None = None
) -> list[float]:
    """GRPO advantages of one group of rewards, in order; ``scale`` (TRL's ``scale_rewards``) divides
    ``r - mean`` by this group's std (+ ``eps``), by ``batch_std`` (0: unscaled), or not at all.

    Example:
        >>> [round(a, 4) for a in group_advantages([1.0, 0.0, 0.0, 1.0])]
        [0.866, -0.866, -0.866, 0.866]
    """
    check_choice("scale", scale, SCALE_REWARDS)
    if scale == "batch" and batch_std is None:
        raise ValueError("scale='batch' needs batch_std (grouped_advantages computes it)")
    values = _check_finite(rewards)
    if not values:
        return []
    if len(values) > 1 and all(v == values[0] for v in values):
        # No contrast inside the group: no signal (avoids 1e-11 residues from float sums).
        return [0.0] * len(values)
    # Convention of the reference code: a lone sample has mean 0 (and, for "group", std 1).
    mean = math.fsum(values) / len(values) if len(values) > 1 else 0.0
    centred = [v - mean for v in values]
    if scale == "none" or (scale == "group" and len(values) == 1):
        return centred
    std = _sample_std(values) if scale == "group" else batch_std
    if scale == "batch" and not std > 0:
        return centred
    return [c / (std + eps) for c in centred]


def grouped_advantages(
    rewards: Sequence[float], keys: Sequence[Hashable], eps: float = 1e-6, *, scale: str = "group"
) -> list[float]:
    """GRPO advantages within each key's group, in order; ``scale="batch"`` uses the std of *all* ``rewards``."""
    if len(rewards) != len(keys):
        raise ValueError(f"got {len(rewards)} rewards but {len(keys)} keys")
    batch_std = _sample_std(_check_finite(rewards)) if scale == "batch" else None
    return per_group(rewards, keys, lambda group: group_advantages(group, eps=eps, scale=scale, batch_std=batch_std))


def per_group(
    values: Sequence[float], keys: Sequence[Hashable], rule: Callable[[list[float]], list[float]]
) -> list[float]:
    """``rule`` applied to the values of each group of equal ``keys``; the results back in the original order."""
    positions: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        positions.setdefault(key, []).append(i)
    out = [0.0] * len(values)
    for idx in positions.values():
        for i, a in zip(idx, rule([values[i] for i in idx])):
            out[i] = a
    return out


def internalization_weights(r2: Sequence[float], mode: str) -> list[float]:
    """Internalization weights from the rewards ``r2``: ``"raft"`` ``max(r2, 0)``, ``"nll"`` ``1[r2 > 0]``."""
    check_choice("internalization mode", mode, INTERNALIZATION_MODES)
    values = _check_finite(r2)
    if mode == "raft":
        return [max(v, 0.0) for v in values]
    return [1.0 if v > 0 else 0.0 for v in values]
