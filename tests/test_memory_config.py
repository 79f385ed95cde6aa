"""Memory rules and config validation."""

from __future__ import annotations

import pytest

from erl_lite.config import ERLConfig
from erl_lite.config.presets import PRESETS
from erl_lite.core.memory import ReflectionMemory


def test_single_slot_is_overwritten_and_stores_at_threshold():
    mem = ReflectionMemory()
    assert mem.maybe_store("first", reward=1.0, threshold=1.0)  # r2 >= τ, not r2 > τ
    assert not mem.maybe_store("failed", reward=0.0, threshold=1.0)
    assert not mem.maybe_store("partial", reward=0.99, threshold=1.0)
    assert mem.maybe_store("second", reward=1.0, threshold=1.0)
    assert mem.entries == ["second"] and mem.context() == "second" and mem.total_writes == 2


def test_fifo_keeps_size_and_shows_top_k_newest():
    mem = ReflectionMemory("fifo", size=3, top_k=2)
    for i in range(5):
        mem.maybe_store(f"r{i}", 1.0, 1.0)
    assert mem.entries == ["r2", "r3", "r4"]
    ctx = mem.context()
    assert "r3" in ctx and "r4" in ctx and "r2" not in ctx and ctx.index("r3") < ctx.index("r4")


def test_memory_state_round_trip():
    mem = ReflectionMemory("fifo", size=3)
    mem.maybe_store("a", 1.0, 1.0)
    other = ReflectionMemory("fifo", size=3)
    other.load_state_dict(mem.state_dict())
    assert other.entries == ["a"] and other.total_writes == 1
    with pytest.raises(ValueError):
        ReflectionMemory("single").load_state_dict(mem.state_dict())
    with pytest.raises(ValueError):
        ReflectionMemory("lru")


@pytest.mark.parametrize(
    "field,value",
    [
        ("mode", "ppo"),
        ("num_generations", 0),
        ("temperature", 0.0),
        ("top_p", 1.5),
        ("epsilon", 1.2),
        ("loss_type", "sum"),
        ("memory_type", "lru"),
        ("internalization_mode", "kl"),
        ("beta", -1.0),
        ("dual_clip", 0.5),
        ("max_steps", 2.5),
    ],
)
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ERLConfig(**{field: value})


def test_presets_are_valid_and_overridable():
    for name in PRESETS:
        assert ERLConfig.preset(name).preset_name == name
    assert ERLConfig.preset("cpu", max_steps=3).max_steps == 3
    with pytest.raises(ValueError, match="preset must be one of cpu, demo, gpu, paper, got .tpu."):
        ERLConfig.preset("tpu")
    assert ERLConfig().replace(mode="rlvr").mode == "rlvr"


# --- one τ, one G, modes that say what they do ---------------------------------------------------


def test_rlvr_uses_the_papers_compute_matched_g():
    assert ERLConfig(mode="rlvr").num_generations == 10
    assert ERLConfig().num_generations == 4 and ERLConfig(mode="erl_simple").num_generations == 4
    for name in ("cpu", "gpu", "paper"):
        assert ERLConfig.preset(name, mode="rlvr").num_generations == 10
    assert ERLConfig(mode="rlvr", num_generations=6).num_generations == 6  # explicit wins
    assert ERLConfig().replace(mode="rlvr").num_generations == 10
    assert ERLConfig(num_generations=3).replace(mode="rlvr").num_generations == 3


@pytest.mark.parametrize(
    "cfg",
    [
        ERLConfig(),
        ERLConfig(mode="rlvr"),
        ERLConfig(num_generations=4),
        ERLConfig(num_generations=7),
        ERLConfig.preset("cpu"),
        ERLConfig.preset("paper"),
    ],
)
def test_a_config_and_its_saved_copy_replace_alike(cfg):
    # What a config does is read from its fields alone: the copy a run saves (to_dict) behaves as the original.
    copy = ERLConfig(**cfg.to_dict())
    assert copy == cfg
    for mode in ("rlvr", "erl", "erl_simple"):
        assert copy.replace(mode=mode) == cfg.replace(mode=mode)
        assert cfg.replace(mode=mode).num_generations == (
            cfg.num_generations if cfg.num_generations not in (4, 10) else (10 if mode == "rlvr" else 4)
        )


def test_cli_rlvr_gets_g10():
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings

    args = build_parser().parse_args(["train", "--mode", "rlvr", "--env", "frozenlake"])
    assert train_settings(args)[1].num_generations == 10


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(mode="rlvr", use_memory=False), "use_memory"),
        (dict(mode="rlvr", memory_type="fifo"), "memory_type"),
        (dict(mode="rlvr", use_reflection=False), "use_reflection"),
        (dict(mode="rlvr", use_internalization=False), "use_internalization"),
        (dict(mode="erl_simple", train_second=False), "train_second"),
        (dict(use_memory=False, memory_type="fifo"), "memory_type"),
        (dict(use_reflection=False, memory_top_k=5), "memory_top_k"),
    ],
)
def test_impossible_mode_combinations_fail_at_construction(kwargs, named):
    with pytest.raises(ValueError, match=named):
        ERLConfig(**kwargs)


def test_paper_and_gpu_presets_evaluate_like_the_paper():
    for name in ("paper", "gpu"):
        cfg = ERLConfig.preset(name)
        assert (cfg.eval_temperature, cfg.eval_top_p, cfg.eval_top_k) == (0.7, 0.8, 20)
    assert ERLConfig.preset("gpu").steps_per_generation == 2  # the clip acts on the second mini-batch
    paper = ERLConfig.preset("paper")  # the reference: ERL 1-4 optimizer steps, RLVR one
    assert paper.max_optimizer_steps() == 4 and paper.replace(mode="rlvr").max_optimizer_steps() == 1
    assert ERLConfig.preset("cpu").steps_per_generation == 1


def test_evaluation_samples_with_the_eval_settings():
    from conftest import GuessEnv

    from erl_lite.engine.generation import ScriptedGenerator
    from erl_lite.run.trainer import ERLTrainer
    from erl_lite.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    seen = []

    class Recording(ScriptedGenerator):
        def generate(self, prompts, params):
            seen.append(params)
            return super().generate(prompts, params)

    args = ERLConfig.preset("cpu", eval_top_p=0.8, eval_top_k=20, eval_temperature=0.6, progress_bar=False)
    trainer = ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        env=GuessEnv(max_turns=1),
        generator=Recording(tok, lambda p: "x"),
    )
    trainer.evaluate()
    assert seen and all((p.temperature, p.top_p, p.top_k) == (0.6, 0.8, 20) for p in seen)
