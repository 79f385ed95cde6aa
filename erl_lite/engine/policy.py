"""What the algorithm does to a policy beyond calling it: its stop tokens, its KL reference, which weights its
samplers drew from, and keeping a 4-bit model's gradients right (loading one is :mod:`erl_lite.models`' job).

Departures from the paper: the KL reference is the base with the LoRA adapter off, not a frozen copy (equal at step 0).
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from erl_lite.engine.chat import end_of_turn_id


def keep_4bit_trainable(model: torch.nn.Module) -> int:
    """Undo and prevent, in a trainable 4-bit model, ``Linear4bit``'s repacking for an inference-only kernel at its
    first eval-mode, no-grad call on an AVX512-BF16 CPU (LoRA gradients then silently wrong); returns its layers."""
    if not is_4bit(model) or not any(p.requires_grad for p in model.parameters()):
        return 0
    import bitsandbytes as bnb
    from bitsandbytes.functional import _convert_weight_packed_for_cpu_inverse

    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    restored = 0
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
        state = layer.weight.quant_state
        if getattr(state, "packing_format_for_cpu", False):
            # The inverse updates ``state`` in place, which layer.quant_state also points to.
            layer.weight.data, layer.weight.quant_state = _convert_weight_packed_for_cpu_inverse(
                layer.weight.data, state
            )
            restored += 1
    if restored:
        warnings.warn(
            f"{restored} 4-bit layers had been repacked for bitsandbytes' CPU inference "
            "kernel (no autograd); converted back, with their block scales rounded to bf16",
            stacklevel=2,
        )
    return len(layers)


def eos_token_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every id that ends a generation: the tokenizer's eos, the generation config's, the end of turn."""
    base = base_model(model)
    config = getattr(base, "generation_config", None) or base.config
    ids: list[Any] = []
    for value in (tokenizer.eos_token_id, getattr(config, "eos_token_id", None), end_of_turn_id(tokenizer)):
        ids += value if isinstance(value, (list, tuple)) else [value]
    return list(dict.fromkeys(int(i) for i in ids if i is not None))  # in order, each once


@contextmanager
def reference_context(model: torch.nn.Module, reference: torch.nn.Module | None = None) -> Iterator[torch.nn.Module]:
    """Yield the module that computes reference-policy logits for the KL term: ``reference`` (a frozen copy) as
    is, else the PeftModel with its adapter disabled (else ValueError). Wrap the forward in ``torch.no_grad()``."""
    if reference is not None:
        yield reference
        return
    keep_4bit_trainable(model)  # the reference pass runs without grad, often in eval mode
    inner = unwrap(model)
    if not isinstance(inner, PeftModel):
        raise ValueError(
            "reference_context needs a PeftModel (the KL reference is the base model with the adapter "
            "disabled) or an explicit frozen copy via reference=...; for a fully fine-tuned policy "
            "either pass reference= or set the KL coefficient beta to 0"
        )
    with inner.disable_adapter():
        yield model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """Strip DistributedDataParallel-style wrappers (``.module``) that accelerate adds."""
    while isinstance(model, torch.nn.parallel.DistributedDataParallel | torch.nn.DataParallel):
        model = model.module
    return model


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    inner = unwrap(model)
    return inner.get_base_model() if isinstance(inner, PeftModel) else inner


#: Per policy, the weight versions its samplers drew from since its last update (:func:`note_sampled`).
_SAMPLED: "weakref.WeakKeyDictionary[torch.nn.Module, set]" = weakref.WeakKeyDictionary()


def weight_versions(model: torch.nn.Module) -> tuple[int, ...]:
    """Each parameter's version counter: an in-place change (an optimizer step, a load) moves it."""
    return tuple(p._version for p in model.parameters())


def note_sampled(policy: torch.nn.Module, versions: tuple[int, ...]) -> None:
    """Record that a sampler drew from ``policy``'s weights as they were at ``versions``."""
    _SAMPLED.setdefault(policy, set()).add(versions)


def sampled_stale(policy: torch.nn.Module) -> bool:
    """Whether a sampler drew from other weights than ``policy``'s now, since the last call (which forgets them)."""
    return any(v != weight_versions(policy) for v in _SAMPLED.pop(policy, ()))


def is_4bit(model: torch.nn.Module) -> bool:
    return bool(getattr(base_model(model), "is_loaded_in_4bit", False))


def is_quantized(model: torch.nn.Module) -> bool:
    """Whether any part of ``model`` is quantized: transformers' flags for any quantizer (4-bit, 8-bit, GPTQ, ...)
    or a bitsandbytes layer put in by hand (``Linear4bit``, ``Linear8bitLt``), which sets no flag."""
    base = base_model(model)
    flags = ("is_quantized", "is_loaded_in_4bit", "is_loaded_in_8bit")
    return (
        any(getattr(base, f, False) is True for f in flags)
        or getattr(base, "hf_quantizer", None) is not None
        or any(type(m).__module__.startswith("bitsandbytes") for m in model.modules())
    )


def shared_rows(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(first, rows)`` when some rows of ``ids`` ``(B, P)`` (with their ``mask``) are the same: ``first``
    ``(U,)`` one row per distinct one, ``rows`` ``(B,)`` each row's index into them; None when all differ."""
    distinct, rows = torch.unique(torch.cat([ids, mask], dim=1), dim=0, return_inverse=True)
    if len(distinct) == len(ids):
        return None
    order = torch.arange(len(ids), device=ids.device)
    first = torch.full((len(distinct),), len(ids), device=ids.device).scatter_reduce(0, rows, order, "amin")
    return first, rows


def cache_name(model: Any) -> str:
    """The keyword ``model``'s forward and ``generate`` take a KV cache by, and its outputs' attribute: ``cache`` in
    transformers 5 (``past_key_values`` warns there), else ``past_key_values``."""
    forward = base_model(model).forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
