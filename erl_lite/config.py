"""ERLConfig: one flat dataclass holding every knob of a run, and its named presets.

Field names follow TRL's ``GRPOConfig`` where the concept is the same (``num_generations``,
``max_completion_length``, ``temperature``, ``beta``, ``epsilon``, ``learning_rate``, ...),
so a GRPOTrainer user recognises them; the ERL-specific fields use the paper's vocabulary.
TRL's other ``GRPOConfig`` names are mapped to the erl_lite field that holds the same setting or
refused with a reason (:mod:`erl_lite.trl_fields`), never met with a bare "unexpected keyword
argument". Invalid values fail at construction with a message that names the field: first every field
against its type annotation (:mod:`erl_lite.field_types`: a bool is not a number, an int field
refuses 1.5, no float is NaN or infinite), then each field's range and the fields together.

Departures from the paper: the defaults are the paper's (Algorithm 2, τ = 1, clip 0.2/0.28,
KL 0.001, lr 1e-6, T = 0.7) except where a small single-GPU run needs otherwise, and the
presets say so: LoRA adapters want a larger learning rate than full fine-tuning, and the
paper's batch of 64 tasks does not fit a consumer GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

from erl_lite.field_types import conform_fields
from erl_lite.records import ROLES
from erl_lite.trl_fields import translate_trl_fields

MODES = ("erl", "erl_simple", "rlvr")
#: The seed of a run unless told otherwise: the config's default, which the CLI and the notebooks
#: read. 0, the seed every figure in the README was measured at (TRL and transformers default to 42).
DEFAULT_SEED = 0
LOSS_TYPES = ("seq_sum", "token_mean", "seq_mean")
#: TRL ``loss_type`` names whose formula erl_lite implements, and the erl_lite name each one becomes.
LOSS_TYPE_ALIASES = {"grpo": "seq_mean", "dapo": "token_mean", "luspo": "seq_sum"}
#: Every name ``loss_type`` accepts (erl_lite's own, then TRL's aliases).
LOSS_TYPE_NAMES = LOSS_TYPES + tuple(LOSS_TYPE_ALIASES)
#: TRL ``loss_type`` names erl_lite does not implement, each with the closest formula it has.
TRL_LOSS_TYPES_MISSING = {
    "bnpo": "token_mean (= TRL's dapo: the same token mean, over the whole mini-batch instead of per micro-batch)",
    "dr_grpo": "seq_sum (= TRL's dr_grpo × max_completion_length: the same sums, divided by the sequence count)",
    "cispo": "token_mean (TRL's dapo; the clip acts on the ratio term, not a detached weight)",
    "sapo": "token_mean (TRL's dapo, with a hard clip instead of a soft gate)",
    "vespo": "token_mean with importance_sampling_level='sequence'",
}
#: ``lr_scheduler_type`` values (transformers' ``get_scheduler`` names).
LR_SCHEDULERS = ("constant", "linear", "cosine", "constant_with_warmup")
#: ``scale_rewards`` values (TRL's).
SCALE_REWARDS = ("group", "batch", "none")
#: ``importance_sampling_level`` values (TRL's).
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
MEMORY_TYPES = ("single", "fifo")
INTERNALIZATION_MODES = ("raft", "nll")
#: Experiment trackers ``report_to`` can name (each an optional pip extra of the same name).
REPORT_TO_BACKENDS = ("tensorboard", "trackio", "wandb")
OPTIMIZERS = ("adamw_torch", "adamw_8bit", "paged_adamw_8bit")


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
    """``erl`` (paper Algorithm 2: train first attempts, reflections, second attempts and
    internalization), ``erl_simple`` (Algorithm 1: one combined reward, only y1 trained) or
    ``rlvr`` (the GRPO baseline: first attempts only)."""
    max_steps: int | None = None
    """Training iterations. One iteration = one batch of tasks through every phase. None (the
    default) = 100, or as many as ``num_train_epochs`` needs when that is set; a number wins
    over ``num_train_epochs`` (TRL's rule)."""
    num_train_epochs: float | None = None
    """TRL's other way to say how long to train: passes over ``train_dataset``. The trainer
    turns it into ``max_steps = ceil(num_train_epochs × len(train_dataset) / num_tasks_per_step)``
    (one iteration draws ``num_tasks_per_step`` tasks) and writes that into ``max_steps``.
    Ignored when ``max_steps`` is given. TRL's default is 3 epochs; erl_lite's is None (100
    iterations), since an ERL iteration's cost does not follow the dataset's size."""
    num_tasks_per_step: int = 8
    """Tasks per iteration (the paper uses 64)."""
    num_generations: int | None = None
    """G: first-attempt rollouts per task. None (default) = the paper's compute-matched
    choice for the mode: 4 for ``erl`` / ``erl_simple``, 10 for ``rlvr`` (see
    :data:`DEFAULT_GENERATIONS`); set a number to override. G = 1 leaves every advantage group
    with one row, and a group of one gets ``A = r`` (mean 0, std 1: :mod:`erl_lite.core.advantages`),
    so there is no baseline: ``rlvr`` and ``erl_simple``, which train first attempts only, refuse
    it (as TRL refuses G < 2); ``erl`` accepts it with a warning (first attempts, reflections and
    second attempts are then all trained on raw rewards, a REINFORCE without baseline)."""
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
    """Extra keyword arguments for ``model.generate`` when attempts, reflections and evaluation
    are sampled, e.g. ``{"min_p": 0.05, "repetition_penalty": 1.1}`` (TRL's
    ``generation_kwargs``, passed like TRL's transformers path: on top of the sampler's own
    settings). The sampler's own keys (``max_new_tokens``, ``do_sample``, ``temperature``,
    ``top_p``, ``top_k``, ``eos_token_id``, ``pad_token_id``) stay with their fields and are refused
    here. Difference from TRL: there is no vLLM path, so only ``generate``'s keys are meaningful."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the tokenizer's ``apply_chat_template`` wherever a prompt is
    rendered (first and second attempts, the glue between turns, reflections, evaluation,
    internalization targets), e.g. ``{"enable_thinking": False}`` for Qwen3 (TRL's
    ``chat_template_kwargs``; TRL also merges a dataset row's ``chat_template_kwargs`` column,
    erl_lite does not). Ignored by tokenizers without a chat template (the plain format)."""
    max_episode_length: int = 2048
    """Max tokens of a whole episode (context + all turns); an episode that would exceed it
    ends, truncated, with its reward so far."""

    # --- gate, reflection, second attempt ----------------------------------------------
    reward_threshold: float = 1.0
    """τ: a first attempt goes on to reflection when it did not succeed (by default
    ``r1 < τ``); memory stores a rulebook when its second attempt reached ``r2 ≥ τ``."""
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
    """The learning-rate schedule, built with transformers' ``get_scheduler`` (TRL's
    ``lr_scheduler_type``): ``constant`` (the reference's, and the default; it refuses a warm-up,
    which transformers would silently ignore), ``constant_with_warmup``, ``linear`` (warm-up,
    then down to 0) or ``cosine`` (warm-up, then a half cosine down to 0). It runs over
    ``max_steps × max_optimizer_steps()`` optimizer steps and advances once per optimizer step
    (an iteration that takes fewer steps than the most it could, fewer rows than
    ``steps_per_generation`` or, with ``ppo_mini_batch_size``, fewer failures, leaves the
    schedule ending above its final value). Difference from TRL: transformers' default is
    ``linear``; erl_lite keeps the reference's ``constant``."""
    warmup_ratio: float = 0.0
    """Fraction in [0, 1) of the schedule's optimizer steps spent warming up linearly from 0 to
    ``learning_rate``, rounded up (TRL/transformers 4's ``warmup_ratio``; transformers 5 writes
    it as a fractional ``warmup_steps``, also accepted). Give this or ``warmup_steps``."""
    warmup_steps: int | float = 0
    """Optimizer steps of linear warm-up (transformers' ``warmup_steps``: a whole number of
    steps, or a float in (0, 1) as a fraction of the schedule, like ``warmup_ratio``)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    optim: str = "adamw_torch"
    """The optimizer, named as in TRL/transformers' ``optim``: ``adamw_torch``
    (``torch.optim.AdamW``), ``adamw_8bit`` (bitsandbytes ``AdamW8bit``: both moments stored
    in 8 bits, blockwise quantized) or ``paged_adamw_8bit`` (bitsandbytes ``PagedAdamW8bit``:
    the same, in CUDA unified memory that pages to the CPU under memory pressure instead of
    running out). All three take ``learning_rate``, ``weight_decay`` and Adam's default betas
    and eps. Like transformers, the 8-bit ones use bitsandbytes' AdamW with 8-bit states
    (tensors under 4,096 values keep fp32 states); unlike transformers, no embedding is
    switched to 32-bit states, since LoRA leaves the embedding frozen. On CPU, bitsandbytes
    0.50 runs both 8-bit optimizers; paging exists only on CUDA and falls back to the
    non-paged optimizer there (bitsandbytes warns). For a LoRA model the states are small
    (≈ 0.14 GiB in fp32 for Qwen2.5-1.5B at r 16), so 8 bits save little; paging guards
    against an out-of-memory at a long batch."""
    beta: float = 0.001
    """KL coefficient (k3 estimator) to the reference policy; 0 skips the reference pass."""
    epsilon: float = 0.2
    """Lower clip range ε_low of the policy ratio."""
    epsilon_high: float = 0.28
    """Upper clip range ε_high ("clip-higher")."""
    dual_clip: float | None = 3.0
    """Dual-clip constant c for negative advantages (None disables)."""
    scale_rewards: str = "group"
    """How advantages are scaled after the group mean is subtracted (TRL's ``scale_rewards``):
    ``group`` (the default, the paper's GRPO: divided by the std of the advantage's own group),
    ``batch`` (divided by the std of every reward of the same role in the iteration — PPO-Lite,
    TRL's ``batch``) or ``none`` (Dr. GRPO: ``r − mean`` unscaled). ``True``/``False`` mean
    ``group``/``none``, as in TRL. The groups are erl_lite's: one per (task, role) (first attempts,
    reflections, second attempts each among their own), so ``batch`` takes one std per role.
    Differences from TRL: the std is ``std + 1e-6`` (TRL: ``+ 1e-4``), a group of one has mean 0
    (TRL's groups are never of one), so it keeps ``A = r`` under ``group`` and ``none`` and gets
    ``r / (batch std + 1e-6)`` under ``batch``, on the scale of the rest of the batch;
    internalization weights are never scaled, and ``batch`` is refused under several processes
    (each would see only its shard)."""
    importance_sampling_level: str = "token"
    """The policy ratio of the clipped loss (TRL's ``importance_sampling_level``): ``token`` (one
    ratio per token, the paper's and PPO's) or ``sequence`` (GSPO: one ratio per sequence,
    ``exp`` of the mean over its loss tokens of ``log π − log π_old``, shared by every token of the
    sequence and clipped as one). Only matters off-policy (``steps_per_generation`` > 1): on
    policy every ratio is 1 either way. As TRL warns, with ``sequence`` the token-summing
    ``loss_type``s weigh a sequence by its length; ``seq_mean`` (TRL's ``grpo``) does not."""
    loss_type: str = "seq_sum"
    """How per-token losses become one number (each over one optimizer step's mini-batch):
    ``seq_sum`` (paper/reference: sum over a sequence's tokens, mean over sequences; the
    aggregation of TRL's ``luspo``, and TRL's ``dr_grpo`` times ``max_completion_length``),
    ``token_mean`` (every loss token weighs the same: TRL's ``dapo``, whose denominator is also
    the whole accumulated batch's token count) or ``seq_mean`` (mean within a sequence, then over
    sequences: TRL's ``grpo``, except that a sequence without loss tokens is not counted). TRL's
    ``grpo``, ``dapo`` and ``luspo`` are accepted and stored as ``seq_mean``, ``token_mean`` and
    ``seq_sum`` (TRL's LUSPO also wants ``importance_sampling_level="sequence"``; set it). TRL's
    other names are refused with the closest one erl_lite has: ``bnpo`` (a token mean per
    micro-batch: it depends on ``per_device_train_batch_size``), ``dr_grpo``, ``cispo``,
    ``sapo``, ``vespo``. TRL's default is ``dapo``; erl_lite's is the reference's ``seq_sum``."""
    steps_per_generation: int = 1
    """Optimizer steps per iteration: the batch is split into this many mini-batches. With 1
    the update is on-policy (importance ratio ≡ 1, so the clip never acts: a group-baselined
    policy gradient); with more, every mini-batch after the first is off-policy and the clip
    bounds it. The ``cpu`` preset takes 1, ``gpu`` takes 2 for every mode. The reference
    instead fixes the mini-batch's size (``ppo_mini_batch_size``, which replaces this; the
    ``paper`` preset does so). The history logs the count (``optim/steps``)."""
    ppo_mini_batch_size: int | None = None
    """Tasks per optimizer step, as in the reference (verl's ``ppo_mini_batch_size``): the
    iteration's rows are split into mini-batches of at most ``ppo_mini_batch_size ×
    num_generations`` rows, so the number of optimizer steps follows the batch. RLVR's batch
    (``num_tasks_per_step × G`` first attempts) takes one step when this equals
    ``num_tasks_per_step``; ERL's holds reflections, second attempts and internalization rows
    too and takes 1–4, as the reference's does (its ERL and RLVR runs differ in this, and the
    paper's comparison includes it). None: ``steps_per_generation`` steps. Giving both is refused.
    The ``paper`` preset and the embedded demo use it (64 and 8 tasks: every task in one step)."""
    per_device_train_batch_size: int = 8
    """Sequences per forward/backward pass (micro-batch); gradients are accumulated so the
    update equals one pass over the mini-batch."""
    logprob_chunk_size: int | None = 256
    """Completion positions (over all rows of a micro-batch) per lm-head chunk when log-probs
    are computed: the ``(B, L, V)`` logits are never materialised, only a chunk × 8192-column
    fp32 tile at a time, recomputed in the backward (:mod:`erl_lite.core.logprobs`). None = the
    plain full-logits path (memory grows with B·L·V: fine for tiny vocabularies)."""

    # --- evaluation, logging, checkpoints ---------------------------------------------
    eval_steps: int = 5
    """Evaluate every this many iterations, at the start and at the end (0 = never; call
    ``trainer.evaluate()`` yourself)."""
    eval_num_generations: int = 4
    """Samples per evaluation task (paper: 4)."""
    eval_temperature: float = 0.7
    """Sampling temperature for evaluation (first attempt only)."""
    eval_top_p: float = 1.0
    """Nucleus sampling for evaluation (1.0 = off). The paper evaluates with 0.8 (the
    ``paper`` and ``gpu`` presets use it); the ``cpu`` preset keeps the training sampler."""
    eval_top_k: int = 0
    """Top-k sampling for evaluation (0 = off). The paper evaluates with 20 (``paper`` and
    ``gpu`` presets)."""
    output_dir: str | None = "trainer_output"
    """Where history, samples, checkpoints and the final model go: transformers' and TRL's
    default folder, relative to the working directory (None = keep in memory only, write no
    file). One folder holds one run: a fresh run (not a resume) into a folder that already holds another run's
    checkpoints or history stops before its first step, unless ``overwrite_output_dir``."""
    overwrite_output_dir: bool = False
    """Let a fresh run start in an ``output_dir`` that holds another run, deleting that run's
    ``checkpoint-<step>`` folders, ``history.jsonl`` and ``samples.jsonl`` first (so
    ``save_total_limit`` rotation never mixes two runs' checkpoints); other files there stay.
    HF ``TrainingArguments``' name. A resume from a checkpoint in ``output_dir`` never deletes
    anything, whatever this says."""
    save_steps: int = 0
    """Checkpoint every this many iterations (0 = only at the end, if output_dir is set)."""
    save_total_limit: int | None = None
    """Keep at most this many ``checkpoint-<step>`` folders in ``output_dir``: after each save
    the oldest are deleted (None = keep all), as in TRL/transformers. The checkpoint just
    written and the highest-numbered one are never deleted."""
    push_to_hub: bool = False
    """Upload the final model (what ``ERLTrainer.save_model`` writes to ``output_dir``) to the
    Hugging Face Hub at the end of ``train()``, as ``ERLTrainer.push_to_hub()`` does when called.
    Needs ``hub_model_id``, the network and a write token (``huggingface-cli login`` or ``HF_TOKEN``).
    transformers' name; unlike it, only the end of training pushes (no ``hub_strategy``)."""
    hub_model_id: str | None = None
    """The Hub repository ``push_to_hub`` uploads to, ``"user-or-org/name"`` (transformers' name;
    it has no default here, where transformers takes ``output_dir``'s folder name)."""
    hub_private_repo: bool | None = None
    """Whether a repository ``push_to_hub`` creates is private; None = private (transformers'
    None follows the account's default, which is public: a run's outputs stay private unless asked)."""
    sample_every: int = 1
    """Keep the full step record (texts) every this many iterations."""
    report_to: str | list[str] = "none"
    """Experiment trackers that also receive the history, as in TRL (``TrainingArguments.report_to``):
    ``"none"``, ``"tensorboard"``, ``"trackio"``, ``"wandb"``, a list of these, or ``"all"`` (every
    one of the three that is installed). Stored as a list after construction (``"none"`` → ``[]``),
    like transformers. Each one is an optional extra (``pip install 'erl-lite[tensorboard]'``); the
    trainer refuses, when it is built, one that is not installed. They receive every history scalar
    (train and eval records, at their step) and a table of the step's attempts, reflections,
    second attempts and memory (see :mod:`erl_lite.integrations.reporting`). Differences from transformers:
    only these three trackers, and ``"all"`` is resolved by the trainer, not here."""
    logging_steps: int | float = 1
    """Send train records to ``report_to`` every this many iterations; a float in (0, 1) is a
    fraction of ``max_steps``, rounded up (TRL's meaning, counted in iterations instead of
    optimizer steps). A send carries each metric's mean over the iterations since the previous
    send (for ``lr`` and ``memory/*`` totals, the latest value) at the sending iteration's step;
    the last iteration always sends, and evaluations are sent when they happen. TRL's GRPO
    default is 10; erl_lite's is 1 because one iteration is a whole ERL batch (several optimizer
    steps). ``history.jsonl`` keeps every iteration whatever this is."""
    project: str | None = None
    """The Trackio and wandb project of runs erl_lite starts (``TrainingArguments.project``'s name,
    which there only Trackio reads). None: the tracker's own variable, ``WANDB_PROJECT`` for wandb
    and ``TRACKIO_PROJECT`` for Trackio, else ``"erl-lite"``; a value set here wins over both. A
    wandb run started before training keeps its own project. transformers' default is
    ``"huggingface"``."""
    load_in_4bit: bool = False
    """When the trainer loads a model by name: quantize it to 4-bit NF4 (QLoRA). With a model
    object: fine if it is already in 4-bit, refused if it is not (erl_lite quantizes only while
    loading)."""
    lora_r: int = 16
    """LoRA rank of the adapter the trainer adds to a model given by name (TRL's ``ModelConfig``
    field of the same name; a ``peft_config=`` passed to the trainer wins over all four
    ``lora_*`` fields). With a model object without an adapter, ``lora_*`` fields set away from
    the defaults add one of that shape; with an object that has one, they are refused."""
    lora_alpha: float = 32
    """LoRA scaling numerator α (the update is scaled by α / r); TRL ``ModelConfig``'s name."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch's input. TRL ``ModelConfig``'s default is 0.05; erl_lite's 0."""
    lora_target_modules: str | list[str] = "all-linear"
    """Modules that get an adapter: ``"all-linear"`` (every linear layer but the output head,
    peft's shorthand) or a list of module names, e.g. ``["q_proj", "v_proj"]``. TRL
    ``ModelConfig``'s default None leaves the choice to peft's per-architecture table."""
    gradient_checkpointing: bool = False
    """Trade compute for memory in the update pass (non-reentrant activation checkpointing),
    switched on for a model given by name and for a model object alike."""
    progress_bar: bool = True
    """Show tqdm progress bars (``tqdm.auto``: widgets in a notebook, stderr in a terminal): one
    per iteration, and inside each iteration one per phase (first attempts, reflections, second
    attempts: sequences done; the update: micro-batches done) and one per evaluation (see
    :mod:`erl_lite.core.progress`). Only the main process shows them under several processes."""

    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form values carried into the history's header (e.g. the preset's name)."""

    def __post_init__(self) -> None:
        if isinstance(self.scale_rewards, bool):  # TRL's True/False, before the type check
            self.scale_rewards = "group" if self.scale_rewards else "none"
        conform_fields(self)  # every field against its annotation (bool, int, finite float, ...)
        _choice("mode", self.mode, MODES)
        if self.num_generations is None:
            self.num_generations = DEFAULT_GENERATIONS[self.mode]
            self._generations_from_mode = True
        else:
            self._generations_from_mode = False
        if self.loss_type in TRL_LOSS_TYPES_MISSING:
            raise ValueError(f"ERLConfig.loss_type={self.loss_type!r} (a TRL loss) is not implemented in "
                             f"erl_lite; the closest is {TRL_LOSS_TYPES_MISSING[self.loss_type]}")
        _choice("loss_type", self.loss_type, LOSS_TYPE_NAMES)
        self.loss_type = LOSS_TYPE_ALIASES.get(self.loss_type, self.loss_type)
        _choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        _choice("importance_sampling_level", self.importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
        _choice("lr_scheduler_type", self.lr_scheduler_type, LR_SCHEDULERS)
        self._check_schedule()
        self._check_lora()
        owned = sorted(set(self.generation_kwargs) & set(SAMPLER_KEYS))
        if owned:
            raise ValueError(f"ERLConfig.generation_kwargs: {owned} belong to the sampler's own fields "
                             "(max_completion_length, temperature, top_p, top_k, ...); set those instead")
        _choice("memory_type", self.memory_type, MEMORY_TYPES)
        _choice("internalization_mode", self.internalization_mode, INTERNALIZATION_MODES)
        _choice("optim", self.optim, OPTIMIZERS)
        self._resolve_length()
        if self.max_steps is not None:
            _positive("max_steps", self.max_steps)
        if self.ppo_mini_batch_size is not None:
            _positive("ppo_mini_batch_size", self.ppo_mini_batch_size)
            if self.steps_per_generation != 1:
                raise ValueError("ERLConfig: give ppo_mini_batch_size (steps follow the batch) or "
                                 f"steps_per_generation={self.steps_per_generation} (a fixed count), not both")
        for name in ("num_tasks_per_step", "num_generations", "max_completion_length",
                     "max_episode_length", "max_reflection_length", "max_reflection_prompt_length",
                     "memory_size", "memory_top_k", "steps_per_generation",
                     "per_device_train_batch_size", "eval_num_generations", "sample_every"):
            _positive(name, getattr(self, name))
        for name in ("eval_steps", "save_steps", "top_k", "eval_top_k", "beta", "weight_decay",
                     "internalization_coef", "learning_rate", "max_grad_norm"):
            if getattr(self, name) < 0:
                raise ValueError(f"ERLConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("temperature", "reflection_temperature", "eval_temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ERLConfig.{name} must be > 0 (sampling), got {getattr(self, name)!r}")
        for name in ("top_p", "reflection_top_p", "eval_top_p"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"ERLConfig.{name} must be in (0, 1], got {getattr(self, name)!r}")
        for name in ("epsilon", "epsilon_high"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"ERLConfig.{name} must be in (0, 1), got {getattr(self, name)!r}")
        self.report_to = _report_to(self.report_to)
        self.logging_steps = _logging_steps(self.logging_steps)
        if self.project is not None and not self.project.strip():
            raise ValueError(f"ERLConfig.project must be a non-empty name or None, got {self.project!r}")
        if self.save_total_limit is not None:
            _positive("save_total_limit", self.save_total_limit)
        _check_hub(self.push_to_hub, self.hub_model_id, self.hub_private_repo)
        if not isinstance(self.overwrite_output_dir, bool):
            raise ValueError(f"ERLConfig.overwrite_output_dir must be True or False, got {self.overwrite_output_dir!r}")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"ERLConfig.dual_clip must be > 1 or None, got {self.dual_clip!r}")
        if self.max_completion_length >= self.max_episode_length:
            raise ValueError("ERLConfig.max_completion_length must be smaller than max_episode_length")
        self._check_mode_switches()
        self._check_group_size()

    def _check_group_size(self) -> None:
        """G = 1: refused where first attempts are all that trains, a warning in ``erl`` mode."""
        if self.num_generations != 1:
            return
        if self.mode != "erl":
            raise ValueError(f"ERLConfig.num_generations=1 with mode={self.mode!r}: a group of one first attempt "
                             "has no baseline (its advantage would be the raw reward); GRPO needs >= 2 "
                             "(TRL refuses G < 2)")
        warnings.warn("ERLConfig.num_generations=1: every (task, role) group holds one row, so each trained "
                      "row's advantage is its raw reward (A = r, no group baseline); use >= 2 for GRPO's "
                      "baseline", UserWarning, stacklevel=4)

    def _check_schedule(self) -> None:
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"ERLConfig.warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")
        w = self.warmup_steps
        if not (w >= 0 and (float(w).is_integer() or w < 1)):
            raise ValueError("ERLConfig.warmup_steps must be a whole number of steps >= 0 or a fraction in "
                             f"(0, 1), got {w!r}")
        if self.warmup_ratio and w:
            raise ValueError("ERLConfig: give warmup_ratio or warmup_steps, not both")
        if self.lr_scheduler_type == "constant" and (self.warmup_ratio or w):
            raise ValueError("ERLConfig.lr_scheduler_type='constant' has no warm-up (transformers would ignore "
                             "it); use 'constant_with_warmup' with warmup_ratio/warmup_steps")

    def _check_lora(self) -> None:
        _positive("lora_r", self.lora_r)
        if not self.lora_alpha > 0:
            raise ValueError(f"ERLConfig.lora_alpha must be > 0, got {self.lora_alpha!r}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"ERLConfig.lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if not self.lora_target_modules:
            raise ValueError("ERLConfig.lora_target_modules must be 'all-linear', a module name or a non-empty "
                             f"list of module names, got {self.lora_target_modules!r}")

    def optimizer_steps(self, rows: int) -> int:
        """Optimizer steps an update of ``rows`` rows takes: ``steps_per_generation`` (at most
        one per row), or with ``ppo_mini_batch_size`` one per ``ppo_mini_batch_size × G`` rows,
        rounded up.

        Example:
            >>> cfg = ERLConfig(num_tasks_per_step=8, ppo_mini_batch_size=8)  # G = 4: 32 rows a step
            >>> cfg.optimizer_steps(32), cfg.optimizer_steps(92), cfg.replace(mode="rlvr").optimizer_steps(80)
            (1, 3, 1)
        """
        if self.ppo_mini_batch_size is None:
            return min(self.steps_per_generation, rows)
        return max(1, math.ceil(rows / (self.ppo_mini_batch_size * self.num_generations)))

    def max_optimizer_steps(self) -> int:
        """The most optimizer steps one iteration can take (the learning-rate schedule is this
        many per iteration long): with ``ppo_mini_batch_size``, the steps of a batch where every
        first attempt failed and each brought every role's row (4 per first attempt in ``erl``
        mode, 1 in ``rlvr`` and ``erl_simple``, where only first attempts are trained).

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

    def _resolve_length(self) -> None:
        """``max_steps`` from its default, or left None for the trainer to derive from epochs."""
        if self.num_train_epochs is not None and not self.num_train_epochs > 0:
            raise ValueError(f"ERLConfig.num_train_epochs must be a positive number, got {self.num_train_epochs!r}")
        if self.max_steps is None and self.num_train_epochs is None:
            self.max_steps = DEFAULT_MAX_STEPS

    def _check_mode_switches(self) -> None:
        """Fail on switches that the chosen mode would silently ignore."""
        ignored = {
            "rlvr": ("use_reflection", "use_memory", "memory_type", "memory_size", "memory_top_k",
                     "train_reflection", "train_second", "use_internalization", "internalization_mode",
                     "internalization_coef", "reflection_temperature", "reflection_top_p"),
            "erl_simple": ("train_first", "train_reflection", "train_second", "use_internalization",
                           "internalization_mode", "internalization_coef"),
            "erl": (),
        }[self.mode]
        if self.mode != "rlvr" and not (self.use_reflection and self.use_memory):
            # "w/o reflection" (no Δ to remember) and "w/o memory" keep no memory at all
            ignored += ("memory_type", "memory_size", "memory_top_k")
        changed = [name for name in dict.fromkeys(ignored) if getattr(self, name) != _DEFAULTS[name]]
        if changed:
            why = f"mode={self.mode!r}" if self.mode != "erl" else (
                "use_reflection=False" if not self.use_reflection else "use_memory=False")
            raise ValueError(f"ERLConfig: {', '.join(changed)} {'has' if len(changed) == 1 else 'have'} "
                             f"no effect with {why}; leave {'it' if len(changed) == 1 else 'them'} at the default")

    @property
    def uses_memory(self) -> bool:
        """Whether the run reads and writes a reflection memory (ERL modes with reflection and memory)."""
        return self.mode != "rlvr" and self.use_reflection and self.use_memory

    # --- presets -----------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "ERLConfig":
        """A named preset with optional overrides. Names: see :data:`PRESETS`."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        overrides = translate_trl_fields(overrides, _FIELD_NAMES)  # TRL's names, before the preset's layer
        values = {**PRESETS[name], **one_split(overrides)}
        if overrides.get("num_train_epochs") is not None and "max_steps" not in overrides:
            values["max_steps"] = None  # epochs given with a preset: they decide the length
        values["extra"] = {**values.get("extra", {}), "preset": name}
        return cls(**values)

    def replace(self, **changes: Any) -> "ERLConfig":
        """A copy with some fields changed (validated again). G that came from the mode follows
        a new mode unless ``num_generations`` is given; see :func:`one_split` for the two ways of
        splitting an iteration into optimizer steps.

        Example:
            >>> ERLConfig().replace(mode="rlvr").num_generations
            10
        """
        changes = translate_trl_fields(changes, _FIELD_NAMES, current=self.to_dict())
        if self._generations_from_mode and "num_generations" not in changes:
            changes["num_generations"] = None
        return dataclasses.replace(self, **one_split(changes))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: Named presets, each complete in itself (no preset is a layer on another). ``cpu``: tiny
#: models on a laptop CPU in minutes. ``demo``: the embedded model on its demo world (``erl-lite
#: demo``, ``erl-lite train``'s default, the notebooks' cpu setup). ``gpu``: a Qwen-class
#: 0.5–4B model in 4-bit QLoRA on one consumer GPU (Colab T4/L4 class). ``paper``: the
#: reference settings of the ERL paper (8×H100 scale; shown for reference).
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": dict(
        max_steps=20, num_tasks_per_step=4, max_completion_length=48,
        # 1888 + 160: a reflection fits the embedded model's 2048 positions (erl_lite.lengths)
        max_episode_length=2048, max_reflection_length=160, max_reflection_prompt_length=1888,
        learning_rate=2e-3, beta=0.0, eval_steps=5, eval_num_generations=2,
        per_device_train_batch_size=16,
    ),
    "demo": dict(
        # Budgets that fit the embedded model: its replies are at most 16 tokens per turn, its
        # rulebooks about 45 tokens, and its episodes and reflection requests well under 1024.
        max_completion_length=24, max_episode_length=1024, max_reflection_length=64,
        max_reflection_prompt_length=1024,
        # Sampling: a little below 1 keeps the tiny model's moves and rulebooks well formed.
        temperature=0.7, reflection_temperature=0.5, reflection_top_p=0.9, eval_temperature=0.7,
        # The training schedule of the demo run. In trial runs on the shipped model (one optimizer
        # step per iteration then), 5e-4 was too slow for 30 steps, and 2e-3 often got there sooner
        # but then broke the reflections (no <prompt> block, letters repeated), which 1e-3 kept
        # well formed.
        max_steps=30, num_tasks_per_step=8, learning_rate=1e-3, beta=0.0,
        eval_steps=10, eval_num_generations=2, per_device_train_batch_size=32, progress_bar=False,
        # The reference's mini-batch rule: one optimizer step per 8 tasks' worth of rows, so RLVR
        # (8 x 10 first attempts) takes one step and ERL, whose failures add reflection, second
        # attempt and internalization rows, takes 1-4. With one step for every mode, ERL's first
        # attempts named a letter in 16% of the replies at step 10 and 88% at step 14 (94% at step
        # 10 with the rule; the demo reports' timelines).
        ppo_mini_batch_size=8,
    ),
    # gpu: sized so Qwen2.5-1.5B-Instruct in 4-bit fits a 15 GiB T4 (ERL mode), by the
    # arithmetic of erl_lite.integrations.budget (`python -m erl_lite.integrations.budget`, README "GPU figures"): the
    # batched rollout of tasks x G rows at the episode budget (key/value cache and prefill)
    # is the largest part, so 4 tasks per step (16 rows); with chunked log-probs a micro-batch
    # of 4 keeps the update (5.4 GiB) below the rollout (9.2 GiB); paged 8-bit AdamW pages its
    # states out rather than failing at a peak.
    "gpu": dict(
        max_steps=60, num_tasks_per_step=4, max_completion_length=256,
        max_episode_length=3072, max_reflection_length=512, max_reflection_prompt_length=2048,
        learning_rate=1e-5, beta=0.001, eval_steps=5, eval_num_generations=4,
        eval_top_p=0.8, eval_top_k=20, steps_per_generation=2,
        per_device_train_batch_size=4, gradient_checkpointing=True, optim="paged_adamw_8bit",
    ),
    "paper": dict(
        max_steps=100, num_tasks_per_step=64, max_completion_length=1024,
        max_episode_length=8192, max_reflection_length=2048, max_reflection_prompt_length=6144,
        learning_rate=1e-6, beta=0.001, eval_steps=5, eval_num_generations=4,
        eval_top_p=0.8, eval_top_k=20, ppo_mini_batch_size=64,
        per_device_train_batch_size=8,
    ),
}


#: Presets sized for a CUDA GPU (a Qwen-class model in 4-bit): :func:`require_cuda_for_preset`
#: refuses to run them where no CUDA device exists.
GPU_PRESETS: frozenset[str] = frozenset({"gpu", "paper"})


def require_cuda_for_preset(name: str | None, *, allow_cpu: bool = False) -> None:
    """Raise RuntimeError when preset ``name`` is sized for a GPU and no CUDA device exists.

    A model loaded by name falls back to the CPU when there is no CUDA device, so without this
    check ``PRESET = "gpu"`` would train a 1.5 B model on the CPU for hours without a word.
    Settings stay data: ``ERLConfig.preset("gpu")`` can be built and read anywhere; the check runs
    where a model is about to be loaded for a run — in the notebooks' environment cell and in
    :class:`~erl_lite.ERLTrainer` when it loads a model by name. ``allow_cpu=True`` (or, with the
    trainer, a model loaded explicitly with ``load_policy(name, device="cpu")``) is the override.

    Args:
        name: a preset's name (see :data:`PRESETS`), or None for a config not made from one.
        allow_cpu: run a GPU preset on the CPU anyway.

    Example:
        >>> require_cuda_for_preset("cpu")  # a CPU preset needs nothing
        >>> require_cuda_for_preset("gpu", allow_cpu=True)  # the explicit override
    """
    if name is not None and name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    if name not in GPU_PRESETS or allow_cpu:
        return
    import torch  # here, not at the top: `import erl_lite.config` stays free of torch

    if torch.cuda.is_available():
        return
    raise RuntimeError(
        f"PRESET = {name!r} (ERLConfig.preset({name!r})) is sized for a CUDA GPU, but torch sees no CUDA "
        "device here: its model would load on the CPU and train for hours. Either set PRESET = 'cpu' "
        "(the embedded model, offline, minutes); or switch to a GPU (on Colab: Runtime -> Change "
        "runtime type -> T4 GPU, then run all cells again); or run on the CPU anyway: in a notebook, "
        "pass allow_cpu=True in the environment cell (require_cuda_for_preset(PRESET, allow_cpu=True)); "
        "with ERLTrainer, load the model yourself with erl_lite.models.load_policy(name, device='cpu') "
        "and pass the model in.")


#: ``model.generate`` keys that the sampler sets from its own fields (refused in ``generation_kwargs``).
SAMPLER_KEYS = ("max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "eos_token_id",
                "pad_token_id", "generation_config", "input_ids", "attention_mask")

#: Training iterations when neither ``max_steps`` nor ``num_train_epochs`` is given.
DEFAULT_MAX_STEPS = 100

#: G per mode when ``num_generations`` is None: the paper's 4 rollouts per task for ERL and its
#: compute-matched 10 for the RLVR baseline.
DEFAULT_GENERATIONS: dict[str, int] = {"erl": 4, "erl_simple": 4, "rlvr": 10}

_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(ERLConfig))
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


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"ERLConfig.{name} must be one of {allowed}, got {value!r}")


def _report_to(value: Any) -> list[str]:
    """``report_to`` as a list of tracker names (``"all"`` kept for the trainer to resolve)."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"ERLConfig.report_to must be a string or a list of strings, got {value!r}")
    names = list(dict.fromkeys(names))
    allowed = ("none", "all") + REPORT_TO_BACKENDS
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(f"ERLConfig.report_to: unknown tracker {unknown[0]!r}; choose from {allowed}")
    if len(names) > 1 and ("none" in names or "all" in names):
        raise ValueError(f"ERLConfig.report_to: 'none' and 'all' stand alone, got {names!r}")
    return [] if names == ["none"] else names


def _logging_steps(value: Any) -> int | float:
    """A positive whole number of iterations, or a fraction of ``max_steps`` in (0, 1)."""
    if isinstance(value, float) and 0 < value < 1:
        return value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("ERLConfig.logging_steps must be a positive integer (iterations) or a float in "
                         f"(0, 1) (a fraction of max_steps), got {value!r}")
    return value


def _positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"ERLConfig.{name} must be a positive integer, got {value!r}")


def _check_hub(push_to_hub: Any, hub_model_id: Any, hub_private_repo: Any) -> None:
    """The Hub settings, checked when the config is built rather than after hours of training."""
    if not isinstance(push_to_hub, bool):
        raise ValueError(f"ERLConfig.push_to_hub must be True or False, got {push_to_hub!r}")
    if hub_private_repo is not None and not isinstance(hub_private_repo, bool):
        raise ValueError(f"ERLConfig.hub_private_repo must be True, False or None, got {hub_private_repo!r}")
    if hub_model_id is not None and not (isinstance(hub_model_id, str) and hub_model_id.count("/") == 1
                                         and all(hub_model_id.split("/"))):
        raise ValueError(f"ERLConfig.hub_model_id must look like 'user-or-org/name', got {hub_model_id!r}")
    if push_to_hub and hub_model_id is None:
        raise ValueError("ERLConfig.push_to_hub=True needs hub_model_id='user-or-org/name': the repository "
                         "the final model is uploaded to")
