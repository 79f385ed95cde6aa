"""Metric names: every key a run logs is in the glossary (or a member of a documented family,
``reward/first/<env>``), and every glossary key and family is logged by some run."""

from __future__ import annotations

import pytest

from erl_lite.config import ERLConfig
from erl_lite.generation import ScriptedGenerator
from erl_lite.envs.dataset import RewardFunctionEnv
from erl_lite.envs.multi import MultiEnvironment
from erl_lite.metrics import (ENV_FAMILY_SUFFIX, METRIC_FAMILIES, METRIC_GLOSSARY, REWARD_FUNC_FAMILIES, describe,
                              reward_func_family)
from erl_lite.testing import tiny_model, tiny_tokenizer
from erl_lite.trainer import ERLTrainer

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
        args = ERLConfig.preset("cpu", mode=mode, max_steps=1, num_tasks_per_step=4, num_generations=2,
                               max_completion_length=8, max_reflection_length=12, eval_steps=1,
                               eval_num_generations=1, progress_bar=False, beta=0.0, output_dir=None)
        trainer = ERLTrainer(model=tiny_model(tok), processing_class=tok, args=args, reward_funcs=say_reward,
                             train_dataset=ROWS, eval_dataset=ROWS[:1],
                             generator=ScriptedGenerator(tok, _script))
        history = trainer.train()
        for record in history.records:
            keys.setdefault(mode, set()).update(k for k in record if k != "kind")
    # two dataset environments routed by the ``environment`` column: the per-environment families
    args = ERLConfig.preset("cpu", max_steps=1, num_tasks_per_step=4, num_generations=2, max_completion_length=8,
                            max_reflection_length=12, eval_steps=1, eval_num_generations=1, progress_bar=False,
                            beta=0.0)
    multi = MultiEnvironment({"a": RewardFunctionEnv(say_reward), "b": RewardFunctionEnv(say_reward)})
    rows = [{**r, "environment": "ab"[i % 2]} for i, r in enumerate(ROWS)]
    trainer = ERLTrainer(model=tiny_model(tok), processing_class=tok, args=args, env=multi, train_dataset=rows,
                         eval_dataset=rows[:2], generator=ScriptedGenerator(tok, _script))
    for record in trainer.train().records:
        keys.setdefault("multi", set()).update(k for k in record if k != "kind")
    return keys


def family(key: str) -> str | None:
    """The family a logged key belongs to (``reward/first/a`` -> ``reward/first/<env>``), or None."""
    head = key.rpartition("/")[0] + ENV_FAMILY_SUFFIX
    return head if key not in METRIC_GLOSSARY and head in METRIC_FAMILIES else None


def test_every_logged_key_is_in_the_glossary(logged_keys):
    for mode, keys in logged_keys.items():
        undocumented = {k for k in keys if k not in METRIC_GLOSSARY and family(k) is None
                        and reward_func_family(k) is None}
        assert not undocumented, (mode, sorted(undocumented))
        assert all(describe(k) for k in keys)


def test_every_glossary_key_is_logged_by_some_run(logged_keys):
    union = set().union(*logged_keys.values())
    assert set(METRIC_GLOSSARY) <= union, sorted(set(METRIC_GLOSSARY) - union)


def test_every_reward_function_family_is_logged(logged_keys):
    erl = {reward_func_family(k) for k in logged_keys["erl"]} - {None}
    assert erl == set(REWARD_FUNC_FAMILIES)
    assert {k for k in logged_keys["rlvr"] if reward_func_family(k)} == {"rewards/say_reward/mean",
                                                                         "rewards/say_reward/std"}


def test_every_family_is_logged_for_each_environment(logged_keys):
    logged = {(family(k), k.rpartition("/")[2]) for k in logged_keys["multi"] if family(k)}
    assert logged == {(f, env) for f in METRIC_FAMILIES for env in "ab"}, sorted(logged)
    # single-environment runs log no family member
    assert not [k for mode in ("erl", "erl_simple", "rlvr") for k in logged_keys[mode] if family(k)]
