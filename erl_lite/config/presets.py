"""The named presets of :class:`~erl_lite.config.ERLConfig` (each lists what it changes) and the GPU check.

``cpu``: tiny models on a laptop CPU. ``demo``: the embedded model on its demo world (``erl-lite demo``,
the notebooks' demo setup). ``gpu``: a 0.5–4B model in 4-bit QLoRA on one T4/L4. ``paper``: the released code's.
Departures from the paper: every preset but ``paper`` is smaller, and LoRA presets take a larger learning rate."""

from __future__ import annotations

from typing import Any

from erl_lite.config.checks import check_choice

PRESETS: dict[str, dict[str, Any]] = {
    "cpu": dict(
        max_steps=20,
        num_tasks_per_step=4,
        max_completion_length=48,
        # 1888 + 160: a reflection fits the embedded model's 2048 positions (erl_lite.run.lengths)
        max_reflection_length=160,
        max_reflection_prompt_length=1888,
        learning_rate=2e-3,
        beta=0.0,
        eval_num_generations=2,
        per_device_train_batch_size=16,
    ),
    "demo": dict(
        # The embedded model's replies are ≤ 16 tokens a turn, rulebooks ~45, episodes well under 1024.
        max_completion_length=24,
        max_episode_length=1024,
        max_reflection_length=64,
        max_reflection_prompt_length=1024,
        # Trial runs: 5e-4 was too slow for 30 steps; 2e-3 then broke the reflections (no <prompt> block).
        max_steps=30,
        learning_rate=1e-3,
        beta=0.0,
        eval_steps=10,
        eval_num_generations=2,
        per_device_train_batch_size=32,
        progress_bar=False,
        # The reference's rule (RLVR 1 step, ERL 1-4): at step 10 ERL named a letter in 94% of replies, 16% without.
        ppo_mini_batch_size=8,
    ),
    # gpu: Qwen2.5-1.5B-Instruct in 4-bit on a 15 GiB T4 (erl_lite.integrations.budget): the rollout of
    # 16 rows is the peak (9.2 GiB), a micro-batch of 4 keeps the update below it (5.4 GiB).
    "gpu": dict(
        max_steps=60,
        num_tasks_per_step=4,
        max_episode_length=3072,
        learning_rate=1e-5,
        eval_top_p=0.8,
        eval_top_k=20,
        steps_per_generation=2,
        per_device_train_batch_size=4,
        gradient_checkpointing=True,
        optim="paged_adamw_8bit",
        # benchmarks/rollout_waste.py, real-shape model on the CPU: 0.55-0.88x generate's time per phase.
        generation_backend="continuous",
    ),
    "paper": dict(  # the released code's scripts, each number cited in docs/REFERENCE.md
        max_steps=100,
        num_tasks_per_step=64,
        ppo_mini_batch_size=64,
        max_completion_length=10_240,
        max_episode_length=16_354,
        max_reflection_prompt_length=6_114,
        max_reflection_length=10_240,
        learning_rate=1e-6,
        beta=0.001,
        eval_steps=5,
        eval_num_generations=4,
        eval_top_p=0.8,
        eval_top_k=20,
        per_device_train_batch_size=8,  # not the reference's: it packs rows by tokens (24,000 a GPU)
    ),  # reflection_copies=1 and one memory slot: the paper describes neither of the code's (opt-in) quirks
}
#: ``--preset paper``'s iterations and games by ``--env``: the paper's tasks, the reference's prompts, no extra hints.
PAPER_MAX_STEPS: dict[str, int] = {"frozenlake": 100, "sokoban": 200, "qa": 100}
PAPER_GAMES = {game: dict(source="paper", prompt_style="reference", hint=False) for game in ("frozenlake", "sokoban")}

#: Presets sized for a CUDA GPU: :func:`require_cuda_for_preset` refuses them where no CUDA device exists.
GPU_PRESETS: frozenset[str] = frozenset({"gpu", "paper"})
#: The cpu and demo presets' rates are the embedded model's (trained from scratch); a pretrained model that is given
#: no rate trains at the gpu preset's (the CLI and run files), and one above the top of LoRA's usual rates is warned of.
PRETRAINED_LEARNING_RATE, PRETRAINED_MAX_LEARNING_RATE = PRESETS["gpu"]["learning_rate"], 1e-4


def pretrained_rate_warning(learning_rate: float) -> str | None:
    """The one rule for a pretrained model's learning rate, or None where it fits (CLI, run files and Python API)."""
    if learning_rate <= PRETRAINED_MAX_LEARNING_RATE:
        return None
    return (
        f"learning_rate={learning_rate:g} is the embedded model's (the cpu and demo presets'): LoRA on a pretrained"
        f" model trains at 1e-6 to {PRETRAINED_MAX_LEARNING_RATE:g}; pass learning_rate={PRETRAINED_LEARNING_RATE:g}"
    )


def require_cuda_for_preset(name: str | None, *, allow_cpu: bool = False, command: bool = False) -> None:
    """Raise RuntimeError (``command``, for ``erl-lite``: ValueError) when preset ``name`` (None: none) is sized for a
    GPU and torch sees no CUDA device.

    Example:
        >>> require_cuda_for_preset("gpu", allow_cpu=True)  # the explicit override
    """
    check_choice("preset", name, (None, *sorted(PRESETS)))
    if name not in GPU_PRESETS or allow_cpu:
        return
    import torch  # here, not at the top: `import erl_lite.config` stays free of torch

    if torch.cuda.is_available():
        return
    if command:  # one paragraph with the command line's remedies, no notebook's
        raise ValueError(
            f"--preset {name} is sized for a CUDA GPU, but torch sees no CUDA device here (its run would "
            "take hours on the CPU): use --preset cpu or demo here, or run on a machine with a GPU"
        )
    raise RuntimeError(
        f"PRESET = {name!r} (ERLConfig.preset({name!r})) is sized for a CUDA GPU, but torch sees no CUDA device "
        "here: its model would load on the CPU and train for hours. Either set PRESET = 'demo' (the embedded model, "
        "offline, minutes); or switch to a GPU (on Colab: Runtime -> Change runtime type -> T4 GPU, then run all "
        "cells again); or run on the CPU anyway: in a notebook, pass allow_cpu=True in the environment cell "
        "(require_cuda_for_preset(PRESET, allow_cpu=True)); with ERLTrainer, load the model yourself with "
        "erl_lite.models.load_policy(name, device='cpu') and pass the model in."
    )
