"""ERLTrainer: the training loop around :func:`erl_lite.core.phases.erl_step`.

Usage mirrors TRL's GRPOTrainer (same argument names and reward-function signature), so a
GRPOTrainer user changes one line; environments plug into the same trainer through ``env=``.

How erl_lite departs from the paper (and its released code) — read before comparing numbers;
the README's "How erl_lite departs from the paper" gives each point in full:

1. Rollouts use ``transformers.generate`` on the training model, not vLLM; no Ray (see 8).
2. LoRA/QLoRA adapters instead of full fine-tuning; the KL reference is the same model with
   its adapter disabled. LoRA wants a larger learning rate than the paper's 1e-6.
3. Small batches; ``steps_per_generation`` optimizer steps per iteration (1 in the ``cpu``
   preset, 2 in ``gpu``), or the reference's fixed mini-batch size (``ppo_mini_batch_size``,
   the ``paper`` preset's and the embedded demo's: ERL then takes 1–4 steps, RLVR one), logged
   as ``optim/steps``.
4. Memory is the paper's single overwritten slot, written only with a *parsed* rulebook.
5. Internalization follows the released code (clipped loss, advantage ``max(r2, 0)``,
   weight-0 rows kept, cut targets closed with the end-of-turn token).
6. Evaluation samples first attempts only, from the initial prompt, never touching memory,
   with its own sampler settings (``eval_top_p``/``eval_top_k``; the paper's in ``gpu``/``paper``).
7. ``mode="rlvr"`` defaults to the paper's G = 10.
8. Several GPUs: the same script under ``accelerate launch`` shards each step's tasks over the
   processes (data parallel, :mod:`erl_lite.integrations.distributed`), where the reference uses Ray workers.

Example:
    >>> from erl_lite import ERLConfig, ERLTrainer
    >>> from erl_lite.testing import tiny_tokenizer, tiny_model
    >>> tok = tiny_tokenizer(); model = tiny_model(tok)
    >>> def reward(prompts, completions, answer, **kw):
    ...     return [float(a in c) for c, a in zip(completions, answer)]
    >>> args = ERLConfig.preset("cpu", max_steps=1, num_tasks_per_step=1, eval_steps=0,
    ...                         max_completion_length=4, max_reflection_length=4, progress_bar=False)
    >>> trainer = ERLTrainer(model=model, processing_class=tok, args=args, reward_funcs=reward,
    ...                      train_dataset=[{"prompt": "Say 7.", "answer": "7"}])
    >>> history = trainer.train()
    >>> "gate/rate" in history.records[-1]
    True
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import warnings
from typing import Any, Callable, Sequence

import torch

from erl_lite.integrations.callbacks import TrainerCallbacks
from erl_lite.checkpoint import (
    CheckpointError,
    TrainingState,
    apply_state,
    capture_state,
    ensure_writable,
    latest_good_checkpoint,
    previous_run,
    read_checkpoint,
    remove_previous_run,
    save_checkpoint,
    save_weights,
)
from erl_lite.config import ERLConfig
from erl_lite.integrations.distributed import DataParallel
from erl_lite.core.env import Environment
from erl_lite.integrations.dataset import RewardFunctionEnv, rows_to_tasks
from erl_lite.integrations.reward_calls import RewardFunctionError, RewardLog, mean_metrics
from erl_lite.core.generation import Generator, HFGenerator
from erl_lite.history import History
from erl_lite.integrations.data_sources import load_rows
from erl_lite.integrations.multi import MultiEnvironment
from erl_lite.integrations.trl_adapter import environment_from_factory, placeholder_rows
from erl_lite.identity import run_differences, run_identity
from erl_lite.core.memory import MemoryBank, ReflectionMemory
from erl_lite.metrics import (GATE_RATE, LR, MEMORY_SIZE, PEAK_GPU_GB, REWARD_FIRST, REWARD_SECOND, STEP, TIME_STEP,
                              TIME_UPDATE, cuda_device, describe, env_eval_metrics, env_step_metrics, eval_metrics,
                              peak_gpu_gb, reset_peak_gpu_memory, step_metrics)
from erl_lite.core.phases import PhaseContext, attempt_first, erl_step
from erl_lite.core.progress import Progress
from erl_lite.lengths import check_lengths
from erl_lite.records import StepRecord, Task, check_unique_task_ids
from erl_lite.integrations.reporting import make_reporter
from erl_lite.trainer_args import (TrainerStateView, adopt_model_object, build_optimizer, build_scheduler,
                                  check_callbacks, refuse_trl_only, wants_4bit)
from erl_lite.core.update import PolicyUpdater


class ERLTrainer:
    """Trains a causal LM with ERL (or RLVR / Algorithm 1 / an ablation, per ``args.mode``).

    The positional order is TRL 1.16's ``GRPOTrainer``'s (``model, reward_funcs, args,
    train_dataset, eval_dataset, processing_class, ...``), so a ``GRPOTrainer(...)`` call runs
    with the class name changed (and an :class:`ERLConfig` for ``args``); erl_lite's own
    extras are keyword-only.

    Args:
        model: a model name or path (loaded with :func:`erl_lite.models.load_policy`, 4-bit
            when ``args.load_in_4bit`` or ``quantization_config.load_in_4bit``), or a loaded
            ``PreTrainedModel`` / ``PeftModel``. The model settings of ``args`` are applied to an
            object or refused, never ignored (see
            :func:`~erl_lite.trainer_args.adopt_model_object`): ``gradient_checkpointing=True`` is
            switched on; ``load_in_4bit`` (or a 4-bit ``quantization_config``) is fine on an
            object already in 4-bit and refused on a full-precision one (pass the name, or
            quantize it yourself); ``lora_*`` fields set away from ERLConfig's defaults add an
            adapter of that shape to an object without one and are refused, by name, on an
            object that already has a PEFT adapter (as is ``peft_config``). An object passed
            with the defaults (or a preset, which sets no ``lora_*``) is used as it is.
        reward_funcs: TRL-style reward function(s) for dataset tasks, called by keyword once
            per phase (see :mod:`erl_lite.integrations.dataset`). Reward models are not accepted.
        args: the :class:`ERLConfig`. TRL ``GRPOConfig`` names given to it are accepted, mapped
            or refused with a reason (:mod:`erl_lite.trl_fields`); a ``GRPOConfig`` object is refused.
        train_dataset: rows with a ``prompt`` column — a list of dicts, a ``datasets.Dataset``, a
            ``.jsonl``/``.json``/``.csv``/``.parquet`` path or a dataset name (offline-safe; see
            :mod:`erl_lite.integrations.data_sources`) — or a list of :class:`Task`; defaults to
            ``env.train_tasks()`` when ``env`` is given. With a :class:`MultiEnvironment`, each
            row's ``environment`` column names its environment (see :mod:`erl_lite.integrations.multi`).
        eval_dataset: like ``train_dataset``; defaults to ``env.test_tasks()`` for an env.
        processing_class: the tokenizer (loaded with the model when omitted).
        reward_processing_classes: TRL's tokenizers for reward models; must be None.
        callbacks: ``transformers.TrainerCallback`` objects (or classes), run by transformers'
            ``CallbackHandler`` at the matching points of the loop, ``control.should_training_stop``
            / ``should_save`` / ``should_evaluate`` included (see :mod:`erl_lite.integrations.callbacks`); and
            functions ``f(trainer, step_record)`` called after every iteration (e.g. to print a
            line per step, or to stop early by raising: the step that just finished is kept and
            saved). Anything else is refused.
        optimizers: ``(optimizer, scheduler)``; either may be None (default: the optimizer ``args.optim``
            names, with ``args.learning_rate``/``args.weight_decay``, and the schedule
            ``args.lr_scheduler_type`` names, stepped once per optimizer step).
        quantization_config: a ``BitsAndBytesConfig`` with ``load_in_4bit`` to load a named
            model in 4-bit (erl_lite's NF4 settings are used); anything else is refused.
        peft_config: a ``peft.LoraConfig``; when the model is given by name and this is None,
            a LoRA adapter built from ``args.lora_r``/``lora_alpha``/``lora_dropout``/
            ``lora_target_modules`` is added (the KL reference needs one).
        tools, rollout_func: TRL's agent hooks; must be None (multi-turn tasks plug in
            through ``env=`` or ``environment_factory=``).
        environment_factory: a TRL-style environment class (or factory, or a dict of them
            routed by the ``environment`` column), run through the adapter of
            :mod:`erl_lite.integrations.trl_adapter`; ``reward_funcs`` are then optional and receive
            ``environments=`` as in TRL.
        feedback_func: TRL-style function returning one feedback string per completion.
        env: a multi-turn :class:`Environment` instead of reward functions.
        generator: a custom sampler (e.g. :class:`~erl_lite.core.generation.ScriptedGenerator`).
        reward_weights: weights of several reward functions.

    Reward functions receive ``trainer_state`` (:attr:`state`): ``global_step`` is the
    iteration the completions belong to (1-based while training; during evaluation, the
    number of finished iterations — TRL counts finished optimizer steps, one less while
    training), ``max_steps`` and ``epoch`` (passes over the training tasks).
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Callable | Sequence[Callable] | None = None,
        args: ERLConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: Sequence[Callable[["ERLTrainer", StepRecord], None]] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        quantization_config: Any = None,
        peft_config: Any = None,
        tools: Any = None,
        rollout_func: Any = None,
        environment_factory: Any = None,
        *,
        feedback_func: Callable | None = None,
        env: Environment | None = None,
        generator: Generator | None = None,
        reward_weights: Sequence[float] | None = None,
    ) -> None:
        refuse_trl_only(reward_processing_classes=reward_processing_classes, tools=tools, rollout_func=rollout_func)
        if args is not None and not isinstance(args, ERLConfig):
            raise TypeError(f"args must be an ERLConfig (got {type(args).__name__}); e.g. "
                            "ERLConfig.preset('gpu', max_steps=...) in place of a GRPOConfig")
        self.args = args = args or ERLConfig()
        if environment_factory is not None:
            if env is not None:
                raise ValueError("pass env= or environment_factory=, not both")
            env = environment_from_factory(environment_factory, reward_funcs, reward_weights, args.reward_threshold)
            if train_dataset is None:  # TRL's dataset-free mode: reset() returns the prompt
                train_dataset = placeholder_rows(environment_factory, args.max_steps, args.num_tasks_per_step)
            reward_funcs = None  # the adapter calls them, with environments= as TRL does
        if (env is None) == (reward_funcs is None):
            raise ValueError("pass exactly one of env= (multi-turn), environment_factory= (TRL-style "
                             "environment classes) or reward_funcs= (dataset tasks)")
        self.callbacks, trainer_callbacks = check_callbacks(callbacks)
        # DDP: under `accelerate launch`, this process's rank and device (see erl_lite.integrations.distributed).
        self.dist = DataParallel.from_environment()
        if self.dist.world_size > 1 and args.scale_rewards == "batch":
            # Each process sees only its shard of tasks; a per-shard std would differ from one process's.
            raise ValueError("ERLConfig.scale_rewards='batch' is not supported under several processes "
                             "(the std would be each process's own); use 'group' or 'none'")
        reporter = make_reporter(args)  # a tracker that is not installed fails before the model loads
        if not self.dist.is_main:  # DDP: rank 0 alone reports (checked above on every rank)
            reporter = None
        from transformers import set_seed

        set_seed(args.seed)  # adapter initialisation draws from the global generators
        self.model, self.tokenizer = self._load(model, processing_class, peft_config, quantization_config)
        self.dist.check_device(self.model)  # DDP: one GPU per process
        self.env = env if env is not None else RewardFunctionEnv(
            reward_funcs, feedback_func, reward_weights, success_threshold=args.reward_threshold)
        self.state = TrainerStateView(self)
        self.env.trainer_state = self.state
        self.reward_log = RewardLog()  # what reward functions pass to TRL's log_metric / log_extra
        self.env.reward_log = self.reward_log
        self.env.use_tokenizer(self.tokenizer, args.chat_template_kwargs)  # e.g. tools= for the chat template
        self.train_tasks = self._tasks(train_dataset, "train")
        if not self.train_tasks:
            raise ValueError("train_dataset is empty: it needs at least one row with a 'prompt'")
        self.eval_tasks = self._tasks(eval_dataset, "eval") if eval_dataset is not None or env is not None else []
        if args.max_steps is None:  # num_train_epochs decides (see ERLConfig.num_train_epochs)
            args.max_steps = max(1, math.ceil(args.num_train_epochs * len(self.train_tasks) / args.num_tasks_per_step))
        if eval_dataset is not None and not self.eval_tasks:
            raise ValueError("eval_dataset is empty: pass None for no evaluation, or rows with a 'prompt'")
        check_lengths(args, self.model, self.tokenizer, self.env,
                      {"train_dataset": self.train_tasks, "eval_dataset": self.eval_tasks})
        self.generator = generator or HFGenerator(self.model, self.tokenizer)
        self.memory = self._memory()
        # DDP: every rank keeps the (global) records; rank 0 alone writes the files.
        self.history = History(out_dir=args.output_dir if self.dist.is_main else None, reporter=reporter)
        # The bars inside a step and of evaluation; read at each bar, so setting progress_bar later counts.
        self.progress = Progress(lambda: self.args.progress_bar and self.dist.is_main)
        self.ctx = PhaseContext(self.generator, self.tokenizer, self.env, args, self.progress)
        self.optimizer, self.scheduler = self._optimizers(*optimizers)
        pad = self.tokenizer.pad_token_id
        # DDP: wraps the policy (rank 0's weights on every process), global loss normalizers.
        self.updater = PolicyUpdater(self.model, self.optimizer, self.scheduler, args,
                                     pad if pad is not None else self.tokenizer.eos_token_id, dist=self.dist)
        self.updater.progress = self.progress
        self.step = 0
        self.last_outcome: StepRecord | None = None
        # transformers.TrainerCallback objects: transformers' CallbackHandler, state and control.
        self.hf_callbacks = TrainerCallbacks(self, trainer_callbacks)
        self.callback_handler = self.hf_callbacks.handler  # transformers.Trainer's attribute name
        self.hf_callbacks.event("init_end")

    # --- setup -----------------------------------------------------------------------------
    def _optimizers(self, optimizer: Any, scheduler: Any) -> tuple[Any, Any]:
        """The user's (optimizer, scheduler) pair, each defaulting as documented in the class."""
        if optimizer is None:
            optimizer = build_optimizer([p for p in self.model.parameters() if p.requires_grad], self.args)
        if scheduler is None:
            scheduler = build_scheduler(optimizer, self.args)
        return optimizer, scheduler

    def _load(self, model: Any, tokenizer: Any, peft_config: Any, quantization_config: Any) -> tuple[Any, Any]:
        from erl_lite.config import require_cuda_for_preset
        from erl_lite.models import load_policy

        if isinstance(model, str) or hasattr(model, "__fspath__"):
            # A GPU preset must not fall back to the CPU unnoticed (a model object is an explicit choice).
            require_cuda_for_preset(self.args.extra.get("preset"))
            a = self.args  # the lora_* fields build the adapter unless a peft_config is given
            four_bit = wants_4bit(quantization_config, self.args)
            return load_policy(model, tokenizer, quantization="4bit" if four_bit else "none",
                               peft=peft_config if peft_config is not None else "lora",
                               lora_r=a.lora_r, lora_alpha=a.lora_alpha, lora_dropout=a.lora_dropout,
                               target_modules=a.lora_target_modules,
                               gradient_checkpointing=self.args.gradient_checkpointing,
                               device=self.dist.device)  # DDP: cuda:<local rank>; None: the default
        return adopt_model_object(model, tokenizer, self.args, peft_config, quantization_config)

    def _memory(self) -> ReflectionMemory | MemoryBank:
        """The paper's one memory, or one per environment when the run mixes environments."""
        a = self.args
        if isinstance(self.env, MultiEnvironment):
            return MemoryBank(self.env.names, a.memory_type, a.memory_size, a.memory_top_k, self.env.env_name)
        return ReflectionMemory(a.memory_type, a.memory_size, a.memory_top_k)

    def _tasks(self, data: Any, split: str) -> list[Task]:
        """Tasks of a dataset (see :func:`~erl_lite.integrations.data_sources.load_rows`: rows, a
        ``datasets.Dataset``, a path or a name; or Tasks), or of the env's split. A
        :class:`MultiEnvironment` routes rows by their ``environment`` column. Ids must be
        unique within the split (they key the GRPO groups)."""
        where = f"{split}_dataset" if data is not None else f"the environment's {split} tasks"
        return check_unique_task_ids(self._read_tasks(data, split), where)

    def _read_tasks(self, data: Any, split: str) -> list[Task]:
        if data is None and split == "train":
            return self.env.train_tasks()
        if data is None:
            try:
                return self.env.test_tasks()
            except NotImplementedError:  # e.g. a TRL-style environment: no evaluation unless asked
                return []
        rows = load_rows(data, split)
        if isinstance(self.env, MultiEnvironment):
            return self.env.tasks_from_rows(rows, split)
        if rows and isinstance(rows[0], Task):
            return rows
        return rows_to_tasks(rows, prefix=split, where=f"{split}_dataset")

    def _batch(self, step: int) -> list[Task]:
        """Tasks of iteration ``step`` (1-based): a fixed function of the seed and the step,
        so a resumed run sees the same tasks as an uninterrupted one."""
        n, pool = self.args.num_tasks_per_step, len(self.train_tasks)
        start = (step - 1) * n
        out = []
        for pos in range(start, start + n):
            epoch, offset = divmod(pos, pool)
            order = list(range(pool))
            random.Random(self.args.seed * 100_003 + epoch).shuffle(order)
            out.append(self.train_tasks[order[offset]])
        return out

    # --- the loop --------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None,
              ignore_config_mismatch: bool = False) -> History:
        """Run ``args.max_steps`` iterations; returns the :class:`History`.

        Args:
            resume_from_checkpoint: a checkpoint folder, or True for the newest one in
                ``args.output_dir`` that reads cleanly (damaged ones, and ones holding NaN or inf
                weights, are skipped with a warning).
            ignore_config_mismatch: resume even when the checkpoint was saved with other
                run-changing settings (mode, ``num_generations``, memory kind, τ, model name,
                LoRA settings, tokenizer, ...; see :data:`erl_lite.identity.RESUMABLE_FIELDS` for
                the ones that may always change). Without it such a resume fails, naming each field.

        Before any compute: ``args.output_dir`` is checked to be writable, and a fresh run (no
        resume) into a folder that holds another run stops with an error unless
        ``args.overwrite_output_dir``; a resume to a ``max_steps`` below the checkpoint's step
        is refused. Calling ``train()`` again on a trainer that stopped continues where it stopped.

        Any exception in a step (Ctrl-C, a reward function that raises, weights that became NaN,
        a CUDA error...) rolls the trainer back to the last *finished* step — a step cut short has
        half-updated weights and optimizer moments — saves that step's checkpoint when
        ``output_dir`` is set, and re-raises the exception with a note saying where it saved and
        how to continue. A step is finished once its history record is written: a failing
        callback or evaluation after it keeps it. For this the trainer keeps a CPU copy of the
        trainable weights and optimizer state from the start of the running step (small for
        LoRA adapters).
        """
        from transformers import set_seed

        continuing = self.step > 0 and not resume_from_checkpoint  # this trainer stopped earlier
        if not continuing:
            set_seed(self.args.seed)  # continuing keeps the live random state, as an unbroken run would
        if self.args.output_dir:
            ensure_writable(self.args.output_dir)
        if resume_from_checkpoint:
            self._resume(resume_from_checkpoint, ignore_config_mismatch)
        elif not continuing and self.args.output_dir:
            if not self._claimed:  # an evaluate(log=True) before train() may have taken it already
                self._claim_output_dir()
            self.history.rewrite()  # the files afresh, from this trainer's records
        if self.step > self.args.max_steps:
            raise ValueError(self._past_max_steps(self.step, "this trainer"))
        if not continuing:
            self.dist.decorrelate_rng()  # DDP: each process samples with its own noise
        bar = self._progress()
        self._step_start = None
        self._training = True
        self.hf_callbacks.event("train_begin")
        flags = self.hf_callbacks  # flags.control: what the TrainerCallbacks asked for, read after each event
        try:
            if self.step == 0 and self.args.eval_steps and self.eval_tasks:
                self._log_eval()
            while self.step < self.args.max_steps and not flags.control.should_training_stop:
                self._step_start = capture_state(self.step, self.model, self.optimizer, self.scheduler,
                                                 self.memory, self.history)
                self.hf_callbacks.event("step_begin")
                self.training_step()  # clears _step_start once the step's record is written
                logged = self.history.of_kind("train")[-1]  # the step's record (a callback may log after it)
                bar.update(1)
                bar.set_postfix_str(self._postfix(logged))
                self.hf_callbacks.event("step_end")
                self.hf_callbacks.event("log", logs=logged)
                if self.eval_tasks and (flags.control.should_evaluate or self.args.eval_steps and (
                        self.step % self.args.eval_steps == 0 or self.step == self.args.max_steps)):
                    self._log_eval()
                if self.args.output_dir and (flags.control.should_save or self.args.save_steps
                                             and self.step % self.args.save_steps == 0):
                    self.save_checkpoint()
        except (Exception, KeyboardInterrupt) as error:
            self._stopped(error)
            raise
        finally:
            self._step_start, self._training = None, False
            bar.close()
            self.progress.close_all()  # a phase's bar an error left open
            self.history.close_reporter()
        if self.args.output_dir and self._saved_step != self.step:
            self.save_checkpoint()
        if self.args.output_dir:
            self.save_model()  # the final model at output_dir's root, as transformers' Trainer leaves it
        if self.args.push_to_hub:
            self.push_to_hub()
        self.hf_callbacks.event("train_end")
        return self.history

    def training_step(self) -> StepRecord:
        """One iteration: every phase, the update, and the history record."""
        self.step += 1
        tasks = self._batch(self.step)
        memory = self.memory if self.args.uses_memory else None
        memory_before = self.memory.entries
        device = cuda_device(self.model)
        reset_peak_gpu_memory(device)
        t0 = time.perf_counter()
        # DDP: this process plays its block of the step's tasks, reading memory but holding its
        # writes back (in one process: all the tasks, and memory itself).
        view = self.dist.deferred(memory)
        outcome = erl_step(self.ctx, self.dist.shard(tasks), view)
        t1 = time.perf_counter()
        self.updater.step = self.step  # named in its warnings and errors
        losses = self.updater.update(outcome.samples)
        t2 = time.perf_counter()
        # DDP: every process's records, and memory written in rank order (identity in one process).
        outcome = self.dist.merge(outcome, view)
        metrics = {STEP: self.step, **step_metrics(outcome, memory, self.args.mode)}
        if isinstance(self.env, MultiEnvironment):
            metrics.update(env_step_metrics(outcome, self.env.env_name, self.env.names, memory, self.args.mode))
        metrics.update(losses.to_metrics())
        metrics.update(self._logged_metrics())
        metrics.update({TIME_UPDATE: t2 - t1, TIME_STEP: t2 - t0, LR: self.scheduler.get_last_lr()[0],
                        PEAK_GPU_GB: peak_gpu_gb(device)})
        record = StepRecord(self.step, tasks, outcome.first_attempts, outcome.retries,
                            memory_before, self.memory.entries, metrics)
        self.history.log(metrics, step_record=record)
        if self.step % self.args.sample_every == 0:
            self.history.log_sample(record.to_dict())
        self.last_outcome = outcome
        self._step_start = None  # the step is finished: a failure from here on keeps it
        for callback in self.callbacks:
            callback(self, record)
        return record

    # --- evaluation ----------------------------------------------------------------------------
    def evaluate(self, tasks: list[Task] | None = None, num_generations: int | None = None,
                 log: bool = False) -> dict[str, float]:
        """First attempts only, from the initial prompt; memory is neither shown nor written.

        ``log=True`` also records the result in the history as an evaluation at the current
        step, so figures drawn from the history show it (the trainer's own evaluations every
        ``eval_steps`` are always recorded).
        """
        tasks = self.eval_tasks if tasks is None else tasks
        if not tasks:
            raise ValueError("no evaluation tasks: pass eval_dataset= or tasks=")
        mine = self.dist.shard(tasks, allow_empty=True)  # DDP: each process plays a block
        attempts = attempt_first(self.ctx, mine, num_generations or self.args.eval_num_generations,
                                 params=self.ctx.eval_params(), desc="evaluation") if mine else []
        attempts = self.dist.gather(attempts)
        metrics = eval_metrics(attempts)
        metrics.update({f"eval/{k}": v for k, v in self._logged_metrics().items()})
        if isinstance(self.env, MultiEnvironment):
            metrics.update(env_eval_metrics(attempts, self.env.env_name, self.env.names))
        if log:
            if self.args.output_dir and not self._claimed and self.step == 0:
                self._claim_output_dir()  # this writes the run's first record: the folder becomes this run's
            self.history.log({STEP: self.step, **metrics}, kind="eval")
            self.hf_callbacks.event("log", logs=self.history.records[-1])
            if not self._training:  # train() finishes its tracker runs itself, at its end
                self.history.close_reporter()
        self.hf_callbacks.event("evaluate", metrics=metrics)
        return metrics

    def _logged_metrics(self) -> dict[str, float]:
        """The means of what reward functions passed to ``log_metric`` since the last call (TRL:
        sum / count over every process). A name clashing with erl_lite's own keys is refused."""
        logged = mean_metrics(self.dist.gather(self.reward_log.take_metrics()))
        clash = sorted(k for k in logged if describe(k) is not None)
        if clash:
            raise RewardFunctionError(f"log_metric name(s) {clash} are metrics erl_lite logs itself; "
                                      "pick other names")
        return logged

    def _log_eval(self) -> None:
        self.evaluate(log=True)

    # --- checkpoints -----------------------------------------------------------------------------
    _saved_step: int | None = None  # step of the newest checkpoint of this run in output_dir
    _claimed = False  # output_dir checked to hold no other run, and taken by this one (first write)
    _step_start: TrainingState | None = None  # where the running step began (None between steps)
    _training = False  # inside train(), which closes the tracker runs at its end

    def save_checkpoint(self) -> str:
        """Write ``<output_dir>/checkpoint-<step>`` (see :mod:`erl_lite.checkpoint`) and rotate
        old ones per ``args.save_total_limit``; returns its path. Weights holding NaN or inf are
        refused (:class:`~erl_lite.checkpoint.CheckpointError`) and nothing on disk changes."""
        if not self.args.output_dir:
            raise ValueError("ERLConfig.output_dir is not set; nowhere to save a checkpoint")
        # DDP: the state is replicated, so rank 0 writes it and the others wait for the folder.
        path = self.dist.on_main(self._write_checkpoint,
                                 default=os.path.join(self.args.output_dir, f"checkpoint-{self.step}"))
        self._saved_step = self.step
        self.hf_callbacks.event("save")
        return path

    def save_model(self, output_dir: str | None = None) -> str:
        """Save the policy for use (transformers' ``Trainer.save_model``): a LoRA run's adapter in
        PEFT's format (with the ``erl_lite.json`` note :mod:`erl_lite.integrations.export` reads), a run without
        LoRA's full model with ``save_pretrained``; the tokenizer; and the run's config as
        ``training_args.json`` (HF pickles ``training_args.bin``; erl_lite never writes pickles).
        ``output_dir`` defaults to ``args.output_dir``; returns the folder. DDP: rank 0 writes."""
        folder = os.fspath(output_dir) if output_dir is not None else self.args.output_dir
        if not folder:
            raise ValueError("save_model() needs a folder: pass output_dir= or set ERLConfig.output_dir")

        def write() -> str:
            os.makedirs(folder, exist_ok=True)
            if hasattr(self.model, "peft_config"):
                save_weights(folder, self.model, self.tokenizer)
            else:
                self.model.save_pretrained(folder)
                self.tokenizer.save_pretrained(folder)
            with open(os.path.join(folder, "training_args.json"), "w", encoding="utf-8") as f:
                json.dump(self.args.to_dict(), f, indent=1)
            return folder

        with self.progress.library_bars():
            return self.dist.on_main(write, default=folder)

    def push_to_hub(self, commit_message: str = "End of training", blocking: bool = True,
                    token: str | None = None, revision: str | None = None, **kwargs: Any) -> str | None:
        """Save the final model to ``args.output_dir`` (:meth:`save_model`) and upload that folder to
        ``args.hub_model_id`` (transformers' ``Trainer.push_to_hub``); returns the repository's URL.

        Only this method and ``push_to_hub=True`` (at the end of ``train()``) reach the network.
        ``blocking=False``, ``revision`` and model-card keywords are not supported (refused).
        DDP: rank 0 uploads, the others return None.
        """
        if not blocking or revision is not None or kwargs:
            given = (["blocking=False"] if not blocking else []) + ([f"revision={revision!r}"] if revision else []) + [
                f"{k}=" for k in kwargs]
            raise ValueError(f"push_to_hub: {', '.join(given)} not supported; erl_lite uploads the saved folder "
                             "in one blocking commit to the repository's main branch")
        if not self.args.hub_model_id:
            raise ValueError("push_to_hub needs ERLConfig.hub_model_id='user-or-org/name' (the repository to "
                             "upload to)")
        if not self.args.output_dir:
            raise ValueError("push_to_hub uploads ERLConfig.output_dir, which is not set")
        from erl_lite.integrations import export

        folder = self.save_model()
        private = True if self.args.hub_private_repo is None else self.args.hub_private_repo
        return self.dist.on_main(lambda: export.push_to_hub(folder, self.args.hub_model_id, private=private,
                                                             token=token, commit_message=commit_message),
                                 default=None)

    def _write_checkpoint(self) -> str:
        with self.progress.library_bars():
            return self._save_files()

    def _save_files(self) -> str:
        return save_checkpoint(self.args.output_dir, self.step, self.model, self.optimizer, self.scheduler,
                               self.memory, self.history, self._run_identity(), self.args.save_total_limit,
                               tokenizer=self.tokenizer, hf_state=self._hf_state())

    def _hf_state(self) -> Any:
        """This run as a ``transformers.TrainerState`` (what ``trainer_state.json`` holds): HF's
        names for the step, the schedule and the log. ``best_metric`` / ``best_model_checkpoint``
        stay None: erl_lite has no ``metric_for_best_model`` to rank checkpoints by."""
        from transformers import TrainerState

        return TrainerState(global_step=self.step, max_steps=self.args.max_steps, epoch=self.state.epoch,
                            logging_steps=1, eval_steps=self.args.eval_steps, save_steps=self.args.save_steps,
                            train_batch_size=self.args.num_tasks_per_step,
                            num_train_epochs=self.args.num_train_epochs or 0, log_history=list(self.history.records))

    def _run_identity(self) -> dict[str, Any]:
        return run_identity(self.args.to_dict(), self.model, self.tokenizer, self.env)

    def _claim_output_dir(self) -> None:
        """A fresh run: refuse an ``output_dir`` holding another run, or clear that run's files
        when ``overwrite_output_dir`` says so (rank 0 alone deletes)."""
        found = previous_run(self.args.output_dir)
        # DDP: every process looks before any writes (rank 0 rewrites the history right after),
        # so all of them see the same folder and take the same decision.
        self.dist.barrier()
        if not found:
            self._claimed = True
            return
        if not self.args.overwrite_output_dir:
            raise CheckpointError(
                f"output_dir {self.args.output_dir!r} already holds another run ({', '.join(found)}); a fresh "
                "run there would overwrite its history and, with save_total_limit, delete its checkpoints. "
                "Resume it with train(resume_from_checkpoint=True) (erl-lite train --resume), pick another "
                "output_dir, or set overwrite_output_dir=True (--overwrite-output-dir) to delete that run's "
                "checkpoints and history and start afresh")
        if self.dist.is_main:
            remove_previous_run(self.args.output_dir)
        self._claimed = True

    def _past_max_steps(self, step: int, where: str) -> str:
        """The refusal of a ``max_steps`` below the step a run already reached (HF's Trainer
        would return without training; a lowered ``max_steps`` is more likely a typo or the
        wrong folder than a wish to do nothing)."""
        return (f"{where} is at step {step}, beyond max_steps={self.args.max_steps}: there is nothing to train "
                f"and the run would end without a word. Set max_steps above {step} to train further, "
                "or resume from an earlier checkpoint-<step> folder")

    def _resume(self, where: str | bool | os.PathLike, ignore_config_mismatch: bool) -> None:
        if where is True:
            if not self.args.output_dir:
                raise ValueError("resume_from_checkpoint=True looks in ERLConfig.output_dir, which is not "
                                 "set; set it or pass a checkpoint folder")
            state = latest_good_checkpoint(self.args.output_dir)
        else:
            state = read_checkpoint(os.fspath(where))
        if state.step > self.args.max_steps:
            raise ValueError(self._past_max_steps(state.step, f"the checkpoint {state.path}"))
        if self.args.output_dir and os.path.abspath(os.path.dirname(state.path or "")) != os.path.abspath(
                self.args.output_dir):
            self._claim_output_dir()  # a checkpoint from elsewhere continues here: as a fresh run would
        differences = run_differences(state.run, self._run_identity())
        if differences and not ignore_config_mismatch:
            raise ValueError(f"cannot resume from {state.path}: it was saved by a run with other settings:\n"
                             + "\n".join(f"  {d}" for d in differences)
                             + "\nPass train(..., ignore_config_mismatch=True) to resume anyway.")
        if differences:
            warnings.warn(f"resuming from {state.path} with changed settings: " + "; ".join(differences),
                          stacklevel=3)
        self._restore(state)
        self._apply_optimizer_settings(state.run.get("config", {}))
        in_output_dir = self.args.output_dir and os.path.abspath(state.path or "") == os.path.abspath(
            os.path.join(self.args.output_dir, f"checkpoint-{state.step}"))
        self._saved_step = state.step if in_output_dir else None

    def _restore(self, state: TrainingState) -> None:
        """Make the live trainer equal ``state`` (weights, optimizer, memory, RNG, step, history)."""
        apply_state(state, self.model, self.optimizer, self.scheduler, self.memory)
        self.step = state.step
        self.history.records, self.history.samples = list(state.records), list(state.samples)
        self.history.rewrite()

    def _apply_optimizer_settings(self, saved: dict[str, Any]) -> None:
        """A resume overriding the learning rate or weight decay takes effect: loading the
        optimizer state brought the checkpoint's values back."""
        lr, wd = self.args.learning_rate, self.args.weight_decay
        if saved.get("learning_rate", lr) != lr or saved.get("weight_decay", wd) != wd:
            bases = self.scheduler.base_lrs if self.scheduler is not None else [None] * len(self.optimizer.param_groups)
            for group, base in zip(self.optimizer.param_groups, bases):
                factor = group["lr"] / base if base else 1.0  # the schedule's progress is kept
                group.update(lr=lr * factor, initial_lr=lr, weight_decay=wd)
            if self.scheduler is not None:
                self.scheduler.base_lrs = [lr] * len(self.optimizer.param_groups)

    def _stopped(self, error: BaseException) -> None:
        """Any exception in train(): undo a step cut short, save the last finished step, and say
        so (a note on ``error``; a printed line for Ctrl-C). Nothing here may replace ``error``:
        a failure to undo or to save is a warning."""
        message = self._recover()
        if isinstance(error, KeyboardInterrupt):
            print(f"\nInterrupted: {message}")
        elif hasattr(error, "add_note"):  # Python 3.11+: shown under the traceback
            error.add_note(f"erl_lite: {message}")
        else:
            print(f"\nerl_lite: {message}", file=sys.stderr)

    def _recover(self) -> str:
        """Roll back to the last finished step and save it; returns what happened, for the user."""
        start, self._step_start = self._step_start, None
        if start is not None:
            try:
                self._restore(start)
            except Exception as e:  # noqa: BLE001 - the caller re-raises the original error
                warnings.warn(f"could not undo the unfinished step {self.step}: {e}", stacklevel=4)
                return f"step {self.step} did not finish and could not be undone; nothing saved"
        last = (f"step {self.step + 1} did not finish and was undone; " if start is not None else "") + (
            f"step {self.step} is the last finished one" if self.step else "no step finished")
        again = f"call trainer.train() again on this trainer to continue from step {self.step + 1}"
        if not self.args.output_dir or self.step == 0:
            return f"{last}; nothing saved. Fix the cause, then {again}"
        try:
            path = self._save_after_failure()
        except Exception as e:  # noqa: BLE001 - the original error is what the user must see
            warnings.warn(f"could not save step {self.step} after the run failed: {e}", stacklevel=4)
            return f"{last}; it was not saved ({type(e).__name__}). Fix the cause, then {again}"
        return (f"{last}, saved in {path}. Fix the cause, then {again}, or resume it in a new session "
                "with train(resume_from_checkpoint=True) (erl-lite train --resume)")

    def _save_after_failure(self) -> str:
        """Save the current (finished) step unless it is saved already. DDP: rank 0 writes without
        waiting for the others, which may be stopped anywhere (the state is replicated)."""
        path = os.path.join(self.args.output_dir, f"checkpoint-{self.step}")
        if self._saved_step != self.step:
            if self.dist.is_main:
                path = self._write_checkpoint()
            self._saved_step = self.step
        return path

    # --- display ---------------------------------------------------------------------------------
    def _progress(self) -> Any:
        from tqdm.auto import tqdm

        return tqdm(total=self.args.max_steps, initial=self.step, desc=f"{self.args.mode}",
                    unit="step", disable=not (self.args.progress_bar and self.dist.is_main))

    def _postfix(self, r: dict[str, Any]) -> str:
        """The step bar's summary of the step record ``r``."""
        parts = [f"r1={r[REWARD_FIRST]:.2f}"]
        if r.get(REWARD_SECOND) is not None:
            parts.append(f"r2={r[REWARD_SECOND]:.2f}")
        if self.args.mode != "rlvr":
            parts += [f"gate={r[GATE_RATE]:.2f}", f"mem={int(r[MEMORY_SIZE])}"]
        return " ".join(parts)

