"""``transformers.TrainerCallback`` objects, dispatched by its ``CallbackHandler`` at the matching points
of erl_lite's loop (one ERL iteration is one step; ``control`` is honoured after it). Departures from
transformers: ``on_log`` gets each record, not a ``logging_steps`` average; no epoch, substep or
optimizer-step events."""

from __future__ import annotations

from typing import Any, Sequence


def is_trainer_callback(cb: Any) -> bool:
    """Whether ``cb`` is a ``transformers.TrainerCallback`` instance or subclass."""
    from transformers import TrainerCallback

    return isinstance(cb, TrainerCallback) or (isinstance(cb, type) and issubclass(cb, TrainerCallback))


def as_trainer_callback(callback: Any, trainer: Any) -> Any:
    """``callback`` as a TrainerCallback, so one handler runs them all: a TrainerCallback as it is, a function
    ``f(trainer, record)`` called at each step's end with the step's StepRecord (``trainer.last_record``)."""
    if is_trainer_callback(callback):
        return callback
    from transformers import TrainerCallback

    class StepFunction(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            callback(trainer, trainer.last_record)

    return StepFunction()


def _flow_callback() -> Any:
    """A flow callback that sets nothing: erl_lite's loop decides when to evaluate and save."""
    from transformers.trainer_callback import DefaultFlowCallback

    class ERLFlowCallback(DefaultFlowCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            return control

    return ERLFlowCallback()


class TrainerCallbacks:
    """The ``TrainerCallback`` objects of one trainer, with transformers' state and control."""

    def __init__(self, trainer: Any, callbacks: Sequence[Any]) -> None:
        from transformers import TrainerControl, TrainerState
        from transformers.trainer_callback import CallbackHandler

        self.trainer, a = trainer, trainer.args
        every = [_flow_callback(), *(as_trainer_callback(cb, trainer) for cb in callbacks)]
        self.handler = CallbackHandler(every, trainer.model, trainer.tokenizer, trainer.optimizer, trainer.scheduler)
        self.state = TrainerState(  # its step, max_steps, epoch and log history: set at each event
            logging_steps=a.logging_steps,
            eval_steps=a.eval_steps,
            save_steps=a.save_steps,
            train_batch_size=a.num_tasks_per_step,
            num_train_epochs=a.num_train_epochs or 0,
            is_local_process_zero=trainer.reducer.is_main,
            is_world_process_zero=trainer.reducer.is_main,
        )
        self.control = TrainerControl()

    def event(self, name: str, **kwargs: Any) -> Any:
        """Run ``on_<name>`` of every callback (transformers' dispatch); returns the control."""
        t, s = self.trainer, self.state
        # Read from the trainer at each event: one home for the step and the history.
        s.global_step, s.max_steps, s.epoch = t.step, t.args.max_steps or 0, t.state.epoch
        s.log_history = t.history.records
        self.control = getattr(self.handler, f"on_{name}")(t.args, s, self.control, **kwargs)
        return self.control
