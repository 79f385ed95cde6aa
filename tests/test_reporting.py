"""report_to / logging_steps: records reach TensorBoard (read back from the event file), and
wandb / Trackio through stand-in modules (no network); frac_reward_zero_std per role."""

from __future__ import annotations

import sys
import types

import pytest

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.integrations.reporting import SAMPLE_COLUMNS, SAMPLES_TABLE, Reporter, logging_interval, resolve_report_to
from erl_lite.metric_names import ZERO_STD_FIRST, ZERO_STD_REFLECTION, ZERO_STD_SECOND
from erl_lite.metrics import frac_reward_zero_std
from erl_lite.records import TrainSample
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

ROWS = [{"prompt": f"Say {i}.", "answer": str(i)} for i in range(4)]


def say_reward(prompts, completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def _script(prompt: str) -> str:
    # "Say 0." and "Say 1." fail their first attempts; reflections parse, second attempts succeed
    if "<prompt>" in prompt or "rulebook" in prompt.lower():
        return "<prompt>Say the number.</prompt>"
    if "Say the number." in prompt:  # under the rulebook
        return "0 1 2 3"
    return "no" if ("Say 0." in prompt or "Say 1." in prompt) else "0 1 2 3"


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _trainer(tok, **overrides):
    values = dict(
        max_steps=3,
        num_tasks_per_step=2,
        num_generations=2,
        max_completion_length=8,
        max_reflection_length=48,
        eval_steps=0,
        progress_bar=False,
        beta=0.0,
    )
    args = ERLConfig.preset("cpu", **{**values, **overrides})
    return ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        reward_funcs=say_reward,
        train_dataset=ROWS,
        eval_dataset=ROWS[:1],
        generator=ScriptedGenerator(tok, _script),
    )


# --- config --------------------------------------------------------------------------------------
def test_report_to_is_normalised_like_transformers():
    assert ERLConfig().report_to == []
    assert ERLConfig(report_to="none").report_to == []
    assert ERLConfig(report_to="tensorboard").report_to == ["tensorboard"]
    assert ERLConfig(report_to=["wandb", "trackio"]).report_to == ["wandb", "trackio"]
    assert ERLConfig(report_to="all").report_to == ["all"]


@pytest.mark.parametrize(
    "bad, words",
    [
        ("mlflow", "report_to must be one of none, all, tensorboard, trackio, wandb, got 'mlflow'"),
        (["none", "wandb"], "stand alone"),
        (3, "string"),
    ],
)
def test_bad_report_to_names_the_field(bad, words):
    with pytest.raises(ValueError, match="report_to") as err:
        ERLConfig(report_to=bad)
    assert words in str(err.value)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "5"])
def test_bad_logging_steps_names_the_field(bad):
    with pytest.raises(ValueError, match="logging_steps"):
        ERLConfig(logging_steps=bad)


def test_logging_steps_as_a_fraction_of_max_steps():
    assert ERLConfig(logging_steps=0.25).logging_steps == 0.25
    assert ERLConfig(logging_steps=4.0).logging_steps == 4
    assert logging_interval(0.25, 10) == 3 and logging_interval(0.01, 10) == 1 and logging_interval(4, 10) == 4


# --- missing trackers --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["wandb", "trackio", "tensorboard"])
def test_a_tracker_that_is_not_installed_fails_at_construction_naming_the_extra(tok, name, monkeypatch):
    monkeypatch.setitem(sys.modules, name, None)  # import fails, as when it is not installed
    with pytest.raises(ImportError, match=rf"pip install 'erl-lite\[{name}\]'"):
        _trainer(tok, report_to=name)


def test_all_means_every_installed_tracker(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", types.ModuleType("wandb"))
    monkeypatch.setitem(sys.modules, "trackio", None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    assert resolve_report_to(["all"]) == ["wandb"]


# --- the window ----------------------------------------------------------------------------------
class _Recorder:
    def __init__(self, config):
        self.scalars, self.tables, self.closed = [], [], 0

    def log_scalars(self, values, step):
        self.scalars.append((step, dict(values)))

    def log_table(self, name, columns, rows, step):
        self.tables.append((step, name, columns, rows))

    def close(self):
        self.closed += 1


def test_a_send_carries_the_window_mean_and_the_latest_point_in_time_values():
    reporter = Reporter(ERLConfig(max_steps=5, logging_steps=2), ["rec"], {"rec": _Recorder})
    for step in range(1, 6):
        reporter.log(
            {
                "kind": "train",
                "step": step,
                "reward/first": float(step),
                "lr": 10.0 * step,
                "reward/second": None if step == 1 else 1.0,
            }
        )
    reporter.log({"kind": "eval", "step": 5, "eval/reward": 0.25})
    sent = reporter.trackers[0].scalars
    assert sent == [
        (2, {"reward/first": 1.5, "lr": 20.0, "reward/second": 1.0}),
        (4, {"reward/first": 3.5, "lr": 40.0, "reward/second": 1.0}),
        (5, {"reward/first": 5.0, "lr": 50.0, "reward/second": 1.0}),  # the last step sends
        (5, {"eval/reward": 0.25}),
    ]


def test_close_sends_a_window_cut_short_and_closes():
    opened = []

    def recorder(config):
        opened.append(_Recorder(config))
        return opened[-1]

    reporter = Reporter(ERLConfig(max_steps=10, logging_steps=4), ["rec"], {"rec": recorder})
    reporter.log({"kind": "train", "step": 1, "reward/first": 0.0})
    reporter.log({"kind": "train", "step": 2, "reward/first": 1.0})
    assert opened == []  # nothing due yet, nothing opened
    reporter.close()  # e.g. a run stopped at step 2
    assert opened[0].scalars == [(2, {"reward/first": 0.5})] and opened[0].closed == 1
    assert reporter.trackers == []


def test_resume_may_change_report_to_and_logging_steps(tok, tmp_path):
    pytest.importorskip("tensorboard")
    _trainer(tok, max_steps=1, output_dir=str(tmp_path)).train()
    resumed = _trainer(tok, max_steps=2, output_dir=str(tmp_path), report_to="tensorboard", logging_steps=2)
    resumed.train(resume_from_checkpoint=True)
    (run,) = (tmp_path / "runs").iterdir()
    assert _points(_read_events(run), "reward/first")[0] == [2]  # only the step trained after the resume


# --- TensorBoard, for real -------------------------------------------------------------------------
def _points(acc, key):
    """(steps, values) of a scalar tag; values are stored as float32."""
    events = acc.Scalars(key)
    return [e.step for e in events], pytest.approx([e.value for e in events], rel=1e-6)


def _read_events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_tensorboard_event_file_holds_every_scalar_at_its_step(tok, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    trainer = _trainer(tok, report_to="tensorboard", eval_steps=2, eval_num_generations=1)
    history = trainer.train()
    acc = _read_events(tmp_path / "tb")
    tags = set(acc.Tags()["scalars"])
    train = history.of_kind("train")
    for key in ("reward/first", "gate/rate", "loss/total", "lr", ZERO_STD_FIRST, ZERO_STD_SECOND):
        rows = [r for r in train if r.get(key) is not None]
        assert ([r["step"] for r in rows], [r[key] for r in rows]) == _points(acc, key), key
    evals = history.of_kind("eval")
    assert [r["step"] for r in evals] == [0, 2, 3]
    assert ([0, 2, 3], [r["eval/reward"] for r in evals]) == _points(acc, "eval/reward")
    logged = {k for r in history.records for k, v in r.items() if isinstance(v, float)}
    assert logged <= tags, sorted(logged - tags)
    # the text summary of each step: the failed task's first attempt, reflection, second attempt
    texts = acc.Tensors(f"{SAMPLES_TABLE}/text_summary")
    assert [t.step for t in texts] == [1, 2, 3]
    body = texts[0].tensor_proto.string_val[0].decode()
    assert "**first_attempt**" in body and "<prompt>Say the number.</prompt>" in body
    assert "**second_attempt**" in body and "**memory**" in body


def test_tensorboard_logging_steps_averages_over_the_window(tok, tmp_path):
    pytest.importorskip("tensorboard")
    trainer = _trainer(tok, report_to=["tensorboard"], logging_steps=2, output_dir=str(tmp_path / "run"))
    history = trainer.train()
    runs = list((tmp_path / "run" / "runs").iterdir())  # transformers' <output_dir>/runs/<date>_<host>
    assert len(runs) == 1
    r = [rec["reward/first"] for rec in history.of_kind("train")]
    assert ([2, 3], [(r[0] + r[1]) / 2, r[2]]) == _points(_read_events(runs[0]), "reward/first")


def test_tensorboard_writes_on_in_the_same_run_folder_after_a_close(tmp_path, monkeypatch):
    """A closed reporter reopens its TensorBoard writer on the same folder (torch's SummaryWriter makes a new event
    file there on the next write), not a new <date>_<host> folder, even when the clock has moved on."""
    pytest.importorskip("tensorboard")
    import transformers.integrations.integration_utils as hf_integrations

    names = iter(f"run{i}" for i in range(10))  # a later second names another folder
    monkeypatch.setattr(hf_integrations, "default_logdir", lambda: next(names))
    reporter = Reporter(ERLConfig(max_steps=4, output_dir=str(tmp_path)), ["tensorboard"])
    for step in (1, 2):
        reporter.log({"kind": "train", "step": step, "reward/first": float(step)})
        reporter.close()  # e.g. train() returning, then called again
    (run,) = tmp_path.iterdir()  # <output_dir>/<default_logdir()>: one folder
    assert ([1, 2], [1.0, 2.0]) == _points(_read_events(run), "reward/first")


# --- wandb and Trackio, through stand-ins (never the network) ------------------------------------
class _Table:
    def __init__(self, dataframe):
        self.dataframe = dataframe


def _fake_wandb():
    mod = types.ModuleType("wandb")
    mod.run, mod.calls = None, []

    def init(**kw):
        mod.calls.append(("init", kw))
        mod.run = types.SimpleNamespace(id=kw.get("id") or f"run{len(mod.calls)}")
        return mod.run

    def finish():
        mod.calls.append(("finish",))
        mod.run = None

    mod.init, mod.finish = init, finish
    mod.define_metric = lambda *a, **kw: mod.calls.append(("define_metric", a, kw))
    mod.log = lambda data, **kw: mod.calls.append(("log", data, kw))
    mod.Table = _Table
    mod.config = types.SimpleNamespace(update=lambda *a, **kw: None)
    return mod


def _fake_trackio():
    mod = types.ModuleType("trackio")
    mod.calls = []

    def init(**kw):
        mod.calls.append(("init", kw))
        return types.SimpleNamespace(name=kw.get("name") or "dancing-trackio-1")

    mod.init = init
    mod.log = lambda data, step=None: mod.calls.append(("log", data, step))
    mod.finish = lambda: mod.calls.append(("finish",))
    mod.Table = _Table
    return mod


def test_wandb_gets_every_scalar_and_a_samples_table_per_step(tok, monkeypatch):
    wandb = _fake_wandb()
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    history = _trainer(tok, report_to="wandb", max_steps=2).train()
    inits = [c for c in wandb.calls if c[0] == "init"]
    assert len(inits) == 1 and inits[0][1]["project"] == "erl-lite" and inits[0][1]["config"]["report_to"] == ["wandb"]
    assert ("define_metric", ("*",), {"step_metric": "train/global_step", "step_sync": True}) in wandb.calls
    logs = [c[1] for c in wandb.calls if c[0] == "log"]
    scalars = [d for d in logs if "reward/first" in d]
    assert [d["train/global_step"] for d in scalars] == [1, 2]
    assert [d["reward/first"] for d in scalars] == [r["reward/first"] for r in history.of_kind("train")]
    tables = [d for d in logs if SAMPLES_TABLE in d]
    assert [d["train/global_step"] for d in tables] == [1, 2]
    import pandas as pd

    frame = pd.concat([t[SAMPLES_TABLE].dataframe for t in tables])
    assert list(frame.columns) == SAMPLE_COLUMNS and len(frame) == 8  # 2 steps x 2 tasks x G = 2
    assert frame["step"].tolist() == [1] * 4 + [2] * 4
    gated, passed = frame[frame["r1"] < 1.0], frame[frame["r1"] >= 1.0]
    assert len(gated) >= 2 and set(gated["task_id"]) <= {"train-0", "train-1"}
    assert (gated["reflection"] == "<prompt>Say the number.</prompt>").all() and (gated["r2"] == 1.0).all()
    assert gated["second_attempt"].str.endswith("assistant: 0 1 2 3").all()
    assert (passed["reflection"] == "").all() and passed["r2"].isna().all() and (passed["second_attempt"] == "").all()
    assert (frame["memory"] == "Say the number.").all()  # memory after each step


def test_trackio_gets_scalars_at_their_step_and_is_finished(tok, monkeypatch):
    trackio = _fake_trackio()
    monkeypatch.setitem(sys.modules, "trackio", trackio)
    history = _trainer(tok, report_to="trackio", max_steps=2, eval_steps=2, eval_num_generations=1).train()
    logs = [(c[1], c[2]) for c in trackio.calls if c[0] == "log"]
    assert [step for data, step in logs if "reward/first" in data] == [1, 2]
    assert [step for data, step in logs if "eval/reward" in data] == [0, 2]
    assert [step for data, step in logs if SAMPLES_TABLE in data] == [1, 2]
    assert [data["gate/rate"] for data, _ in logs if "gate/rate" in data] == [
        r["gate/rate"] for r in history.of_kind("train")
    ]
    assert trackio.calls[-1] == ("finish",) and trackio.calls[0][0] == "init"


# --- tracker runs are finished, and continue when train() is called again ------------------------------
def _fake(name):
    return _fake_wandb() if name == "wandb" else _fake_trackio()


def _steps_logged(mod):
    return [
        c[1]["train/global_step"] if c[0] == "log" and "train/global_step" in c[1] else c[2]
        for c in mod.calls
        if c[0] == "log" and "reward/first" in c[1]
    ]


@pytest.mark.parametrize("name", ["wandb", "trackio"])
def test_the_run_is_finished_at_the_end_of_train(tok, monkeypatch, name):
    mod = _fake(name)
    monkeypatch.setitem(sys.modules, name, mod)
    _trainer(tok, report_to=name, max_steps=2).train()
    assert [c[0] for c in mod.calls].count("init") == 1 and mod.calls[-1] == ("finish",)


@pytest.mark.parametrize("name", ["wandb", "trackio"])
@pytest.mark.parametrize("fail_at", [1, 2])
def test_a_failed_train_finishes_the_run_and_a_second_train_continues_it(tok, monkeypatch, name, fail_at):
    mod = _fake(name)
    monkeypatch.setitem(sys.modules, name, mod)
    trainer = _trainer(tok, report_to=name, max_steps=3, output_dir=None)  # Trackio names the run itself

    def stop(trainer, record):
        if record.step == fail_at and not getattr(stop, "done", False):
            stop.done = True
            raise RuntimeError("stopped by a callback")

    trainer.add_callback(stop)
    with pytest.raises(RuntimeError, match="stopped"):
        trainer.train()
    assert mod.calls[-1] == ("finish",)  # nothing left open at the error
    trainer.train()  # continues from the step after the failure
    inits = [c[1] for c in mod.calls if c[0] == "init"]
    assert len(inits) == 2 and mod.calls[-1] == ("finish",)
    if name == "wandb":  # the same run, resumed
        assert inits[1]["id"] == "run1" and inits[1]["resume"] == "allow"
    else:
        assert inits[1]["name"] == "dancing-trackio-1" and inits[1]["resume"] == "allow"
    assert _steps_logged(mod) == [1, 2, 3]


def test_a_wandb_run_the_user_started_is_left_to_them(tok, monkeypatch):
    wandb = _fake_wandb()
    wandb.run = types.SimpleNamespace(id="mine")
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    _trainer(tok, report_to="wandb", max_steps=1).train()
    assert not [c for c in wandb.calls if c[0] in ("init", "finish")] and wandb.run.id == "mine"


@pytest.mark.parametrize("name", ["wandb", "trackio"])
def test_an_evaluation_logged_after_train_is_sent_and_finished(tok, monkeypatch, name):
    mod = _fake(name)
    monkeypatch.setitem(sys.modules, name, mod)
    trainer = _trainer(tok, report_to=name, max_steps=1)
    trainer.train()
    trainer.evaluate(log=True)
    assert any(c[0] == "log" and "eval/reward" in c[1] for c in mod.calls) and mod.calls[-1] == ("finish",)


# --- the project name ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, env_var", [("wandb", "WANDB_PROJECT"), ("trackio", "TRACKIO_PROJECT")])
@pytest.mark.parametrize(
    "project, env_value, expected",
    [
        (None, None, "erl-lite"),
        ("lab-3", None, "lab-3"),
        (None, "from-env", "from-env"),
        ("lab-3", "from-env", "lab-3"),  # the field, set in code, wins over the environment
    ],
)
def test_the_project_is_the_field_else_the_trackers_variable(
    tok, monkeypatch, name, env_var, project, env_value, expected
):
    mod = _fake(name)
    monkeypatch.setitem(sys.modules, name, mod)
    for var in ("WANDB_PROJECT", "TRACKIO_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    if env_value is not None:
        monkeypatch.setenv(env_var, env_value)
    _trainer(tok, report_to=name, max_steps=1, project=project).train()
    [init] = [c[1] for c in mod.calls if c[0] == "init"]
    assert init["project"] == expected


@pytest.mark.parametrize("bad", ["", "   ", 3, ["a"]])
def test_a_bad_project_names_the_field(bad):
    with pytest.raises((TypeError, ValueError), match="project"):
        ERLConfig(project=bad)


def test_the_project_is_a_cli_flag_and_does_not_block_a_resume():
    import argparse

    from erl_lite.cli.config_args import add_config_arguments, given_fields
    from erl_lite.run.identity import RESUMABLE_FIELDS

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    assert given_fields(parser.parse_args(["--project", "lab-3"])) == {"project": "lab-3"}
    assert "project" in RESUMABLE_FIELDS


# --- frac_reward_zero_std ----------------------------------------------------------------------------
def _samples(role, pairs):
    return [TrainSample(role, [], [], [], advantage, task) for advantage, task in pairs]


def test_frac_reward_zero_std_counts_groups_without_signal():
    batch = (
        _samples("first", [(0.0, "a"), (0.0, "a"), (0.7, "b"), (-0.7, "b"), (0.0, "c"), (0.0, "c")])
        + _samples("second", [(0.5, "a")])
        + _samples("reflection", [(0.0, "b")])
    )
    assert frac_reward_zero_std(batch, "first") == pytest.approx(2 / 3)
    assert frac_reward_zero_std(batch, "second") == 0.0  # a lone rollout with r = 0.5 has A = 0.5
    assert frac_reward_zero_std(batch, "reflection") == 1.0
    assert frac_reward_zero_std(batch, "internalization") is None


def test_frac_reward_zero_std_in_a_run(tok):
    # all four tasks every step, G = 2: tasks 0 and 1 fail both first attempts, task 2 fails
    # one of two, task 3 solves both; every second attempt (under the rulebook) succeeds
    calls = {"n": 0}

    def script(prompt: str) -> str:
        if "<prompt>" in prompt or "rulebook" in prompt.lower():
            return "<prompt>Say the number.</prompt>"
        if "Say the number." in prompt:
            return "0 1 2 3"
        if "Say 2." in prompt:
            calls["n"] += 1
            return "2" if calls["n"] % 2 else "no"
        return "no" if ("Say 0." in prompt or "Say 1." in prompt) else "3"

    args = ERLConfig.preset(
        "cpu",
        max_steps=2,
        num_tasks_per_step=4,
        num_generations=2,
        max_completion_length=8,
        max_reflection_length=48,
        eval_steps=0,
        progress_bar=False,
        beta=0.0,
        output_dir=None,
    )
    history = ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        reward_funcs=say_reward,
        train_dataset=ROWS,
        generator=ScriptedGenerator(tok, script),
    ).train()
    for record in history.of_kind("train"):
        assert record["reward/first"] == pytest.approx(3 / 8)
        assert record[ZERO_STD_FIRST] == pytest.approx(3 / 4)  # task 2's group has a spread
        # tasks 0 and 1: two equal r2 = 1; task 2: a lone retry with r2 = 1 gets A = 1
        assert record[ZERO_STD_SECOND] == pytest.approx(2 / 3)
        assert record[ZERO_STD_REFLECTION] == pytest.approx(2 / 3)
    no_second = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=4,
        num_generations=2,
        max_completion_length=8,
        max_reflection_length=48,
        eval_steps=0,
        progress_bar=False,
        beta=0.0,
        train_second=False,
    )
    record = (
        ERLTrainer(
            model=tiny_model(tok),
            processing_class=tok,
            args=no_second,
            reward_funcs=say_reward,
            train_dataset=ROWS,
            generator=ScriptedGenerator(tok, script),
        )
        .train()
        .records[-1]
    )
    assert record[ZERO_STD_SECOND] is None and record[ZERO_STD_REFLECTION] is not None  # not trained
