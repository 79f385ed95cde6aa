"""``transformers.TrainerCallback`` objects are honoured: their events fire at the points of
erl_lite's loop that match ``transformers.Trainer``'s, and ``control`` flags steer the loop."""

from __future__ import annotations

import pytest
from transformers import TrainerCallback, TrainerControl, TrainerState

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

ROWS = [{"prompt": f"Say {i}.", "answer": str(i)} for i in range(2)]


def hit(completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


class Recorder(TrainerCallback):
    """Writes down each event with the step it saw, and what it was given."""

    def __init__(self):
        self.events, self.logs, self.metrics, self.kwargs = [], [], [], {}

    def _note(self, name, args, state, control, **kw):
        assert isinstance(state, TrainerState) and isinstance(control, TrainerControl)
        self.events.append((name, state.global_step))
        self.kwargs[name] = kw

    def on_init_end(self, args, state, control, **kw):
        self._note("init_end", args, state, control, **kw)

    def on_train_begin(self, args, state, control, **kw):
        self._note("train_begin", args, state, control, **kw)

    def on_step_begin(self, args, state, control, **kw):
        self._note("step_begin", args, state, control, **kw)

    def on_step_end(self, args, state, control, **kw):
        self._note("step_end", args, state, control, **kw)

    def on_log(self, args, state, control, logs=None, **kw):
        self._note("log", args, state, control, **kw)
        self.logs.append(dict(logs))

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        self._note("evaluate", args, state, control, **kw)
        self.metrics.append(dict(metrics))

    def on_save(self, args, state, control, **kw):
        self._note("save", args, state, control, **kw)

    def on_train_end(self, args, state, control, **kw):
        self._note("train_end", args, state, control, **kw)


def make(callbacks, tmp_path=None, **kw):
    tok = tiny_tokenizer()
    settings = {
        "max_steps": 2,
        "num_tasks_per_step": 2,
        "num_generations": 2,
        "max_completion_length": 4,
        "max_reflection_length": 8,
        "eval_steps": 0,
        "progress_bar": False,
        "beta": 0.0,
        "output_dir": str(tmp_path) if tmp_path else None,
        **kw,
    }
    args = ERLConfig.preset("cpu", **settings)
    return ERLTrainer(
        tiny_model(tok),
        hit,
        args,
        ROWS,
        eval_dataset=ROWS[:1],
        processing_class=tok,
        callbacks=callbacks,
        generator=ScriptedGenerator(tok, lambda p: "1"),
    )


def test_every_event_fires_in_trainer_order(tmp_path):
    rec = Recorder()
    trainer = make([rec], tmp_path, eval_steps=2, save_steps=1)
    trainer.train()
    # transformers.Trainer's order: step_end, then log, evaluate (its own log first) and save
    assert rec.events == [
        ("init_end", 0),
        ("train_begin", 0),
        ("log", 0),
        ("evaluate", 0),  # the step-0 evaluation
        ("step_begin", 0),
        ("step_end", 1),
        ("log", 1),
        ("save", 1),
        ("step_begin", 1),
        ("step_end", 2),
        ("log", 2),
        ("log", 2),
        ("evaluate", 2),
        ("save", 2),
        ("train_end", 2),
    ]
    train_logs = [log for log in rec.logs if "reward/first" in log]
    assert [log["step"] for log in train_logs] == [1, 2]
    assert rec.metrics[0]["eval/reward"] == trainer.history.of_kind("eval")[-1]["eval/reward"]
    # transformers' keyword arguments: the model, tokenizer, optimizer and schedule
    kw = rec.kwargs["step_end"]
    assert kw["model"] is trainer.model and kw["processing_class"] is trainer.tokenizer
    assert kw["optimizer"] is trainer.optimizer and kw["lr_scheduler"] is trainer.scheduler


def test_state_follows_the_run():
    seen = []

    class Watch(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            seen.append((state.global_step, state.max_steps, state.epoch, len(state.log_history), args.max_steps))

    make([Watch()]).train()
    assert seen == [(1, 2, 1.0, 1, 2), (2, 2, 2.0, 2, 2)]


@pytest.mark.parametrize("event", ["on_step_end", "on_log", "on_step_begin"])
def test_should_training_stop_ends_the_run(event, tmp_path):
    class Stop(TrainerCallback):
        pass

    def stop(self, args, state, control, **kw):
        control.should_training_stop = True

    setattr(Stop, event, stop)
    rec = Recorder()
    trainer = make([Stop(), rec], tmp_path, max_steps=5)
    history = trainer.train()
    assert trainer.step == 1 and len(history.of_kind("train")) == 1
    assert ("train_end", 1) in rec.events
    assert (tmp_path / "checkpoint-1").is_dir()  # the last step is saved, as at a normal end


def test_should_save_and_should_evaluate_are_honoured(tmp_path):
    class Ask(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 1:
                control.should_save = control.should_evaluate = True

    trainer = make([Ask()], tmp_path, max_steps=3, save_steps=0)
    trainer.train()
    assert (tmp_path / "checkpoint-1").is_dir()
    assert [r["step"] for r in trainer.history.of_kind("eval")] == [1]


def test_callback_classes_and_plain_functions_mix():
    steps = []
    trainer = make([Recorder, lambda t, record: steps.append(record.step)])
    trainer.train()
    assert steps == [1, 2]
    assert any(isinstance(cb, Recorder) for cb in trainer.callback_handler.callbacks)


@pytest.mark.parametrize("bad", [42, "on_step_end", object()])
def test_other_objects_are_refused(bad):
    with pytest.raises(TypeError, match=r"callbacks\[0\]"):
        make([bad])


def test_functions_and_trainer_callbacks_share_one_channel_in_the_order_given():
    """One CallbackHandler runs them all: a function f(trainer, record) sits between the TrainerCallbacks given
    around it, at each step's end (also for a training_step called alone); add_callback takes both kinds."""
    order = []

    class Before(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            order.append(("before", state.global_step))

    class After(Before):
        def on_step_end(self, args, state, control, **kw):
            order.append(("after", state.global_step))

    trainer = make([Before(), lambda t, record: order.append(("function", record.step)), After()])
    record = trainer.training_step()
    assert order == [("before", 1), ("function", 1), ("after", 1)] and trainer.last_record is record
    trainer.add_callback(lambda t, record: order.append(("added", record.step)))
    trainer.add_callback(Recorder)
    trainer.training_step()
    assert order[3:] == [("before", 2), ("function", 2), ("after", 2), ("added", 2)]
    assert any(isinstance(cb, Recorder) for cb in trainer.callback_handler.callbacks)
    with pytest.raises(TypeError, match=r"callbacks\[0\]"):
        trainer.add_callback(42)
