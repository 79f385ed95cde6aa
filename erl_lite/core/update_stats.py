"""What one update did, tallied: the :class:`UpdateStats` record and its metric keys, the loss sums over
micro-batches (:class:`Tally`), the on-policy check's sums (:class:`GapTally`) and the weights' movement
(:class:`WeightProbe`). The update itself (:mod:`erl_lite.core.update`) calls them and reads on without them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from erl_lite import metric_names as keys
from erl_lite.config import ERLConfig
from erl_lite.core.losses import _MAX_LOG_RATIO, LossStats
from erl_lite.engine.batching import Packed
from erl_lite.engine.logprobs import cut_logprobs
from erl_lite.engine.policy import base_model
from erl_lite.engine.reducer import Reducer
from erl_lite.records import ADVANTAGE_ROLES, FIRST, REFLECTION, ROLES, SECOND


@dataclass(frozen=True)
class UpdateStats(Mapping):
    """What one :meth:`PolicyUpdater.update` did, read as a mapping of :data:`UPDATE_METRICS`."""

    samples: dict[str, int]  # rows per role
    advantage: dict[str, float]  # mean |A| per role of ADVANTAGE_ROLES
    loss: dict[str, float]  # each role's loss (KL included), mean over the stepped mini-batches
    loss_total: float  # their sum
    kl: float  # mean k3 KL per loss token
    clip_ratio: float  # fraction of policy-loss tokens clipped
    grad_norm: float  # before clipping, at the last step taken
    optim_steps: int  # steps taken
    skipped_steps: int = 0  # steps skipped for a non-finite loss or gradient
    weight_update: float = 0.0  # |W_after - W_before| / |W_before| over a sample of the trainable weights
    gap: dict[str, float] = dataclasses.field(default_factory=dict)  # the on-policy check's keys (GapTally)

    @classmethod
    def empty(cls, samples: dict[str, int], advantage: dict[str, float] | None = None) -> "UpdateStats":
        """The record of an update that took no step."""
        return cls(
            samples, advantage or {r: 0.0 for r in ADVANTAGE_ROLES}, {r: 0.0 for r in ROLES}, 0.0, 0.0, 0.0, 0.0, 0
        )

    def to_metrics(self) -> dict[str, float]:
        """The metrics as a flat dict with exactly the keys of :data:`UPDATE_METRICS`."""
        return {
            **{keys.SAMPLES_KEYS[r]: float(self.samples.get(r, 0)) for r in ROLES},
            **{keys.ADVANTAGE_KEYS[r]: float(self.advantage.get(r, 0.0)) for r in ADVANTAGE_ROLES},
            keys.LOSS_TOTAL: float(self.loss_total),
            **{keys.LOSS_KEYS[r]: float(self.loss.get(r, 0.0)) for r in ROLES},
            keys.KL: float(self.kl),
            keys.CLIP_RATIO: float(self.clip_ratio),
            keys.GRAD_NORM: float(self.grad_norm),
            keys.OPTIM_STEPS: float(self.optim_steps),
            keys.OPTIM_SKIPPED_STEPS: float(self.skipped_steps),
            keys.WEIGHT_UPDATE: float(self.weight_update),
            **{key: float(self.gap.get(key, 0.0)) for key in keys.GAP_RECORD},
        }

    def __getitem__(self, key: str) -> float:
        return self.to_metrics()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(UPDATE_METRICS)

    def __len__(self) -> int:
        return len(UPDATE_METRICS)


#: Every metric key :meth:`UpdateStats.to_metrics` yields, in its order (samples, |A|, losses, KL, clip ratio, gradient
#: norm, steps, weight update, the on-policy check).
UPDATE_METRICS: tuple[str, ...] = tuple(UpdateStats.empty({r: 0 for r in ROLES}).to_metrics())


class Tally:
    """Sums :class:`LossStats` over micro-batches and mini-batches into an :class:`UpdateStats`."""

    def __init__(self) -> None:
        # Each role's loss shares; KL and clip ratio weighted by their token counts; the counts.
        self.sums = dict.fromkeys([*keys.LOSS_KEYS.values(), keys.KL, "clipped", "tokens", "policy_tokens"], 0.0)

    def add(self, batch: Packed, stats: LossStats) -> None:
        for role, share in zip(batch.roles, stats.row_losses):
            self.sums[keys.LOSS_KEYS[role]] += share
        self.sums[keys.KL] += (stats.kl or 0.0) * stats.num_tokens
        self.sums["tokens"] += stats.num_tokens
        self.sums["clipped"] += stats.clip_ratio * stats.policy_tokens
        self.sums["policy_tokens"] += stats.policy_tokens

    def merge(self, other: "Tally") -> None:
        for key, value in other.sums.items():
            self.sums[key] += value

    def result(self, reducer: Reducer, **fields: Any) -> UpdateStats:
        """The record: the loss, KL and clip ratio from the sums (over every process under DDP), ``fields`` the rest
        (``samples``, ``advantage``, ``grad_norm``, ``optim_steps``, ...)."""
        s = reducer.sum(self.sums)
        loss = {r: s[keys.LOSS_KEYS[r]] / max(fields["optim_steps"], 1) for r in ROLES}  # per stepped mini-batch
        kl, clipped = s[keys.KL] / max(s["tokens"], 1), s["clipped"] / max(s["policy_tokens"], 1)
        return UpdateStats(loss=loss, loss_total=sum(loss.values()), kl=kl, clip_ratio=clipped, **fields)


class GapTally:
    """The on-policy check's sums: ``|sampler's log-prob - the update's|`` over each sampled role's loss tokens, from
    the first pass over the weights that sampled them, rescored under the role's top-k / top-p cut where its sampler
    cut (``model``, ``config``); ``stale``: a sampler drew from other weights. Max: over this process's rows."""

    def __init__(self, model: Any = None, config: ERLConfig | None = None, stale: bool = False) -> None:
        self.sums: dict[str, float] = {key: 0.0 for r in ADVANTAGE_ROLES for key in (f"s/{r}", f"n/{r}")}
        self.sums["stale"] = float(stale)
        self.maxes = {r: 0.0 for r in ADVANTAGE_ROLES}
        c = config or ERLConfig()
        self.model = model  # the cuts: as the phases sample each role
        self.cuts = {FIRST: (c.top_k, c.top_p), SECOND: (c.top_k, c.top_p), REFLECTION: (0, c.reflection_top_p)}
        self.temperature = c.temperature
        # fp32 sampler and update agree to ~1e-6 a token; 16-bit rounding adds ~5e-3 (docs/HEALTH.md)
        self.limit = 1e-3 if getattr(base_model(model), "dtype", torch.float32) == torch.float32 else 0.02

    def add(self, batch: Packed, scored: torch.Tensor) -> None:
        scored = scored.detach().float()
        for cut in {self.cuts.get(r, (0, 1.0)) for r in batch.roles} - {(0, 1.0)}:
            rows = torch.tensor([self.cuts.get(r) == cut for r in batch.roles], device=scored.device)[:, None]
            rescored = cut_logprobs(self.model, *batch.logprob_inputs, batch.temperature or self.temperature, *cut)
            scored = torch.where(rows, rescored.to(scored), scored)
        # (B, L); a token outside the update's cut is off by at least the cap; NaN where nothing was reported
        gap = (batch.sampled_logp - scored).abs().clamp(max=_MAX_LOG_RATIO)
        known = batch.mask.bool() & torch.isfinite(batch.sampled_logp)
        for b, role in enumerate(batch.roles):
            row = gap[b][known[b]]
            if role in self.maxes and row.numel():
                self.sums[f"s/{role}"] += float(row.sum())
                self.sums[f"n/{role}"] += row.numel()
                self.maxes[role] = max(self.maxes[role], float(row.max()))

    def result(self, reducer: Reducer) -> dict[str, float]:
        s = reducer.sum(self.sums)  # DDP: over every process
        out = {keys.GAP_MEAN_KEYS[r]: s[f"s/{r}"] / max(s[f"n/{r}"], 1) for r in ADVANTAGE_ROLES}
        out.update({keys.GAP_MAX_KEYS[r]: self.maxes[r] for r in ADVANTAGE_ROLES})
        out[keys.GAP_TOKENS] = sum(s[f"n/{r}"] for r in ADVANTAGE_ROLES)
        out[keys.GAP_STALE], out[keys.GAP_LIMIT] = float(s["stale"] > 0), self.limit
        return out


class WeightProbe:
    """How far the trainable weights moved: a copy of a fixed strided sample (at most :attr:`max_entries`) of their
    entries, compared later; a full copy would double a fully fine-tuned model's memory. DDP: no reduction needed."""

    max_entries = 1 << 16

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = params
        self.stride = max(1, math.ceil(sum(p.numel() for p in params) / self.max_entries))
        self.before = self._sample()

    def _sample(self) -> list[torch.Tensor]:
        return [p.detach().reshape(-1)[:: self.stride].float().clone() for p in self.params]

    def moved(self) -> float:
        """``|W_after - W_before| / |W_before|`` over the sample (the absolute change where ``W_before`` is 0)."""
        if not self.params:
            return 0.0
        after = self._sample()
        change = math.sqrt(sum(float((a - b).pow(2).sum()) for a, b in zip(after, self.before)))
        size = math.sqrt(sum(float(b.pow(2).sum()) for b in self.before))
        return change / size if size > 0 else change
