"""The trainer's run folder: checkpoints, the final model, resume, and recovery from a failed step (a base
of :class:`~erl_lite.run.trainer.ERLTrainer`; the files are :mod:`erl_lite.run.checkpoint`'s)."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from erl_lite.config import ERLConfig
from erl_lite.core.env import Environment
from erl_lite.core.memory import MemoryBank, ReflectionMemory
from erl_lite.engine.policy import sampled_stale
from erl_lite.engine.progress import Progress
from erl_lite.history import History
from erl_lite.run.args import TrainerStateView
from erl_lite.run.callbacks import TrainerCallbacks
from erl_lite.run.checkpoint import (
    find_run,
    mark_last_written,
    previous_run,
    remove_previous_run,
    save_checkpoint,
    save_weights,
)
from erl_lite.run.identity import run_differences, run_identity
from erl_lite.run.layout import write_json
from erl_lite.run.lock import FILES_RECORD, RunLock, check_out, written
from erl_lite.run.state import CheckpointError, ResumeRefused, TrainingState, apply_state


class CheckpointSaving:
    """Saving and resuming for :class:`~erl_lite.run.trainer.ERLTrainer` (see there for an example): of its
    trainer it reads only the public attributes annotated below, each set by ``ERLTrainer.__init__`` (a test
    holds both)."""

    args: ERLConfig
    reducer: Any  # wiring.process_group's DataParallel (the trainer reaches integrations only through wiring)
    env: Environment
    history: History
    hf_callbacks: TrainerCallbacks
    memory: ReflectionMemory | MemoryBank
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    progress: Progress
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    state: TrainerStateView
    step: int  # iterations finished
    tokenizer: Any

    _saved_step: int | None = None  # step of this run's newest checkpoint in output_dir
    _claimed = False  # output_dir checked to hold no other run, and taken by this one
    _step_start: TrainingState | None = None  # where the running step began (None between steps)
    _training = False  # inside train(), which closes the tracker runs at its end
    _weights: dict[str, str] | None = None  # identity.model_fingerprint of the model as loaded (in __init__)
    _lock: RunLock | None = None

    def run_lock(self, purpose: str = "training") -> Any:
        """This run's hold on ``output_dir`` (one writer per folder; rank 0 writes), taken by train()."""
        if not (self.args.output_dir and self.reducer.is_main):
            return contextlib.nullcontext()
        if self._lock is None or self._lock.folder != self.args.output_dir:
            self._lock = RunLock(self.args.output_dir, purpose)
        return self._lock

    def save_checkpoint(self) -> str:
        """Write ``<output_dir>/checkpoint-<step>`` and rotate old ones; returns its path."""
        if not self.args.output_dir:
            raise ValueError("ERLConfig.output_dir is not set; nowhere to save a checkpoint")
        # DDP: the state is replicated, so rank 0 writes it and the others wait for the folder.
        path = self.reducer.on_main(
            self._write_checkpoint, default=os.path.join(self.args.output_dir, f"checkpoint-{self.step}")
        )
        self._saved_step = self.step
        self.hf_callbacks.event("save")
        return path

    def save_model(self, output_dir: str | None = None) -> str:
        """Save the policy (a LoRA adapter, or the full model), tokenizer and ``training_args.json``, as HF's."""
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
            write_json(os.path.join(folder, "training_args.json"), self.args.to_dict())
            return folder

        with self.progress.library_bars():
            return self.reducer.on_main(write, default=folder)

    def push_to_hub(
        self,
        commit_message: str = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        **kwargs: Any,
    ) -> str | None:
        """Save the final model and upload ``args.output_dir`` to ``args.hub_model_id`` (the only network access)."""
        if not blocking or revision is not None or kwargs:
            given = (
                (["blocking=False"] if not blocking else [])
                + ([f"revision={revision!r}"] if revision else [])
                + [f"{k}=" for k in kwargs]
            )
            raise ValueError(
                f"push_to_hub: {', '.join(given)} not supported; erl_lite uploads the saved folder "
                "in one blocking commit to the repository's main branch"
            )
        if not self.args.hub_model_id:
            raise ValueError(
                "push_to_hub needs ERLConfig.hub_model_id='user-or-org/name' (the repository to upload to)"
            )
        if not self.args.output_dir:
            raise ValueError("push_to_hub uploads ERLConfig.output_dir, which is not set")
        from erl_lite.run import export

        folder = self.save_model()
        private = True if self.args.hub_private_repo is None else self.args.hub_private_repo
        return self.reducer.on_main(
            lambda: export.push_to_hub(
                folder, self.args.hub_model_id, private=private, token=token, commit_message=commit_message
            ),
            default=None,
        )

    def _write_checkpoint(self) -> str:
        with self.progress.library_bars():
            return save_checkpoint(
                self.args.output_dir,
                self.step,
                self.model,
                self.optimizer,
                self.scheduler,
                self.memory,
                self.history,
                self._run_identity(),
                self._hf_state(),
                self.args.save_total_limit,
                tokenizer=self.tokenizer,
            )

    def _hf_state(self) -> Any:
        """This run as a ``transformers.TrainerState`` (no ``best_metric``: there is no metric_for_best_model)."""
        from transformers import TrainerState

        return TrainerState(
            global_step=self.step,
            max_steps=self.args.max_steps,
            epoch=self.state.epoch,
            logging_steps=1,
            eval_steps=self.args.eval_steps,
            save_steps=self.args.save_steps,
            train_batch_size=self.args.num_tasks_per_step,
            num_train_epochs=self.args.num_train_epochs or 0,
            log_history=list(self.history.records),
        )

    def _run_identity(self) -> dict[str, Any]:
        return run_identity(self.args.to_dict(), self.model, self.tokenizer, self.env, self._weights)

    def _claim_output_dir(self) -> None:
        """Refuse an ``output_dir`` holding another run or files of a run's names that erl_lite did not write;
        clear the run when ``overwrite_output_dir`` says so (only the files erl_lite recorded writing there)."""
        out = self.args.output_dir
        try:  # files of a run's names that erl_lite did not write (a copied checkpoint too): never deleted
            check_out(out, "a fresh run", "training", overwrite=True)
        except CheckpointError as e:
            raise CheckpointError(
                f"{e}. A run to continue: resume it with train(resume_from_checkpoint=True) (erl-lite train --resume)"
            ) from None
        ours = written(out)
        found = previous_run(out, ours)
        # DDP: every process looks before rank 0 writes, so all take the same decision.
        self.reducer.barrier()
        if found and not self.args.overwrite_output_dir:
            raise CheckpointError(
                f"output_dir {out!r} already holds another run ({', '.join(found)}); a fresh "
                "run there would overwrite its history and, with save_total_limit, delete its checkpoints. "
                "Resume it with train(resume_from_checkpoint=True) (erl-lite train --resume), pick another "
                "output_dir, or set overwrite_output_dir=True (--overwrite) to delete the files that run wrote "
                f"(named in {FILES_RECORD}; no other file) and start afresh"
            )
        if found and self.reducer.is_main:
            remove_previous_run(out, ours)
        self._claimed = True

    def _past_max_steps(self, step: int, where: str) -> str:
        """The refusal of a ``max_steps`` below the step reached (HF's Trainer would silently do nothing)."""
        return (
            f"{where} is at step {step}, beyond max_steps={self.args.max_steps}: there is nothing to train "
            f"and the run would end without a word. Set max_steps above {step} to train further, "
            "or resume from an earlier checkpoint-<step> folder"
        )

    def _resume(self, where: str | bool | os.PathLike, ignore_config_mismatch: bool) -> None:
        if where is True and not self.args.output_dir:
            raise ValueError(
                "resume_from_checkpoint=True looks in ERLConfig.output_dir, which is not "
                "set; set it or pass a checkpoint folder"
            )
        choice = find_run(self.args.output_dir if where is True else where)
        state = choice.checkpoint()
        if self.reducer.is_main:
            print(f"erl_lite: resuming {choice.line}")
        if state.step > self.args.max_steps:
            raise ResumeRefused(self._past_max_steps(state.step, f"the checkpoint {state.path}"))
        here = self.args.output_dir and os.path.abspath(self.args.output_dir)
        if here and os.path.abspath(os.path.dirname(state.path or "")) != here:
            self._claim_output_dir()  # a checkpoint from elsewhere continues here: as a fresh run would
        differences = run_differences(state.run, self._run_identity())
        if differences and not ignore_config_mismatch:
            raise ResumeRefused(
                f"cannot resume from {state.path}: it was saved by a run with other settings:\n"
                + "\n".join(f"  {d}" for d in differences)
                + "\nPass train(..., ignore_config_mismatch=True) (erl-lite train --ignore-config-mismatch) to "
                "resume anyway."
            )
        if differences:
            warnings.warn(f"resuming from {state.path} with changed settings: " + "; ".join(differences), stacklevel=3)
        self._restore(state)
        self._apply_optimizer_settings(state.run.get("config", {}))
        in_output_dir = here and os.path.abspath(state.path or "") == os.path.join(here, f"checkpoint-{state.step}")
        self._saved_step = state.step if in_output_dir else None
        if in_output_dir and self.reducer.is_main:  # the lineage continues from here, not from a higher step
            mark_last_written(self.args.output_dir, state.step)

    def _restore(self, state: TrainingState) -> None:
        sampled_stale(self.model)  # forget the weights the undone step's samplers drew from: the redo samples anew
        apply_state(state, self.model, self.optimizer, self.scheduler, self.memory)
        self.step = state.step
        self.history.records, self.history.samples = list(state.records), list(state.samples)
        self.history.rewrite()

    def _apply_optimizer_settings(self, saved: dict[str, Any]) -> None:
        """Re-apply a changed learning rate or weight decay (loading the optimizer brought the old back), and
        set the rate this run's schedule gives at this step (a raised max_steps: not the old schedule's last)."""
        lr, wd, sched = self.args.learning_rate, self.args.weight_decay, self.scheduler
        groups = self.optimizer.param_groups
        if saved.get("learning_rate", lr) != lr or saved.get("weight_decay", wd) != wd:
            for group, base in zip(groups, getattr(sched, "base_lrs", None) or [None] * len(groups)):  # progress kept
                group.update(lr=lr * (group["lr"] / base if base else 1.0), initial_lr=lr, weight_decay=wd)
            if sched is not None:
                sched.base_lrs = [lr] * len(groups)
        if isinstance(sched, LambdaLR):  # transformers' schedules: the rate is base * lambda(optimizer steps)
            for group, base, f in zip(groups, sched.base_lrs, sched.lr_lambdas):
                group["lr"] = base * f(sched.last_epoch)

    def _stopped(self, error: BaseException) -> None:
        """Undo a step cut short, save the last finished one, and say so; never replaces ``error``."""
        message = self._recover()
        if isinstance(error, KeyboardInterrupt):
            print(f"\nInterrupted: {message}")
        elif hasattr(error, "add_note"):  # Python 3.11+: shown under the traceback
            error.add_note(f"erl_lite: {message}")
        else:
            print(f"\nerl_lite: {message}", file=sys.stderr)

    def _recover(self) -> str:
        """Roll back to the last finished step and save it; returns what happened."""
        start, self._step_start = self._step_start, None
        if start is not None:
            try:
                self._restore(start)
            except Exception as e:  # noqa: BLE001 - the caller re-raises the original error
                warnings.warn(f"could not undo the unfinished step {self.step}: {e}", stacklevel=4)
                return f"step {self.step} did not finish and could not be undone; nothing saved"
        last = (f"step {self.step + 1} did not finish and was undone; " if start is not None else "") + (
            f"step {self.step} is the last finished one" if self.step else "no step finished"
        )
        again = f"call trainer.train() again on this trainer to continue from step {self.step + 1}"
        if not self.args.output_dir or self.step == 0:
            return f"{last}; nothing saved. Fix the cause, then {again}"
        try:
            path = self._save_after_failure()
        except Exception as e:  # noqa: BLE001 - the original error is what the user must see
            warnings.warn(f"could not save step {self.step} after the run failed: {e}", stacklevel=4)
            return f"{last}; it was not saved ({type(e).__name__}). Fix the cause, then {again}"
        return (
            f"{last}, saved in {path}. Fix the cause, then {again}, or resume it in a new session "
            "with train(resume_from_checkpoint=True) (erl-lite train --resume)"
        )

    def _save_after_failure(self) -> str:
        """Save the finished step unless saved; DDP: rank 0 writes without waiting for the others."""
        path = os.path.join(self.args.output_dir, f"checkpoint-{self.step}")
        if self._saved_step != self.step:
            if self.reducer.is_main:
                path = self._write_checkpoint()
            self._saved_step = self.step
        return path

    def _open_run(self, resume_from_checkpoint: str | bool | os.PathLike | None, ignore_config_mismatch: bool) -> None:
        """Check the folder, resume or claim it (neither when this trainer continues its own stopped run)."""
        from transformers import set_seed

        continuing = self.step > 0 and not resume_from_checkpoint
        if not continuing:
            set_seed(self.args.seed)
        if resume_from_checkpoint:
            self._resume(resume_from_checkpoint, ignore_config_mismatch)
        elif not continuing and self.args.output_dir:
            if not self._claimed:  # an evaluate(log=True) before train() may have taken it already
                self._claim_output_dir()
            self.history.rewrite()  # the files afresh, from this trainer's records
        if self.step > self.args.max_steps:
            raise ValueError(self._past_max_steps(self.step, "this trainer"))
        if not continuing:
            self.reducer.decorrelate_rng()  # DDP: each process samples with its own noise

    def _close_run(self) -> None:
        """The last checkpoint, the final model and the upload of a finished ``train()``."""
        if self.args.output_dir and self._saved_step != self.step:
            self.save_checkpoint()
        if self.args.output_dir:
            self.save_model()  # the final model at output_dir's root, as transformers' Trainer leaves it
        if self.args.push_to_hub:
            self.push_to_hub()
