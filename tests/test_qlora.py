"""4-bit QLoRA and LoRA across model families: gradients that are right, not just present.

Every test runs over the tiny families of :data:`erl_lite.testing.FAMILIES` (bias-free Llama,
Qwen2-style q/k/v bias, Qwen3-style q/k norm, tied embeddings). "Weights changed" would pass
with a wrong gradient, so gradients are compared with an independent computation: the same
model that never generated, or a full-precision model holding the dequantized 4-bit weights.
"""

from __future__ import annotations

import math

import bitsandbytes as bnb
import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.core.update import PolicyUpdater
from erl_lite.engine.generation import HFGenerator, SamplingParams
from erl_lite.engine.policy import reference_context
from erl_lite.models import load_policy, trainable_parameters
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import FAMILIES, save_tiny_model

torch.set_num_threads(1)
FAMILY_IDS = [family + ("-tied" if tied else "") for family, tied in FAMILIES]
TEXTS = ("The cat sat.", "A longer second line\nwith a newline")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``saved(family, tied) -> checkpoint dir``, each written once per module."""
    cache: dict[tuple[str, bool], str] = {}

    def get(family: str, tied: bool) -> str:
        if (family, tied) not in cache:
            where = tmp_path_factory.mktemp(f"{family}{'-tied' if tied else ''}")
            cache[family, tied] = save_tiny_model(where, family=family, tie_embeddings=tied)
        return cache[family, tied]

    return get


def _load(path: str, quantization: str):
    """The same LoRA policy every call: LoRA A is drawn from the global generator, B perturbed."""
    torch.manual_seed(0)
    model, tok = load_policy(path, quantization=quantization, lora_r=4, device="cpu")
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # B starts at zero, where the adapter does nothing and A gets no grad
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model, tok


def _loss_and_grads(model, tok) -> tuple[float, dict[str, torch.Tensor]]:
    """Causal-LM loss on a fixed batch and the gradient of every trainable parameter."""
    model.train()
    batch = tok(list(TEXTS), return_tensors="pt", padding=True)
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


def _generate(model, tok) -> None:
    HFGenerator(model, tok).generate([tok("hi").input_ids, tok("hello").input_ids], SamplingParams(4))


def _packed_layers(model) -> int:
    """4-bit layers switched to bitsandbytes' CPU inference-only format."""
    return sum(
        bool(getattr(m.weight.quant_state, "packing_format_for_cpu", False))
        for m in model.modules()
        if isinstance(m, bnb.nn.Linear4bit)
    )


@pytest.mark.parametrize("quantization", ["none", "4bit"])
@pytest.mark.parametrize(("family", "tied"), FAMILIES, ids=FAMILY_IDS)
def test_lora_backward_reaches_every_adapter_and_nothing_else(saved, family, tied, quantization):
    model, tok = _load(saved(family, tied), quantization)
    loss, grads = _loss_and_grads(model, tok)
    assert math.isfinite(loss)
    assert grads and all("lora_" in n for n in grads)
    assert all(g.abs().sum() > 0 and torch.isfinite(g).all() for g in grads.values())
    # q/k/v/o and the MLP of every layer carry an adapter; Qwen2's biases stay frozen.
    assert {n.split(".")[-4] for n in grads} == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    assert all(p.grad is None for n, p in model.named_parameters() if "lora_" not in n)
    if family == "qwen2":
        assert model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.bias is not None


@pytest.mark.parametrize(("family", "tied"), FAMILIES, ids=FAMILY_IDS)
def test_4bit_gradients_unchanged_by_generate(saved, family, tied):
    """Regression: a generate switched CPU 4-bit layers to a kernel without autograd."""
    path = saved(family, tied)
    fresh, tok = _load(path, "4bit")
    used, _ = _load(path, "4bit")
    _generate(used, tok)
    assert _packed_layers(used) == 0
    loss_fresh, grads_fresh = _loss_and_grads(fresh, tok)
    loss_used, grads_used = _loss_and_grads(used, tok)
    assert loss_used == loss_fresh
    assert grads_used.keys() == grads_fresh.keys()
    for name in grads_fresh:
        assert torch.equal(grads_used[name], grads_fresh[name]), name


def _dense_twin(quantized, path: str):
    """The same LoRA policy in full precision, its base holding the dequantized 4-bit weights:
    an independent computation of what the 4-bit model's forward and backward should give."""
    dense, _ = _load(path, "none")
    dense_modules = dict(dense.named_modules())
    with torch.no_grad():
        for name, layer in quantized.named_modules():
            if isinstance(layer, bnb.nn.Linear4bit):
                weight = bnb.functional.dequantize_4bit(layer.weight.data, layer.weight.quant_state)
                dense_modules[name].weight.copy_(weight)  # (out_features, in_features)
    return dense


@pytest.mark.parametrize(("family", "tied"), FAMILIES, ids=FAMILY_IDS)
def test_4bit_gradients_equal_full_precision_on_dequantized_weights(saved, family, tied):
    path = saved(family, tied)
    quantized, tok = _load(path, "4bit")
    dense = _dense_twin(quantized, path)
    _generate(quantized, tok)  # the 4-bit model must be right after a generate, too
    loss_q, grads_q = _loss_and_grads(quantized, tok)
    loss_d, grads_d = _loss_and_grads(dense, tok)
    assert loss_q == pytest.approx(loss_d, rel=1e-5)
    for name in grads_d:
        # atol relative to the tensor's largest gradient: bitsandbytes' dequantize-and-matmul and
        # the dense matmul round differently (float32), by a few ulp of the largest terms.
        scale = float(grads_d[name].abs().max())
        torch.testing.assert_close(grads_q[name], grads_d[name], rtol=1e-4, atol=1e-5 * scale, msg=name)


@pytest.mark.parametrize("quantization", ["none", "4bit"])
@pytest.mark.parametrize(("family", "tied"), FAMILIES, ids=FAMILY_IDS)
def test_reference_context_is_the_base_model(saved, family, tied, quantization):
    model, tok = _load(saved(family, tied), quantization)
    model.eval()  # the reference pass of an update may run in eval mode, without grad
    batch = tok(list(TEXTS), return_tensors="pt", padding=True)
    with torch.no_grad():
        adapter_logits = model(**batch).logits  # (B, T, V)
        with reference_context(model) as ref:
            ref_logits = ref(**batch).logits
        assert torch.equal(model(**batch).logits, adapter_logits)  # adapter back on after exit
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.zero_()  # B = 0: the adapter is the identity, i.e. the base model
        base_logits = model(**batch).logits
    scale = float(base_logits.abs().max())
    assert float((adapter_logits - base_logits).abs().max()) > 1e-3 * scale  # the adapter matters
    torch.testing.assert_close(ref_logits, base_logits, rtol=1e-5, atol=1e-5 * scale)  # float32 rounding
    assert _packed_layers(model) == 0


def test_already_packed_layers_are_restored(saved):
    """A 4-bit model that ran inference before it was made trainable is converted back."""
    from erl_lite.engine.policy import keep_4bit_trainable

    model, tok = _load(saved("qwen2", False), "4bit")
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    for layer in layers:
        layer.support_avx512bf16_for_cpu = True  # as bitsandbytes leaves a layer it built
    with torch.no_grad():
        model.eval()
        model(**tok(["hi"], return_tensors="pt"))
    if not bnb.functional.has_avx512bf16():
        pytest.skip("this CPU has no AVX512-BF16; bitsandbytes never repacks here")
    assert _packed_layers(model) == len(layers)
    with pytest.warns(UserWarning, match="repacked"):
        assert keep_4bit_trainable(model) == len(layers)
    assert _packed_layers(model) == 0
    loss, grads = _loss_and_grads(model, tok)
    assert math.isfinite(loss) and all(torch.isfinite(g).all() for g in grads.values())


def test_frozen_4bit_model_is_left_alone(saved):
    from erl_lite.engine.policy import keep_4bit_trainable

    model, _ = load_policy(saved("llama", False), quantization="4bit", peft="none", device="cpu")
    assert keep_4bit_trainable(model) == 0  # inference only: the fast CPU kernel is fine
    assert all(
        m.support_avx512bf16_for_cpu == bnb.functional.has_avx512bf16()
        for m in model.modules()
        if isinstance(m, bnb.nn.Linear4bit)
    )


@pytest.mark.slow
@pytest.mark.parametrize(("family", "tied"), FAMILIES, ids=FAMILY_IDS)
def test_4bit_erl_step_with_kl_matches_full_precision(saved, guess_env, family, tied):
    """One full ERL step (generate, reflect, second attempt, update with a KL term through the
    disabled adapter) in 4-bit on CPU. Its update equals the same update of the dense twin on the
    same samples. Qwen2's q/k/v bias used to crash the backward; the others got wrong gradients."""
    path = saved(family, tied)
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=2,
        max_completion_length=6,
        max_reflection_length=8,
        max_reflection_prompt_length=700,
        eval_steps=0,
        progress_bar=False,
        beta=0.1,
        per_device_train_batch_size=8,
    )
    # B != 0, so the policy differs from the reference and the KL term has a gradient even
    # when every reward (hence every advantage) is zero.
    policy, tok = _load(path, "4bit")
    dense = _dense_twin(policy, path)
    before = trainable_parameters(policy)
    trainer = ERLTrainer(model=policy, processing_class=tok, args=args, env=guess_env)
    # Plain SGD with lr 1: the change of each weight is minus its (clipped) gradient, which
    # compares to tolerance; AdamW's first step is lr * sign(grad) and would not.
    trainer.updater.optimizer, trainer.updater.scheduler = _sgd(policy), None
    record = trainer.training_step()
    samples = trainer.last_outcome.samples
    assert samples and trainer.generator.calls >= 1
    assert math.isfinite(record.metrics["loss/total"]) and record.metrics["kl"] > 0
    after = trainable_parameters(policy)
    assert any(not torch.equal(before[n], after[n]) for n in before)

    dense_before = trainable_parameters(dense)
    PolicyUpdater(dense, _sgd(dense), None, args, tok.pad_token_id).update(samples)
    dense_after = trainable_parameters(dense)
    for name in before:
        step = dense_after[name] - dense_before[name]
        # Relative to the step: the 4-bit and dense gradients round differently (see above).
        torch.testing.assert_close(
            after[name] - before[name], step, rtol=1e-3, atol=1e-3 * float(step.abs().max()), msg=name
        )


def _sgd(model) -> torch.optim.Optimizer:
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
