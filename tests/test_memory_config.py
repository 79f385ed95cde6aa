"""Memory rules and config validation."""

from __future__ import annotations

import pytest

from erl_lite.config import PRESETS, ERLConfig
from erl_lite.memory import ReflectionMemory


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


@pytest.mark.parametrize("field,value", [
    ("mode", "ppo"), ("num_generations", 0), ("temperature", 0.0), ("top_p", 1.5), ("epsilon", 1.2),
    ("loss_type", "sum"), ("memory_type", "lru"), ("internalization_mode", "kl"), ("beta", -1.0),
    ("dual_clip", 0.5), ("max_steps", 2.5),
])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ERLConfig(**{field: value})


def test_presets_are_valid_and_overridable():
    for name in PRESETS:
        assert ERLConfig.preset(name).extra["preset"] == name
    assert ERLConfig.preset("cpu", max_steps=3).max_steps == 3
    with pytest.raises(ValueError, match="unknown preset"):
        ERLConfig.preset("tpu")
    assert ERLConfig().replace(mode="rlvr").mode == "rlvr"
