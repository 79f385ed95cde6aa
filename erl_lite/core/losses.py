"""Loss functions for ERL's update: pure tensor functions (``B`` sequences, ``T`` completion
positions, ``V`` vocabulary; ``mask`` ``(B, T)`` is 1 where a token carries loss).

Departures from the paper: it outlines the objective only; the settings are the reference code's. Guards as in verl
(log-ratios clamped to ±20, k3 capped at 10, masked old/reference log-probs set to the policy's own); else TRL's loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from erl_lite.config import ERLConfig
from erl_lite.config.checks import IMPORTANCE_SAMPLING_LEVELS, LOSS_TYPES, check_choice

# exp(20) ≈ 4.9e8: far beyond any clip range, far below float32 overflow.
_MAX_LOG_RATIO = 20.0
# Cap of the k3 estimate per token (verl's low_var_kl clamps it to [-10, 10]; k3 >= 0).
_MAX_KL = 10.0


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π ‖ π_ref), ``exp(d) - d - 1`` with ``d = ref - logp`` ``(B, T)``;
    as verl's low-variance KL, ``d`` is clamped to ±20 and the estimate to at most 10.

    Example:
        >>> k3_kl(torch.tensor([[-1.0]]), torch.tensor([[-1.0]]))
        tensor([[0.]])
    """
    d = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # (B, T)
    return (torch.exp(d) - d - 1).clamp(max=_MAX_KL)


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = ERLConfig.epsilon,  # the loss defaults' one home is ERLConfig
    epsilon_high: float = ERLConfig.epsilon_high,
    dual_clip: float | None = ERLConfig.dual_clip,
    importance_sampling_level: str = ERLConfig.importance_sampling_level,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO clipped loss ``-min(r·A, clip(r, 1-ε_low, 1+ε_high)·A)``, capped at ``-A·c`` for ``A < 0``.
    ``importance_sampling_level="sequence"`` (GSPO): one ratio per sequence, from its mean log-ratio.
    Returns ``(loss, clipped)``, both ``(B, T)``: 0 where masked, and True where a clip acted. The ranges of ε and c
    are ERLConfig's to check (:func:`~erl_lite.config.checks.check_clip`)."""
    adv = (advantages.unsqueeze(1) if advantages.dim() == 1 else advantages).to(logp.dtype)  # (B, 1) or (B, T)
    log_ratio = logp - old_logp.detach()  # (B, T)
    keep = mask.bool()
    if importance_sampling_level == "sequence":
        # Masked slots may hold anything: they count neither in the sum nor in the length.
        summed = torch.where(keep, log_ratio, torch.zeros_like(log_ratio)).sum(-1, keepdim=True)  # (B, 1)
        log_ratio = (summed / keep.sum(-1, keepdim=True).clamp(min=1)).expand_as(logp)  # (B, T)
    else:
        check_choice("importance_sampling_level", importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    ratio = torch.exp(log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))  # (B, T)
    bounded = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    loss = -torch.minimum(ratio * adv, bounded * adv)  # (B, T)
    clipped = ((ratio > 1 + epsilon_high) & (adv > 0)) | ((ratio < 1 - epsilon_low) & (adv < 0))
    if dual_clip is not None:
        cap = -adv * dual_clip  # positive where A < 0
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(dual, cap.expand_as(loss), loss)
        clipped = clipped | dual
    return torch.where(keep, loss, torch.zeros_like(loss)), clipped & keep


def nll_loss(logp: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token weighted NLL ``-w·logp`` (internalization); ``weights`` ``(B,)`` from ``internalization_weights``."""
    loss = -weights.to(logp.dtype).unsqueeze(1) * logp  # (B, T)
    return torch.where(mask.bool(), loss, torch.zeros_like(loss))


def normalizer_for(mask: torch.Tensor, loss_type: str) -> float:
    """:func:`aggregate`'s denominator: loss tokens for ``token_mean``, else sequences with one (at least 1)."""
    m = mask.bool()
    count = m.sum() if loss_type == "token_mean" else m.any(dim=-1).sum()
    return max(float(count), 1.0)


def row_losses(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str) -> torch.Tensor:
    """Each sequence's share ``(B,)`` of :func:`aggregate`'s numerator: ``Σ_t m·ℓ`` (``/ n_b`` for ``seq_mean``)."""
    check_choice("loss_type", loss_type, LOSS_TYPES)  # ERLConfig turns TRL's names into these
    m = mask.bool()
    sums = torch.where(m, per_token, torch.zeros_like(per_token)).sum(dim=-1)  # (B,)
    if loss_type == "seq_mean":
        return sums / m.sum(dim=-1).clamp(min=1).to(per_token.dtype)
    return sums


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, loss_type: str, normalizer: float | None = None
) -> torch.Tensor:
    """A ``(B, T)`` per-token loss as a scalar: :func:`row_losses` summed over ``normalizer``; with
    ``normalizer_for(full_mask, loss_type)`` micro-batches accumulate the whole batch's gradient (None: this batch's).

    Example:
        >>> loss = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
        >>> m = torch.tensor([[1, 1, 0], [1, 0, 0]])
        >>> [float(aggregate(loss, m, t)) for t in LOSS_TYPES]
        [3.0, 2.0, 2.25]
    """
    total = row_losses(per_token, mask, loss_type).sum()
    return total / _resolve_normalizer(mask, loss_type, normalizer)


def _resolve_normalizer(mask: torch.Tensor, loss_type: str, normalizer: float | None) -> float:
    if normalizer is None:
        return normalizer_for(mask, loss_type)
    if not normalizer > 0:
        raise ValueError(f"normalizer must be positive, got {normalizer}")
    return normalizer


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the positions where ``mask`` is set (0 if none)."""
    m = mask.bool()
    total = torch.where(m, values.to(torch.float32), torch.zeros((), dtype=torch.float32)).sum()
    return total / m.sum().clamp(min=1)


@dataclass
class LossStats:
    """Statistics of one (micro-)batch, detached plain values for logging."""

    loss: float  # the aggregated objective
    clip_ratio: float  # fraction of policy-loss tokens (not NLL rows) where a clip acted
    kl: float | None  # mean k3 KL over loss tokens; None when the KL term was skipped
    num_tokens: int  # loss tokens
    policy_tokens: int = 0  # loss tokens of policy-loss rows
    row_losses: tuple[float, ...] = ()  # each row's share of ``loss`` (they add up to it)


def sampler_weights(
    old_logp: torch.Tensor,
    sampled_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """TRL's importance-sampling correction of the sampler: ``w = exp(log π_old - log q)`` on loss tokens, one per
    token ``(B, T)`` or, in a ``sequence_*`` mode, ``exp`` of the row's sum ``(B, 1)``; ``*_truncate`` clips w into
    [clip_min, clip_max], ``*_mask`` zeroes it outside. A token the sampler did not score (NaN) counts 1.

    Example:
        >>> sampler_logps = torch.tensor([[-2.0, 0.0]])
        >>> w = sampler_weights(torch.zeros(1, 2), sampler_logps, torch.ones(1, 2), "token_truncate", None, 3.0)
        >>> [round(v, 3) for v in w[0].tolist()]
        [3.0, 1.0]
    """
    diff = torch.nan_to_num((old_logp - sampled_logp) * mask, nan=0.0)  # (B, T)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)  # (B, 1)
    ratio = diff.exp()
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    if mode.endswith("truncate"):
        return ratio.clamp(min=low, max=high)
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def policy_objective(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    nll_rows: torch.Tensor | None = None,
    beta: float = ERLConfig.beta,
    epsilon_low: float = ERLConfig.epsilon,
    epsilon_high: float = ERLConfig.epsilon_high,
    dual_clip: float | None = ERLConfig.dual_clip,
    loss_type: str = ERLConfig.loss_type,
    normalizer: float | None = None,
    importance_sampling_level: str = ERLConfig.importance_sampling_level,
    sampler_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """Clipped policy loss (or weighted NLL on ``nll_rows``) + ``beta``·k3 KL per token, aggregated.
    ``sampler_weight`` (:func:`sampler_weights`) multiplies the policy term of each token, as TRL's.
    Log-probs are ``(B, T)``; ``old_logp`` None: on-policy (ratio 1); ``ref_logp`` None: no KL.
    ``advantages`` ``(B,)`` are the weights on ``nll_rows`` ``(B,)`` bool. Returns ``(loss, stats)``.

    Example:
        >>> lp = torch.full((2, 3), -1.0, requires_grad=True)
        >>> loss, stats = policy_objective(lp, None, None, torch.tensor([1.0, -1.0]),
        ...                                torch.ones(2, 3), beta=0.0)
        >>> loss.item(), stats.clip_ratio, stats.kl, stats.row_losses
        (0.0, 0.0, None, (-1.5, 1.5))
    """
    keep = mask.bool()  # (B, T)
    current = logp.detach()
    old = current if old_logp is None else torch.where(keep, old_logp.detach(), current)
    policy, clipped = clipped_policy_loss(
        logp,
        old,
        advantages,
        mask,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        dual_clip=dual_clip,
        importance_sampling_level=importance_sampling_level,
    )  # (B, T) each
    if sampler_weight is not None:
        policy = policy * sampler_weight.detach()
    per_token, policy_mask = policy, keep
    if nll_rows is not None:
        nll = nll_rows.to(device=logp.device, dtype=torch.bool).unsqueeze(1)  # (B, 1)
        per_token = torch.where(nll, nll_loss(logp, advantages, mask), policy)
        policy_mask = keep & ~nll
    kl_mean = None
    if beta != 0 and ref_logp is not None:
        kl = k3_kl(logp, torch.where(keep, ref_logp.detach(), current))  # (B, T)
        per_token = per_token + beta * kl
        kl_mean = float(masked_mean(kl.detach(), mask))
    norm = _resolve_normalizer(mask, loss_type, normalizer)
    loss = aggregate(per_token, mask, loss_type, norm)
    with torch.no_grad():  # the statistics (every tensor (B, T)), outside the graph
        stats = LossStats(
            loss=float(loss.detach()),
            clip_ratio=float(masked_mean(clipped, policy_mask)),
            kl=kl_mean,
            num_tokens=int(mask.bool().sum()),
            policy_tokens=int(policy_mask.sum()),
            row_losses=tuple((row_losses(per_token, mask, loss_type) / norm).tolist()),
        )
    return loss, stats


def first_non_finite(tensors: Any) -> str | None:
    """The name of the first floating-point tensor with NaN or inf among ``(name, tensor)`` pairs, or None."""
    pairs = [(n, t) for n, t in tensors if t.is_floating_point()]
    if not pairs:
        return None
    device = pairs[0][1].device
    with torch.no_grad():  # one flag per tensor, gathered on one device: one sync for all of them
        finite = torch.stack([torch.isfinite(t).all().to(device) for _, t in pairs])
    if bool(finite.all()):
        return None
    return pairs[int((~finite).nonzero()[0, 0])][0]
