"""Completion log-probs from a causal LM, without ever holding ``(B, L, V)`` logits: the decoder runs
once; only the completion positions go through the lm-head, a chunk at a time::

    hidden  (B, P + L, H) ──► positions P-1 … P+L-2 ──► (B·L, H) ──► chunks of ``chunk_size``
    each chunk × lm_head.weight (V, H), one vocabulary tile at a time ──► log p(target)  (B, L)

The head step is TRL's ``trl.kernels.ChunkedLogProbFunction``, called directly (its ``add_fused_lm_head`` patches
``model.forward`` before PEFT wraps it).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
import torch.nn.functional as F

from erl_lite.config import ERLConfig
from erl_lite.engine.policy import base_model, cache_name, shared_rows

#: Completion positions per lm-head chunk: 256 keeps a tile at 8 MiB, below glibc's mmap
#: ceiling, so CPU tiles reuse heap memory (about twice as fast as 1024 on one CPU thread).
DEFAULT_CHUNK_SIZE: int | None = ERLConfig.__dataclass_fields__["logprob_chunk_size"].default
#: Vocabulary columns per tile: a (256, 8192) fp32 tile is 8 MiB.
VOCAB_TILE = 8192
# Models whose chunked head was checked once against their own forward (see _check_once).
_CHECKED: "weakref.WeakKeyDictionary[torch.nn.Module, bool]" = weakref.WeakKeyDictionary()


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities ``(B, T)`` of ``token_ids`` under ``logits / temperature`` ``(B, T, V)``, in
    float32 (TRL's ``selective_log_softmax``, written here so this layer imports no trl)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if temperature != 1.0:
        logits = logits / temperature
    ids = token_ids.unsqueeze(-1)  # (B, T, 1)
    if logits.dtype in (torch.float32, torch.float64):
        picked = logits.gather(-1, ids).squeeze(-1)  # (B, T)
        # One sequence at a time: peak extra memory is (T, V), not (B, T, V).
        lse = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])  # (B, T)
        return picked - lse
    # bf16/fp16: logsumexp minus a logit loses too many bits; upcast row by row instead.
    rows = [F.log_softmax(row.float(), dim=-1).gather(-1, r) for row, r in zip(logits, ids)]
    return torch.stack(rows).squeeze(-1)


def truncated_logprobs(
    logits: torch.Tensor, token_ids: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Log-probs ``(N,)`` of ``token_ids`` ``(N,)`` under ``softmax(logits / T)`` ``(N, V)`` cut to its ``top_k`` best,
    then its top-p nucleus, renormalised, as transformers' and vLLM's samplers draw; -inf outside the cut."""
    z = logits.float() / temperature
    if 0 < top_k < z.shape[-1]:
        z = z.masked_fill(z < z.topk(top_k, dim=-1).values[:, -1:], -math.inf)
    if top_p < 1:
        ascending, order = z.sort(dim=-1)
        cut = ascending.softmax(-1).cumsum(-1) <= 1 - top_p  # the least likely tokens, up to 1 - top_p of the mass
        cut[:, -1] = False  # the most likely token always stays
        z = z.masked_fill(cut.scatter(-1, order, cut), -math.inf)
    return z.log_softmax(-1).gather(-1, token_ids[:, None])[:, 0]


def sequence_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> torch.Tensor:
    """Log-probs ``(B, L)`` float32 of ``targets``, the last ``L`` tokens of ``input_ids`` ``(B, P + L)``;
    ``chunk_size`` None computes the full logits, else a head that is not ``nn.Linear`` raises ValueError."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    L = targets.shape[1]
    if chunk_size is None:
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=L + 1,
        )
        logits = out.logits[:, -(L + 1) : -1, :]  # (B, L, V): position P-1+j predicts target j
        return token_logprobs(logits.float(), targets, temperature)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    lm = causal_lm(model)
    _check_once(model, lm, input_ids, temperature)
    return _chunked(lm, input_ids, attention_mask, position_ids, targets, temperature, chunk_size)


@torch.no_grad()
def cut_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
) -> torch.Tensor:
    """:func:`sequence_logprobs` ``(B, L)`` under a sampler's top-k / top-p cut (:func:`truncated_logprobs`), for the
    on-policy check: one row at a time, its full logits ``(L, V)`` cut a chunk of positions at a time."""
    L, out = targets.shape[1], []
    for b in range(targets.shape[0]):
        logits = model(
            input_ids=input_ids[b : b + 1],
            attention_mask=attention_mask[b : b + 1],
            use_cache=False,
            position_ids=position_ids[b : b + 1],
            logits_to_keep=L + 1,
        ).logits[0, :-1]  # (L, V)
        chunks = zip(logits.split(256), targets[b].split(256))  # (<= 256, V) logits, (<= 256,) targets
        out.append(torch.cat([truncated_logprobs(z, t, temperature, top_k, top_p) for z, t in chunks]))
    return torch.stack(out)


def _chunked(
    lm: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    chunk_size: int,
) -> torch.Tensor:
    from trl.kernels import ChunkedLogProbFunction  # imported here: trl costs a second to import

    head = output_head(lm)
    scale, softcap = logit_transform(lm.config)
    B, L = targets.shape
    hidden = completion_hidden(lm.base_model, input_ids, attention_mask, position_ids, L)  # (B, L, H)
    flat = hidden.reshape(B * L, -1).to(head.weight.device)  # (N, H)
    ids = targets.reshape(-1).to(head.weight.device)  # (N,)
    pieces = []
    for start in range(0, B * L, chunk_size):
        part = slice(start, start + chunk_size)
        logp, *_ = ChunkedLogProbFunction.apply(
            flat[part], head.weight, head.bias, ids[part], temperature, VOCAB_TILE, softcap, scale, ()
        )
        pieces.append(logp)  # (n,) float32
    return torch.cat(pieces).view(B, L).to(targets.device)


def completion_hidden(
    decoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, L: int
) -> torch.Tensor:
    """Hidden states ``(B, L, H)`` at the positions that predict the last ``L`` columns of ``input_ids`` ``(B, P + L)``.
    Rows with the same context (the first ``P`` columns, padding included: GRPO's G rollouts of a prompt) run it
    once, its keys and values ``(U, P)`` indexed out to the ``B`` rows of the completion pass ``(B, L)``: the same
    attention, and a shared context's gradient sums over its rows. Active dropout (each row draws its own masks)
    and gradient checkpointing (no cache) keep the full forward. transformers has no shared-prefix forward."""
    P = input_ids.shape[1] - L
    groups = shared_rows(input_ids[:, :P], attention_mask[:, :P]) if P > 0 and _may_share(decoder) else None
    if groups is not None:
        first, rows = groups  # (U,) a row holding each distinct context; (B,) each row's context
        name = cache_name(decoder)
        context = decoder(
            input_ids=input_ids[first, :P],
            attention_mask=attention_mask[first, :P],
            position_ids=position_ids[first, :P],
            use_cache=True,
        )
        cache = getattr(context, name, None)
        if hasattr(cache, "reorder_cache"):  # a model without a cache object runs the full forward below
            last = context.last_hidden_state[rows, -1:]  # (B, 1, H): column P-1 predicts target 0
            if L == 1:
                return last
            cache.reorder_cache(rows)  # (U, ...) -> (B, ...) keys and values
            rest = decoder(
                input_ids=input_ids[:, P:],
                attention_mask=attention_mask,
                position_ids=position_ids[:, P:],
                use_cache=True,
                **{name: cache},
            )
            return torch.cat([last, rest.last_hidden_state[:, : L - 1]], dim=1)
    out = decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    return out.last_hidden_state[:, -(L + 1) : -1, :]


def _may_share(decoder: Any) -> bool:
    """Whether a pass may share contexts: no dropout that draws, no gradient checkpointing under a gradient.
    The modules are walked at every pass (~1 ms): a LoRA adapter injected later brings its own dropout."""
    if torch.is_grad_enabled() and any(getattr(m, "gradient_checkpointing", False) is True for m in decoder.modules()):
        return False
    return not draws_dropout(decoder, training=True)


def draws_dropout(model: Any, training: bool = False) -> bool:
    """Whether ``model`` has dropout that draws in train mode (``training``: only modules now training)."""
    config = getattr(base_model(model), "config", None)
    if getattr(config, "attention_dropout", 0.0) and (model.training or not training):
        return True
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 and (m.training or not training) for m in model.modules())


def causal_lm(model: Any) -> Any:
    """The transformers causal LM inside ``model`` (unwrapping accelerate/DDP and PEFT)."""
    model = base_model(model)
    if not hasattr(model, "get_output_embeddings") or getattr(model, "base_model", model) is model:
        raise ValueError(
            f"{type(model).__name__} is not a causal LM with a decoder and an lm-head; "
            "use the full-logits path (logprob chunk size None)"
        )
    return model


def output_head(lm: Any) -> torch.nn.Linear:
    """The lm-head as a plain ``nn.Linear`` (what the chunked kernel can read), or a ValueError."""
    head = lm.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if not (
        isinstance(head, torch.nn.Linear)
        and type(weight) in (torch.nn.Parameter, torch.Tensor)
        and weight.dtype.is_floating_point
    ):
        raise ValueError(
            f"{type(lm).__name__}'s lm-head is {type(head).__name__} (weight {type(weight).__name__}); the "
            "chunked log-probs need a plain floating-point nn.Linear head (not quantized, not wrapped by an "
            "adapter): keep lm_head out of LoRA/4-bit, or use the full-logits path (logprob chunk size None)"
        )
    return head


def logit_transform(config: Any) -> tuple[float, float | None]:
    """``(scale, softcap)`` a model applies to ``lm_head(h)``: ``softcap·tanh(scale·z/softcap)``, read as TRL does."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    softcap = getattr(cfg, "final_logit_softcapping", None)
    scale_keys = ("logit_scale", "output_multiplier", "lm_head_multiplier")
    scale = next((getattr(cfg, name) for name in scale_keys if getattr(cfg, name, None) is not None), None)
    if scale is None and getattr(cfg, "logits_scaling", None) is not None:
        div = cfg.logits_scaling
        scale = div if getattr(cfg, "model_type", "") == "hyperclovax" else 1 / div
    return (1.0 if scale is None else float(scale)), (None if softcap is None else float(softcap))


@torch.no_grad()
def _check_once(model: Any, lm: Any, input_ids: torch.Tensor, temperature: float) -> None:
    """Compare the chunked head with the model's own logits once, so an unknown logit transform fails."""
    if _CHECKED.get(lm) or input_ids.shape[1] < 2:
        return
    ids = input_ids[:1, -8:]
    ones, pos = torch.ones_like(ids), torch.arange(ids.shape[1], device=ids.device)[None]
    targets = ids[:, 1:]
    devices = [ids.device] if ids.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # same dropout masks in both passes
        torch.manual_seed(0)
        full = sequence_logprobs(model, ids, ones, pos, targets, temperature, chunk_size=None)
        torch.manual_seed(0)
        chunked = _chunked(lm, ids, ones, pos, targets, temperature, chunk_size=DEFAULT_CHUNK_SIZE)
    atol = 1e-3 if output_head(lm).weight.dtype == torch.float32 else 5e-2
    gap = float((full - chunked).abs().max())
    if not gap <= atol:
        raise ValueError(
            f"{type(lm).__name__}: chunked lm-head log-probs differ from the model's own by {gap:.3g}; "
            "its logits go through a transform erl_lite does not know. Use the full-logits path "
            "(logprob chunk size None)"
        )
    _CHECKED[lm] = True
