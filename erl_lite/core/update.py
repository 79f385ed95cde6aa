"""The RL update: a list of :class:`TrainSample` (every role a row of one batch) into optimizer steps.

One step per mini-batch (``ERLConfig.optimizer_steps``), accumulated over micro-batches under the mini-batch's
normalizer. Old and reference log-probs are computed once, before the first step, with dropout off as in sampling.

Departures from the paper: each row is scored at its sampling temperature (reflections at ``reflection_temperature``);
rows with A = 0 are skipped when ``beta == 0`` (zero gradient) but counted; a non-finite mini-batch is not stepped.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from erl_lite.config import ERLConfig
from erl_lite.core.batching import (
    CompletionLogProbs,
    Packed,
    completion_logprobs,
    micro_batches,
    normalizer,
    pack,
)
from erl_lite.core.logprobs import cut_logprobs, draws_dropout
from erl_lite.core.losses import _MAX_LOG_RATIO, LossStats, first_non_finite, policy_objective, sampler_weights
from erl_lite.core.policy import base_model, keep_4bit_trainable, reference_context, sampled_stale
from erl_lite.core.progress import NO_PROGRESS, Progress
from erl_lite.core.reducer import SINGLE_PROCESS, Reducer
from erl_lite.metric_names import (
    ADVANTAGE_KEYS,
    CLIP_RATIO,
    GAP_LIMIT,
    GAP_MAX_KEYS,
    GAP_MEAN_KEYS,
    GAP_RECORD,
    GAP_STALE,
    GAP_TOKENS,
    GRAD_NORM,
    KL,
    LOSS_KEYS,
    LOSS_TOTAL,
    OPTIM_SKIPPED_STEPS,
    OPTIM_STEPS,
    SAMPLES_KEYS,
    WEIGHT_UPDATE,
)
from erl_lite.records import ADVANTAGE_ROLES, FIRST, REFLECTION, ROLES, SECOND, TrainSample

#: Every metric key :meth:`UpdateStats.to_metrics` yields, in order.
UPDATE_METRICS: tuple[str, ...] = (
    *SAMPLES_KEYS.values(),
    *ADVANTAGE_KEYS.values(),
    LOSS_TOTAL,
    *LOSS_KEYS.values(),
    KL,
    CLIP_RATIO,
    GRAD_NORM,
    OPTIM_STEPS,
    OPTIM_SKIPPED_STEPS,
    WEIGHT_UPDATE,
    *GAP_RECORD,
)


@dataclass(frozen=True)
class UpdateStats(Mapping):
    """What one :meth:`PolicyUpdater.update` did, read as a mapping of :data:`UPDATE_METRICS`.

    Example:
        >>> s = UpdateStats.empty({r: 0 for r in ROLES})
        >>> list(s.to_metrics()) == list(UPDATE_METRICS), s[OPTIM_STEPS]
        (True, 0.0)
    """

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
        out = {SAMPLES_KEYS[r]: float(self.samples.get(r, 0)) for r in ROLES}
        out.update({ADVANTAGE_KEYS[r]: float(self.advantage.get(r, 0.0)) for r in ADVANTAGE_ROLES})
        out[LOSS_TOTAL] = float(self.loss_total)
        out.update({LOSS_KEYS[r]: float(self.loss.get(r, 0.0)) for r in ROLES})
        out.update(
            {
                KL: float(self.kl),
                CLIP_RATIO: float(self.clip_ratio),
                GRAD_NORM: float(self.grad_norm),
                OPTIM_STEPS: float(self.optim_steps),
                OPTIM_SKIPPED_STEPS: float(self.skipped_steps),
                WEIGHT_UPDATE: float(self.weight_update),
            }
        )
        out.update({key: float(self.gap.get(key, 0.0)) for key in GAP_RECORD})
        return out

    def __getitem__(self, key: str) -> float:
        return self.to_metrics()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(UPDATE_METRICS)

    def __len__(self) -> int:
        return len(UPDATE_METRICS)


class _Tally:
    """Sums :class:`LossStats` over micro-batches and mini-batches into an :class:`UpdateStats`."""

    def __init__(self) -> None:
        # Each role's loss shares; KL and clip ratio weighted by their token counts; the counts.
        self.sums = dict.fromkeys([*LOSS_KEYS.values(), KL, "clipped", "tokens", "policy_tokens"], 0.0)

    def add(self, batch: Packed, stats: LossStats) -> None:
        for role, share in zip(batch.roles, stats.row_losses):
            self.sums[LOSS_KEYS[role]] += share
        self.sums[KL] += (stats.kl or 0.0) * stats.num_tokens
        self.sums["tokens"] += stats.num_tokens
        self.sums["clipped"] += stats.clip_ratio * stats.policy_tokens
        self.sums["policy_tokens"] += stats.policy_tokens

    def merge(self, other: "_Tally") -> None:
        for key, value in other.sums.items():
            self.sums[key] += value

    def result(
        self,
        dist: Reducer,
        samples: dict[str, int],
        advantage: dict[str, float],
        grad_norm: float,
        steps: int,
        skipped: int,
        moved: float,
    ) -> UpdateStats:
        s = dist.sum(self.sums)  # DDP: the sums over every process
        loss = {r: s[LOSS_KEYS[r]] / max(steps, 1) for r in ROLES}  # mean over the stepped mini-batches
        return UpdateStats(
            samples,
            advantage,
            loss,
            sum(loss.values()),
            s[KL] / max(s["tokens"], 1),
            s["clipped"] / max(s["policy_tokens"], 1),
            grad_norm,
            steps,
            skipped,
            moved,
        )


class GapTally:
    """The on-policy check's sums: ``|sampler's log-prob - the update's|`` over each sampled role's loss tokens, from
    the first pass over the weights that sampled them, rescored under the role's top-k / top-p cut where its sampler
    cut (``model``, ``config``); ``stale``: a sampler drew from other weights. Max: over this process's rows."""

    def __init__(self, model: Any = None, config: ERLConfig | None = None, stale: bool = False) -> None:
        self.sums: dict[str, float] = {key: 0.0 for r in ADVANTAGE_ROLES for key in (f"s/{r}", f"n/{r}")}
        self.sums["stale"] = float(stale)
        self.maxes = {r: 0.0 for r in ADVANTAGE_ROLES}
        c = config or ERLConfig()
        self.model, self.cuts = (
            model,
            {FIRST: (c.top_k, c.top_p), SECOND: (c.top_k, c.top_p), REFLECTION: (0, c.reflection_top_p)},
        )  # as the phases sample each role
        self.temperature = c.temperature
        # fp32 sampler and update agree to ~1e-6 a token; 16-bit rounding adds ~5e-3 (docs/HEALTH.md)
        self.limit = 1e-3 if getattr(base_model(model), "dtype", torch.float32) == torch.float32 else 0.02

    def add(self, batch: Packed, scored: torch.Tensor) -> None:
        if batch.sampled_logp is None:
            return
        scored = scored.detach().float()
        for cut in {self.cuts.get(r, (0, 1.0)) for r in batch.roles} - {(0, 1.0)}:
            rows = torch.tensor([self.cuts.get(r) == cut for r in batch.roles], device=scored.device)[:, None]
            scored = torch.where(
                rows,
                cut_logprobs(
                    self.model,
                    batch.input_ids,
                    batch.attention_mask,
                    batch.position_ids,
                    batch.targets,
                    batch.temperature or self.temperature,
                    *cut,
                ).to(scored),
                scored,
            )
        # (B, L); a token outside the update's cut is off by at least the cap; NaN where nothing was reported
        gap = (batch.sampled_logp - scored).abs().clamp(max=_MAX_LOG_RATIO)
        known = batch.mask.bool() & torch.isfinite(batch.sampled_logp)
        for b, role in enumerate(batch.roles):
            row = gap[b][known[b]]
            if role in self.maxes and row.numel():
                self.sums[f"s/{role}"] += float(row.sum())
                self.sums[f"n/{role}"] += row.numel()
                self.maxes[role] = max(self.maxes[role], float(row.max()))

    def result(self, dist: Reducer) -> dict[str, float]:
        s = dist.sum(self.sums)  # DDP: over every process
        out = {GAP_MEAN_KEYS[r]: s[f"s/{r}"] / max(s[f"n/{r}"], 1) for r in ADVANTAGE_ROLES}
        out.update({GAP_MAX_KEYS[r]: self.maxes[r] for r in ADVANTAGE_ROLES})
        out[GAP_TOKENS] = sum(s[f"n/{r}"] for r in ADVANTAGE_ROLES)
        out[GAP_STALE], out[GAP_LIMIT] = float(s["stale"] > 0), self.limit
        return out


class PolicyUpdater:
    """Applies optimizer steps to a model (a PEFT model when ``beta > 0``: the reference is its base); ``dist``:
    the process group's :class:`~erl_lite.core.reducer.Reducer` (lines marked ``DDP``). A mini-batch with a
    non-finite loss or gradient is skipped with a ``RuntimeWarning``, as DeepSpeed's loss scaler does;
    :attr:`max_skipped_in_a_row` in a row, or a non-finite weight, raise FloatingPointError."""

    max_skipped_in_a_row: int = 3  # optimizer steps skipped in a row (non-finite) that stop the run
    step: int | None = None  # the training iteration being updated (the trainer sets it), named in messages
    progress: Progress = NO_PROGRESS  # the update's bar, a tick per micro-batch (the trainer sets it)

    def __init__(
        self, model: Any, optimizer: Any, scheduler: Any, config: ERLConfig, pad_id: int, dist: Reducer = SINGLE_PROCESS
    ) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.config, self.pad_id, self.dist = config, pad_id, dist
        self.device = next(model.parameters()).device
        # DDP: wrapping broadcasts rank 0's weights to every process (the module itself in one).
        self.trained = dist.wrap(CompletionLogProbs(model, config.temperature, config.logprob_chunk_size))
        self.skipped_in_a_row = 0  # optimizer steps skipped since the last one taken

    def _logprobs(self, batch: Packed) -> torch.Tensor:
        keep_4bit_trainable(self.model)  # a model that generated elsewhere may have been repacked
        return completion_logprobs(self.model, batch, self.config.temperature, self.config.logprob_chunk_size)

    def _plan(self, mini: list[TrainSample]) -> tuple[float, list[Packed]]:
        """A mini-batch's normalizer (over *all* its rows) and its packed micro-batches."""
        c = self.config
        masks = [torch.tensor(s.completion_mask) for s in mini]
        # DDP: the denominator counts every process's rows (a raw 0 when this one has no token).
        local = normalizer(masks, c.loss_type) if any(m.any() for m in masks) else 0.0
        norm = self.dist.total_count(local)
        active = [s for s in mini if c.beta > 0 or s.advantage != 0]  # A = 0 and no KL: no gradient
        return norm, [
            pack(chunk, self.pad_id, c.internalization_mode == "nll", self.device)
            for chunk in micro_batches(active, c.per_device_train_batch_size)
        ]

    def plans(self, samples: list[TrainSample], k: int) -> list[tuple[float, list[Packed]]]:
        """``samples`` as ``k`` interleaved mini-batches (:meth:`_plan`), each with every role; k == 1: on-policy."""
        positions = self.dist.global_positions(samples)  # DDP: in the global batch (range(n) in one process)
        return [self._plan([s for s, p in zip(samples, positions) if p % k == i]) for i in range(k)]

    @torch.no_grad()
    def _attach_old_and_ref(self, batches: list[Packed], old: list[bool], ref: bool) -> list[Packed]:
        """Each micro-batch with its old log-probs (where ``old[i]``) and/or reference log-probs,
        computed before any step in eval mode (no dropout), as the sampler ran."""
        was_training = self.model.training
        self.model.eval()
        try:
            batches = [dataclasses.replace(b, old_logp=self._logprobs(b)) if o else b for b, o in zip(batches, old)]
            for b in batches:
                if b.old_logp is not None:
                    self.gaps.add(b, b.old_logp)
            if ref:
                with reference_context(self.model):
                    batches = [dataclasses.replace(b, ref_logp=self._logprobs(b)) for b in batches]
        finally:
            self.model.train(was_training)
        return batches

    def update(self, samples: list[TrainSample]) -> UpdateStats:
        """Optimizer steps over ``samples``; returns what the update did (messages name :attr:`step`)."""
        c = self.config
        # DDP: counts and |A| sums over every process's rows (this process's alone in one).
        totals = self.dist.sum(
            {
                **{SAMPLES_KEYS[r]: float(sum(s.role == r for s in samples)) for r in ROLES},
                **{f"|A|/{r}": sum(abs(s.advantage) for s in samples if s.role == r) for r in ROLES},
            }
        )
        counts = {r: int(totals[SAMPLES_KEYS[r]]) for r in ROLES}
        advantage = {r: totals[f"|A|/{r}"] / counts[r] if counts[r] else 0.0 for r in ADVANTAGE_ROLES}
        n_rows = sum(counts.values())  # the global batch
        if not n_rows:
            return UpdateStats.empty(counts, advantage)
        k = c.optimizer_steps(n_rows)
        plans = self.plans(samples, k)
        # The first mini-batch trains on the weights that sampled it (ratio 1): no old log-probs, unless dropout draws.
        self.gaps = GapTally(self.model, c, sampled_stale(self.model))
        dropout = draws_dropout(self.model)
        old = [i > 0 or dropout for i, (_, bs) in enumerate(plans) for _ in bs]
        flat = self._attach_old_and_ref([b for _, bs in plans for b in bs], old=old, ref=c.beta > 0)
        tally, grad_norm, at, taken = _Tally(), 0.0, 0, 0
        probe = WeightProbe([p for p in self.model.parameters() if p.requires_grad])
        bar = self.progress.bar("update", len(flat), unit="micro-batch")  # closed below, or by Progress.close_all
        self.model.train()
        for i, (norm, batches) in enumerate(plans):
            where = f"{'this update' if self.step is None else f'step {self.step}'}, optimizer step {i + 1} of {k}"
            mini = self._mini_batch_step(flat[at : at + len(batches)], norm, where, bar)
            at += len(batches)
            if mini is not None:
                tally.merge(mini[0])
                grad_norm, taken, self.skipped_in_a_row = mini[1], taken + 1, 0
        bar.close()
        self.optimizer.zero_grad(set_to_none=True)
        return dataclasses.replace(
            tally.result(self.dist, counts, advantage, grad_norm, taken, k - taken, probe.moved()),
            gap=self.gaps.result(self.dist),
        )

    def _mini_batch_step(self, batches: list[Packed], norm: float, where: str, bar: Any) -> tuple[_Tally, float] | None:
        """Accumulate one mini-batch's gradient and step; its tally and gradient norm, or None if skipped."""
        self.optimizer.zero_grad(set_to_none=True)
        mini, bad_roles = _Tally(), []
        for batch in batches:
            with self.dist.no_sync(self.trained):  # DDP: accumulate here, all-reduce in _sync_gradients
                loss, stats = self._objective(batch, norm)
                bad = _non_finite_roles(batch, stats)
                if bad:  # its gradient would poison the step, which is skipped anyway
                    bad_roles += [r for r in bad if r not in bad_roles]
                else:
                    # DDP averages over processes; each loss is this process's share of the global loss.
                    (loss * self.dist.world_size).backward()
                    mini.add(batch, stats)
            bar.update(1)
        self._sync_gradients()  # DDP: the global batch's gradient before clipping
        params = [p for p in self.model.parameters() if p.requires_grad]
        _zero_missing_gradients(params)
        norm_now = float(torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm))
        # DDP: a non-finite loss on any process skips the step on every process.
        any_bad = self.dist.sum({"bad": float(bool(bad_roles))})["bad"] > 0
        if any_bad or not math.isfinite(norm_now):
            self.optimizer.zero_grad(set_to_none=True)
            self._skipped(where, bad_roles, norm_now)
            return None
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        _check_finite_weights([(n, p) for n, p in self.model.named_parameters() if p.requires_grad], where)
        return mini, norm_now

    def _sync_gradients(self) -> None:
        """DDP: all-reduce the accumulated gradients with one synced backward of a zero-loss dummy row
        (processes hold different numbers of rows, maybe none; the dummy reaches every parameter)."""
        if self.dist.world_size == 1:
            return
        row = TrainSample(FIRST, [self.pad_id], [self.pad_id], [0], 0.0)
        (self.trained(pack([row], self.pad_id, False, self.device)).sum() * 0.0).backward()

    def _skipped(self, where: str, bad_roles: list[str], grad_norm: float) -> None:
        """Warn about a skipped optimizer step; raise after :attr:`max_skipped_in_a_row` in a row."""
        self.skipped_in_a_row += 1
        if bad_roles:
            cause = f"the loss of {', '.join(r for r in ROLES if r in bad_roles)} rows was not finite"
        else:
            cause = f"the gradient was not finite (norm {grad_norm}) while every role's loss was finite"
        message = (
            f"{where}: {cause}; the optimizer step was skipped (weights, optimizer state and "
            f"learning-rate schedule untouched, counted in optim/skipped_steps)"
        )
        if self.skipped_in_a_row >= self.max_skipped_in_a_row:
            raise FloatingPointError(
                f"{message}. That makes {self.skipped_in_a_row} optimizer steps in a row without a finite "
                "update: the run has diverged or its data or rewards give non-finite values; lower "
                "learning_rate or raise the precision, and check the reward functions."
            )
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _objective(self, batch: Packed, norm: float) -> tuple[torch.Tensor, LossStats]:
        """The micro-batch's share of the mini-batch loss (normalised by ``norm``)."""
        c = self.config
        keep_4bit_trainable(self.model)  # as in _logprobs
        logp = self.trained(batch)
        if batch.old_logp is None:  # the first mini-batch's pass is over the weights that sampled it
            self.gaps.add(batch, logp)
        weight = None
        if c.vllm_importance_sampling_correction and c.generation_backend == "vllm" and batch.sampled_logp is not None:
            old = logp.detach() if batch.old_logp is None else batch.old_logp
            weight = sampler_weights(
                old,
                batch.sampled_logp.to(old),
                batch.mask,
                c.vllm_importance_sampling_mode,
                c.vllm_importance_sampling_clip_min,
                c.vllm_importance_sampling_clip_max,
            )
        return policy_objective(
            logp,
            batch.old_logp,
            batch.ref_logp,
            batch.advantages,
            batch.mask,
            nll_rows=batch.is_nll,
            beta=c.beta,
            epsilon_low=c.epsilon,
            epsilon_high=c.epsilon_high,
            dual_clip=c.dual_clip,
            loss_type=c.loss_type,
            normalizer=norm,
            importance_sampling_level=c.importance_sampling_level,
            sampler_weight=weight,
        )


class WeightProbe:
    """How far the trainable weights moved: a copy of a fixed strided sample (at most :attr:`max_entries`) of their
    entries, compared later; a full copy would double a fully fine-tuned model's memory. DDP: no reduction needed.

    Example:
        >>> w = torch.nn.Parameter(torch.ones(10))
        >>> probe = WeightProbe([w])
        >>> with torch.no_grad():
        ...     _ = w.mul_(1.5)
        >>> round(probe.moved(), 3)
        0.5
    """

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


def _non_finite_roles(batch: Packed, stats: LossStats) -> list[str]:
    """The roles of rows whose loss share is not finite (all of them when only the sum overflows)."""
    bad = [r for r, v in zip(batch.roles, stats.row_losses) if not math.isfinite(v)]
    if not bad and not math.isfinite(stats.loss):
        bad = list(batch.roles)
    return list(dict.fromkeys(bad))


def _check_finite_weights(named: list[tuple[str, torch.nn.Parameter]], where: str) -> None:
    """Raise FloatingPointError, naming the first bad tensor, if the step left a weight NaN or inf."""
    bad = first_non_finite(named)
    if bad is None:
        return
    raise FloatingPointError(
        f"{where}: the optimizer step left non-finite weights in {bad!r} (finite loss and gradient before it): "
        "the learning_rate is too large for these weights; lower it and resume from the last checkpoint."
    )


def _zero_missing_gradients(params: list[torch.nn.Parameter]) -> None:
    """A zero gradient where there is none (a mini-batch of skipped rows backpropagates nothing), so
    AdamW still applies momentum and weight decay, as TRL's backward of the zero loss does."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
