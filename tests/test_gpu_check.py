"""benchmarks/gpu_check.py and what it stands on: the shipped Qwen architectures, the memory
arithmetic of erl_lite.integrations.budget, the forced-length policy, the two new history metrics, and
multi-turn ERL through the real Qwen3 tokenizer and chat template (skipped without it)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys

import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.engine.chat import encode_messages
from erl_lite.engine.generation import SamplingParams
from erl_lite.envs import FrozenLake
from erl_lite.integrations.budget import MODEL_CONFIGS, ModelShape, estimate_memory, memory_table, model_config
from erl_lite.testing import find_qwen3_tokenizer, qwen3_tokenizer, tiny_model, tiny_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Published parameter counts of the three models (their model cards / safetensors index).
PUBLISHED = {
    "qwen2.5-0.5b-instruct": 494_032_768,
    "qwen2.5-1.5b-instruct": 1_543_714_304,
    "qwen3-4b-instruct-2507": 4_022_468_096,
}


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", os.path.join(ROOT, "benchmarks", "gpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


# --- the shipped architectures and the arithmetic ---------------------------------------------


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_shipped_configs_build_the_published_architecture(name, gpu_check):
    from transformers import AutoModelForCausalLM

    tok = tiny_tokenizer()
    config = gpu_check.hf_config(name, tok, tiny=False)
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(config)
    count = sum(p.numel() for p in model.parameters())
    assert count == PUBLISHED[name] == ModelShape.load(name).parameter_count()
    attn = model.model.layers[0].self_attn
    assert (attn.q_proj.bias is not None) == name.startswith("qwen2.5")  # Qwen2: q/k/v bias
    assert hasattr(attn, "q_norm") == name.startswith("qwen3")  # Qwen3: q/k RMSNorm
    assert model.lm_head.weight is model.model.embed_tokens.weight  # all three tie
    assert config.rope_parameters["rope_theta"] == model_config(name)["rope_theta"]


def test_unknown_architecture_is_named():
    with pytest.raises(ValueError, match="qwen9"):
        model_config("qwen9")


def test_gpu_preset_fits_a_t4_by_the_arithmetic():
    shape = ModelShape.load("qwen2.5-1.5b-instruct")
    fits = estimate_memory(ERLConfig.preset("gpu"), shape)
    assert fits.peak_gib < 13
    # the preset's previous sizes (8 tasks x G 4 rollout rows, micro-batch 4) did not fit
    before = estimate_memory(
        ERLConfig.preset("gpu", num_tasks_per_step=8, per_device_train_batch_size=4, optim="adamw_torch"), shape
    )
    assert before.peak_gib > 15
    # the parts move with the settings that own them
    assert (
        estimate_memory(ERLConfig.preset("gpu", gradient_checkpointing=False), shape).update_gib > 3 * fits.update_gib
    )
    assert estimate_memory(ERLConfig.preset("gpu", optim="adamw_torch"), shape).optimizer == pytest.approx(
        4 * fits.optimizer
    )
    assert "| qwen3-4b-instruct-2507 |" in memory_table(ERLConfig.preset("gpu"))


def test_budget_counts_lora_and_cache_by_hand():
    shape = ModelShape.load("qwen2.5-0.5b-instruct")
    # q 896->896, k/v 896->128, o 896->896, gate/up 896->4864, down 4864->896, 24 layers
    assert shape.lora_parameters(16) == 24 * 16 * (2 * 1792 + 2 * 1024 + 3 * 5760)
    assert shape.kv_bytes_per_token() == 24 * 2 * 2 * 64 * 4
    cfg = ERLConfig.preset("gpu")
    e = estimate_memory(cfg, shape)
    rows_tokens = cfg.num_tasks_per_step * cfg.num_generations * cfg.max_episode_length
    assert e.kv_cache * 2**30 == pytest.approx(rows_tokens * shape.kv_bytes_per_token())


@pytest.mark.parametrize(
    "flags",
    [
        ["--lora-r", "64"],  # before: estimate_memory took its own lora_r=16, so the flag changed nothing
        ["--optim", "adamw_torch"],
        ["--num-generations", "8"],
        ["--max-episode-length", "2048"],
        ["--no-gradient-checkpointing"],
    ],
)
def test_erl_lite_budget_reads_each_setting_it_is_given(capsys, flags):
    """Each flag that sizes a part of the step changes ``erl-lite budget``'s table; none is silently dropped."""
    from erl_lite.cli import main

    tables = []
    for argv in (["budget"], ["budget", *flags]):
        assert main(argv) == 0
        tables.append(capsys.readouterr().out.split("\n", 1)[1])
    assert tables[0] != tables[1]


@pytest.mark.parametrize("name", ["qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct"])
def test_budget_counts_vllms_share_by_hand(name):
    """generation_backend="vllm": a 16-bit training copy (vLLM takes no 4-bit base), vLLM's own 16-bit copy and its
    KV cache (the run's cache_tokens_for, 16-bit keys and values) are held for the whole run; its rollout needs no
    cache of transformers' own."""
    from erl_lite.engine.continuous import cache_tokens_for

    shape = ModelShape.load(name)
    cfg = ERLConfig.preset("gpu", generation_backend="vllm")
    e, plain = estimate_memory(cfg, shape), estimate_memory(ERLConfig.preset("gpu"), shape)
    weights16 = shape.parameter_count() * 2 / 2**30
    kv16 = cache_tokens_for(cfg) * shape.layers * 2 * shape.kv_heads * shape.head_dim * 2 / 2**30
    assert e.weights == pytest.approx(weights16) and e.engine == pytest.approx(weights16 + kv16)
    assert e.kv_cache == 0 and plain.engine == 0
    assert e.static_gib == pytest.approx(plain.static_gib - plain.weights + weights16 + weights16 + kv16)
    assert e.peak_gib > plain.peak_gib - plain.rollout_gib  # the engine is paid for during the update too
    assert "vLLM" in memory_table(cfg) and "vLLM" not in memory_table(ERLConfig.preset("gpu"))
    if name == "qwen2.5-1.5b-instruct":  # docs/VLLM.md's T4 arithmetic: ~7.5 GiB before activations
        assert 7.0 < weights16 + e.engine < 7.6


# --- the forced-length policy ------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["generate", "continuous"])
def test_forced_length_generator_samples_exactly_n_then_acts(gpu_check, backend):
    import torch

    torch.manual_seed(0)  # the sampled filler is random; a seed keeps the parse check exact
    tok = tiny_tokenizer()
    model = tiny_model(tok, family="qwen3")
    gen = gpu_check.ForcedLengthGenerator(
        model, tok, turn_tokens=6, reflection_tokens=9, backend=backend, cache_tokens=4096
    )
    env = FrozenLake.small()
    obs = env.new_episode().reset(env.train_tasks(1)[0])
    prompts = [encode_messages([{"role": "user", "content": obs}], tok)] * 3
    outs = gen.generate(prompts, SamplingParams(64))
    assert gen.sampled == 3 * 6
    for out in outs:
        assert out[-1] == gen.stop_ids[0] and gen.stop_ids[0] not in out[:6]
        episode = env.new_episode()
        episode.reset(env.train_tasks(1)[0])
        assert episode.step(tok.decode(out, skip_special_tokens=True))[3]["event"] != "invalid"
    from erl_lite.core.prompts import REFLECTION_REQUEST

    reflection = gen.generate([tok(f"x {REFLECTION_REQUEST}").input_ids], SamplingParams(64))[0]
    text = tok.decode(reflection, skip_special_tokens=True)
    assert re.fullmatch(r"<prompt>[\s\S]*</prompt>", text) and gen.sampled == 3 * 6 + 9
    gen.flush()


def test_cpu_smoke_runs_the_gpu_code_path(gpu_check, capsys):
    rows = gpu_check.main(["--cpu-smoke"])
    out = capsys.readouterr().out
    assert "| model | dtype | mode | backend | peak GiB |" in out
    assert sorted((r["model"], r["mode"], r["backend"]) for r in rows) == sorted(
        (m, mode, b)
        for m in ("qwen2.5-0.5b-instruct", "qwen3-4b-instruct-2507")
        for mode in ("erl", "rlvr")
        for b in ("generate", "continuous")
    )
    for r in rows:
        assert r["peak GiB"] is None  # no CUDA here
        assert r["s/step"] > 0 and r["update"] > 0 and r["tok/s"] > 0 and r["len y1"] > 0
        assert (r["reflect"] is not None) == (r["mode"] == "erl")


def test_flags_choose_the_rows(gpu_check, capsys):
    rows = gpu_check.main(
        ["--cpu-smoke", "--models", "qwen3-4b-instruct-2507", "--modes", "erl", "--backends", "generate"]
    )
    assert [(r["model"], r["mode"], r["backend"]) for r in rows] == [("qwen3-4b-instruct-2507", "erl", "generate")]
    with pytest.raises(SystemExit, match="select none"):  # the smoke plan has no fp16 row of the 4B
        gpu_check.main(["--cpu-smoke", "--models", "qwen3-4b-instruct-2507", "--dtypes", "fp16"])


def test_gpu_check_refuses_to_run_without_cuda(gpu_check):
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(SystemExit, match="--cpu-smoke"):
        gpu_check.main([])


# --- the real Qwen3 tokenizer and template ------------------------------------------------------


@pytest.mark.skipif(find_qwen3_tokenizer() is None, reason="shared/qwen3_tokenizer not found")
def test_multiturn_erl_through_the_real_qwen3_template():
    from erl_lite.engine.generation import ScriptedGenerator
    from erl_lite.run.trainer import ERLTrainer

    tok = qwen3_tokenizer()
    assert len(tok) == 151_669 and tok.eos_token == "<|im_end|>"
    model = tiny_model(tok, family="qwen3", hidden_size=16, num_heads=2, intermediate_size=32, num_layers=1)
    # walks into a wall first (two turns at least), then tries every direction; reflections parse
    moves = iter(["Up", "Left", "Down", "Right"] * 50)

    def script(prompt: str) -> str:
        if "<prompt>" in prompt or "system prompt for the agent" in prompt:
            return "<prompt>Reach the goal, avoid holes.</prompt>"
        return f"I move.\n```{next(moves)}```"

    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=1,
        num_generations=2,
        eval_steps=0,
        progress_bar=False,
        per_device_train_batch_size=1,
        max_completion_length=32,
        max_reflection_length=32,
        max_episode_length=1500,
    )
    gen = ScriptedGenerator(tok, script)
    trainer = ERLTrainer(
        model=model, processing_class=tok, args=args, env=FrozenLake.small(max_actions=4), generator=gen
    )
    history = trainer.train()
    record = history.records[-1]
    assert record["loss/total"] == record["loss/total"]  # finite, not NaN
    first = trainer.last_outcome.first_attempts[0]
    text = tok.decode(first.prompt_ids + first.completion_ids)
    assert text.startswith("<|im_start|>system\n") and "<|im_start|>assistant\n" in text
    if first.num_turns > 1:  # the glue between turns is the template's
        assert "```<|im_end|>\n<|im_start|>user\n" in text
    assert record["tokens/first"] < 2 * 4 * 40  # BPE: a reply is a few tokens, not one per character


# --- the two new history metrics ------------------------------------------------------------------


def test_history_logs_tokens_per_second_and_peak_gpu_memory():
    from erl_lite.engine.generation import ScriptedGenerator
    from erl_lite.run.trainer import ERLTrainer

    tok = tiny_tokenizer()
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=1,
        num_generations=2,
        eval_steps=0,
        progress_bar=False,
        max_completion_length=8,
        max_reflection_length=8,
    )
    trainer = ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        env=FrozenLake.small(n_train=8),
        generator=ScriptedGenerator(tok, lambda p: "```Up```"),
    )
    r = trainer.train().records[-1]
    tokens = r["tokens/first"] + r["tokens/reflection"] + r["tokens/second"]
    seconds = r["time/first"] + (r.get("time/reflect") or 0) + (r.get("time/second") or 0)
    assert r["tokens/per_second"] == pytest.approx(tokens / seconds)
    assert "memory/peak_gpu_gb" in r and (r["memory/peak_gpu_gb"] is None) == (not torch.cuda.is_available())


def test_decode_probe_smoke_times_every_loading(gpu_check, capsys):
    """benchmarks/decode_probe.py (where sampling time goes on a GPU) on its CPU smoke path."""
    spec = importlib.util.spec_from_file_location("decode_probe", os.path.join(ROOT, "benchmarks", "decode_probe.py"))
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    rows = probe.main(["--cpu-smoke"])  # a difference of two timings: its sign is noise at this scale
    assert list(rows) == ["4bit+lora", "4bit+lora, model.generate", "4bit", "bf16+lora", "bf16"]
    assert all(list(cells) == [1, 2] and all(isinstance(ms, float) for ms in cells.values()) for cells in rows.values())
    assert "| loading | batch | ms/step | tok/s |" in capsys.readouterr().out
