"""Metric names: every key a run logs is in the glossary, and every glossary key is logged."""

from __future__ import annotations

import pytest

from erl_lite.config import ERLConfig
from erl_lite.generation import ScriptedGenerator
from erl_lite.metrics import METRIC_GLOSSARY
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
                               eval_num_generations=1, progress_bar=False, beta=0.0)
        trainer = ERLTrainer(model=tiny_model(tok), processing_class=tok, args=args, reward_funcs=say_reward,
                             train_dataset=ROWS, eval_dataset=ROWS[:1],
                             generator=ScriptedGenerator(tok, _script))
        history = trainer.train()
        for record in history.records:
            keys.setdefault(mode, set()).update(k for k in record if k != "kind")
    return keys


def test_every_logged_key_is_in_the_glossary(logged_keys):
    for mode, keys in logged_keys.items():
        assert keys <= set(METRIC_GLOSSARY), (mode, sorted(keys - set(METRIC_GLOSSARY)))


def test_every_glossary_key_is_logged_by_some_run(logged_keys):
    union = set().union(*logged_keys.values())
    assert set(METRIC_GLOSSARY) <= union, sorted(set(METRIC_GLOSSARY) - union)
