"""ERLConfig's field values and checks: each ``check_*`` refuses a bad value, each ``conform_*`` also rewrites one."""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from typing import Any, Callable, Iterable

#: The ERLConfig being built, typed loosely: naming the class here would make an import circle.
Config = Any

MODES = ("erl", "erl_simple", "rlvr")
#: How a base model is loaded: in full, or NF4 4-bit (QLoRA); ``AUTO`` (export) reads it from the folder.
NO_QUANTIZATION, FOUR_BIT, AUTO = "none", "4bit", "auto"
QUANTIZATIONS = (NO_QUANTIZATION, FOUR_BIT)


def reflects(mode: str) -> bool:
    """Whether ``mode`` reflects on failed attempts (ERL, Algorithms 1 and 2); RLVR does not."""
    return mode != "rlvr"


def quantization_name(load_in_4bit: bool) -> str:
    return FOUR_BIT if load_in_4bit else NO_QUANTIZATION


LOSS_TYPES = ("seq_sum", "token_mean", "seq_mean")
#: TRL ``loss_type`` names whose formula erl_lite implements, and the erl_lite name each one becomes.
LOSS_TYPE_ALIASES = {"grpo": "seq_mean", "dapo": "token_mean", "luspo": "seq_sum"}
LOSS_TYPE_NAMES = LOSS_TYPES + tuple(LOSS_TYPE_ALIASES)
LR_SCHEDULERS = ("constant", "linear", "cosine", "constant_with_warmup")
SCALE_REWARDS = ("group", "batch", "none")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
#: TRL's corrections of the sampler's log-probs (``vllm_importance_sampling_mode``;
#: :func:`~erl_lite.core.losses.sampler_weights`).
SAMPLER_CORRECTIONS = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
MEMORY_TYPES = ("single", "fifo", "slots")
INTERNALIZATION_MODES = ("raft", "nll")
#: Experiment trackers ``report_to`` can name (each an optional pip extra of the same name).
REPORT_TO_BACKENDS = ("tensorboard", "trackio", "wandb")
OPTIMIZERS = ("adamw_torch", "adamw_8bit", "paged_adamw_8bit")

DIAGNOSTICS_LEVELS = ("warn", "off", "raise")
GENERATION_BACKENDS = ("generate", "continuous", "vllm")
#: The fields that take one of a few words, and those words (also the command line's choices).
FIELD_CHOICES: dict[str, tuple[str, ...]] = {
    "mode": MODES,
    "loss_type": LOSS_TYPE_NAMES,
    "scale_rewards": SCALE_REWARDS,
    "importance_sampling_level": IMPORTANCE_SAMPLING_LEVELS,
    "lr_scheduler_type": LR_SCHEDULERS,
    "memory_type": MEMORY_TYPES,
    "internalization_mode": INTERNALIZATION_MODES,
    "optim": OPTIMIZERS,
    "diagnostics": DIAGNOSTICS_LEVELS,
    "generation_backend": GENERATION_BACKENDS,
    "vllm_importance_sampling_mode": SAMPLER_CORRECTIONS,
}

#: ``model.generate`` keys that the sampler sets from its own fields (refused in ``generation_kwargs``).
SAMPLER_KEYS = (
    "max_new_tokens",
    "do_sample",
    "temperature",
    "top_p",
    "top_k",
    "eos_token_id",
    "pad_token_id",
    "generation_config",
    "input_ids",
    "attention_mask",
)

#: ``GenerationConfig`` fields that change which token is drawn (refused: the update could not score them).
DISTRIBUTION_KEYS = (
    "repetition_penalty",
    "encoder_repetition_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "suppress_tokens",
    "begin_suppress_tokens",
    "sequence_bias",
    "min_length",
    "min_new_tokens",
    "min_p",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
    "top_h",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "guidance_scale",
    "exponential_decay_length_penalty",
    "renormalize_logits",
    "watermarking_config",
    "remove_invalid_values",
    "length_penalty",
    "diversity_penalty",
    "penalty_alpha",
)

#: The largest seed every RNG a run seeds takes (numpy's, through ``transformers.set_seed``, stops at 2**32 - 1).
MAX_SEED = 2**32 - 1

#: Training iterations when neither ``max_steps`` nor ``num_train_epochs`` is given.
DEFAULT_MAX_STEPS = 100

#: G per mode when ``num_generations`` is None: the paper's 4 for ERL, its compute-matched 10 for RLVR.
DEFAULT_GENERATIONS: dict[str, int] = {"erl": 4, "erl_simple": 4, "rlvr": 10}

#: The fields only the ``vllm`` backend reads (TRL's names).
VLLM_FIELDS = (
    "vllm_gpu_memory_utilization",
    *(f"vllm_importance_sampling_{name}" for name in ("correction", "mode", "clip_max", "clip_min")),
)
#: The most ``memory_size`` takes: 64 times the reference's 1,024 slots (each slot a memory, all checkpointed).
MAX_MEMORY_SIZE = 2**16

#: Switches each mode ignores (refused away from their defaults rather than silently dropped).
_IGNORED_BY_MODE = {
    "rlvr": (
        "use_reflection",
        "use_memory",
        "memory_type",
        "memory_size",
        "memory_top_k",
        "train_reflection",
        "train_second",
        "use_internalization",
        "internalization_mode",
        "internalization_coef",
        "reflection_temperature",
        "reflection_top_p",
        "reflection_copies",
    ),
    "erl_simple": (
        "train_first",
        "train_reflection",
        "train_second",
        "use_internalization",
        "internalization_mode",
        "internalization_coef",
        "reflection_copies",
    ),
    "erl": (),
}


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Refuse ``value`` unless it is one of ``allowed``, naming ``name`` (a field, an argument, a file's key): the
    one wording of this check, for ERLConfig's fields and every function that takes one of a few words."""
    if value not in tuple(allowed):
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")


def check_whole(owner: str, name: str, value: Any, minimum: int = 0) -> None:
    """A ValueError naming ``owner``'s setting ``name`` unless ``value`` is a whole number >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{owner}.{name} must be a whole number >= {minimum}, got {value!r}")


def check_flag(owner: str, name: str, value: Any) -> None:
    """A TypeError naming ``owner``'s setting ``name`` unless ``value`` is True or False (``"false"`` is truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{owner}.{name} must be True or False, got {value!r}")


def check_sizes(owner: str, value: Any, minimum: int, name: str = "sizes") -> None:
    """A ValueError naming ``owner``'s ``name`` unless a (low, high) pair of whole numbers, minimum <= low <= high."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise ValueError(f"{owner}.{name} must be a (low, high) pair, got {value!r}")
    for v in value:
        check_whole(owner, name, v, minimum)
    if value[0] > value[1]:
        raise ValueError(f"{owner}.{name} must be (low, high) with low <= high, got {value!r}")


def check_share(owner: str, name: str, value: Any) -> None:
    """A ValueError naming ``owner``'s setting ``name`` unless ``value`` is a number in 0..1 (a probability)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        raise ValueError(f"{owner}.{name} must be a number in 0..1, got {value!r}")


def _require(cfg: Config, name: str, ok: Callable[[Any], bool], what: str) -> None:
    """Refuse ``cfg``'s field ``name`` unless ``ok(value)``, saying what it must be: the shape of most range checks."""
    if not ok(getattr(cfg, name)):
        raise ValueError(f"ERLConfig.{name} must be {what}, got {getattr(cfg, name)!r}")


def check_reward_weights(weights: Any, funcs: list[str]) -> list[float] | None:
    """``reward_weights`` (None: 1 each) as floats: one finite number per function in ``funcs`` (their names), at
    least one above 0 (with none, no reward reaches a positive ``reward_threshold`` and a better score never helps)."""
    weights = weights.tolist() if hasattr(weights, "tolist") else weights  # a numpy or torch vector
    if weights is not None and not (
        isinstance(weights, (list, tuple))
        and len(weights) == len(funcs)
        and all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in weights)
        and max(weights) > 0
    ):
        raise ValueError(
            f"reward_weights must be {len(funcs)} finite numbers, one per reward function (for the "
            f"{len(funcs)} reward_funcs {' '.join(funcs)}), at least one above 0; got {weights!r:.80}"
        )
    return None if weights is None else [float(w) for w in weights]


def conform_choices(cfg: Config) -> None:
    """Each field of :data:`FIELD_CHOICES` holds one of its words; TRL's loss names become erl_lite's."""
    for name, allowed in FIELD_CHOICES.items():
        check_choice(f"ERLConfig.{name}", getattr(cfg, name), allowed)
    cfg.loss_type = LOSS_TYPE_ALIASES.get(cfg.loss_type, cfg.loss_type)


def conform_length(cfg: Config) -> None:
    """``max_steps`` from its default, or left None for the trainer to derive from epochs."""
    _require(cfg, "num_train_epochs", lambda epochs: epochs is None or epochs > 0, "a positive number")
    if cfg.max_steps is None and cfg.num_train_epochs is None:
        cfg.max_steps = DEFAULT_MAX_STEPS
    if cfg.max_steps is not None:
        check_whole("ERLConfig", "max_steps", cfg.max_steps, 1)


def check_counts(cfg: Config) -> None:
    """Counts and sizes are positive integers, the rates and intervals not negative, the seed one every RNG takes."""
    if cfg.ppo_mini_batch_size is not None:
        check_whole("ERLConfig", "ppo_mini_batch_size", cfg.ppo_mini_batch_size, 1)
        if cfg.steps_per_generation != 1:
            raise ValueError(
                "ERLConfig: give ppo_mini_batch_size (steps follow the batch) or "
                f"steps_per_generation={cfg.steps_per_generation} (a fixed count), not both"
            )
    for name in (
        "num_tasks_per_step",
        "num_generations",
        "max_completion_length",
        "max_episode_length",
        "max_reflection_length",
        "max_reflection_prompt_length",
        "memory_size",
        "memory_top_k",
        "steps_per_generation",
        "reflection_copies",
        "per_device_train_batch_size",
        "eval_num_generations",
        "sample_every",
    ):
        check_whole("ERLConfig", name, getattr(cfg, name), 1)
    for name in (
        "eval_steps",
        "save_steps",
        "top_k",
        "eval_top_k",
        "beta",
        "weight_decay",
        "internalization_coef",
        "learning_rate",
    ):
        _require(cfg, name, lambda value: value >= 0, ">= 0")
    _require(cfg, "logprob_chunk_size", lambda n: n is None or n >= 1, ">= 1, or None (full logits)")
    _require(cfg, "max_grad_norm", lambda norm: norm is None or norm >= 0, ">= 0 (0 or None: no clipping)")
    _require(
        cfg, "seed", lambda seed: 0 <= seed <= MAX_SEED, f"a whole number in 0..{MAX_SEED} (what numpy and torch take)"
    )
    if cfg.max_completion_length >= cfg.max_episode_length:
        raise ValueError("ERLConfig.max_completion_length must be smaller than max_episode_length")


def check_sampling(cfg: Config) -> None:
    """Temperatures above 0, nucleus sizes in (0, 1], and no sampler key in ``generation_kwargs``."""
    for name in ("temperature", "reflection_temperature", "eval_temperature"):
        _require(cfg, name, lambda temperature: temperature > 0, "> 0 (sampling)")
    for name in ("top_p", "reflection_top_p", "eval_top_p"):
        _require(cfg, name, lambda p: 0 < p <= 1, "in (0, 1]")
    owned = sorted(set(cfg.generation_kwargs) & set(SAMPLER_KEYS))
    if owned:
        raise ValueError(
            f"ERLConfig.generation_kwargs: {owned} belong to the sampler's own fields "
            "(max_completion_length, temperature, top_p, top_k, ...); set those instead"
        )
    if cfg.generation_backend != "generate":
        refuse_generation_kwargs(cfg.generation_kwargs, cfg.generation_backend)
    _require(cfg, "vllm_gpu_memory_utilization", lambda share: share is None or 0 < share <= 1, "in (0, 1] or None")
    for name in ("vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max"):
        _require(cfg, name, lambda bound: bound is None or bound > 0, "> 0 or None")
    low, high = cfg.vllm_importance_sampling_clip_min, cfg.vllm_importance_sampling_clip_max
    if low is not None and high is not None and low >= high:  # TRL's rules, as GRPOConfig states them
        raise ValueError(f"ERLConfig.vllm_importance_sampling_clip_min={low} is not below clip_max={high}")
    if (
        cfg.vllm_importance_sampling_correction
        and cfg.vllm_importance_sampling_mode.endswith("truncate")
        and (low is None and high is None)
    ):
        raise ValueError(
            f"ERLConfig.vllm_importance_sampling_mode={cfg.vllm_importance_sampling_mode!r} needs "
            "vllm_importance_sampling_clip_min or clip_max: with both None it clips nothing"
        )
    for key, value in cfg.generation_kwargs.items():
        check_generation_key(key, value)


def check_generation_key(key: str, value: Any) -> None:
    """Refuse a ``generation_kwargs`` entry the sampler cannot honour exactly: the update scores ``softmax(z / T)``,
    so a processor that reshapes it would train on another distribution than the one sampled.
    Only ``cache_implementation`` is taken: it changes how keys are stored, not what is drawn."""
    if key == "cache_implementation":
        from transformers.generation.configuration_utils import ALL_CACHE_IMPLEMENTATIONS

        if value not in ALL_CACHE_IMPLEMENTATIONS:
            raise ValueError(
                f"ERLConfig.generation_kwargs['cache_implementation']={value!r}: transformers knows "
                f"{list(ALL_CACHE_IMPLEMENTATIONS)}"
            )
        return
    why = (
        "reshapes the sampling distribution, which the loss and the KL would not score (they assume "
        "softmax(z / T) with top-p/top-k)"
        if key in DISTRIBUTION_KEYS
        else "is set by the sampler itself (one sequence per row, its own cache and outputs)"
    )
    raise ValueError(
        f"ERLConfig.generation_kwargs[{key!r}]={value!r} is refused: it {why}. Sampling takes only "
        "ERLConfig's temperature, top_p, top_k and max_completion_length (and cache_implementation)"
    )


def refuse_generation_kwargs(kwargs: dict[str, Any], backend: str = "continuous") -> None:
    """Raise ValueError when ``generation_kwargs`` asks for what ``backend`` would drop or sample differently."""
    if kwargs:
        raise ValueError(
            f"generation_backend={backend!r} cannot honour generation_kwargs {sorted(kwargs)}: it samples with "
            "temperature, top_p and top_k only (transformers' continuous batching drops the rest without a word); "
            "use generation_backend='generate'"
        )


def check_clip(cfg: Config) -> None:
    for name in ("epsilon", "epsilon_high"):
        _require(cfg, name, lambda epsilon: 0 < epsilon < 1, "in (0, 1)")
    _require(cfg, "dual_clip", lambda c: c is None or c > 1, "> 1 or None")


def check_schedule(cfg: Config) -> None:
    """One warm-up setting, in range, and none with the ``constant`` schedule."""
    _require(cfg, "warmup_ratio", lambda ratio: 0 <= ratio < 1, "in [0, 1)")
    w = cfg.warmup_steps
    if not (w >= 0 and (float(w).is_integer() or w < 1)):
        raise ValueError(
            f"ERLConfig.warmup_steps must be a whole number of steps >= 0 or a fraction in (0, 1), got {w!r}"
        )
    if cfg.warmup_ratio and w:
        raise ValueError("ERLConfig: give warmup_ratio or warmup_steps, not both")
    if cfg.lr_scheduler_type == "constant" and (cfg.warmup_ratio or w):
        raise ValueError(
            "ERLConfig.lr_scheduler_type='constant' has no warm-up (transformers would ignore "
            "it); use 'constant_with_warmup' with warmup_ratio/warmup_steps"
        )


def check_lora(cfg: Config) -> None:
    check_whole("ERLConfig", "lora_r", cfg.lora_r, 1)
    _require(cfg, "lora_alpha", lambda alpha: alpha > 0, "> 0")
    _require(cfg, "lora_dropout", lambda dropout: 0 <= dropout < 1, "in [0, 1)")
    _require(cfg, "lora_target_modules", bool, "'all-linear', a module name or a non-empty list of module names")


def conform_reporting(cfg: Config) -> None:
    """``report_to`` stored as a list of tracker names, ``logging_steps``, ``project``."""
    # conform_fields has checked the type: a string or a list of strings
    names = list(dict.fromkeys([cfg.report_to] if isinstance(cfg.report_to, str) else cfg.report_to))
    for name in names:
        check_choice("ERLConfig.report_to", name, ("none", "all", *REPORT_TO_BACKENDS))
    if len(names) > 1 and ("none" in names or "all" in names):
        raise ValueError(f"ERLConfig.report_to: 'none' and 'all' stand alone, got {names!r}")
    cfg.report_to = [] if names == ["none"] else names  # "all" is resolved by the trainer
    value = cfg.logging_steps  # iterations, or a fraction of max_steps in (0, 1)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    fraction = isinstance(value, float) and 0 < value < 1
    if not fraction and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(
            "ERLConfig.logging_steps must be a positive integer (iterations) or a float in "
            f"(0, 1) (a fraction of max_steps), got {value!r}"
        )
    cfg.logging_steps = value
    _require(cfg, "project", lambda project: project is None or project.strip(), "a non-empty name or None")


def check_saving(cfg: Config) -> None:
    """Checkpoint rotation and the Hub settings, checked now rather than after hours of training."""
    if cfg.save_total_limit is not None:
        check_whole("ERLConfig", "save_total_limit", cfg.save_total_limit, 1)
    repo = cfg.hub_model_id
    if repo is not None and not (isinstance(repo, str) and repo.count("/") == 1 and all(repo.split("/"))):
        raise ValueError(f"ERLConfig.hub_model_id must look like 'user-or-org/name', got {repo!r}")
    if cfg.push_to_hub and not cfg.output_dir:  # else found after the last step: push_to_hub uploads that folder
        raise ValueError("ERLConfig.push_to_hub=True uploads output_dir, which is not set: set output_dir")
    if cfg.push_to_hub and repo is None:
        raise ValueError(
            "ERLConfig.push_to_hub=True needs hub_model_id='user-or-org/name': the repository "
            "the final model is uploaded to"
        )


def check_mode_switches(cfg: Config) -> None:
    """Fail on a setting, off its default, that the other choices leave unread, or on a pair no backend honours."""
    if cfg.generation_backend == "vllm" and cfg.load_in_4bit:
        raise ValueError(
            "ERLConfig: generation_backend='vllm' cannot sample a 4-bit base (load_in_4bit=True): "
            "merged weights do not load into a quantized engine; use 'continuous' or 'generate'"
        )
    if cfg.memory_size > MAX_MEMORY_SIZE or cfg.memory_type == "fifo" and cfg.memory_top_k > cfg.memory_size:
        raise ValueError(
            f"ERLConfig: memory_size={cfg.memory_size} (memory_top_k={cfg.memory_top_k}) must be in "
            f"memory_top_k..{MAX_MEMORY_SIZE} with memory_type='fifo', at most {MAX_MEMORY_SIZE} else"
        )
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    for why, ignored in _unread_settings(cfg):
        changed = [f"{name}={getattr(cfg, name)!r}" for name in ignored if getattr(cfg, name) != defaults[name]]
        if changed:
            raise ValueError(
                f"ERLConfig: {', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect "
                f"with {why}; leave {'it' if len(changed) == 1 else 'them'} at the default"
            )


def _unread_settings(cfg: Config) -> list[tuple[str, tuple[str, ...]]]:
    """``(a choice, the fields it leaves unread)`` pairs, the mode's first."""
    memory = ("memory_type", "memory_size", "memory_top_k")
    off = "use_reflection=False" if not cfg.use_reflection else "use_memory=False" if not cfg.use_memory else ""
    kept = {"single": memory[1:], "slots": memory[2:], "fifo": ()}[cfg.memory_type]
    internalizing, vllm = ("internalization_mode", "internalization_coef"), cfg.generation_backend == "vllm"
    return [
        (f"mode={cfg.mode!r}", _IGNORED_BY_MODE[cfg.mode]),
        (off, memory if reflects(cfg.mode) and off else ()),  # "w/o reflection" and "w/o memory" keep none
        (f"memory_type={cfg.memory_type!r}", kept),
        ("use_internalization=False", () if cfg.use_internalization else internalizing),
        (f"generation_backend={cfg.generation_backend!r}", () if vllm else VLLM_FIELDS),
    ]


def check_group_size(cfg: Config) -> None:
    """G = 1: refused where first attempts are all that trains, a warning in ``erl`` mode."""
    if cfg.num_generations != 1:
        return
    if cfg.mode != "erl":
        raise ValueError(
            f"ERLConfig.num_generations=1 with mode={cfg.mode!r}: a group of one first attempt "
            "has no baseline (its advantage would be the raw reward); GRPO needs >= 2 "
            "(TRL refuses G < 2)"
        )
    warnings.warn(
        "ERLConfig.num_generations=1: every (task, role) group holds one row, so each trained "
        "row's advantage is its raw reward (A = r, no group baseline); use >= 2 for GRPO's "
        "baseline",
        UserWarning,
        stacklevel=4,
    )
