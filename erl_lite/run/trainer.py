"""ERLTrainer: the training loop around :func:`erl_lite.core.phases.erl_step`.

Departures from the paper (docs/DEPARTURES.md): ``transformers.generate`` by default, not vLLM; DDP, not Ray;
LoRA/QLoRA (KL reference: the adapter disabled); small batches; one memory slot; evaluation of first attempts only.

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

import contextlib
import dataclasses
import math
import os
import random
import time
import warnings
from typing import Any, Callable, Sequence

from erl_lite import metric_names as keys
from erl_lite.config import ERLConfig
from erl_lite.config.checks import quantization_name, reflects
from erl_lite.core.env import Environment
from erl_lite.core.phases import PhaseContext, attempt_first, erl_step
from erl_lite.core.update import PolicyUpdater
from erl_lite.diagnostics.checks import RunFacts
from erl_lite.diagnostics.monitor import Monitor
from erl_lite.diagnostics.preflight import preflight
from erl_lite.engine.continuous import end_phase
from erl_lite.engine.generation import Generator
from erl_lite.engine.progress import Progress
from erl_lite.history import History
from erl_lite.integrations import wiring
from erl_lite.metrics import cuda_device, eval_metrics, peak_gpu_gb, reset_peak_gpu_memory, step_metrics
from erl_lite.records import StepRecord, Task
from erl_lite.run.args import (
    TrainerStateView,
    adapter_settings,
    adopt_model_object,
    build_optimizer,
    build_scheduler,
    check_callbacks,
    wants_4bit,
)
from erl_lite.run.callbacks import TrainerCallbacks, as_trainer_callback
from erl_lite.run.identity import model_fingerprint
from erl_lite.run.lengths import check_lengths
from erl_lite.run.saving import CheckpointSaving
from erl_lite.run.state import capture_state


class ERLTrainer(CheckpointSaving):
    """Trains a causal LM with ERL (or RLVR / Algorithm 1 / an ablation, per ``args.mode``).

    The first six parameters are TRL 1.16's ``GRPOTrainer``'s, in its order; multi-turn tasks and tools plug in
    through ``env=`` or ``environment_factory=`` (not ``tools``/``rollout_func``). ``model``: a name, a path or a
    loaded model (``args``' model settings applied or refused). Datasets: rows with a ``prompt`` (list, Dataset,
    file or name) or Tasks, by default the env's own. Reward functions receive ``trainer_state`` (:attr:`state`)."""

    def __init__(
        self,
        model: Any,
        reward_funcs: Callable | Sequence[Callable] | None = None,
        args: ERLConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        *,
        callbacks: Sequence[Callable[["ERLTrainer", StepRecord], None]] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        quantization_config: Any = None,
        peft_config: Any = None,
        environment_factory: Any = None,
        feedback_func: Callable | None = None,
        env: Environment | None = None,
        generator: Generator | None = None,
        reward_weights: Sequence[float] | None = None,
    ) -> None:
        if args is not None and not isinstance(args, ERLConfig):
            raise TypeError(
                f"args must be an ERLConfig (got {type(args).__name__}); e.g. "
                "ERLConfig.preset('gpu', max_steps=...) in place of a GRPOConfig"
            )
        self.args = args = args or ERLConfig()
        has_env = env is not None or environment_factory is not None  # it brings its own test tasks
        self.env, train_dataset = wiring.build_environment(
            args, env, environment_factory, reward_funcs, feedback_func, reward_weights, train_dataset
        )
        callbacks = check_callbacks(callbacks)
        self.reducer = wiring.process_group(args)  # DDP: this process's rank and device
        reporter = wiring.reporter_for(args, self.reducer)
        from transformers import set_seed

        set_seed(args.seed)  # adapter initialisation draws from the global generators
        self.model, self.tokenizer = self._load(model, processing_class, peft_config, quantization_config)
        self.reducer.check_device(self.model)  # DDP: one GPU per process
        self._weights = model_fingerprint(self.model)  # what resume compares: the tensors, not the path
        self.state = TrainerStateView(self)
        self.reward_log = wiring.attach(self.env, self.state, self.tokenizer, args)
        self._read_datasets(train_dataset, eval_dataset, has_env)
        self.generator = generator or wiring.generator_for(self.model, self.tokenizer, args, self.reducer.rank)
        self.memory = wiring.memory_for(self.env, args)
        # DDP: every rank keeps the (global) records; rank 0 alone writes the files.
        self.history = History(out_dir=args.output_dir if self.reducer.is_main else None, reporter=reporter)
        # Read at each bar, so setting progress_bar later counts.
        self.progress = Progress(lambda: self.args.progress_bar and self.reducer.is_main)
        self.ctx = PhaseContext(
            generator=self.generator, tokenizer=self.tokenizer, env=self.env, config=args, progress=self.progress
        )
        self.optimizer, scheduler = optimizers
        if self.optimizer is None:
            self.optimizer = build_optimizer([p for p in self.model.parameters() if p.requires_grad], args)
        self.scheduler = scheduler if scheduler is not None else build_scheduler(self.optimizer, args)
        self.updater = self._updater()
        self.step = 0
        self.last_outcome, self.last_record = None, None  # the last step's phase outcome and its StepRecord
        self.hf_callbacks = TrainerCallbacks(self, callbacks)  # the one channel: functions f(trainer, record) too
        self.callback_handler = self.hf_callbacks.handler  # transformers.Trainer's attribute name
        facts = dataclasses.replace(RunFacts.of(args), pretrained=self.pretrained)  # large_step: pretrained models only
        self.monitor = Monitor(lambda: self.args.diagnostics, facts, is_main=self.reducer.is_main)
        self.monitor.preflight(lambda: preflight(self))
        self.hf_callbacks.event("init_end")

    def _read_datasets(self, train_dataset: Any, eval_dataset: Any, has_env: bool) -> None:
        """The task lists, ``max_steps`` from ``num_train_epochs`` when unset, the length checks."""
        args = self.args
        self.train_tasks = wiring.read_tasks(self.env, train_dataset, "train")
        if not self.train_tasks:
            raise ValueError("train_dataset is empty: it needs at least one row with a 'prompt'")
        read_eval = eval_dataset is not None or has_env
        self.eval_tasks = wiring.read_tasks(self.env, eval_dataset, "eval") if read_eval else []
        if args.max_steps is None:  # num_train_epochs decides (see ERLConfig.num_train_epochs)
            args.max_steps = max(1, math.ceil(args.num_train_epochs * len(self.train_tasks) / args.num_tasks_per_step))
        if eval_dataset is not None and not self.eval_tasks:
            raise ValueError("eval_dataset is empty: pass None for no evaluation, or rows with a 'prompt'")
        check_lengths(
            args,
            self.model,
            self.tokenizer,
            self.env,
            {"train_dataset": self.train_tasks, "eval_dataset": self.eval_tasks},
        )

    def _updater(self) -> PolicyUpdater:
        pad = self.tokenizer.pad_token_id
        # DDP: wraps the policy (rank 0's weights on every process), global loss normalizers.
        updater = PolicyUpdater(
            self.model,
            self.optimizer,
            self.scheduler,
            self.args,
            pad if pad is not None else self.tokenizer.eos_token_id,
            reducer=self.reducer,
        )
        updater.progress = self.progress
        return updater

    def _load(self, model: Any, tokenizer: Any, peft_config: Any, quantization_config: Any) -> tuple[Any, Any]:
        from erl_lite.config.presets import pretrained_rate_warning, require_cuda_for_preset
        from erl_lite.models import load_policy, pretrained

        if isinstance(model, str) or hasattr(model, "__fspath__"):
            # A GPU preset must not fall back to the CPU unnoticed (a model object is an explicit choice).
            require_cuda_for_preset(self.args.preset_name)
            loaded = load_policy(
                model,
                tokenizer,
                quantization=quantization_name(wants_4bit(quantization_config, self.args)),
                **adapter_settings(self.args, peft_config),
                device=self.reducer.device,
            )  # DDP: cuda:<local rank>; None: the default
        else:
            loaded = adopt_model_object(model, tokenizer, self.args, peft_config, quantization_config)
        self.pretrained = pretrained(loaded[0])
        if self.pretrained and (note := pretrained_rate_warning(self.args.learning_rate)):
            warnings.warn(note, UserWarning, stacklevel=3)  # the CLI and run files switched an unset rate already
        return loaded

    def _batch(self, step: int) -> list[Task]:
        """Tasks of iteration ``step`` (1-based), a function of seed and step alone (so resume sees the same)."""
        n, pool = self.args.num_tasks_per_step, len(self.train_tasks)
        out = []
        for pos in range((step - 1) * n, step * n):
            epoch, offset = divmod(pos, pool)
            order = list(range(pool))
            random.Random(self.args.seed * 100_003 + epoch).shuffle(order)
            out.append(self.train_tasks[order[offset]])
        return out

    def train(
        self, resume_from_checkpoint: str | bool | os.PathLike | None = None, ignore_config_mismatch: bool = False
    ) -> History:
        """Run ``args.max_steps`` iterations; returns the :class:`History`.

        ``resume_from_checkpoint``: a folder, or True for the newest clean one in ``output_dir``;
        ``ignore_config_mismatch``: resume despite changed run settings (else refused, naming each field).
        An exception in a step rolls back to the last finished step, saves it, and re-raises with a note."""
        with self.run_lock():  # before the folder is looked at: a second writer is refused first
            self._open_run(resume_from_checkpoint, ignore_config_mismatch)
            if self.step == 0:
                self.monitor.start(self.history)  # the pre-flight findings, first in a fresh history
            bar = self._progress()
            self._training = True
            self.hf_callbacks.event("train_begin")
            control = self.hf_callbacks.control  # what the TrainerCallbacks asked for, read after each event
            try:
                if self.step == 0 and self.args.eval_steps and self.eval_tasks:
                    self.evaluate(log=True)
                while self.step < self.args.max_steps and not control.should_training_stop:
                    self._step_start = capture_state(
                        self.step, self.model, self.optimizer, self.scheduler, self.memory, self.history
                    )
                    self.hf_callbacks.event("step_begin")
                    self.training_step()  # clears _step_start once the step's record is written
                    logged = self.history.of_kind("train")[-1]  # the step's record (a callback may log after it)
                    bar.update(1)
                    bar.set_postfix_str(self._postfix(logged))
                    self.hf_callbacks.event("log", logs=logged)
                    self._evaluate_and_save_as_due(control)
            except (Exception, KeyboardInterrupt) as error:
                self._stopped(error)
                raise
            finally:
                self._step_start, self._training = None, False
                bar.close()
                self.progress.close_all()  # a phase's bar an error left open
                self.history.close_reporter()
            self._close_run()
            self.hf_callbacks.event("train_end")
            return self.history

    def _evaluate_and_save_as_due(self, control: Any) -> None:
        """Evaluate and save as ``eval_steps`` / ``save_steps`` or a TrainerCallback's ``control`` asks."""
        a = self.args
        if self.eval_tasks and (
            control.should_evaluate or a.eval_steps and (self.step % a.eval_steps == 0 or self.step == a.max_steps)
        ):
            self.evaluate(log=True)
        if a.output_dir and (control.should_save or a.save_steps and self.step % a.save_steps == 0):
            self.save_checkpoint()

    def training_step(self) -> StepRecord:
        """One iteration: every phase, the update, and the history record."""
        self.step += 1
        tasks = self._batch(self.step)
        memory = self.memory if self.args.uses_memory else None
        memory_before = self.memory.entries
        device = cuda_device(self.model)
        reset_peak_gpu_memory(device)
        t0 = time.perf_counter()
        # DDP: this process plays its block of the tasks, holding memory writes back until merge.
        view = self.reducer.deferred(memory)
        try:
            outcome = erl_step(self.ctx, self.reducer.shard(tasks), view)
        finally:  # the rollouts are done: no cache computed with these weights outlives the update
            end_phase(self.generator)
        t1 = time.perf_counter()
        losses = self.updater.update(outcome.samples, step=self.step)  # the step is named in its warnings and errors
        t2 = time.perf_counter()
        # DDP: every process's records, and memory written in rank order (identity in one process).
        outcome = self.reducer.merge(outcome, view)
        metrics = {
            keys.STEP: self.step,
            **step_metrics(outcome, memory, self.args.mode),
            **wiring.env_step_extras(self.env, outcome, memory, self.args.mode),
            **losses.to_metrics(),
            **wiring.logged_metrics(self.reward_log, self.reducer),
            keys.TIME_UPDATE: t2 - t1,
            keys.TIME_STEP: t2 - t0,
            keys.LR: self.optimizer.param_groups[0]["lr"],  # the rate of the next optimizer step, the schedule's
            keys.PEAK_GPU_GB: peak_gpu_gb(device),
        }
        record = StepRecord(
            step=self.step,
            tasks=tasks,
            first_attempts=outcome.first_attempts,
            retries=outcome.retries,
            memory_before=memory_before,
            memory_after=self.memory.entries,
            metrics=metrics,
        )
        self.history.log(metrics, step_record=record)
        if self.step % self.args.sample_every == 0:
            self.history.log_sample(record.to_dict())
        self.last_outcome, self.last_record = outcome, record
        self._step_start = None  # the step is finished: a failure from here on keeps it
        self.hf_callbacks.event("step_end")  # TrainerCallbacks' on_step_end and the functions f(trainer, record)
        self.monitor.after_step(self.history)  # under diagnostics="raise" a warning stops the run here
        return record

    def add_callback(self, callback: Any) -> None:
        """Add a TrainerCallback (a class or an instance) or a function ``f(trainer, record)``, as Trainer's."""
        self.callback_handler.add_callback(as_trainer_callback(check_callbacks([callback])[0], self))

    def evaluate(
        self, tasks: list[Task] | None = None, num_generations: int | None = None, log: bool = False
    ) -> dict[str, float]:
        """First attempts only, without memory; ``log=True`` also records an eval record at the current step."""
        with self.run_lock() if log else contextlib.nullcontext():  # a logged evaluation writes the run
            tasks = self.eval_tasks if tasks is None else tasks
            if not tasks:
                raise ValueError("no evaluation tasks: pass eval_dataset= or tasks=")
            mine = self.reducer.shard(tasks, allow_empty=True)  # DDP: each process plays a block
            attempts = []
            try:
                if mine:
                    attempts = attempt_first(
                        self.ctx,
                        mine,
                        num_generations or self.args.eval_num_generations,
                        params=self.ctx.eval_params(),
                        desc="evaluation",
                    )
            finally:
                end_phase(self.generator)
            attempts = self.reducer.gather(attempts)
            metrics = eval_metrics(attempts)
            metrics.update(
                {keys.EVAL_PREFIX + k: v for k, v in wiring.logged_metrics(self.reward_log, self.reducer).items()}
            )
            metrics.update(wiring.env_eval_extras(self.env, attempts))
            if log:
                if self.args.output_dir and not self._claimed and self.step == 0:
                    self._claim_output_dir()  # the run's first record: the folder becomes this run's
                self.history.log({keys.STEP: self.step, **metrics}, kind="eval")
                self.hf_callbacks.event("log", logs=self.history.records[-1])
                if not self._training:  # train() finishes its tracker runs itself, at its end
                    self.history.close_reporter()
            self.hf_callbacks.event("evaluate", metrics=metrics)
            return metrics

    def _progress(self) -> Any:
        from tqdm.auto import tqdm

        return tqdm(
            total=self.args.max_steps,
            initial=self.step,
            desc=f"{self.args.mode}",
            unit="step",
            disable=not (self.args.progress_bar and self.reducer.is_main),
        )

    def _postfix(self, r: dict[str, Any]) -> str:
        """The step bar's summary of the step record ``r``."""
        parts = [f"r1={r[keys.REWARD_FIRST]:.2f}"]
        if r.get(keys.REWARD_SECOND) is not None:
            parts.append(f"r2={r[keys.REWARD_SECOND]:.2f}")
        if reflects(self.args.mode):
            parts += [f"gate={r[keys.GATE_RATE]:.2f}", f"mem={int(r[keys.MEMORY_SIZE])}"]
        return " ".join(parts)
