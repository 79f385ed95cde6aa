"""The real-model path on the CPU: tiny random models of real architectures, each with its family's
published ``generation_config.json`` sampling values, trained two ERL steps on each backend; the
on-policy gap stays within the health check's tolerance, and a planted penalty makes it fire.

The sampling numbers are those of the public configs (Qwen2.5-0.5B-Instruct, Qwen3-0.6B,
Llama-3.2-1B-Instruct, gemma-3-1b-it, Phi-3-mini-4k-instruct, SmolLM2-135M-Instruct); token ids are
the test tokenizer's. The Qwen families use the real Qwen3 tokenizer and chat template when it is on disk.
"""

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    GenerationConfig,
    LlamaConfig,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import HFGenerator
from erl_lite.metric_names import GAP_MEAN_KEYS, GAP_TOKENS
from erl_lite.models import load_policy
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import find_qwen3_tokenizer, qwen3_tokenizer, tiny_tokenizer

SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    max_position_embeddings=4096,
)
FAMILIES = {  # config class, extra config numbers, published sampling defaults
    "qwen2.5": (
        Qwen2Config,
        {"tie_word_embeddings": True},
        {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.1},
    ),
    "qwen3": (
        Qwen3Config,
        {"tie_word_embeddings": True},
        {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20},
    ),
    "llama3.2": (LlamaConfig, {"rope_theta": 500000.0}, {"do_sample": True, "temperature": 0.6, "top_p": 0.9}),
    "gemma3": (
        Gemma3TextConfig,
        {"sliding_window": 512, "final_logit_softcapping": None},
        {"do_sample": True, "top_k": 64, "top_p": 0.95, "cache_implementation": "hybrid"},
    ),
    "phi3": (Phi3Config, {}, {}),
    "smollm2": (LlamaConfig, {"tie_word_embeddings": True}, {}),
}


def digit_reward(prompts, completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def feedback(prompts, completions, answer, **kw):
    return [f"expected {a}" for a in answer]


ROWS = [{"prompt": f"Add {i} and {i}.", "answer": str(2 * i)} for i in range(4)]


def _tokenizer(family):
    if family.startswith("qwen") and find_qwen3_tokenizer():
        return qwen3_tokenizer()
    return tiny_tokenizer()


def _save(path, family):
    cls, extra, sampling = FAMILIES[family]
    tok = _tokenizer(family)
    config = cls(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
        **{**SHAPE, **extra},
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **sampling)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _train(path, backend, sampler=None):
    model, tok = load_policy(path, peft="lora", device="cpu")
    generator = None if sampler is None else sampler(model, tok)
    args = ERLConfig.preset(
        "cpu",
        max_steps=2,
        num_tasks_per_step=2,
        num_generations=2,
        max_completion_length=8,
        max_reflection_length=12,
        max_reflection_prompt_length=900,
        eval_steps=0,
        progress_bar=False,
        learning_rate=1e-2,
        beta=0.01,
        steps_per_generation=2,
        generation_backend=backend,
    )
    trainer = ERLTrainer(
        model=model,
        processing_class=tok,
        args=args,
        reward_funcs=digit_reward,
        feedback_func=feedback,
        train_dataset=ROWS,
        generator=generator,
    )
    return trainer, trainer.train()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["generate", "continuous"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_two_erl_steps_stay_on_policy(tmp_path, family, backend):
    trainer, history = _train(_save(tmp_path, family), backend)
    for record in history.of_kind("train"):
        assert record[GAP_TOKENS] > 0
        for role, key in GAP_MEAN_KEYS.items():
            # Same weights, fp32, each token scored under its sampler's cut (the reflections' top-p 0.9 here):
            # the sampler and the update agree to ~1e-6 a token, within the check's 1e-3.
            assert record[key] <= record["onpolicy/tolerance"] == 1e-3, (role, record[key])
    assert not [e for e in history.of_kind("diagnostic") if "diagnostics/off_policy" in e]


class _LeakyGenerator(HFGenerator):
    """A sampler with a penalty outside ERLConfig (as a checkpoint's generation_config once leaked in)."""

    def sampling_config(self, params):
        config = super().sampling_config(params)
        config.repetition_penalty = 3.0
        return config


@pytest.mark.slow
def test_a_planted_repetition_penalty_makes_the_check_fire(tmp_path):
    trainer, history = _train(_save(tmp_path, "llama3.2"), "generate", sampler=_LeakyGenerator)
    fired = [e for e in history.of_kind("diagnostic") if "diagnostics/off_policy" in e]
    assert fired and fired[0]["step"] == 1, history.of_kind("diagnostic")  # one step is enough: the gap is exact


@pytest.mark.parametrize("family", ["qwen2.5", "phi3"])
def test_pre_flight_names_the_checkpoints_ignored_sampling_defaults(tmp_path, family):
    from erl_lite.diagnostics.preflight import sampling_findings

    model, _ = load_policy(_save(tmp_path, family), peft="lora", device="cpu")
    found = sampling_findings(model, ERLConfig())
    if family == "phi3":  # its config recommends no sampling setting
        assert found == []
    else:
        assert "repetition_penalty=1.1" in found[0].saw and "top_k=20" in found[0].saw and found[0].level == "note"
