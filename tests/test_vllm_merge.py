"""The weights the vLLM sampler loads (``erl_lite.integrations.vllm.merged_weights``) are the trained policy's, for
every kind of LoRA adapter: plain, rsLoRA, DoRA (its magnitude vector), ``lora_bias``, ``modules_to_save``. Checked
without vLLM: the merged weights loaded into a plain copy of the base model give the PEFT model's logits."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model

from erl_lite.integrations.vllm import merged_weights
from erl_lite.testing import tiny_model, tiny_tokenizer

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
KINDS = {
    "lora": {},
    "rslora": {"use_rslora": True},
    "dora": {"use_dora": True},
    "lora_bias": {"lora_bias": True},
    "modules_to_save": {"modules_to_save": ["lm_head"]},
    "two_adapters_one_active": {},
}


def _trained(kind: str):
    """A tiny Qwen2 (biased q/k/v: lora_bias has a bias to merge into) with an adapter of ``kind`` moved off its
    initialisation, as training leaves it: every adapter tensor, DoRA's magnitude and the saved module perturbed."""
    tok = tiny_tokenizer()
    base = tiny_model(tok, seed=2, family="qwen2")
    plain = copy.deepcopy(base)
    targets = TARGETS[:3] if kind == "lora_bias" else TARGETS  # Qwen2's biased layers: a bias to merge into
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0, **KINDS[kind])
    model = get_peft_model(base, config)
    if kind == "two_adapters_one_active":
        model.add_adapter("other", LoraConfig(r=2, lora_alpha=4, target_modules=TARGETS))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name or "modules_to_save" in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.2)
    return model.eval(), plain.eval(), tok


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_merged_weights_give_the_policys_logits(kind):
    model, plain, tok = _trained(kind)
    ids = torch.tensor([tok("the merged weights are the policy's own").input_ids])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    plain.load_state_dict(dict(merged_weights(model)), strict=True)
    with torch.no_grad():
        want, got = model(input_ids=ids).logits, plain(input_ids=ids).logits
    # fp32 logits of magnitude ~1-10: a merged matmul rounds differently from base + adapter, ~1e-6; a dropped
    # DoRA magnitude or LoRA bias moves them by > 0.1 (measured 0.79 and 0.45 before PEFT's merge was used).
    assert (want - got).abs().max().item() < 1e-4 * want.abs().max().item()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # the policy itself untouched


@pytest.mark.parametrize("kind", ["lora_bias_without_a_base_bias", "already_merged"])
def test_what_peft_cannot_merge_is_refused_when_the_sampler_is_built(kind, monkeypatch):
    # A LoRA bias on o_proj (no bias in Qwen2) has nowhere to go in the engine's weights: refused by name when
    # the sampler is built, before any rollout (and before vLLM itself is looked for). A layer merged into its
    # base (PEFT's merge_adapter) already holds its adapter: its weights are loaded as they are.
    import importlib.util

    from erl_lite.integrations.vllm import VLLMGenerator

    tok = tiny_tokenizer()
    base = tiny_model(tok, seed=2, family="qwen2")
    model = get_peft_model(
        base, LoraConfig(r=4, target_modules=["q_proj", "o_proj"], lora_bias=kind == "lora_bias_without_a_base_bias")
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.3)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    if kind == "already_merged":
        ids = torch.tensor([tok("merged once").input_ids])
        with torch.no_grad():
            want = model(input_ids=ids).logits
        model.merge_adapter()
        plain = tiny_model(tok, seed=2, family="qwen2")
        plain.load_state_dict(dict(merged_weights(model)), strict=True)
        with torch.no_grad():
            got = plain(input_ids=ids).logits
        assert (want - got).abs().max().item() < 1e-4 * want.abs().max().item()  # as above
        return
    with pytest.raises(ValueError, match=r"PEFT cannot merge the adapter of \S*o_proj.*lora_bias.*continuous"):
        VLLMGenerator(model, tok, cache_tokens=64)


def _as_8bit_module(model):
    import bitsandbytes as bnb

    layer = model.model.layers[0].self_attn.o_proj
    model.model.layers[0].self_attn.o_proj = bnb.nn.Linear8bitLt(
        layer.in_features, layer.out_features, bias=False, has_fp16_weights=False
    )
    return model


def _flagged(flag):
    def mark(model):
        setattr(model, flag, True)
        return model

    return mark


@pytest.mark.parametrize(
    "quantize",
    [_as_8bit_module, _flagged("is_loaded_in_8bit"), _flagged("is_quantized")],
    ids=["bnb-8bit-layer", "loaded-in-8bit", "any-transformers-quantizer"],
)
def test_vllm_refuses_any_quantized_model_object_not_only_4bit(monkeypatch, quantize):
    import importlib.util

    from erl_lite.integrations.vllm import VLLMGenerator

    tok = tiny_tokenizer()
    model = get_peft_model(
        quantize(tiny_model(tok, seed=2, family="qwen2")), LoraConfig(r=4, target_modules=["q_proj"])
    )
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ValueError, match="cannot sample a quantized base"):
        VLLMGenerator(model, tok, cache_tokens=64)
