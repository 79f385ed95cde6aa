"""The RL update: turn a list of :class:`TrainSample` into optimizer steps.

Every role (first attempt, reflection, second attempt, internalization) is one row of the
same batch, each under its own context, with its scalar advantage broadcast over its loss
tokens. The batch is split into ``steps_per_generation`` mini-batches (one optimizer step
each) and every mini-batch into micro-batches of ``per_device_train_batch_size`` rows whose
gradients are accumulated with the mini-batch's own normalizer, so the update does not
depend on the micro-batch size.

Packing (B rows, P = longest context, L = longest completion)::

    input_ids  (B, P + L):  [pad … pad | context_b | completion_b | pad … pad]
    logits kept (B, L + 1, V) → the first L predict completion tokens (B, L)

Contexts are left-padded so every completion starts at column P; the model is asked only
for the last L + 1 positions of logits (``logits_to_keep``), which keeps the (B, T, V)
logits of a 150 k-token vocabulary out of memory.

Departures from the paper: log-probs are taken at the attempts' sampling temperature for
every row (the reference concatenates all roles into one batch the same way); rows whose
advantage is 0 are skipped when ``beta == 0`` (they carry no gradient) but still count in the
normalizer, so the update is unchanged.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from erl_lite.config import ERLConfig
from erl_lite.distributed import SINGLE_PROCESS, DataParallel
from erl_lite.losses import aggregate, clipped_policy_loss, k3_kl, masked_mean, nll_loss, normalizer_for, token_logprobs
from erl_lite.records import ROLES, TrainSample


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


def pack(samples: list[TrainSample], pad_id: int, nll_distill: bool, device: Any = "cpu") -> Packed:
    """Left-pad contexts and right-pad completions into one rectangular micro-batch."""
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
                  mask.to(device), adv.to(device), is_nll.to(device))


def completion_logprobs(model: Any, batch: Packed, temperature: float) -> torch.Tensor:
    """Log-probs ``(B, L)`` of the completion tokens under ``model``."""
    L = batch.targets.shape[1]
    out = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask,
        position_ids=batch.position_ids, use_cache=False, logits_to_keep=L + 1,
    )
    logits = out.logits[:, -(L + 1):-1, :]  # (B, L, V): position P-1+j predicts target j
    return token_logprobs(logits.float(), batch.targets, temperature)


def _padded_length(s: TrainSample) -> int:
    return len(s.prompt_ids) + len(s.completion_ids)


def micro_batches(rows: list[TrainSample], size: int) -> Iterator[list[TrainSample]]:
    """Rows sorted by length, in micro-batches of at most ``size`` rows.

    A micro-batch also closes before a row more than twice as long as its shortest one, so
    short attempts are never padded to the length of a long reflection prompt. The update
    does not depend on how rows are grouped (every micro-batch uses the mini-batch's
    normalizer), only the padding waste does.
    """
    chunk: list[TrainSample] = []
    for row in sorted(rows, key=_padded_length):
        if chunk and (len(chunk) == size or _padded_length(row) > 2 * _padded_length(chunk[0])):
            yield chunk
            chunk = []
        chunk.append(row)
    if chunk:
        yield chunk


class PolicyUpdater:
    """Applies :func:`update` steps to a model with its optimizer and scheduler.

    Args:
        model: the policy (a PEFT model when ``beta > 0``: the reference is the model with its
            adapter disabled).
        optimizer, scheduler: built by the trainer.
        config: loss, clipping, batching and KL settings.
        pad_id: the tokenizer's padding id.

    Several processes (``accelerate launch``): the trainer sets :attr:`dist`; each process
    passes its own rows, and the marked ``DDP`` lines make the step the single-process step
    over every process's rows (see :mod:`erl_lite.distributed`).
    """

    dist: DataParallel = SINGLE_PROCESS  # DDP: the process group (the trainer sets it)

    def __init__(self, model: Any, optimizer: Any, scheduler: Any, config: ERLConfig, pad_id: int) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.config, self.pad_id = config, pad_id
        self.device = next(model.parameters()).device

    def _pack(self, rows: list[TrainSample]) -> Packed:
        return pack(rows, self.pad_id, self.config.internalization_mode == "nll", self.device)

    @torch.no_grad()
    def _logprobs(self, rows: list[TrainSample], reference: bool) -> list[torch.Tensor]:
        """One ``(L_i,)`` tensor of log-probs per row, without gradient."""
        from erl_lite.models import reference_context

        by_row: dict[int, torch.Tensor] = {}
        ctx = reference_context(self.model) if reference else nullcontext()
        with ctx:
            for chunk in micro_batches(rows, self.config.per_device_train_batch_size):
                lp = completion_logprobs(self.model, self._pack(chunk), self.config.temperature)
                by_row.update({id(s): lp[b, :len(s.completion_ids)].cpu() for b, s in enumerate(chunk)})
        return [by_row[id(s)] for s in rows]

    def update(self, samples: list[TrainSample]) -> dict[str, float]:
        """Optimizer steps over ``samples``; returns the step's loss metrics."""
        c = self.config
        # DDP: counts and |A| sums over every process's rows (this process's alone in one).
        totals = self.dist.sum({**{f"samples/{r}": float(sum(s.role == r for s in samples)) for r in ROLES},
                                **{f"|A|/{r}": sum(abs(s.advantage) for s in samples if s.role == r) for r in ROLES}})
        metrics: dict[str, float] = {f"samples/{r}": totals[f"samples/{r}"] for r in ROLES}
        for r in ("first", "reflection", "second"):
            n_r = totals[f"samples/{r}"]
            metrics[f"advantage/{r}"] = totals[f"|A|/{r}"] / n_r if n_r else 0.0
        n_rows = int(sum(metrics[f"samples/{r}"] for r in ROLES))  # global batch size
        if not n_rows:
            return {**metrics, "optim/steps": 0.0}
        k = min(c.steps_per_generation, n_rows)
        # Interleave so every mini-batch holds every role; k == 1 means on-policy (ratio = 1).
        # DDP: by each row's position in the global batch (range(len(samples)) in one process).
        positions = self.dist.global_positions(samples)
        minis = [[s for s, p in zip(samples, positions) if p % k == i] for i in range(k)]
        old = dict(zip(map(id, samples), self._logprobs(samples, False))) if k > 1 else None
        ref = dict(zip(map(id, samples), self._logprobs(samples, True))) if c.beta > 0 else None
        sums = {key: 0.0 for key in ("loss/total", *(f"loss/{r}" for r in ROLES))}
        kl_tok, clip_tok, n_tok, grad_norm = 0.0, 0.0, 0, 0.0
        self.model.train()
        for mini in minis:
            masks = [torch.tensor(s.completion_mask) for s in mini]
            # DDP: the denominator counts every process's rows (a raw 0 when this one has no token).
            norm = self.dist.total_count(_normalizer(masks, c.loss_type) if any(m.any() for m in masks) else 0.0)
            active = [s for s in mini if c.beta > 0 or s.advantage != 0]
            self.optimizer.zero_grad(set_to_none=True)
            for chunk in micro_batches(active, c.per_device_train_batch_size):
                stats = self._backward(chunk, norm, old, ref)
                for key, v in stats["sums"].items():
                    sums[key] += v
                kl_tok += stats["kl"] * stats["tokens"]
                clip_tok += stats["clip"] * stats["tokens"]
                n_tok += stats["tokens"]
            params = [p for p in self.model.parameters() if p.requires_grad]
            self.dist.all_reduce_gradients(params)  # DDP: the global batch's gradient before clipping
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm))
            self.optimizer.step()
            if self.scheduler is not None:
                self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        # DDP: loss sums and token-weighted statistics summed over processes.
        sums = self.dist.sum(sums)
        tok = self.dist.sum({"kl": kl_tok, "clip": clip_tok, "n": n_tok})
        kl_tok, clip_tok, n_tok = tok["kl"], tok["clip"], tok["n"]
        metrics.update({key: v / k for key, v in sums.items()})  # mean over mini-batches
        metrics.update({"kl": kl_tok / max(n_tok, 1), "clip_ratio": clip_tok / max(n_tok, 1),
                        "grad_norm": grad_norm, "optim/steps": float(k)})
        return metrics

    def _backward(self, rows: list[TrainSample], norm: float, old: dict | None, ref: dict | None) -> dict:
        """Forward + backward of one micro-batch; returns its loss contributions by role."""
        c = self.config
        batch = self._pack(rows)
        logp = completion_logprobs(self.model, batch, c.temperature)  # (B, L)
        old_lp = _stack(rows, old, logp) if old is not None else logp.detach()
        policy, clipped = clipped_policy_loss(
            logp, old_lp, batch.advantages, batch.mask,
            epsilon_low=c.epsilon, epsilon_high=c.epsilon_high, dual_clip=c.dual_clip,
        )
        nll = nll_loss(logp, batch.advantages, batch.mask)
        per_token = torch.where(batch.is_nll.unsqueeze(1), nll, policy)  # (B, L)
        kl = torch.zeros_like(logp)
        if ref is not None:
            kl = k3_kl(logp, _stack(rows, ref, logp))
            per_token = per_token + c.beta * kl
        loss = aggregate(per_token, batch.mask, c.loss_type, norm)
        loss.backward()
        sums = {"loss/total": float(loss.detach())}
        with torch.no_grad():
            for r in ROLES:
                rows_of_role = torch.tensor([s.role == r for s in rows], device=logp.device).unsqueeze(1)
                sums[f"loss/{r}"] = float(aggregate(per_token, batch.mask * rows_of_role, c.loss_type, norm))
        policy_mask = batch.mask * (~batch.is_nll).unsqueeze(1)
        return {"sums": sums, "kl": float(masked_mean(kl.detach(), batch.mask)),
                "clip": float(masked_mean(clipped, policy_mask)), "tokens": int(batch.mask.sum())}


def _stack(rows: list[TrainSample], table: dict, like: torch.Tensor) -> torch.Tensor:
    """Gather per-row cached log-probs into a ``(B, L)`` tensor shaped like ``like``."""
    out = torch.zeros_like(like)
    for b, s in enumerate(rows):
        v = table[id(s)]
        out[b, :len(v)] = v.to(out.device)
    return out


def _normalizer(masks: list[torch.Tensor], loss_type: str) -> float:
    """The mini-batch's denominator (see :func:`erl_lite.losses.normalizer_for`)."""
    width = max(max((len(m) for m in masks), default=1), 1)
    full = torch.zeros((len(masks), width), dtype=torch.long)
    for b, m in enumerate(masks):
        full[b, :len(m)] = m
    return normalizer_for(full, loss_type)
