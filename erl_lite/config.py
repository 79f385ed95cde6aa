"""ERLConfig: one flat dataclass holding every knob of a run.

Field names follow TRL's ``GRPOConfig`` where the concept is the same, and the paper's vocabulary
elsewhere; TRL's other names are mapped or refused with a reason (:mod:`erl_lite.trl_fields`), and
README's "Coming from TRL" table says how each field departs from TRL. A bad value fails at
construction naming the field: each field against its type (:mod:`erl_lite.field_types`), then
the named checks of :mod:`erl_lite.config_checks`. The presets live in :mod:`erl_lite.presets`.

Departures from the paper: the defaults are the paper's (Algorithm 2, τ = 1, clip 0.2/0.28, KL
0.001, lr 1e-6, T = 0.7); the presets shrink them for small runs and say why.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

from erl_lite import config_checks as checks
from erl_lite.config_checks import (  # noqa: F401 - the allowed values, importable from here
    DEFAULT_GENERATIONS, DEFAULT_MAX_STEPS, FIELD_CHOICES, IMPORTANCE_SAMPLING_LEVELS, INTERNALIZATION_MODES,
    LOSS_TYPE_ALIASES, LOSS_TYPE_NAMES, LOSS_TYPES, LR_SCHEDULERS, MEMORY_TYPES, MODES, OPTIMIZERS,
    REPORT_TO_BACKENDS, SAMPLER_KEYS, SCALE_REWARDS, TRL_LOSS_TYPES_MISSING)
from erl_lite.field_types import conform_fields
from erl_lite.presets import GPU_PRESETS, PRESETS, require_cuda_for_preset  # noqa: F401 - importable from here
from erl_lite.records import ROLES
from erl_lite.trl_fields import translate_trl_fields

#: The seed of a run unless told otherwise (the CLI and the notebooks read it): 0, the seed every
#: figure in the README was measured at (TRL and transformers default to 42).
DEFAULT_SEED = 0


@dataclass
class ERLConfig:
    """Hyperparameters of an ERL (or RLVR) run.

    Example:
        >>> cfg = ERLConfig(mode="rlvr", num_generations=10)
        >>> cfg.num_generations
        10
        >>> ERLConfig.preset("cpu").max_steps
        20
        >>> ERLConfig.preset("cpu", mode="rlvr").num_generations  # the paper's G for RLVR
        10
    """

    # --- what to run -------------------------------------------------------------------
    mode: str = "erl"
    """``erl`` (paper Algorithm 2: first attempts, reflections, second attempts, internalization),
    ``erl_simple`` (Algorithm 1: one combined reward, only y1 trained) or ``rlvr`` (GRPO baseline)."""
    max_steps: int | None = None
    """Training iterations. One iteration = one batch of tasks through every phase. None = 100, or
    what ``num_train_epochs`` needs when that is set; a number wins over ``num_train_epochs``."""
    num_train_epochs: float | None = None
    """Passes over ``train_dataset``: the trainer sets ``max_steps = ceil(epochs × len(train_dataset)
    / num_tasks_per_step)``. Ignored when ``max_steps`` is given."""
    num_tasks_per_step: int = 8
    """Tasks per iteration (the paper uses 64)."""
    num_generations: int | None = None
    """G: first-attempt rollouts per task. None = the paper's choice for the mode (:data:`DEFAULT_GENERATIONS`:
    4 for ERL, 10 for RLVR). G = 1 has no group baseline: refused by ``rlvr``/``erl_simple``, a warning in ``erl``."""
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
    """Extra ``model.generate`` keywords for attempts, reflections and evaluation, e.g. ``{"min_p": 0.05}``.
    The sampler's own keys (:data:`SAMPLER_KEYS`: ``temperature``, ``top_p``, ...) are refused here."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra ``apply_chat_template`` keywords wherever a prompt is rendered, e.g. ``{"enable_thinking":
    False}`` for Qwen3. Ignored by tokenizers without a chat template."""
    max_episode_length: int = 2048
    """Max tokens of a whole episode (context + all turns); an episode that would exceed it
    ends, truncated, with its reward so far."""

    # --- gate, reflection, second attempt ----------------------------------------------
    reward_threshold: float = 1.0
    """τ: a first attempt with ``r1 < τ`` goes on to reflection; memory stores a rulebook whose
    second attempt reached ``r2 ≥ τ``."""
    use_reflection: bool = True
    """False = the "w/o reflection" ablation: no Δ; the second attempt sees the initial prompt
    plus the first attempt's trace and feedback."""
    reflection_temperature: float = 0.5
    """Sampling temperature of reflections (reference code: 0.5)."""
    reflection_top_p: float = 0.9
    """Nucleus sampling of reflections (reference code: 0.9)."""
    max_reflection_length: int = 512
    """Max new tokens of a reflection."""
    max_reflection_prompt_length: int = 2048
    """Token budget of the reflection context; the attempt trace and then the memory are
    shortened to fit, never the task."""

    # --- memory ------------------------------------------------------------------------
    use_memory: bool = True
    """False = the "w/o memory" ablation: the reflector always starts from the initial
    prompt and nothing is stored."""
    memory_type: str = "single"
    """``single`` (paper: one slot, overwritten by the last successful rulebook) or ``fifo``
    (a queue of ``memory_size`` rulebooks, the ``memory_top_k`` most recent shown)."""
    memory_size: int = 50
    """Capacity of the ``fifo`` memory."""
    memory_top_k: int = 3
    """How many of the most recent ``fifo`` entries the reflector sees."""

    # --- which roles train --------------------------------------------------------------
    train_first: bool = True
    """Policy-gradient update on first attempts."""
    train_reflection: bool = True
    """Policy-gradient update on reflections (reward = r2 of the second attempt)."""
    train_second: bool = True
    """Policy-gradient update on second attempts (under the Δ context)."""
    use_internalization: bool = True
    """Self-distillation: train successful second attempts under the initial context."""
    internalization_mode: str = "raft"
    """``raft`` (reference code: clipped policy loss with advantage max(r2, 0)) or ``nll``
    (paper: NLL weighted by the indicator r2 > 0)."""
    internalization_coef: float = 1.0
    """Weight of the internalization term."""

    # --- loss and optimiser (reference settings) -----------------------------------------
    learning_rate: float = 1e-6
    """AdamW learning rate (the peak of ``lr_scheduler_type``'s schedule)."""
    lr_scheduler_type: str = "constant"
    """Learning-rate schedule (transformers' ``get_scheduler``): ``constant`` (the reference's; no
    warm-up), ``constant_with_warmup``, ``linear`` or ``cosine``, over ``max_steps ×
    max_optimizer_steps()`` optimizer steps, advanced once per optimizer step."""
    warmup_ratio: float = 0.0
    """Fraction in [0, 1) of the schedule's optimizer steps spent warming up linearly from 0,
    rounded up. Give this or ``warmup_steps``."""
    warmup_steps: int | float = 0
    """Optimizer steps of linear warm-up (a float in (0, 1): a fraction of the schedule, like ``warmup_ratio``)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    optim: str = "adamw_torch"
    """The optimizer: ``adamw_torch``, ``adamw_8bit`` (bitsandbytes, 8-bit moments) or ``paged_adamw_8bit``
    (the same in CUDA unified memory, paged to the CPU under pressure; unpaged on CPU)."""
    beta: float = 0.001
    """KL coefficient (k3 estimator) to the reference policy; 0 skips the reference pass."""
    epsilon: float = 0.2
    """Lower clip range ε_low of the policy ratio."""
    epsilon_high: float = 0.28
    """Upper clip range ε_high ("clip-higher")."""
    dual_clip: float | None = 3.0
    """Dual-clip constant c for negative advantages (None disables)."""
    scale_rewards: str = "group"
    """Advantage scaling after the group mean is subtracted: ``group`` (std of its (task, role) group,
    the paper's), ``batch`` (std of the role's rewards in the iteration) or ``none`` (Dr. GRPO).
    True/False mean ``group``/``none``."""
    importance_sampling_level: str = "token"
    """The clipped loss's policy ratio: ``token`` (one per token, the paper's) or ``sequence`` (GSPO:
    one per sequence, from the mean log-ratio). Matters only off-policy (``steps_per_generation`` > 1)."""
    loss_type: str = "seq_sum"
    """How per-token losses of a mini-batch become one number: ``seq_sum`` (the paper's: sum over a
    sequence, mean over sequences), ``token_mean`` or ``seq_mean``. TRL's ``luspo``, ``dapo`` and
    ``grpo`` are stored as these three; its other names are refused with the closest."""
    steps_per_generation: int = 1
    """Optimizer steps per iteration (the batch split into this many mini-batches); 1 is on-policy,
    more make every later mini-batch off-policy. ``ppo_mini_batch_size`` replaces it."""
    ppo_mini_batch_size: int | None = None
    """Tasks per optimizer step (the reference's rule): mini-batches of at most this × G rows, so the
    step count follows the batch (RLVR 1, ERL 1–4). None: ``steps_per_generation``; not both."""
    per_device_train_batch_size: int = 8
    """Sequences per forward/backward pass (micro-batch); gradients are accumulated so the
    update equals one pass over the mini-batch."""
    logprob_chunk_size: int | None = 256
    """Completion positions per lm-head chunk when log-probs are computed, so the ``(B, L, V)``
    logits are never materialised (:mod:`erl_lite.core.logprobs`). None = the full-logits path."""

    # --- evaluation, logging, checkpoints ---------------------------------------------
    eval_steps: int = 5
    """Evaluate every this many iterations, at the start and at the end (0 = never; call
    ``trainer.evaluate()`` yourself)."""
    eval_num_generations: int = 4
    """Samples per evaluation task (paper: 4)."""
    eval_temperature: float = 0.7
    """Sampling temperature for evaluation (first attempt only)."""
    eval_top_p: float = 1.0
    """Nucleus sampling for evaluation (1.0 = off; the paper's 0.8 in the ``paper`` and ``gpu`` presets)."""
    eval_top_k: int = 0
    """Top-k sampling for evaluation (0 = off; the paper's 20 in the ``paper`` and ``gpu`` presets)."""
    output_dir: str | None = "trainer_output"
    """Where history, samples, checkpoints and the final model go (None = write no file). A fresh run
    into a folder that holds another run stops before its first step, unless ``overwrite_output_dir``."""
    overwrite_output_dir: bool = False
    """Let a fresh run delete another run's checkpoints, ``history.jsonl`` and ``samples.jsonl`` in
    ``output_dir`` first (other files stay). A resume never deletes anything."""
    save_steps: int = 0
    """Checkpoint every this many iterations (0 = only at the end, if output_dir is set)."""
    save_total_limit: int | None = None
    """Keep at most this many ``checkpoint-<step>`` folders (None = all); the newest and the
    highest-numbered are never deleted."""
    push_to_hub: bool = False
    """Upload the final model to the Hugging Face Hub at the end of ``train()`` (needs
    ``hub_model_id``, the network and a write token)."""
    hub_model_id: str | None = None
    """The Hub repository ``push_to_hub`` uploads to, ``"user-or-org/name"``."""
    hub_private_repo: bool | None = None
    """Whether a repository ``push_to_hub`` creates is private; None = private."""
    sample_every: int = 1
    """Keep the full step record (texts) every this many iterations."""
    report_to: str | list[str] = "none"
    """Experiment trackers that also receive the history: ``"none"``, ``"tensorboard"``, ``"trackio"``,
    ``"wandb"``, a list of these, or ``"all"`` (those installed). Stored as a list (``"none"`` → ``[]``)."""
    logging_steps: int | float = 1
    """Send train records (means since the last send) to ``report_to`` every this many iterations; a
    float in (0, 1) is a fraction of ``max_steps``. ``history.jsonl`` keeps every iteration."""
    project: str | None = None
    """The Trackio and wandb project of runs erl_lite starts. None: ``WANDB_PROJECT`` /
    ``TRACKIO_PROJECT``, else ``"erl-lite"``."""
    load_in_4bit: bool = False
    """Quantize a model loaded by name to 4-bit NF4 (QLoRA); a model object must already be 4-bit."""
    lora_r: int = 16
    """LoRA rank of the adapter added to a model given by name (or to a model object without one, when
    a ``lora_*`` field is changed); a ``peft_config=`` passed to the trainer wins over the ``lora_*`` fields."""
    lora_alpha: float = 32
    """LoRA scaling numerator α (the update is scaled by α / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch's input."""
    lora_target_modules: str | list[str] = "all-linear"
    """Modules that get an adapter: ``"all-linear"`` (every linear layer but the output head) or a
    list of module names, e.g. ``["q_proj", "v_proj"]``."""
    gradient_checkpointing: bool = False
    """Trade compute for memory in the update pass (non-reentrant activation checkpointing),
    switched on for a model given by name and for a model object alike."""
    progress_bar: bool = True
    """Show tqdm progress bars: per iteration, per phase inside it, per evaluation (main process only)."""

    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form values carried into the history's header (e.g. the command line's environment)."""
    preset_name: str | None = field(default=None, metadata={"cli": False})
    """The preset this config was built from (:meth:`preset` records it; None otherwise). Saved with the
    config; the trainer refuses a GPU preset on a CPU by it."""
    generations_from_mode: bool = field(default=False, init=False, repr=False, compare=False)
    """Derived: True when ``num_generations`` was left None and took the mode's G; :meth:`replace`
    then lets G follow a new ``mode``. Not saved (a restored config keeps its G)."""

    def __post_init__(self) -> None:
        _migrate_extra_preset(self)
        checks.check_trl_values(self)
        conform_fields(self)  # every field against its annotation (bool, int, finite float, ...)
        checks.check_choices(self)
        self.generations_from_mode = self.num_generations is None
        if self.generations_from_mode:
            self.num_generations = DEFAULT_GENERATIONS[self.mode]
        checks.check_length(self)
        checks.check_counts(self)
        checks.check_sampling(self)
        checks.check_clip(self)
        checks.check_schedule(self)
        checks.check_lora(self)
        checks.check_reporting(self)
        checks.check_saving(self)
        checks.check_mode_switches(self)
        checks.check_group_size(self)

    def optimizer_steps(self, rows: int) -> int:
        """Optimizer steps an update of ``rows`` rows takes: ``steps_per_generation`` (at most one
        per row), or one per ``ppo_mini_batch_size × G`` rows, rounded up.

        Example:
            >>> cfg = ERLConfig(num_tasks_per_step=8, ppo_mini_batch_size=8)  # G = 4: 32 rows a step
            >>> cfg.optimizer_steps(32), cfg.optimizer_steps(92), cfg.replace(mode="rlvr").optimizer_steps(80)
            (1, 3, 1)
        """
        if self.ppo_mini_batch_size is None:
            return min(self.steps_per_generation, rows)
        return max(1, math.ceil(rows / (self.ppo_mini_batch_size * self.num_generations)))

    def max_optimizer_steps(self) -> int:
        """The most optimizer steps one iteration can take (the schedule's length per iteration):
        with ``ppo_mini_batch_size``, a batch whose every first attempt failed and brought a row
        of each trained role (4 in ``erl`` mode, 1 in ``rlvr`` and ``erl_simple``).

        Example:
            >>> ERLConfig(num_tasks_per_step=8, ppo_mini_batch_size=8).max_optimizer_steps()
            4
        """
        if self.ppo_mini_batch_size is None:
            return self.steps_per_generation
        roles = len(ROLES) if self.mode == "erl" else 1
        return self.optimizer_steps(roles * self.num_tasks_per_step * self.num_generations)

    def num_warmup_steps(self, num_training_steps: int) -> int:
        """Warm-up optimizer steps of a schedule ``num_training_steps`` long (transformers' rule:
        a fraction is rounded up).

        Example:
            >>> cosine = dict(lr_scheduler_type="cosine")
            >>> ERLConfig(warmup_ratio=0.1, **cosine).num_warmup_steps(25), ERLConfig(warmup_steps=4, **cosine).num_warmup_steps(25)
            (3, 4)
        """
        fraction = self.warmup_ratio or (self.warmup_steps if self.warmup_steps < 1 else 0)
        return math.ceil(num_training_steps * fraction) if fraction else int(self.warmup_steps)

    @property
    def uses_memory(self) -> bool:
        """Whether the run reads and writes a reflection memory (ERL modes with reflection and memory)."""
        return self.mode != "rlvr" and self.use_reflection and self.use_memory

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "ERLConfig":
        """A named preset (:data:`PRESETS`) with optional overrides; the name is kept in ``preset_name``.

        Example:
            >>> ERLConfig.preset("gpu", seed=3).preset_name
            'gpu'
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        overrides = translate_trl_fields(overrides, _FIELD_NAMES)  # TRL's names, before the preset's layer
        values = {**PRESETS[name], **one_split(overrides)}
        if overrides.get("num_train_epochs") is not None and "max_steps" not in overrides:
            values["max_steps"] = None  # epochs given with a preset: they decide the length
        return cls(**{**values, "preset_name": name})

    def replace(self, **changes: Any) -> "ERLConfig":
        """A copy with some fields changed (validated again). G that came from the mode
        (``generations_from_mode``) follows a new mode unless ``num_generations`` is given; a
        change of one split field resets the other (:func:`one_split`).

        Example:
            >>> ERLConfig().replace(mode="rlvr").num_generations
            10
        """
        changes = translate_trl_fields(changes, _FIELD_NAMES, current=self.to_dict())
        if self.generations_from_mode and "num_generations" not in changes:
            changes["num_generations"] = None
        return dataclasses.replace(self, **one_split(changes))

    def to_dict(self) -> dict[str, Any]:
        """The settings as a dict, as saved with a run (derived fields left out).

        Example:
            >>> ERLConfig().to_dict()["mode"], "generations_from_mode" in ERLConfig().to_dict()
            ('erl', False)
        """
        return {k: v for k, v in dataclasses.asdict(self).items() if k in _FIELD_NAMES}


#: The fields one passes to ``ERLConfig(...)`` (derived ones, like ``generations_from_mode``, are not).
_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(ERLConfig) if f.init)
_dataclass_init = ERLConfig.__init__


@functools.wraps(_dataclass_init)
def _init_with_trl_names(self: ERLConfig, *args: Any, **kwargs: Any) -> None:
    # TRL's GRPOConfig names are mapped or refused with a reason (erl_lite.trl_fields) rather than
    # meeting the dataclass's bare "unexpected keyword argument".
    _dataclass_init(self, *args, **translate_trl_fields(kwargs, _FIELD_NAMES))


ERLConfig.__init__ = _init_with_trl_names

_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ERLConfig)
                             if f.default is not dataclasses.MISSING}

#: The two ways to say how an iteration splits into optimizer steps (a fixed count, or the
#: reference's fixed mini-batch size); a config holds one of them.
SPLIT_FIELDS = ("steps_per_generation", "ppo_mini_batch_size")


def one_split(layer: dict[str, Any]) -> dict[str, Any]:
    """``layer`` (settings laid over others: a preset, the demo's settings, a ``replace``) with
    the other split field reset to its default when it gives only one of :data:`SPLIT_FIELDS`,
    so a lower layer's choice gives way instead of colliding with it.

    Example:
        >>> one_split({"steps_per_generation": 2})
        {'steps_per_generation': 2, 'ppo_mini_batch_size': None}
        >>> one_split({"learning_rate": 1e-3})
        {'learning_rate': 0.001}
    """
    given = [name for name in SPLIT_FIELDS if name in layer]
    if len(given) != 1:
        return dict(layer)
    other = SPLIT_FIELDS[1 - SPLIT_FIELDS.index(given[0])]
    return {**layer, other: _DEFAULTS[other]}


def _migrate_extra_preset(cfg: ERLConfig) -> None:
    """Configs saved before ``preset_name`` existed carried the preset as ``extra["preset"]``: move it."""
    if isinstance(cfg.extra, dict) and "preset" in cfg.extra:
        extra = dict(cfg.extra)
        name = extra.pop("preset")
        cfg.extra = extra
        if cfg.preset_name is None:
            cfg.preset_name = name
