"""The update's passes run a context shared by several rows once (GRPO's G rollouts of a prompt, and
internalization rows under their task's first-attempt context): log-probs and gradients equal those of
the full forward, fewer tokens go through the decoder, and the rows keep their own path wherever sharing
would change what is computed (active dropout, gradient checkpointing)."""

from __future__ import annotations

import warnings

import pytest
import torch
from peft import LoraConfig, get_peft_model

from erl_lite.engine.batching import completion_logprobs, pack
from erl_lite.engine.logprobs import sequence_logprobs
from erl_lite.records import TrainSample
from erl_lite.testing import FAMILIES, tiny_model, tiny_tokenizer

FAMILY_IDS = [family + ("-tied" if tied else "") for family, tied in FAMILIES]


def lora_model(family: str, tied: bool, dropout: float = 0.0):
    """A tiny model with a LoRA adapter whose B is not zero (so the adapter shapes every pass), in train mode."""
    model = tiny_model(tiny_tokenizer(), family=family, tie_embeddings=tied)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=dropout,
        target_modules="all-linear",
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(1)
    return get_peft_model(model, config).train()


def rows(seed: int = 0) -> list[TrainSample]:
    """Three tasks: two share their context with 3 rollouts each (contexts of different lengths, so one is
    left-padded), one row stands alone; completions of different lengths with masked glue tokens."""
    g = torch.Generator().manual_seed(seed)
    ints = lambda n: torch.randint(8, 90, (n,), generator=g).tolist()
    out = []
    for context, copies in ((ints(23), 3), (ints(17), 3), (ints(20), 1)):
        for _ in range(copies):
            n = int(torch.randint(3, 12, (1,), generator=g))
            mask = [1] * n
            mask[n // 2] = 0  # an observation token inside the completion carries no loss
            out.append(TrainSample("first", context, ints(n), mask, float(torch.randn(1, generator=g))))
    return out


def decoder_tokens(model) -> list[int]:
    """A list that fills with the number of token positions each decoder call embeds (after the one-off
    check of the chunked head against the model's own logits, which runs at the first call)."""
    with torch.no_grad():
        completion_logprobs(model, pack(rows()[:1], pad_id=0, nll_internalization=False), 1.0, 16)
    seen: list[int] = []
    model.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    return seen


def weighted_sum(logp: torch.Tensor, batch) -> torch.Tensor:
    return (logp * batch.mask * torch.linspace(-1, 1, logp.shape[1])).sum()


def gradients(model, loss: torch.Tensor) -> torch.Tensor:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])


@pytest.mark.parametrize(("family", "tied"), FAMILIES, ids=FAMILY_IDS)
def test_shared_contexts_give_the_full_forward_s_logprobs_and_gradients(family, tied):
    model = lora_model(family, tied)
    batch = pack(rows(), pad_id=0, nll_internalization=False)
    seen = decoder_tokens(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cache by its current name (transformers 5 warns at past_key_values)
        shared = completion_logprobs(model, batch, temperature=0.7, chunk_size=16)
    B, width = batch.input_ids.shape
    L = batch.targets.shape[1]
    # 3 distinct contexts of P columns run once, then every row's L completion columns.
    assert seen == [3 * (width - L), B * L]
    full = sequence_logprobs(
        model, batch.input_ids, batch.attention_mask, batch.position_ids, batch.targets, 0.7, chunk_size=None
    )  # the model's own forward over every row, whole
    keep = batch.mask.bool()
    # Log-probs of a ~100-word vocabulary are around -5; float32 attention over ~35 positions in another
    # order moves them by ~1e-6, so 1e-4 absolute is far below any wrong key, position or mask (>1e-2).
    assert torch.allclose(shared[keep], full[keep], atol=1e-4)
    g_shared, g_full = gradients(model, weighted_sum(shared, batch)), gradients(model, weighted_sum(full, batch))
    # Relative to the gradient's norm: summation-order noise is ~1e-6; a context gradient counted once
    # instead of once per row, or lost, would be off by tens of percent.
    assert float((g_shared - g_full).norm() / g_full.norm()) < 1e-4


def test_rows_keep_their_own_forward_where_sharing_would_change_the_computation():
    batch = pack(rows(), pad_id=0, nll_internalization=False)
    B, width = batch.input_ids.shape
    whole = [B * width]
    # Dropout: each row must draw its own masks over its context.
    model = lora_model("llama", False, dropout=0.1)
    seen = decoder_tokens(model)
    completion_logprobs(model, batch, 1.0, 16)
    assert seen == whole
    with torch.no_grad():  # without a gradient in eval mode, nothing is random: shared
        model.eval()
        completion_logprobs(model, batch, 1.0, 16)
    assert seen[1:] == [3 * (width - batch.targets.shape[1]), B * batch.targets.shape[1]]
    # Gradient checkpointing recomputes each layer without a cache: no sharing under a gradient.
    model = lora_model("qwen3", False)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    seen = decoder_tokens(model)
    completion_logprobs(model, batch, 1.0, 16)
    assert seen == whole
    # Every context distinct: one forward, as before.
    model = lora_model("qwen2", True)
    seen = decoder_tokens(model)
    alone = pack([r for i, r in enumerate(rows()) if i in (0, 3, 6)], pad_id=0, nll_internalization=False)
    completion_logprobs(model, alone, 1.0, 16)
    assert seen == [alone.input_ids.numel()]


@pytest.mark.parametrize(("family", "tied"), FAMILIES, ids=FAMILY_IDS)
def test_sampling_prefills_a_repeated_prompt_once_and_samples_the_same(family, tied):
    # G copies of a prompt (GRPO's group), one of them left-padded among longer prompts: the sampler runs each
    # distinct prompt once (all but its last token), then generate prefills only the last column of every row.
    from erl_lite.engine.generation import HFGenerator, SamplingParams

    model = lora_model(family, tied).eval()
    tok = tiny_tokenizer()
    g = torch.Generator().manual_seed(2)
    a, b = torch.randint(8, 90, (14,), generator=g).tolist(), torch.randint(8, 90, (9,), generator=g).tolist()
    prompts = [a, b, a, b, a, b + [40]]  # a x 3, b x 2, and one prompt alone
    gen = HFGenerator(model, tok, stop_ids=[tok.eos_token_id])
    for params in (SamplingParams(6, temperature=1.0), SamplingParams(6, temperature=1.0, top_k=1)):  # sampled, greedy
        seen = decoder_tokens(model)
        torch.manual_seed(3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # as in the update: the cache by its current name
            outs = gen.generate(prompts, params)
        width = max(map(len, prompts))
        # The first call: 3 distinct prompts of width - 1 columns; then the prefill of the last column of 6 rows.
        assert seen[:2] == [3 * (width - 1), 6]
        # The same draws as model.generate over every row, whole (the sampler's own reference path).
        torch.manual_seed(3)
        plain = HFGenerator(model, tok, stop_ids=[tok.eos_token_id])
        plain.share_prompts = False
        assert plain.generate(prompts, params) == outs
    alone = decoder_tokens(model)
    gen.generate([a, b], SamplingParams(3))
    assert alone[0] == 2 * 14  # nothing repeats: one prefill of every row, as before
