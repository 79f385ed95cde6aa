"""ERLConfig: every knob of a run in one flat dataclass; its defaults are the paper's algorithm at one GPU's scale.

Its batch and lengths are smaller (``preset("paper")`` has the released code's). Names follow TRL's ``GRPOConfig``
(others mapped or refused: :mod:`~erl_lite.config.trl_fields`); a bad value fails at construction, naming the field."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

from erl_lite.config import checks, presets
from erl_lite.config.field_types import conform_fields, expand_path
from erl_lite.config.trl_fields import conform_trl_values, translate_trl_fields
from erl_lite.records import ROLES

#: The seed of a run unless told otherwise: 0, the README figures' seed (TRL and transformers use 42).
DEFAULT_SEED = 0


def _takes_trl_names(cls: type) -> type:
    """A class decorator over the dataclass: TRL's names are mapped or refused with a reason before its ``__init__``
    sees them, not met by a bare "unexpected keyword argument"; ``functools.wraps`` keeps its signature for help()."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **translate_trl_fields(kwargs, _FIELD_NAMES))

    cls.__init__ = __init__
    return cls


@_takes_trl_names
@dataclass
class ERLConfig:
    """Hyperparameters of an ERL (or RLVR) run.

    Example:
        >>> ERLConfig(mode="rlvr", num_generations=10).num_generations
        10
        >>> ERLConfig.preset("cpu", mode="rlvr").num_generations  # the paper's G for RLVR
        10
    """

    # --- what to run -------------------------------------------------------------------
    mode: str = "erl"
    """``erl`` (paper Algorithm 2), ``erl_simple`` (Algorithm 1: one reward, only y1 trained) or ``rlvr`` (GRPO)."""
    max_steps: int | None = None
    """Training iterations. One is a batch of tasks through every phase; None (or transformers' -1) = 100, or what
    epochs need."""
    num_train_epochs: float | None = None
    """Passes over ``train_dataset``: ``max_steps = ceil(epochs × rows / num_tasks_per_step)`` unless given."""
    num_tasks_per_step: int = 8
    """Tasks per iteration (the paper uses 64)."""
    num_generations: int | None = None
    """G: first-attempt rollouts per task. None = the mode's (:data:`~erl_lite.config.checks.DEFAULT_GENERATIONS`);
    G = 1 has no baseline."""
    seed: int = DEFAULT_SEED
    """Seed for task order, sampling and initialisation."""
    # --- sampling ----------------------------------------------------------------------
    temperature: float = 0.7
    """Sampling temperature of first and second attempts."""
    top_p: float = 1.0
    """Nucleus sampling for attempts (1.0 = off)."""
    top_k: int = 0
    """Top-k sampling for attempts (0 = off)."""
    max_completion_length: int = 256
    """Max new tokens per model turn of an attempt."""
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra ``model.generate`` keywords for attempts, reflections and evaluation, e.g. ``{"min_p": 0.05}``."""
    generation_backend: str = "generate"
    """How rollouts are sampled: ``generate`` (``model.generate``), ``continuous`` (transformers' continuous
    batching) or ``vllm``; the last two refuse ``generation_kwargs``."""
    vllm_gpu_memory_utilization: float | None = None
    """vLLM's share of the GPU (TRL's name); None: its KV cache is sized from the run's budgets."""
    vllm_importance_sampling_correction: bool = False
    """With vLLM, weight each sampled token's policy loss by exp(log π_old - log q_sampler), as TRL (opt-in here)."""
    vllm_importance_sampling_mode: str = "token_truncate"
    """TRL's modes: a ratio per ``token`` or per ``sequence``, cut into [C_min, C_max] (``truncate``) or zeroed outside
    it (``mask``)."""
    vllm_importance_sampling_clip_max: float | None = 3.0
    """C_max of the ratio (TRL's, and its old ``vllm_importance_sampling_cap``); None: no upper bound."""
    vllm_importance_sampling_clip_min: float | None = None
    """C_min of the ratio; None: no lower bound."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra ``apply_chat_template`` keywords, e.g. ``{"enable_thinking": False}`` for Qwen3."""
    max_episode_length: int = 2048
    """Max tokens of a whole episode (context + all turns); one that would exceed it ends, truncated."""
    # --- gate, reflection, second attempt ----------------------------------------------
    reward_threshold: float = 1.0
    """τ: a first attempt with ``r1 < τ`` is reflected on; memory keeps rulebooks whose retry got ``r2 ≥ τ``."""
    use_reflection: bool = True
    """False = the "w/o reflection" ablation: no Δ; the retry sees the first attempt's trace and feedback."""
    reflection_temperature: float = 0.5
    """Sampling temperature of reflections (reference code: 0.5)."""
    reflection_top_p: float = 0.9
    """Nucleus sampling of reflections (reference code: 0.9)."""
    max_reflection_length: int = 512
    """Max new tokens of a reflection."""
    max_reflection_prompt_length: int = 2048
    """Token budget of the reflection context (the trace, then the memory, are shortened; never the task)."""
    reflection_request: str = (
        "Write a complete new system prompt for the agent: a short rulebook that says what each symbol or piece of "
        "information means, what each action does, how the task is won or lost, and a strategy that avoids the "
        "mistake above. Keep what the current instructions got right. Put the whole rulebook between <prompt> and "
        "</prompt>."
    )
    """The reflection request's last paragraph, after the task, attempt and outcome (the paper's request)."""
    reflection_prefill: str = ""
    """The reflection's first words, e.g. ``"<prompt>\\n1."``: the block it opens is kept when cut (DEPARTURES)."""
    retry_instruction: str = (
        "You have tried this task before and did not succeed. Here is your previous attempt and how it ended; use "
        "it to do better this time."
    )
    """The "w/o reflection" retry's system prompt: this, between the initial prompt and the first attempt."""
    # --- memory ------------------------------------------------------------------------
    use_memory: bool = True
    """False = the "w/o memory" ablation: the reflector starts from the initial prompt; nothing is stored."""
    memory_type: str = "single"
    """``single`` (paper: one slot, the last successful rulebook), ``fifo`` (a queue) or ``slots`` (the reference's)."""
    memory_size: int = 50
    """Capacity of the ``fifo`` memory; the ``slots``, dealt to rollouts in turn (the reference: 1,024)."""
    memory_top_k: int = 3
    """How many of the most recent ``fifo`` entries the reflector sees."""
    # --- which roles train --------------------------------------------------------------
    train_first: bool = True
    """Policy-gradient update on first attempts."""
    train_reflection: bool = True
    """Policy-gradient update on reflections (reward = r2 of the second attempt)."""
    reflection_copies: int = 1
    """Rows per reflection: 1, or the reference code's 2 (a lone failed rollout's reflection then gets A = 0)."""
    train_second: bool = True
    """Policy-gradient update on second attempts (under the Δ context)."""
    use_internalization: bool = True
    """Self-distillation: train successful second attempts under the initial context."""
    internalization_mode: str = "raft"
    """``raft`` (reference code: clipped loss, advantage max(r2, 0)) or ``nll`` (paper: NLL weighted by r2 > 0)."""
    internalization_coef: float = 1.0
    """Weight of the internalization term."""
    # --- loss and optimiser (reference settings) -----------------------------------------
    learning_rate: float = 1e-6
    """AdamW learning rate (the peak of ``lr_scheduler_type``'s schedule)."""
    lr_scheduler_type: str = "constant"
    """Learning-rate schedule (``get_scheduler``) over ``max_steps × max_optimizer_steps()`` optimizer steps."""
    warmup_ratio: float = 0.0
    """Fraction in [0, 1) of the schedule's optimizer steps spent warming up linearly from 0, rounded up."""
    warmup_steps: int | float = 0
    """Optimizer steps of linear warm-up (a float in (0, 1): a fraction of the schedule, like ``warmup_ratio``)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    max_grad_norm: float | None = 1.0
    """Gradient clipping norm; 0 or None: no clipping (as transformers' Trainer and TRL take 0)."""
    optim: str = "adamw_torch"
    """The optimizer: ``adamw_torch``, ``adamw_8bit`` (bitsandbytes) or ``paged_adamw_8bit`` (pages to the CPU)."""
    beta: float = 0.001
    """KL coefficient (k3 estimator) to the reference policy; 0 skips the reference pass."""
    epsilon: float = 0.2
    """Lower clip range ε_low of the policy ratio."""
    epsilon_high: float | None = 0.28
    """Upper clip range ε_high ("clip-higher"); None = ``epsilon``, as in GRPOConfig."""
    dual_clip: float | None = 3.0
    """Dual-clip constant c for negative advantages (None disables)."""
    scale_rewards: str = "group"
    """Advantage scaling: std of the (task, role) ``group`` (paper), of the role in the ``batch``, or ``none``."""
    importance_sampling_level: str = "token"
    """Policy ratio per ``token`` (the paper's) or per ``sequence`` (GSPO); matters only off-policy."""
    loss_type: str = "seq_sum"
    """Per-token losses to one number: ``seq_sum`` (paper), ``token_mean`` or ``seq_mean`` (or TRL's names)."""
    steps_per_generation: int = 1
    """Optimizer steps per iteration (1 is on-policy; later mini-batches are off-policy)."""
    ppo_mini_batch_size: int | None = None
    """Tasks per optimizer step (the reference's rule: mini-batches of ≤ this × G rows); None = fixed steps."""
    per_device_train_batch_size: int = 8
    """Sequences per forward/backward pass (micro-batch); gradients accumulate over the mini-batch."""
    logprob_chunk_size: int | None = 256
    """Completion positions per lm-head chunk, so ``(B, L, V)`` logits are never held; None = full logits."""
    # --- evaluation, logging, checkpoints ---------------------------------------------
    eval_steps: int = 5
    """Evaluate every this many iterations, at the start and at the end (0 = never)."""
    eval_num_generations: int = 4
    """Samples per evaluation task (paper: 4)."""
    eval_temperature: float = 0.7
    """Sampling temperature for evaluation (first attempt only)."""
    eval_top_p: float = 1.0
    """Nucleus sampling for evaluation (1.0 = off; the paper's 0.8 in the ``paper`` and ``gpu`` presets)."""
    eval_top_k: int = 0
    """Top-k sampling for evaluation (0 = off; the paper's 20 in the ``paper`` and ``gpu`` presets)."""
    output_dir: str | None = "trainer_output"
    """Where history, samples, checkpoints and the model go (None = no file); it must not hold another run."""
    overwrite_output_dir: bool = False
    """Let a fresh run delete another run's checkpoints and histories in ``output_dir`` (a resume deletes nothing)."""
    save_steps: int = 0
    """Checkpoint every this many iterations (0 = only at the end, if output_dir is set)."""
    save_total_limit: int | None = None
    """Keep at most this many ``checkpoint-<step>`` folders (None, or 0 as in transformers = all); the newest and
    highest-numbered stay."""
    push_to_hub: bool = False
    """Upload the final model to the Hub at the end of ``train()`` (needs ``hub_model_id`` and a write token)."""
    hub_model_id: str | None = None
    """The Hub repository ``push_to_hub`` uploads to, ``"user-or-org/name"``."""
    hub_private_repo: bool | None = None
    """Whether a repository ``push_to_hub`` creates is private; None = private."""
    sample_every: int = 1
    """Keep the full step record (texts) every this many iterations."""
    report_to: str | list[str] = "none"
    """Trackers that also get the history: ``tensorboard``, ``trackio``, ``wandb``, a list, ``all`` or ``none``."""
    logging_steps: int | float = 1
    """Send train records to ``report_to`` every this many iterations (a float in (0, 1): of ``max_steps``)."""
    project: str | None = None
    """The Trackio and wandb project (None: ``WANDB_PROJECT`` / ``TRACKIO_PROJECT``, else ``"erl-lite"``)."""
    load_in_4bit: bool = False
    """Quantize a model loaded by name to 4-bit NF4 (QLoRA); a model object must already be 4-bit."""
    lora_r: int = 16
    """LoRA rank of the adapter added to a model; a trainer's ``peft_config=`` wins over the ``lora_*`` fields."""
    lora_alpha: float = 32
    """LoRA scaling numerator α (the update is scaled by α / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch's input."""
    lora_target_modules: str | list[str] = "all-linear"
    """Modules that get an adapter: ``"all-linear"`` (every linear layer but the output head) or a list of names."""
    gradient_checkpointing: bool = False
    """Trade compute for memory in the update pass (non-reentrant activation checkpointing)."""
    progress_bar: bool = True
    """Show tqdm progress bars: per iteration, per phase inside it, per evaluation (main process only)."""
    diagnostics: str = "warn"
    """Health checks: ``warn`` prints each once per episode and logs it, ``raise`` also stops the run, ``off`` none."""

    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form values carried into the history's header (e.g. the command line's environment)."""
    preset_name: str | None = field(default=None, metadata={"cli": False})
    """The preset this config was built from (:meth:`preset`); the trainer refuses a GPU preset on a CPU by it."""

    def __post_init__(self) -> None:
        conform_trl_values(self)
        conform_fields(self)  # every field against its annotation (bool, int, finite float, ...)
        self.output_dir = self.output_dir and expand_path(self.output_dir, "ERLConfig.output_dir")
        checks.conform_choices(self)
        if self.num_generations is None:
            self.num_generations = checks.DEFAULT_GENERATIONS[self.mode]
        checks.conform_length(self)
        checks.check_counts(self)
        checks.check_sampling(self)
        checks.check_clip(self)
        checks.check_schedule(self)
        checks.check_lora(self)
        checks.conform_reporting(self)
        checks.check_saving(self)
        checks.check_mode_switches(self)
        checks.check_group_size(self)

    def optimizer_steps(self, rows: int) -> int:
        """Optimizer steps for ``rows`` rows: ``steps_per_generation`` (≤ rows) or ⌈rows / (mini-batch × G)⌉."""
        if self.ppo_mini_batch_size is None:
            return min(self.steps_per_generation, rows)
        return max(1, math.ceil(rows / (self.ppo_mini_batch_size * self.num_generations)))

    def max_optimizer_steps(self) -> int:
        """The most optimizer steps of one iteration: with ``ppo_mini_batch_size``, every first attempt failed."""
        if self.ppo_mini_batch_size is None:
            return self.steps_per_generation
        roles = len(ROLES) + self.reflection_copies - 1 if self.mode == "erl" else 1
        return self.optimizer_steps(roles * self.num_tasks_per_step * self.num_generations)

    def num_warmup_steps(self, num_training_steps: int) -> int:
        """Warm-up steps of a schedule ``num_training_steps`` long (transformers' rule: a fraction rounds up)."""
        fraction = self.warmup_ratio or (self.warmup_steps if self.warmup_steps < 1 else 0)
        return math.ceil(num_training_steps * fraction) if fraction else int(self.warmup_steps)

    @property
    def uses_memory(self) -> bool:
        """Whether the run reads and writes a reflection memory (ERL modes with reflection and memory)."""
        return checks.reflects(self.mode) and self.use_reflection and self.use_memory

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "ERLConfig":
        """A named preset (:data:`~erl_lite.config.presets.PRESETS`) with optional overrides; the name is kept in
        ``preset_name``."""
        checks.check_choice("preset", name, sorted(presets.PRESETS))
        overrides = translate_trl_fields(overrides, _FIELD_NAMES)  # TRL's names, before the preset's layer
        values = {**presets.PRESETS[name], **one_split(overrides)}
        if overrides.get("num_train_epochs") is not None and "max_steps" not in overrides:
            values["max_steps"] = None  # epochs given with a preset: they decide the length
        return cls(**{**values, "preset_name": name})

    def replace(self, **changes: Any) -> "ERLConfig":
        """A validated copy with ``changes`` (see :func:`one_split`). A G at the mode's default follows a new mode:
        read from the fields alone, so a config and its saved copy replace alike.

        Example:
            >>> ERLConfig().replace(mode="rlvr").num_generations
            10
            >>> ERLConfig(num_generations=6).replace(mode="rlvr").num_generations
            6
        """
        changes = translate_trl_fields(changes, _FIELD_NAMES, current=self.to_dict())
        if (
            "mode" in changes
            and "num_generations" not in changes
            and (self.num_generations == checks.DEFAULT_GENERATIONS[self.mode])
        ):
            changes["num_generations"] = None
        return dataclasses.replace(self, **one_split(changes))

    def to_dict(self) -> dict[str, Any]:
        """The settings as a dict, as saved with a run."""
        return dataclasses.asdict(self)


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(ERLConfig))

#: The two ways an iteration splits into optimizer steps (a count, or the reference's mini-batch size).
SPLIT_FIELDS = ("steps_per_generation", "ppo_mini_batch_size")


def one_split(layer: dict[str, Any]) -> dict[str, Any]:
    """``layer`` (a preset, a ``replace``) with the other :data:`SPLIT_FIELDS` field reset when it gives one."""
    given = [name for name in SPLIT_FIELDS if name in layer]
    if len(given) != 1:
        return dict(layer)
    other = SPLIT_FIELDS[1 - SPLIT_FIELDS.index(given[0])]
    return {**layer, other: ERLConfig.__dataclass_fields__[other].default}  # both have a plain default
