"""Metric names: every key a run logs is in the glossary (or a member of a documented family,
``reward/first/<env>``), and every glossary key and family is logged by some run."""

from __future__ import annotations

import pytest

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.envs.multi import MultiEnvironment
from erl_lite.integrations.dataset import RewardFunctionEnv
from erl_lite.metrics import (
    ENV_FAMILY_SUFFIX,
    METRIC_FAMILIES,
    METRIC_GLOSSARY,
    REWARD_FUNC_FAMILIES,
    describe,
    reward_func_family,
)
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

ROWS = [{"prompt": f"Say {i}.", "answer": str(i)} for i in range(4)]


def say_reward(prompts, completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def _script(prompt: str) -> str:
    # first attempts of "Say 0." and "Say 1." fail; reflections and second attempts succeed
    if "<prompt>" in prompt or "rulebook" in prompt.lower():
        return "<prompt>Say the number.</prompt> 0 1 2 3"
    return "no" if ("Say 0." in prompt or "Say 1." in prompt) else "0 1 2 3"


@pytest.fixture(scope="module")
def logged_keys():
    tok = tiny_tokenizer()
    keys: dict[str, set[str]] = {}
    for mode in ("erl", "erl_simple", "rlvr"):
        args = ERLConfig.preset(
            "cpu",
            mode=mode,
            max_steps=1,
            num_tasks_per_step=4,
            num_generations=2,
            max_completion_length=8,
            max_reflection_length=12,
            eval_steps=1,
            eval_num_generations=1,
            progress_bar=False,
            beta=0.0,
            output_dir=None,
        )
        trainer = ERLTrainer(
            model=tiny_model(tok),
            processing_class=tok,
            args=args,
            reward_funcs=say_reward,
            train_dataset=ROWS,
            eval_dataset=ROWS[:1],
            generator=ScriptedGenerator(tok, _script),
        )
        history = trainer.train()
        for record in history.records:
            keys.setdefault(mode, set()).update(k for k in record if k != "kind")
    # two dataset environments routed by the ``environment`` column: the per-environment families
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=4,
        num_generations=2,
        max_completion_length=8,
        max_reflection_length=12,
        eval_steps=1,
        eval_num_generations=1,
        progress_bar=False,
        beta=0.0,
    )
    multi = MultiEnvironment({"a": RewardFunctionEnv(say_reward), "b": RewardFunctionEnv(say_reward)})
    rows = [{**r, "environment": "ab"[i % 2]} for i, r in enumerate(ROWS)]
    trainer = ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        env=multi,
        train_dataset=rows,
        eval_dataset=rows[:2],
        generator=ScriptedGenerator(tok, _script),
    )
    for record in trainer.train().records:
        keys.setdefault("multi", set()).update(k for k in record if k != "kind")
    return keys


def family(key: str) -> str | None:
    """The family a logged key belongs to (``reward/first/a`` -> ``reward/first/<env>``), or None."""
    head = key.rpartition("/")[0] + ENV_FAMILY_SUFFIX
    return head if key not in METRIC_GLOSSARY and head in METRIC_FAMILIES else None


def test_every_logged_key_is_in_the_glossary(logged_keys):
    for mode, keys in logged_keys.items():
        undocumented = {
            k for k in keys if k not in METRIC_GLOSSARY and family(k) is None and reward_func_family(k) is None
        }
        assert not undocumented, (mode, sorted(undocumented))
        assert all(describe(k) for k in keys)


def test_every_glossary_key_is_logged_by_some_run(logged_keys):
    union = set().union(*logged_keys.values())
    assert set(METRIC_GLOSSARY) <= union, sorted(set(METRIC_GLOSSARY) - union)


def test_every_reward_function_family_is_logged(logged_keys):
    erl = {reward_func_family(k) for k in logged_keys["erl"]} - {None}
    assert erl == set(REWARD_FUNC_FAMILIES)
    assert {k for k in logged_keys["rlvr"] if reward_func_family(k)} == {
        "rewards/say_reward/mean",
        "rewards/say_reward/std",
    }


def test_every_family_is_logged_for_each_environment(logged_keys):
    logged = {(family(k), k.rpartition("/")[2]) for k in logged_keys["multi"] if family(k)}
    assert logged == {(f, env) for f in METRIC_FAMILIES for env in "ab"}, sorted(logged)
    # single-environment runs log no family member
    assert not [k for mode in ("erl", "erl_simple", "rlvr") for k in logged_keys[mode] if family(k)]


# --- one step-metrics function: the per-environment keys are step_metrics on each slice ----------
def _step(rewards_first, gated, second_rewards, envs):
    """A StepRecord-like step over tasks named '<env>:<n>' (first attempts, retries of some)."""
    from types import SimpleNamespace

    from erl_lite.records import Attempt, Retry

    first = [
        Attempt(f"{envs[i % len(envs)]}:{i}", "first", 0, "", [], [1], [1], [1], r, r >= 1.0, "", "", 1)
        for i, r in enumerate(rewards_first)
    ]
    retries = [
        Retry(first[i], None, Attempt(first[i].task_id, "second", 0, "", [], [1], [1], [1], r2, r2 >= 1.0, "", "", 1))
        for i, r2 in zip(gated, second_rewards)
    ]
    return SimpleNamespace(first_attempts=first, retries=retries, samples=[], memory_writes=0, seconds={})


@pytest.mark.parametrize(
    "rewards_first, gated, second_rewards, envs, mode",
    [
        ([0.0, 1.0, 0.0, 0.5], [0, 2], [1.0, 0.0], ["a", "b"], "erl"),
        ([0.0, 0.0, 0.0], [0, 1, 2], [1.0, 1.0, 0.0], ["a", "b", "c"], "erl"),
        ([1.0, 1.0], [], [], ["a", "b"], "erl"),
        ([0.0, 1.0], [], [], ["a", "b"], "rlvr"),
        ([0.25], [0], [0.75], ["a", "b"], "erl_simple"),  # env b has no task this step: its keys are None
    ],
)
def test_env_step_metrics_are_step_metrics_on_each_environments_slice(
    monkeypatch, rewards_first, gated, second_rewards, envs, mode
):
    import erl_lite.metrics as metrics
    from erl_lite.core.memory import MemoryBank

    outcome = _step(rewards_first, gated, second_rewards, envs)
    env_of = lambda task_id: task_id.split(":")[0]
    memory = MemoryBank(envs, env_of=env_of)
    calls = []
    real = metrics.step_metrics
    monkeypatch.setattr(metrics, "step_metrics", lambda o, mem, m: calls.append(o) or real(o, mem, m))
    got = metrics.env_step_metrics(outcome, env_of, envs, memory, mode)
    assert len(calls) == len(envs), "env_step_metrics does not compute through step_metrics"
    for name in envs:
        mine = [a for a in outcome.first_attempts if env_of(a.task_id) == name]
        second = [r.second.reward for r in outcome.retries if env_of(r.task_id) == name]
        assert got[f"reward/first/{name}"] == (sum(a.reward for a in mine) / len(mine) if mine else None)
        assert got[f"reward/second/{name}"] == (sum(second) / len(second) if second else None)
        gate = len(second) / len(mine) if mine and mode != "rlvr" else None
        assert got[f"gate/rate/{name}"] == gate
        assert got[f"memory/size/{name}"] == 0.0
    assert len(got) == 6 * len(envs)


def test_keys_of_the_old_role_name_read_in_todays_names_from_histories_samples_and_checkpoints(tmp_path):
    """The internalization role was once logged as ``distill``: a history, its step records' metrics and a
    checkpoint's rows written then read with ``internalization`` keys; other keys, and eval records, as written."""
    import json

    from erl_lite.history import History
    from erl_lite.metric_names import LOSS_KEYS, RENAMED_KEYS, SAMPLES_KEYS
    from erl_lite.records import INTERNALIZATION
    from erl_lite.run.checkpoint import _read_jsonl

    old = {"step": 1, "loss/distill": -0.5, "samples/distill": 3.0, "loss/first": 0.25, "kind": "train"}
    evaluation = {"step": 1, "kind": "eval", "eval/success": 0.5}
    step = {"step": 1, "first_attempts": [], "metrics": {"loss/distill": -0.5, "gate/rate": 0.5}}
    (tmp_path / "history.jsonl").write_text(json.dumps(old) + "\n" + json.dumps(evaluation) + "\n")
    (tmp_path / "samples.jsonl").write_text(json.dumps(step) + "\n")
    new = {"step": 1, LOSS_KEYS[INTERNALIZATION]: -0.5, SAMPLES_KEYS[INTERNALIZATION]: 3.0, "loss/first": 0.25}
    history = History.load(tmp_path)
    assert history.records == [{**new, "kind": "train"}, evaluation]
    assert history.samples[0]["metrics"] == {LOSS_KEYS[INTERNALIZATION]: -0.5, "gate/rate": 0.5}
    assert history.series(LOSS_KEYS[INTERNALIZATION]) == ([1], [-0.5])
    assert _read_jsonl(str(tmp_path / "history.jsonl"))[0] == {**new, "kind": "train"}
    assert not set(RENAMED_KEYS) & set(METRIC_GLOSSARY)  # an old name is never a current one


def test_the_committed_demo_run_reads_with_an_internalization_loss():
    """erl_lite/assets/demo (regenerated by scripts/make_assets.py) has an internalization loss at every step; a run
    written when the role was ``distill`` reads the same way (the test above)."""
    from pathlib import Path

    from erl_lite.history import History
    from erl_lite.metric_names import LOSS_KEYS
    from erl_lite.records import INTERNALIZATION

    history = History.load(Path(__file__).resolve().parent.parent / "erl_lite" / "assets" / "demo")
    steps, values = history.series(LOSS_KEYS[INTERNALIZATION])
    assert len(steps) == len(history.of_kind("train")) > 0 and all(v == v for v in values)


def test_same_run_tells_a_renamed_key_from_a_changed_value(tmp_path):
    """scripts/same_run.py: a run written with the old 'distill' keys is the same run as today's, a changed value
    or figure is not, and wall-clock keys never count."""
    import importlib.util
    import json
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("same_run", Path(__file__).parent.parent / "scripts" / "same_run.py")
    same_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(same_run)

    def run(name, record, figure=b"png"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "history.jsonl").write_text(json.dumps(record) + "\n")
        (folder / "samples.jsonl").write_text(json.dumps({"step": 1, "metrics": record}) + "\n")
        (folder / "memory.png").write_bytes(figure)
        return str(folder)

    old = run("old", {"step": 1, "loss/distill": -0.5, "time/step": 3.0})
    assert same_run.differences(old, run("new", {"step": 1, "loss/internalization": -0.5, "time/step": 9.0})) == []
    assert same_run.differences(old, run("moved", {"step": 1, "loss/internalization": -0.25})) == [
        "history.jsonl: record 0 differs",
        "samples.jsonl: record 0 differs",
    ]
    assert same_run.differences(old, run("drawn", {"step": 1, "loss/distill": -0.5}, b"other")) == [
        "memory.png: the figures differ"
    ]
