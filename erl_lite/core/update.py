"""The RL update: a list of :class:`TrainSample` (every role a row of one batch) into optimizer steps.

One step per mini-batch (``ERLConfig.optimizer_steps``), accumulated over micro-batches under the mini-batch's
normalizer. Old and reference log-probs are computed once, before the first step, with dropout off as in sampling.
:meth:`PolicyUpdater.update` reads in that order; what it tallies on the way is in :mod:`erl_lite.core.update_stats`.

Departures from the paper: each row is scored at its sampling temperature (reflections at ``reflection_temperature``);
rows with A = 0 are skipped when ``beta == 0`` (zero gradient) but counted; a non-finite mini-batch is not stepped.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from erl_lite.config import ERLConfig
from erl_lite.core.losses import LossStats, first_non_finite, normalizer_for, policy_objective, sampler_weights
from erl_lite.core.update_stats import GapTally, Tally, UpdateStats, WeightProbe
from erl_lite.engine.batching import CompletionLogProbs, Packed, completion_logprobs, micro_batches, pack
from erl_lite.engine.logprobs import draws_dropout
from erl_lite.engine.policy import keep_4bit_trainable, reference_context, sampled_stale
from erl_lite.engine.progress import NO_PROGRESS, Progress
from erl_lite.engine.reducer import SINGLE_PROCESS, Reducer
from erl_lite.metric_names import SAMPLES_KEYS
from erl_lite.records import ADVANTAGE_ROLES, FIRST, ROLES, TrainSample


class PolicyUpdater:
    """Applies optimizer steps to a model (a PEFT model when ``beta > 0``: the reference is its base); ``reducer``:
    the process group's :class:`~erl_lite.engine.reducer.Reducer` (lines marked ``DDP``). A mini-batch with a
    non-finite loss or gradient is skipped with a ``RuntimeWarning``, as DeepSpeed's loss scaler does;
    :attr:`max_skipped_in_a_row` in a row, or a non-finite weight, raise FloatingPointError."""

    max_skipped_in_a_row: int = 3  # optimizer steps skipped in a row (non-finite) that stop the run
    progress: Progress = NO_PROGRESS  # the update's bar, a tick per micro-batch (the trainer sets it)

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        scheduler: Any,
        config: ERLConfig,
        pad_id: int,
        reducer: Reducer = SINGLE_PROCESS,
    ) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.config, self.pad_id, self.reducer = config, pad_id, reducer
        self.device = next(model.parameters()).device
        # DDP: wrapping broadcasts rank 0's weights to every process (the module itself in one).
        self.trained = reducer.wrap(CompletionLogProbs(model, config.temperature, config.logprob_chunk_size))
        self.skipped_in_a_row = 0  # optimizer steps skipped since the last one taken

    def _logprobs(self, batch: Packed) -> torch.Tensor:
        keep_4bit_trainable(self.model)  # a model that generated elsewhere may have been repacked
        return completion_logprobs(self.model, batch, self.config.temperature, self.config.logprob_chunk_size)

    def _plan(self, mini: list[TrainSample]) -> tuple[float, list[Packed]]:
        """A mini-batch's normalizer (over *all* its rows) and its packed micro-batches."""
        c = self.config
        masks = [torch.tensor(s.completion_mask) for s in mini]
        # DDP: the denominator counts every process's rows (a raw 0 when this one has no token).
        has_tokens = any(m.any() for m in masks)
        local = normalizer_for(pad_sequence(masks, batch_first=True), c.loss_type) if has_tokens else 0.0
        norm = self.reducer.total_count(local)
        active = [s for s in mini if c.beta > 0 or s.advantage != 0]  # A = 0 and no KL: no gradient
        return norm, [
            pack(chunk, self.pad_id, c.internalization_mode == "nll", self.device)
            for chunk in micro_batches(active, c.per_device_train_batch_size)
        ]

    def plans(self, samples: list[TrainSample], k: int) -> list[tuple[float, list[Packed]]]:
        """``samples`` as ``k`` interleaved mini-batches (:meth:`_plan`), each with every role; k == 1: on-policy."""
        positions = self.reducer.global_positions(samples)  # DDP: in the global batch (range(n) in one process)
        return [self._plan([s for s, p in zip(samples, positions) if p % k == i]) for i in range(k)]

    @torch.no_grad()
    def _attach_old_and_ref(self, batches: list[Packed], old: bool, ref: bool, gaps: GapTally) -> list[Packed]:
        """A mini-batch's micro-batches with their old log-probs (when ``old``, also measured against the sampler's in
        ``gaps``) and/or reference log-probs, computed in eval mode (no dropout), as the sampler ran."""
        was_training = self.model.training
        self.model.eval()
        try:
            batches = [dataclasses.replace(b, old_logp=self._logprobs(b)) if old else b for b in batches]
            for b in batches:
                if b.old_logp is not None:
                    gaps.add(b, b.old_logp)
            if ref:
                with reference_context(self.model):
                    batches = [dataclasses.replace(b, ref_logp=self._logprobs(b)) for b in batches]
        finally:
            self.model.train(was_training)
        return batches

    def update(self, samples: list[TrainSample], step: int | None = None) -> UpdateStats:
        """Optimizer steps over ``samples``; returns what the update did (messages name the training ``step``)."""
        c = self.config
        # 1. Count the rows and their |A| per role. DDP: over every process's rows (this process's alone in one).
        totals = self.reducer.sum(
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
        # 2. Plan k mini-batches, each a normalizer and its packed micro-batches.
        k = c.optimizer_steps(n_rows)
        plans = self.plans(samples, k)
        # 3. Old and reference log-probs of every micro-batch, before the first step. The first mini-batch trains on
        # the weights that sampled it (ratio 1): no old log-probs for it, unless dropout draws.
        gaps = GapTally(self.model, c, sampled_stale(self.model))  # the sampler's log-probs against the update's
        dropout = draws_dropout(self.model)
        plans = [
            (norm, self._attach_old_and_ref(batches, old=i > 0 or dropout, ref=c.beta > 0, gaps=gaps))
            for i, (norm, batches) in enumerate(plans)
        ]
        # 4. One optimizer step per mini-batch, its gradient accumulated over its micro-batches.
        tally, grad_norm, taken = Tally(), 0.0, 0
        probe = WeightProbe([p for p in self.model.parameters() if p.requires_grad])
        bar = self.progress.bar("update", sum(len(bs) for _, bs in plans), unit="micro-batch")  # or Progress.close_all
        self.model.train()
        for i, (norm, batches) in enumerate(plans):
            where = f"{'this update' if step is None else f'step {step}'}, optimizer step {i + 1} of {k}"
            stepped = self._mini_batch_step(batches, norm, where, bar, gaps)
            if stepped is not None:
                mini_tally, grad_norm = stepped
                tally.merge(mini_tally)
                taken, self.skipped_in_a_row = taken + 1, 0
        bar.close()
        self.optimizer.zero_grad(set_to_none=True)
        # 5. What the update did.
        done = dict(
            samples=counts, advantage=advantage, grad_norm=grad_norm, optim_steps=taken, skipped_steps=k - taken
        )
        return tally.result(self.reducer, **done, weight_update=probe.moved(), gap=gaps.result(self.reducer))

    def _mini_batch_step(
        self, batches: list[Packed], norm: float, where: str, bar: Any, gaps: GapTally
    ) -> tuple[Tally, float] | None:
        """Accumulate one mini-batch's gradient and step; its tally and gradient norm, or None if skipped."""
        self.optimizer.zero_grad(set_to_none=True)
        mini, bad_roles = Tally(), []
        for batch in batches:
            with self.reducer.no_sync(self.trained):  # DDP: accumulate here, all-reduce in _sync_gradients
                loss, stats = self._objective(batch, norm, gaps)
                bad = _non_finite_roles(batch, stats)
                if bad:  # its gradient would poison the step, which is skipped anyway
                    bad_roles += [r for r in bad if r not in bad_roles]
                else:
                    # DDP averages over processes; each loss is this process's share of the global loss.
                    (loss * self.reducer.world_size).backward()
                    mini.add(batch, stats)
            bar.update(1)
        self._sync_gradients()  # DDP: the global batch's gradient before clipping
        params = [p for p in self.model.parameters() if p.requires_grad]
        _zero_missing_gradients(params)
        # 0 or None: no clipping, as in transformers' Trainer (an infinite bound only measures the norm).
        norm_now = float(torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm or math.inf))
        # DDP: a non-finite loss on any process skips the step on every process.
        any_bad = self.reducer.sum({"bad": float(bool(bad_roles))})["bad"] > 0
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
        if self.reducer.world_size == 1:
            return
        row = TrainSample(
            role=FIRST, prompt_ids=[self.pad_id], completion_ids=[self.pad_id], completion_mask=[0], advantage=0.0
        )
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

    def _objective(self, batch: Packed, norm: float, gaps: GapTally) -> tuple[torch.Tensor, LossStats]:
        """The micro-batch's share of the mini-batch loss (normalised by ``norm``)."""
        c = self.config
        keep_4bit_trainable(self.model)  # as in _logprobs
        logp = self.trained(batch)
        if batch.old_logp is None:  # the first mini-batch's pass is over the weights that sampled it
            gaps.add(batch, logp)
        weight = None
        if c.vllm_importance_sampling_correction and c.generation_backend == "vllm":
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


def _non_finite_roles(batch: Packed, stats: LossStats) -> list[str]:
    """The roles of rows whose loss share is not finite (all of them when only the sum overflows)."""
    bad = [r for r, v in zip(batch.roles, stats.row_losses) if not math.isfinite(v)]
    if not bad and not math.isfinite(stats.loss):
        bad = list(batch.roles)
    return list(dict.fromkeys(bad))


def _check_finite_weights(named: list[tuple[str, torch.nn.Parameter]], where: str) -> None:
    """Raise FloatingPointError, naming the first bad tensor, if the step left a weight NaN or inf."""
    bad = first_non_finite(named)
    if bad is not None:
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
