"""Packing the RL batch into micro-batches of tensors, and their completion log-probs::

input_ids  (B, P + L):  [pad … pad | context_b | completion_b | pad … pad]
hidden states at columns P-1 … P+L-2 predict the completion tokens (B, L)
(B rows, P = longest context, L = longest completion)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from erl_lite.engine.logprobs import DEFAULT_CHUNK_SIZE, sequence_logprobs
from erl_lite.records import TrainSample


@dataclass
class Packed:
    """A micro-batch as tensors (layout in the module docstring)."""

    input_ids: torch.Tensor  # (B, P + L)
    attention_mask: torch.Tensor  # (B, P + L)
    position_ids: torch.Tensor  # (B, P + L)
    targets: torch.Tensor  # (B, L) completion ids
    mask: torch.Tensor  # (B, L) 1 where the token carries loss
    advantages: torch.Tensor  # (B,)
    is_nll: torch.Tensor  # (B,) True for internalization rows in NLL mode
    sampled_logp: torch.Tensor  # (B, L) the sampler's log-probs, NaN where none was reported
    roles: tuple[str, ...] = ()  # (B,) role of each row
    temperature: float | None = None  # every row's sampling temperature (None: the run's)
    old_logp: torch.Tensor | None = None  # (B, L) sampling policy; None = on-policy (ratio 1)
    ref_logp: torch.Tensor | None = None  # (B, L) reference policy; None = no KL term

    @property
    def logprob_inputs(self) -> tuple[torch.Tensor, ...]:
        """``(input_ids, attention_mask, position_ids, targets)``: a log-prob pass's arguments after the model."""
        return self.input_ids, self.attention_mask, self.position_ids, self.targets


def pack(samples: list[TrainSample], pad_id: int, nll_internalization: bool, device: Any = "cpu") -> Packed:
    """Left-pad contexts and right-pad completions into one rectangular micro-batch."""
    if not samples:
        raise ValueError("pack needs at least one TrainSample")
    P = max(len(s.prompt_ids) for s in samples)
    L = max(max(len(s.completion_ids) for s in samples), 1)
    B = len(samples)
    ids = torch.full((B, P + L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + L), dtype=torch.long)
    targets = torch.full((B, L), pad_id, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    sampled = torch.full((B, L), float("nan"))
    for b, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        ids[b, P - p : P] = torch.tensor(s.prompt_ids, dtype=torch.long)
        ids[b, P : P + c] = torch.tensor(s.completion_ids, dtype=torch.long)
        attn[b, P - p : P + c] = 1
        targets[b, :c] = torch.tensor(s.completion_ids, dtype=torch.long)
        mask[b, :c] = torch.tensor(s.completion_mask, dtype=torch.long)
        if s.sampled_logp is not None:
            sampled[b, : len(s.sampled_logp)] = torch.tensor(s.sampled_logp, dtype=torch.float32)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    is_nll = torch.tensor([nll_internalization and s.role == "internalization" for s in samples])
    temperatures = {s.temperature for s in samples}
    if len(temperatures) > 1:
        raise ValueError(f"a micro-batch mixes sampling temperatures {sorted(temperatures, key=str)}")
    return Packed(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        position_ids=positions.to(device),
        targets=targets.to(device),
        mask=mask.to(device),
        advantages=adv.to(device),
        is_nll=is_nll.to(device),
        sampled_logp=sampled.to(device),
        roles=tuple(s.role for s in samples),
        temperature=temperatures.pop(),
    )


def completion_logprobs(
    model: Any, batch: Packed, temperature: float, chunk_size: int | None = DEFAULT_CHUNK_SIZE
) -> torch.Tensor:
    """Completion log-probs ``(B, L)`` under ``model`` at the batch's sampling temperature, else ``temperature``."""
    return sequence_logprobs(
        model, *batch.logprob_inputs, temperature if batch.temperature is None else batch.temperature, chunk_size
    )


class CompletionLogProbs(torch.nn.Module):
    """:func:`completion_logprobs` as a module: DDP all-reduces only gradients whose forward ran through its wrapper."""

    def __init__(self, policy: Any, temperature: float, chunk_size: int | None) -> None:
        super().__init__()
        self.policy, self.temperature, self.chunk_size = policy, temperature, chunk_size

    def forward(self, batch: Packed) -> torch.Tensor:
        return completion_logprobs(self.policy, batch, self.temperature, self.chunk_size)


def _padded_length(s: TrainSample) -> int:
    return len(s.prompt_ids) + len(s.completion_ids)


def _context_then_length(s: TrainSample) -> tuple[float, int, list[int], int]:
    return -1.0 if s.temperature is None else s.temperature, len(s.prompt_ids), s.prompt_ids, len(s.completion_ids)


def micro_batches(rows: list[TrainSample], size: int) -> Iterator[list[TrainSample]]:
    """Rows in micro-batches of at most ``size`` rows and twice the width of their shortest row, sorted by context
    length, then context, then completion length: a pass runs a shared context once (see ``completion_hidden``)."""
    chunk: list[TrainSample] = []
    context = completion = shortest = 0  # the current chunk's longest context and completion, shortest row
    for row in sorted(rows, key=_context_then_length):
        width = max(context, len(row.prompt_ids)) + max(completion, len(row.completion_ids))
        if chunk and (
            len(chunk) == size
            or width > 2 * min(shortest, _padded_length(row))
            or row.temperature != chunk[-1].temperature
        ):  # one temperature per pass
            yield chunk
            chunk, context, completion = [], 0, 0
        shortest = min(shortest, _padded_length(row)) if chunk else _padded_length(row)
        chunk.append(row)
        context, completion = max(context, len(row.prompt_ids)), max(completion, len(row.completion_ids))
    if chunk:
        yield chunk
