"""Progress inside a step and during evaluation: every bar is captured through a stand-in for
``tqdm.auto.tqdm`` (the class the trainer's bars are made with), so counts can be checked."""

from __future__ import annotations

import pytest

# the run the trackers' tests use: "Say 0." and "Say 1." fail their first attempts, reflections
# parse, second attempts succeed
from test_reporting import ROWS, _script, say_reward

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer


class _Bar:
    """Records what a bar was asked to show (tqdm's constructor keywords, updates, close)."""

    made: list["_Bar"] = []

    def __init__(self, iterable=None, desc=None, total=None, disable=False, initial=0, **kw):
        self.desc, self.total, self.disable, self.n = desc, total, disable, initial
        self.iterable = iterable  # transformers' own bars (weight loading) iterate
        self.updates: list[int] = []
        self.closed = False
        _Bar.made.append(self)

    def __iter__(self):
        yield from self.iterable

    def update(self, n=1):
        self.n += n
        self.updates.append(n)

    def set_postfix_str(self, s, refresh=True):
        pass

    def close(self):
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture
def bars(monkeypatch):
    import tqdm.auto

    _Bar.made = []
    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)
    return _Bar.made


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _trainer(tok, **overrides):
    values = dict(
        max_steps=1,
        num_tasks_per_step=4,
        num_generations=2,
        max_completion_length=8,
        max_reflection_length=48,
        eval_steps=0,
        beta=0.0,
    )
    args = ERLConfig.preset("cpu", **{**values, **overrides})
    return ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        reward_funcs=say_reward,
        train_dataset=ROWS,
        eval_dataset=ROWS[:3],
        generator=ScriptedGenerator(tok, _script),
    )


def _shown(bars, word):
    return [b for b in bars if not b.disable and word in (b.desc or "")]


def _count_micro_batches(trainer):
    """Wrap the updater's per-micro-batch objective to count the micro-batches it trains."""
    calls = []
    objective = trainer.updater._objective

    def counted(batch, norm, gaps):
        calls.append(len(batch.roles))
        return objective(batch, norm, gaps)

    trainer.updater._objective = counted
    return calls


# beta > 0 trains every row (the KL term); with beta = 0, rows of a group with one reward have
# A = 0 and are not trained, so rlvr on this script (each task always passes or always fails)
# trains nothing and shows no update bar.
@pytest.mark.parametrize(
    "mode, tasks, generations, micro, beta",
    [
        ("erl", 4, 2, 2, 0.0),
        ("erl", 2, 3, 4, 0.04),
        ("erl_simple", 3, 2, 1, 0.04),
        ("rlvr", 2, 2, 3, 0.04),
        ("rlvr", 4, 2, 2, 0.0),
    ],
)
def test_a_step_shows_each_phase_and_the_update(tok, bars, mode, tasks, generations, micro, beta):
    trainer = _trainer(
        tok,
        mode=mode,
        num_tasks_per_step=tasks,
        num_generations=generations,
        per_device_train_batch_size=micro,
        beta=beta,
        output_dir=None,  # no saving bars
        **({"lora_r": 4} if beta else {}),
    )  # the KL reference is the adapter switched off
    trained = _count_micro_batches(trainer)
    trainer.train()
    out = trainer.last_outcome
    [first] = _shown(bars, "first attempts")
    assert (first.total, first.n) == (tasks * generations, len(out.first_attempts))
    if mode == "rlvr":
        assert not _shown(bars, "reflection") and not _shown(bars, "second attempts")
    else:
        assert out.retries, "the script makes some first attempts fail"
        [second] = _shown(bars, "second attempts")
        assert second.total == second.n == len(out.retries)
        shown = _shown(bars, "reflection")
        if mode == "erl":
            assert [(b.total, b.n) for b in shown] == [(len(out.reflections),) * 2]
    shown = _shown(bars, "update")
    assert [(b.total, b.n) for b in shown] == ([(len(trained),) * 2] if trained else [])  # a tick per micro-batch
    assert trained or (mode, beta) == ("rlvr", 0.0)
    assert all(b.closed for b in bars)


def test_no_bar_when_progress_bar_is_false(tok, bars):
    trainer = _trainer(tok, progress_bar=False, eval_steps=1)
    trainer.train()
    trainer.evaluate()
    assert [b.desc for b in bars if not b.disable] == []


def test_turning_the_bar_off_after_construction_takes_effect(tok, bars):
    trainer = _trainer(tok)
    trainer.args.progress_bar = False
    trainer.train()
    assert [b.desc for b in bars if not b.disable] == []


@pytest.mark.parametrize("n_tasks, generations", [(3, 2), (1, 1), (2, 4)])
def test_evaluate_has_its_own_bar(tok, bars, n_tasks, generations):
    from erl_lite.envs.rows import rows_to_tasks

    trainer = _trainer(tok)
    tasks = rows_to_tasks(ROWS[:n_tasks], prefix="eval")
    trainer.evaluate(tasks, num_generations=generations)
    [bar] = [b for b in bars if not b.disable]
    assert "evaluation" in bar.desc and bar.total == bar.n == n_tasks * generations and bar.closed


def test_training_evaluations_show_the_evaluation_bar(tok, bars):
    trainer = _trainer(tok, max_steps=2, eval_steps=1, eval_num_generations=2)
    trainer.train()
    shown = _shown(bars, "evaluation")
    assert [(b.total, b.n) for b in shown] == [(6, 6)] * 3  # before step 1, after steps 1 and 2


@pytest.mark.parametrize("where", ["update", "reward"])
def test_an_error_inside_a_step_leaves_no_bar_open(tok, bars, where):
    trainer = _trainer(tok, beta=0.04, lora_r=4)
    if where == "update":

        def broken(batch, norm, gaps):
            raise RuntimeError("boom in the update")

        trainer.updater._objective = broken
    else:
        calls = []

        def reward(prompts, completions, answer, **kw):  # the second phase's scoring fails
            calls.append(1)
            if len(calls) > 1:
                raise RuntimeError("boom in the reward")
            return say_reward(prompts, completions, answer)

        trainer.env.reward_funcs = [reward]
    with pytest.raises(Exception, match="boom"):  # a reward failure comes wrapped, naming the function
        trainer.train()
    assert [b for b in bars if not b.disable] and all(b.closed for b in bars)


def test_cli_eval_shows_an_evaluation_bar_and_prints_only_json(tmp_path, bars, capsys):
    import json

    from erl_lite.cli import main
    from erl_lite.embedded.demo import demo_trainer

    demo_trainer(
        seed=1, eval_tasks=2, max_steps=1, num_tasks_per_step=2, eval_steps=0, output_dir=str(tmp_path)
    ).train()
    bars.clear()
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(tmp_path), "--limit", "3", "--num-generations", "2"]) == 0
    got = json.loads(capsys.readouterr().out)  # the bar is not on stdout
    [bar] = _shown(bars, "evaluation")  # (transformers' own bar of loading the weights aside)
    assert bar.total == bar.n == got["tasks"] * 2 == 6 and bar.closed
