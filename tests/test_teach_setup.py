"""``erl_lite.teach.setup``: the notebooks' one-call setup (model, tokenizer, environment, config)."""

from __future__ import annotations

import pytest

from erl_lite.config import DEFAULT_SEED, ERLConfig


def test_demo_setup_is_the_embedded_model_on_the_demo_world_with_the_demo_preset():
    from erl_lite.embedded import demo_config, demo_world
    from erl_lite.teach import setup

    run = setup("demo", seed=3, max_steps=4, output_dir=None)
    model, tokenizer, env, config = run  # unpackable, in this order
    assert (model, tokenizer, env, config) == (run.model, run.tokenizer, run.env, run.config)
    assert config == demo_config(seed=3, max_steps=4, output_dir=None)
    assert env.symbols == demo_world(3).symbols
    assert tokenizer.eos_token == "<|im_end|>"  # the embedded model's
    assert hasattr(model, "peft_config")  # a LoRA adapter, as load_embedded attaches


def test_demo_setup_seeds_the_adapter_as_the_notebooks_did():
    """Same seed, same LoRA initialisation: setup seeds the global RNG before loading."""
    from erl_lite.teach import setup

    a, b = setup("demo", seed=DEFAULT_SEED), setup("demo", seed=DEFAULT_SEED)
    weights = lambda m: [p.detach().clone() for n, p in m.named_parameters() if "lora_" in n]
    assert all((x == y).all() for x, y in zip(weights(a.model), weights(b.model), strict=True))
    assert a.config.seed == DEFAULT_SEED


@pytest.mark.parametrize(
    "preset,overrides,expected",
    [
        ("gpu", {}, dict(quantization="4bit", lora_r=16, gradient_checkpointing=True)),
        ("gpu", {"lora_r": 8, "max_steps": 3}, dict(quantization="4bit", lora_r=8, gradient_checkpointing=True)),
        (
            "gpu",
            {"quantization": "none", "gradient_checkpointing": False},
            dict(quantization="none", gradient_checkpointing=False),
        ),
        (
            "demo",
            {"quantization": "4bit", "lora_r": 4},
            dict(quantization="4bit", lora_r=4, gradient_checkpointing=False),
        ),
    ],
)
def test_setup_loads_the_model_the_config_describes(monkeypatch, preset, overrides, expected):
    """The loader gets the config's adapter fields (lora_r, gradient checkpointing); gpu: 4-bit by default.
    The loader is replaced: no test reaches a model hub."""
    from erl_lite import models
    from erl_lite.teach import setup as teach_setup

    calls = []
    monkeypatch.setattr(models, "load_policy", lambda name, **kw: calls.append((str(name), kw)) or ("M", "T"))
    run = teach_setup(preset, seed=5, **overrides)
    ((name, kwargs),) = calls
    for key, value in expected.items():
        assert kwargs[key] == value, key
    assert kwargs["peft"] == "lora"
    given = {k: v for k, v in overrides.items() if k != "quantization"}
    if preset == "gpu":
        from erl_lite.envs import FrozenLake
        from erl_lite.teach.setup import GPU_MODEL

        assert name == GPU_MODEL and isinstance(run.env, FrozenLake)
        assert run.config == ERLConfig.preset("gpu", seed=5, **given)
    else:
        assert name.endswith("embedded") and run.config == ERLConfig.preset("demo", seed=5, **given)
    assert (run.model, run.tokenizer) == ("M", "T")


@pytest.mark.parametrize(
    "preset,overrides,message",
    [
        ("tpu", {}, "setup: preset must be one of demo, gpu, got"),
        ("cpu", {}, "setup: preset must be one of demo, gpu, got"),  # ERLConfig's preset for tiny models, not a setup
        ("demo", {"quantization": "8bit"}, "quantization"),
        ("demo", {"max_step": 3}, "max_steps"),  # a mistyped field: did you mean
        ("gpu", {"model_name": 3}, "model_name"),
        ("demo", {"world": "Sparse"}, "embedded world must be one of demo, hard, sparse"),
        ("demo", {"world": "frozenlake"}, "embedded world must be one of demo, hard, sparse"),
        ("gpu", {"world": "sparse"}, "is an embedded world; the gpu setup plays FrozenLake"),
    ],
)
def test_setup_refuses_what_it_cannot_do_before_loading_anything(monkeypatch, preset, overrides, message):
    from erl_lite import models
    from erl_lite.teach import setup

    monkeypatch.setattr(models, "load_policy", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises((ValueError, TypeError), match=message):
        setup(preset, **overrides)


def test_demo_setup_plays_the_world_it_is_asked_for():
    from erl_lite.teach import setup

    assert setup("demo", seed=1, world="sparse").env.test_tasks(1)[0].data["size"] == 5
    assert setup("demo", seed=1).env.test_tasks(1)[0].data["size"] == 3


def test_setup_leaves_no_loading_bar_in_a_saved_output(capfd):
    """A notebook saved after running keeps transformers' "Loading weights" bar frozen where it stopped."""
    from transformers.utils import logging as hf_logging

    from erl_lite.teach import setup

    assert hf_logging.is_progress_bar_enabled()
    setup("demo", seed=DEFAULT_SEED)
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # switched off for the load only
