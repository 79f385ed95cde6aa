"""The RL update: turn a list of :class:`TrainSample` into optimizer steps.

Every role (first attempt, reflection, second attempt, internalization) is one row of the
same batch, each under its own context, with its scalar advantage broadcast over its loss
tokens. The batch is split into mini-batches, one optimizer step each
(:meth:`~erl_lite.config.ERLConfig.optimizer_steps`: ``steps_per_generation`` of them, or one
per ``ppo_mini_batch_size × G`` rows as in the reference), and every mini-batch into
micro-batches of ``per_device_train_batch_size`` rows whose gradients are accumulated with
the mini-batch's own normalizer, so the update does not depend on the micro-batch size. Every micro-batch's loss is
:func:`erl_lite.core.losses.policy_objective` (the function the TRL-parity tests check).

Packing (B rows, P = longest context, L = longest completion)::

    input_ids  (B, P + L):  [pad … pad | context_b | completion_b | pad … pad]
    hidden states at columns P-1 … P+L-2 predict the completion tokens (B, L)

Contexts are left-padded so every completion starts at column P. Log-probs come from
:func:`erl_lite.core.logprobs.sequence_logprobs`, which applies the lm-head to chunks of
completion positions and never holds ``(B, L, V)`` logits. Before the first optimizer step
every micro-batch is packed once and its old (sampling-policy) and reference log-probs are
attached to it (:class:`Packed`), so they travel with the rows they belong to.

Departures from the paper: log-probs are taken at the attempts' sampling temperature for
every row (the reference concatenates all roles into one batch the same way); rows whose
advantage is 0 are skipped when ``beta == 0`` (their gradient is exactly 0) but still count in
the normalizer, and every trainable parameter left without a gradient gets a zero one before
the step, so the update is unchanged: the reference keeps those rows with advantage 0, and a
mini-batch made only of them is still an AdamW step (momentum, weight decay, step counter).
A mini-batch whose loss or gradient is not finite is not stepped (the reference has no guard;
see :class:`PolicyUpdater`), and a few such in a row, or non-finite weights, stop the run.
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
from erl_lite.core.logprobs import DEFAULT_CHUNK_SIZE, sequence_logprobs
from erl_lite.models import keep_4bit_trainable
from erl_lite.integrations.distributed import SINGLE_PROCESS, DataParallel
from erl_lite.core.losses import LossStats, first_non_finite, normalizer_for, policy_objective
from erl_lite.core.progress import NO_PROGRESS, Progress
# ADVANTAGE_ROLES: the roles with a policy-gradient advantage (their mean |A| is logged).
from erl_lite.records import ADVANTAGE_ROLES, FIRST, ROLES, TrainSample

#: Every metric key :meth:`UpdateStats.to_metrics` yields, in order.
UPDATE_METRICS: tuple[str, ...] = (
    *(f"samples/{r}" for r in ROLES),
    *(f"advantage/{r}" for r in ADVANTAGE_ROLES),
    "loss/total",
    *(f"loss/{r}" for r in ROLES),
    "kl",
    "clip_ratio",
    "grad_norm",
    "optim/steps",
    "optim/skipped_steps",
)

#: Optimizer steps skipped in a row (non-finite loss or gradient) after which the run stops.
MAX_SKIPPED_IN_A_ROW = 3


@dataclass
class Packed:
    """A micro-batch as tensors (see the module docstring for the layout)."""

    input_ids: torch.Tensor  # (B, P + L)
    attention_mask: torch.Tensor  # (B, P + L)
    position_ids: torch.Tensor  # (B, P + L)
    targets: torch.Tensor  # (B, L) completion ids
    mask: torch.Tensor  # (B, L) 1 where the token carries loss
    advantages: torch.Tensor  # (B,)
    is_nll: torch.Tensor  # (B,) True for internalization rows in NLL mode
    roles: tuple[str, ...] = ()  # (B,) role of each row
    old_logp: torch.Tensor | None = None  # (B, L) sampling policy; None = on-policy (ratio 1)
    ref_logp: torch.Tensor | None = None  # (B, L) reference policy; None = no KL term


def pack(samples: list[TrainSample], pad_id: int, nll_distill: bool, device: Any = "cpu") -> Packed:
    """Left-pad contexts and right-pad completions into one rectangular micro-batch.

    Example:
        >>> rows = [TrainSample("first", [5, 6], [7], [1], 1.0), TrainSample("distill", [5], [7, 8], [1, 1], 1.0)]
        >>> b = pack(rows, pad_id=0, nll_distill=True)
        >>> b.input_ids.tolist(), b.mask.tolist(), b.is_nll.tolist(), b.roles
        ([[5, 6, 7, 0], [0, 5, 7, 8]], [[1, 0], [1, 1]], [False, True], ('first', 'distill'))
    """
    if not samples:
        raise ValueError("pack needs at least one TrainSample")
    P = max(len(s.prompt_ids) for s in samples)
    L = max(max(len(s.completion_ids) for s in samples), 1)
    B = len(samples)
    ids = torch.full((B, P + L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + L), dtype=torch.long)
    targets = torch.full((B, L), pad_id, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    for b, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        ids[b, P - p:P] = torch.tensor(s.prompt_ids, dtype=torch.long)
        ids[b, P:P + c] = torch.tensor(s.completion_ids, dtype=torch.long)
        attn[b, P - p:P + c] = 1
        targets[b, :c] = torch.tensor(s.completion_ids, dtype=torch.long)
        mask[b, :c] = torch.tensor(s.completion_mask, dtype=torch.long)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    is_nll = torch.tensor([nll_distill and s.role == "distill" for s in samples])
    return Packed(ids.to(device), attn.to(device), positions.to(device), targets.to(device),
                  mask.to(device), adv.to(device), is_nll.to(device), tuple(s.role for s in samples))


def completion_logprobs(model: Any, batch: Packed, temperature: float,
                        chunk_size: int | None = DEFAULT_CHUNK_SIZE) -> torch.Tensor:
    """Log-probs ``(B, L)`` of the completion tokens under ``model`` (see :mod:`erl_lite.core.logprobs`)."""
    return sequence_logprobs(model, batch.input_ids, batch.attention_mask, batch.position_ids,
                             batch.targets, temperature, chunk_size)


class CompletionLogProbs(torch.nn.Module):
    """:func:`completion_logprobs` as a module, so that torch DDP wraps the whole gradient pass.

    The chunked path calls the decoder and the lm-head separately (never the model's own
    forward); DDP only all-reduces gradients of a backward whose forward went through its
    wrapper, so the wrapper has to hold all of it. ``policy`` is a submodule: its parameters are
    this module's, and DDP broadcasts and synchronises them.

    Example:
        >>> from erl_lite.testing import tiny_model, tiny_tokenizer
        >>> rows = [TrainSample("first", [5, 6], [7, 8], [1, 1], 1.0)]
        >>> CompletionLogProbs(tiny_model(tiny_tokenizer()), 1.0, None)(pack(rows, 0, False)).shape
        torch.Size([1, 2])
    """

    def __init__(self, policy: Any, temperature: float, chunk_size: int | None) -> None:
        super().__init__()
        self.policy, self.temperature, self.chunk_size = policy, temperature, chunk_size

    def forward(self, batch: Packed) -> torch.Tensor:
        """Log-probs ``(B, L)`` of ``batch``'s completion tokens, with gradient when enabled."""
        return completion_logprobs(self.policy, batch, self.temperature, self.chunk_size)


def _padded_length(s: TrainSample) -> int:
    return len(s.prompt_ids) + len(s.completion_ids)


def micro_batches(rows: list[TrainSample], size: int) -> Iterator[list[TrainSample]]:
    """Rows sorted by length, in micro-batches of at most ``size`` rows.

    :func:`pack` pads contexts to the longest context and completions to the longest
    completion, so a micro-batch is ``max(context) + max(completion)`` columns wide, which can
    be wider than any of its rows (a reflection request beside an attempt with a long reply).
    A micro-batch therefore closes before a row that would make it more than twice as wide as
    its shortest row, so short attempts are never padded to the width of a long reflection
    prompt. The update does not depend on how rows are grouped (every micro-batch uses the
    mini-batch's normalizer), only the padding waste does.

    Example:
        >>> attempt = lambda n: TrainSample("first", [1] * 60, [2] * n, [1] * n, 0.0)
        >>> request = TrainSample("reflection", [1] * 300, [2] * 30, [1] * 30, 0.0)
        >>> [len(c) for c in micro_batches([attempt(20), attempt(150), request, request], 32)]
        [1, 1, 2]
    """
    chunk: list[TrainSample] = []
    context = completion = 0  # the current chunk's longest context and completion
    for row in sorted(rows, key=_padded_length):
        width = max(context, len(row.prompt_ids)) + max(completion, len(row.completion_ids))
        if chunk and (len(chunk) == size or width > 2 * _padded_length(chunk[0])):
            yield chunk
            chunk, context, completion = [], 0, 0
        chunk.append(row)
        context, completion = max(context, len(row.prompt_ids)), max(completion, len(row.completion_ids))
    if chunk:
        yield chunk


@dataclass(frozen=True)
class UpdateStats(Mapping):
    """What one :meth:`PolicyUpdater.update` did; :meth:`to_metrics` gives the history's keys.

    It also reads as a mapping of those metrics (``stats["loss/total"]``), so it can be merged
    into a metrics record directly.

    Attributes:
        samples: rows per role in the batch.
        advantage: mean ``|A|`` per role of :data:`ADVANTAGE_ROLES` (0 when absent).
        loss: loss contributed by each role (KL term included), mean over the mini-batches.
        loss_total: the objective, mean over the mini-batches (the sum of ``loss``).
        kl: mean k3 KL per loss token (0 when ``beta == 0``).
        clip_ratio: fraction of policy-loss tokens whose ratio was clipped.
        grad_norm: gradient norm before clipping, at the last optimizer step taken (0 if none).
        optim_steps: optimizer steps taken.
        skipped_steps: optimizer steps skipped because their loss or gradient was not finite.

    Example:
        >>> s = UpdateStats.empty({r: 0 for r in ROLES})
        >>> list(s.to_metrics()) == list(UPDATE_METRICS), s["optim/steps"]
        (True, 0.0)
    """

    samples: dict[str, int]
    advantage: dict[str, float]
    loss: dict[str, float]
    loss_total: float
    kl: float
    clip_ratio: float
    grad_norm: float
    optim_steps: int
    skipped_steps: int = 0

    @classmethod
    def empty(cls, samples: dict[str, int], advantage: dict[str, float] | None = None) -> "UpdateStats":
        """The record of an update that took no step."""
        return cls(samples, advantage or {r: 0.0 for r in ADVANTAGE_ROLES}, {r: 0.0 for r in ROLES},
                   0.0, 0.0, 0.0, 0.0, 0)

    def to_metrics(self) -> dict[str, float]:
        """The metrics as a flat dict with exactly the keys of :data:`UPDATE_METRICS`."""
        out = {f"samples/{r}": float(self.samples.get(r, 0)) for r in ROLES}
        out.update({f"advantage/{r}": float(self.advantage.get(r, 0.0)) for r in ADVANTAGE_ROLES})
        out["loss/total"] = float(self.loss_total)
        out.update({f"loss/{r}": float(self.loss.get(r, 0.0)) for r in ROLES})
        out.update({"kl": float(self.kl), "clip_ratio": float(self.clip_ratio),
                    "grad_norm": float(self.grad_norm), "optim/steps": float(self.optim_steps),
                    "optim/skipped_steps": float(self.skipped_steps)})
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
        self.loss = {r: 0.0 for r in ROLES}
        self.kl_sum = self.clipped = 0.0
        self.tokens = self.policy_tokens = 0

    def add(self, batch: Packed, stats: LossStats) -> None:
        for role, share in zip(batch.roles, stats.row_losses):
            self.loss[role] += share
        self.kl_sum += (stats.kl or 0.0) * stats.num_tokens
        self.tokens += stats.num_tokens
        self.clipped += stats.clip_ratio * stats.policy_tokens
        self.policy_tokens += stats.policy_tokens

    def merge(self, other: "_Tally") -> None:
        """Add ``other``'s sums (one mini-batch that was stepped) to these."""
        for role, value in other.loss.items():
            self.loss[role] += value
        self.kl_sum += other.kl_sum
        self.clipped += other.clipped
        self.tokens += other.tokens
        self.policy_tokens += other.policy_tokens

    def reduced(self, dist: DataParallel) -> "_Tally":
        """DDP: the sums over every process (itself in one process)."""
        keys = [f"loss/{r}" for r in ROLES] + ["kl_sum", "clipped", "tokens", "policy_tokens"]
        mine = dict(zip(keys, [self.loss[r] for r in ROLES] + [self.kl_sum, self.clipped, self.tokens,
                                                              self.policy_tokens]))
        total = dist.sum(mine)
        self.loss = {r: total[f"loss/{r}"] for r in ROLES}
        self.kl_sum, self.clipped = total["kl_sum"], total["clipped"]
        self.tokens, self.policy_tokens = int(total["tokens"]), int(total["policy_tokens"])
        return self

    def result(self, samples: dict[str, int], advantage: dict[str, float], grad_norm: float,
               steps: int, skipped: int) -> UpdateStats:
        loss = {r: v / max(steps, 1) for r, v in self.loss.items()}  # mean over the stepped mini-batches
        return UpdateStats(samples, advantage, loss, sum(loss.values()), self.kl_sum / max(self.tokens, 1),
                           self.clipped / max(self.policy_tokens, 1), grad_norm, steps, skipped)


class PolicyUpdater:
    """Applies optimizer steps to a model with its optimizer and scheduler.

    Args:
        model: the policy (a PEFT model when ``beta > 0``: the reference is the model with its
            adapter disabled).
        optimizer, scheduler: built by the trainer.
        config: loss, clipping, batching and KL settings, and ``logprob_chunk_size``
            (completion positions per lm-head chunk, see :mod:`erl_lite.core.logprobs`; None
            computes full ``(B, L, V)`` logits instead).
        pad_id: the tokenizer's padding id.

    Non-finite values: a mini-batch whose loss (any role's rows) or gradient norm is NaN or
    inf is not stepped: its gradient is dropped, the optimizer, its state and the scheduler
    are left untouched, a ``RuntimeWarning`` names the step, the optimizer step and the roles
    whose loss was not finite, and ``optim/skipped_steps`` counts it (DeepSpeed's loss scaler
    skips an overflowed step the same way; HF Trainer and accelerate have no such guard).
    :attr:`max_skipped_in_a_row` skipped steps in a row raise ``FloatingPointError``, and so
    does a step that leaves a non-finite weight (a learning rate large enough to overflow).

    Several processes (``accelerate launch``): the trainer passes ``dist``; the gradient pass
    runs through torch DDP (:meth:`DataParallel.wrap`), each process passes its own rows, and
    the marked ``DDP`` lines make the step the single-process step over every process's rows
    (see :mod:`erl_lite.integrations.distributed`). Generation and the no-grad passes use ``model`` itself.
    """

    max_skipped_in_a_row: int = MAX_SKIPPED_IN_A_ROW  # skipped optimizer steps in a row that stop the run
    step: int | None = None  # the training iteration being updated (the trainer sets it), named in messages
    progress: Progress = NO_PROGRESS  # the update's bar, a tick per micro-batch (the trainer sets it)

    def __init__(self, model: Any, optimizer: Any, scheduler: Any, config: ERLConfig, pad_id: int,
                 dist: DataParallel = SINGLE_PROCESS) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.config, self.pad_id, self.dist = config, pad_id, dist
        self.device = next(model.parameters()).device
        # DDP: wrapping broadcasts rank 0's weights to every process (the module itself in one).
        self.trained = dist.wrap(CompletionLogProbs(model, config.temperature, config.logprob_chunk_size))
        self.skipped_in_a_row = 0  # optimizer steps skipped since the last one taken

    def _logprobs(self, batch: Packed) -> torch.Tensor:
        # A 4-bit model that generated outside HFGenerator must not run its old/reference pass
        # on bitsandbytes' inference-only CPU kernel (see models.keep_4bit_trainable).
        keep_4bit_trainable(self.model)
        return completion_logprobs(self.model, batch, self.config.temperature, self.config.logprob_chunk_size)

    def _plan(self, mini: list[TrainSample]) -> tuple[float, list[Packed]]:
        """A mini-batch's normalizer (over *all* its rows) and its packed micro-batches."""
        c = self.config
        masks = [torch.tensor(s.completion_mask) for s in mini]
        # DDP: the denominator counts every process's rows (a raw 0 when this one has no token).
        local = _normalizer(masks, c.loss_type) if any(m.any() for m in masks) else 0.0
        norm = self.dist.total_count(local)
        active = [s for s in mini if c.beta > 0 or s.advantage != 0]  # A = 0 and no KL: no gradient
        nll = c.internalization_mode == "nll"
        return norm, [pack(chunk, self.pad_id, nll, self.device)
                      for chunk in micro_batches(active, c.per_device_train_batch_size)]

    @torch.no_grad()
    def _attach_old_and_ref(self, batches: list[Packed], old: bool, ref: bool) -> list[Packed]:
        """Each micro-batch with its old and/or reference log-probs, computed before any step."""
        from erl_lite.models import reference_context

        if old:
            batches = [dataclasses.replace(b, old_logp=self._logprobs(b)) for b in batches]
        if ref:
            with reference_context(self.model):
                batches = [dataclasses.replace(b, ref_logp=self._logprobs(b)) for b in batches]
        return batches

    def update(self, samples: list[TrainSample]) -> UpdateStats:
        """Optimizer steps over ``samples``; returns what the update did.

        A mini-batch whose loss or gradient is not finite is not stepped (see the class);
        warnings and errors name :attr:`step`.
        """
        c = self.config
        # DDP: counts and |A| sums over every process's rows (this process's alone in one).
        totals = self.dist.sum({**{f"samples/{r}": float(sum(s.role == r for s in samples)) for r in ROLES},
                                **{f"|A|/{r}": sum(abs(s.advantage) for s in samples if s.role == r) for r in ROLES}})
        counts = {r: int(totals[f"samples/{r}"]) for r in ROLES}
        advantage = {r: totals[f"|A|/{r}"] / counts[r] if counts[r] else 0.0 for r in ADVANTAGE_ROLES}
        n_rows = sum(counts.values())  # the global batch
        if not n_rows:
            return UpdateStats.empty(counts, advantage)
        k = c.optimizer_steps(n_rows)
        # Interleave so every mini-batch holds every role; k == 1 means on-policy (ratio = 1).
        # DDP: by each row's position in the global batch (range(len(samples)) in one process).
        positions = self.dist.global_positions(samples)
        plans = [self._plan([s for s, p in zip(samples, positions) if p % k == i]) for i in range(k)]
        flat = self._attach_old_and_ref([b for _, bs in plans for b in bs], old=k > 1, ref=c.beta > 0)
        tally, grad_norm, at, taken = _Tally(), 0.0, 0, 0
        # Closed below, or on an error by the trainer (Progress.close_all).
        bar = self.progress.bar("update", len(flat), unit="micro-batch")
        self.model.train()
        for i, (norm, batches) in enumerate(plans):
            self.optimizer.zero_grad(set_to_none=True)
            mini, bad_roles = _Tally(), []
            for batch in flat[at:at + len(batches)]:
                with self.dist.no_sync(self.trained):  # DDP: accumulate here, all-reduce in _sync_gradients
                    loss, stats = self._objective(batch, norm)
                    bad = _non_finite_roles(batch, stats)
                    if bad:  # its gradient would poison the step, which is skipped anyway
                        bad_roles += [r for r in bad if r not in bad_roles]
                        bar.update(1)
                        continue
                    # DDP averages over processes; each loss is already this process's share of the
                    # global loss (global normaliser), so scale by the process count to get the sum.
                    (loss * self.dist.world_size).backward()
                mini.add(batch, stats)
                bar.update(1)
            at += len(batches)
            self._sync_gradients()  # DDP: the global batch's gradient before clipping
            params = [p for p in self.model.parameters() if p.requires_grad]
            _zero_missing_gradients(params)
            norm_now = float(torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm))
            # DDP: a non-finite loss on any process skips the step on every process.
            any_bad = self.dist.sum({"bad": float(bool(bad_roles))})["bad"] > 0
            where = f"{'this update' if self.step is None else f'step {self.step}'}, optimizer step {i + 1} of {k}"
            if any_bad or not math.isfinite(norm_now):
                self.optimizer.zero_grad(set_to_none=True)
                self._skipped(where, bad_roles, norm_now)
                continue
            self.optimizer.step()
            if self.scheduler is not None:
                self.scheduler.step()
            _check_finite_weights([(n, p) for n, p in self.model.named_parameters() if p.requires_grad], where)
            tally.merge(mini)
            grad_norm, taken, self.skipped_in_a_row = norm_now, taken + 1, 0
        bar.close()
        self.optimizer.zero_grad(set_to_none=True)
        return tally.reduced(self.dist).result(counts, advantage, grad_norm, taken, k - taken)

    def _sync_gradients(self) -> None:
        """DDP: all-reduce the accumulated gradients with one synced, zero-weighted backward.

        DDP all-reduces inside a backward, and each process must run the same number of synced
        backwards, but the gate gives processes different numbers of rows (a process may have no
        row, or only skipped ones, in a mini-batch). So every real micro-batch runs under
        ``no_sync`` and then every process runs this one backward of a one-token dummy row with
        loss 0: its gradient adds exact zeros, and it reaches every trainable parameter (the same
        forward), so DDP reduces all of them. The cost is a two-token forward and backward per
        optimizer step, and the sync never depends on which rows a process holds (syncing on
        the last real micro-batch would need a dummy anyway on processes without one).
        """
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
        message = (f"{where}: {cause}; the optimizer step was skipped (weights, optimizer state and "
                   f"learning-rate schedule untouched, counted in optim/skipped_steps)")
        if self.skipped_in_a_row >= self.max_skipped_in_a_row:
            raise FloatingPointError(
                f"{message}. That makes {self.skipped_in_a_row} optimizer steps in a row without a finite "
                "update: the run has diverged or its data or rewards give non-finite values; lower "
                "learning_rate or raise the precision, and check the reward functions.")
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _objective(self, batch: Packed, norm: float) -> tuple[torch.Tensor, LossStats]:
        """The micro-batch's share of the mini-batch loss (normalised by ``norm``)."""
        c = self.config
        keep_4bit_trainable(self.model)  # as in _logprobs
        return policy_objective(
            self.trained(batch), batch.old_logp, batch.ref_logp, batch.advantages, batch.mask,
            nll_rows=batch.is_nll, beta=c.beta, epsilon_low=c.epsilon, epsilon_high=c.epsilon_high,
            dual_clip=c.dual_clip, loss_type=c.loss_type, normalizer=norm,
            importance_sampling_level=c.importance_sampling_level,
        )


def _non_finite_roles(batch: Packed, stats: LossStats) -> list[str]:
    """The roles (in batch order, once each) of rows whose loss share is not finite; all of the
    micro-batch's roles when only the total is (a share can be finite while the sum overflows)."""
    bad = [r for r, v in zip(batch.roles, stats.row_losses) if not math.isfinite(v)]
    if not bad and not math.isfinite(stats.loss):
        bad = list(batch.roles)
    return list(dict.fromkeys(bad))


def _check_finite_weights(named: list[tuple[str, torch.nn.Parameter]], where: str) -> None:
    """Raise FloatingPointError, naming the first bad tensor, if the step just taken left a
    weight NaN or inf (the next step would sample from NaN probabilities)."""
    bad = first_non_finite(named)
    if bad is None:
        return
    raise FloatingPointError(
        f"{where}: the optimizer step left non-finite weights in {bad!r} (finite loss and gradient before it): "
        "the learning_rate is too large for these weights; lower it and resume from the last checkpoint.")


def _zero_missing_gradients(params: list[torch.nn.Parameter]) -> None:
    """Give every parameter without a gradient a zero one, so ``optimizer.step()`` acts on it.

    Rows skipped by :meth:`PolicyUpdater._plan` (A = 0 and no KL) have an exactly zero
    gradient; when a whole mini-batch is made of them nothing is backpropagated, and
    ``AdamW.step()`` would skip every ``p.grad is None`` parameter: no momentum step, no weight
    decay, no advance of Adam's step counter, while the scheduler counts the step. TRL and verl
    backpropagate the zero loss instead; a zero gradient is what that gives, without the pass.
    """
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)


def _normalizer(masks: list[torch.Tensor], loss_type: str) -> float:
    """The mini-batch's denominator (see :func:`erl_lite.core.losses.normalizer_for`)."""
    width = max(max((len(m) for m in masks), default=1), 1)
    full = torch.zeros((len(masks), width), dtype=torch.long)
    for b, m in enumerate(masks):
        full[b, :len(m)] = m
    return normalizer_for(full, loss_type)
