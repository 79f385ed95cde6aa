"""A notebook's setup in one call: :func:`setup` loads the policy, the environment and the config.

Departures from the paper: demo is a toy world and model; gpu a 1.5 B model on one GPU, not Qwen3-4B on 8 H100s.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from erl_lite.config import DEFAULT_SEED, ERLConfig
from erl_lite.config.checks import FOUR_BIT, NO_QUANTIZATION, QUANTIZATIONS, check_choice
from erl_lite.engine.progress import NO_PROGRESS

#: The model of the ``gpu`` setup: fits a 15 GiB Colab T4 in 4-bit (see the gpu preset's sizing).
GPU_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
#: Each setup's default quantization of the policy; its ERLConfig preset has the setup's name.
_SETUPS = {"demo": NO_QUANTIZATION, "gpu": FOUR_BIT}


class Setup(NamedTuple):
    """What :func:`setup` returns; unpacks as ``model, tokenizer, env, config``."""

    model: Any  #: the policy: a PEFT model with a fresh LoRA adapter
    tokenizer: Any  #: its tokenizer (``processing_class`` for the trainer)
    env: Any  #: one of the embedded model's worlds (demo) or FrozenLake (gpu)
    config: ERLConfig  #: the setup's preset, the seed, then the overrides


def setup(
    preset: str = "demo",
    seed: int = DEFAULT_SEED,
    *,
    quantization: str | None = None,
    model_name: str = GPU_MODEL,
    world: str = "demo",
    **overrides: Any,
) -> Setup:
    """Load the policy, build the environment and make the config for a notebook.

    ``"demo"``: the embedded model, one of its worlds (``world``: ``"demo"``; ``"sparse"`` or ``"hard"``, where first
    attempts rarely succeed), the ``demo`` preset; ``"gpu"``: ``model_name`` in 4-bit, FrozenLake, the ``gpu`` preset
    (LoRA on both). ``seed`` seeds adapter, world and config; the config comes first, so a bad setting fails early.

    Example:
        >>> model, tokenizer, env, config = setup("demo", seed=0, max_steps=2)
        >>> config.max_steps, config.preset_name, tokenizer.eos_token
        (2, 'demo', '<|im_end|>')
    """
    check_choice("setup: preset", preset, _SETUPS)
    quantization = _SETUPS[preset] if quantization is None else quantization
    check_choice("setup: quantization", quantization, QUANTIZATIONS)
    if not isinstance(model_name, str) or not model_name:
        raise ValueError(f"setup: model_name must be a model's hub name or folder, got {model_name!r}")
    if preset == "gpu" and world != "demo":
        raise ValueError(f"setup: world={world!r} is an embedded world; the gpu setup plays FrozenLake")
    config = ERLConfig.preset(preset, seed=seed, **overrides)

    from transformers import set_seed

    set_seed(seed)  # the LoRA initialisation draws from the global RNG: seed it before loading
    with NO_PROGRESS.library_bars():  # a saved notebook would keep the "Loading weights" bar frozen
        return _load(preset, seed, world, model_name, quantization, config)


def _load(preset: str, seed: int, world: str, model_name: str, quantization: str, config: ERLConfig) -> Setup:
    from erl_lite.run.args import adapter_settings

    adapter = dict(adapter_settings(config, None), quantization=quantization)  # LoRA as ERLTrainer loads it
    if preset == "demo":
        from erl_lite.embedded.loading import load_embedded
        from erl_lite.embedded.world import demo_world

        env = demo_world(seed, world)  # an unknown world name fails before the model loads
        return Setup(*load_embedded(**adapter), env, config)
    from erl_lite import models
    from erl_lite.envs.frozenlake import FrozenLake

    model, tokenizer = models.load_policy(model_name, **adapter)
    return Setup(model, tokenizer, FrozenLake(), config)
