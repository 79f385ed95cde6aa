"""TRL 1.16's reward-side logging: ``log_metric``/``log_extra`` keywords, ``rewards/<name>/mean|std``
per reward function, and TRL's metric names (``reward``, ``completions/*``, ...) next to ERL's."""

from __future__ import annotations

import functools
import math

import pytest

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.integrations.reward_calls import RewardFunctionError
from erl_lite.metrics import describe
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

ROWS = [{"prompt": "Say 0.", "answer": "0"}, {"prompt": "Say 1.", "answer": "1"}]


def script(prompt: str) -> str:
    """First attempts at "Say 0." fail; the reflection's rulebook makes the second attempt succeed."""
    if "<prompt>" in prompt or "rulebook" in prompt.lower():
        return "<prompt>Say the number.</prompt>"
    if "Say the number." in prompt:
        return "0"
    return "no" if "Say 0." in prompt else "1"


def hit(completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def maybe(completions, answer, **kw):
    """TRL's "not applicable": None on the rows of task 0."""
    return [None if a == "0" else 0.5 for a in answer]


def _scaled(completions, factor, **kw):
    return [factor * 0.0 for _ in completions]


class Judge:
    def __call__(self, completions, **kw):
        return [0.0] * len(completions)


def trainer_for(reward_funcs, max_steps=1, **kw):
    tok = tiny_tokenizer()
    settings = {
        "max_completion_length": 8,
        "max_reflection_length": 64,
        "max_reflection_prompt_length": 4000,
        "eval_steps": 0,
        "progress_bar": False,
        "beta": 0.0,
        **kw,
    }
    args = ERLConfig.preset("cpu", max_steps=max_steps, num_tasks_per_step=2, num_generations=2, **settings)
    trainer = ERLTrainer(
        tiny_model(tok), reward_funcs, args, ROWS, processing_class=tok, generator=ScriptedGenerator(tok, script)
    )
    trainer._batch = lambda step: list(trainer.train_tasks)  # both tasks every step
    return trainer


def close(a, b):
    # values are means of a handful of small floats computed in double precision
    return a is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


# --- rewards/<name>/mean|std ----------------------------------------------------------------
def test_per_function_means_and_stds_with_trl_names():
    record = trainer_for([hit, maybe, functools.partial(_scaled, factor=2.0), Judge()]).train().records[-1]
    # first attempts: hit = [0, 0, 1, 1]; TRL's std is the unbiased one (n - 1)
    assert close(record["rewards/hit/mean"], 0.5) and close(record["rewards/hit/std"], math.sqrt(1 / 3))
    # None rows are left out of a function's statistics, as TRL's nanmean/nanstd leave NaN out
    assert close(record["rewards/maybe/mean"], 0.5) and close(record["rewards/maybe/std"], 0.0)
    # a partial is named after the function it wraps, a callable object after its class (TRL's rule)
    assert close(record["rewards/_scaled/mean"], 0.0) and close(record["rewards/Judge/mean"], 0.0)
    # second attempts (task 0's two gated rollouts) under their own role
    assert close(record["rewards/hit/second/mean"], 1.0) and close(record["rewards/hit/second/std"], 0.0)
    assert record["rewards/maybe/second/mean"] is None  # maybe returned None on every second attempt
    for key in set(record) - {"kind"}:
        assert describe(key), key


@pytest.mark.parametrize("funcs", [[hit], [hit, hit]])
def test_a_single_value_has_no_std_and_duplicate_names_share_a_key(funcs):
    record = trainer_for(funcs).train().records[-1]
    assert close(record["rewards/hit/mean"], 0.5)


def test_trl_environment_get_reward_is_named_after_the_class():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    from trl_env_counter import CounterEnv

    from erl_lite.integrations.trl_adapter import TRLEnvironment

    assert [f.__name__ for f in TRLEnvironment(CounterEnv).reward_funcs] == ["CounterEnv"]


# --- TRL's names ----------------------------------------------------------------------------
def test_trl_metric_names_next_to_erl_names():
    trainer = trainer_for([hit, maybe])
    record = trainer.train().records[-1]
    first = trainer.last_outcome.first_attempts
    totals = [0.0, 0.0, 1.5, 1.5]  # hit + maybe (None skipped)
    assert [a.reward for a in first] == totals
    assert close(record["reward"], record["reward/first"]) and close(record["reward"], 0.75)
    assert close(record["reward_std"], math.sqrt(sum((t - 0.75) ** 2 for t in totals) / 3))
    lengths = [a.num_generated_tokens for a in first]
    assert close(record["completions/mean_length"], sum(lengths) / 4)
    assert record["completions/min_length"] == min(lengths) and record["completions/max_length"] == max(lengths)
    assert record["completions/clipped_ratio"] == 0.0
    assert close(record["completions/mean_terminated_length"], sum(lengths) / 4)
    assert record["frac_reward_zero_std"] == record["frac_reward_zero_std/first"] == 1.0


def test_clipped_completions_count_and_leave_the_terminated_lengths():
    record = trainer_for([hit], max_completion_length=1).train().records[-1]
    assert record["completions/clipped_ratio"] == 1.0  # "no"/"1" plus the end token do not fit in 1
    assert record["completions/mean_terminated_length"] is None  # a gap, not TRL's made-up 0


# --- log_metric / log_extra -----------------------------------------------------------------
def test_log_metric_values_are_averaged_into_the_step():
    def logging_hit(completions, answer, log_metric, **kw):
        out = hit(completions, answer)
        log_metric("hit/rate", sum(out) / len(out))
        return out

    def twice(completions, log_metric, **kw):
        log_metric("calls", 1.0)
        log_metric("calls", 3.0)
        return [0.0] * len(completions)

    history = trainer_for([logging_hit, twice], max_steps=2).train()
    for record in history.of_kind("train"):
        # one call per phase: first attempts (0.5) and second attempts (1.0), averaged as TRL does
        assert close(record["hit/rate"], 0.75)
        assert close(record["calls"], 2.0)


def test_log_extra_columns_land_on_each_attempt():
    def tagging(completions, answer, log_extra, **kw):
        log_extra("said", [c.strip() for c in completions])
        return hit(completions, answer)

    trainer = trainer_for([tagging])
    trainer.train()
    first = trainer.last_outcome.first_attempts
    assert [a.extra["said"] for a in first] == ["no", "no", "1", "1"]
    assert all(r.second.extra["said"] == "0" for r in trainer.last_outcome.retries)
    assert first[0].to_dict()["extra"] == {"said": "no"}


def test_log_extra_takes_numpy_and_torch_scalars():
    import numpy as np
    import torch

    def tagging(completions, answer, log_extra, **kw):
        log_extra("n", [np.int64(i) for i in range(len(completions))])
        log_extra("t", [torch.tensor(0.5)] * len(completions))
        return hit(completions, answer)

    trainer = trainer_for([tagging])
    trainer.train()
    assert [a.extra for a in trainer.last_outcome.first_attempts] == [{"n": i, "t": 0.5} for i in range(4)]


@pytest.mark.parametrize(
    "body,message",
    [
        ("log_extra('col', ['x'])", "log_extra column 'col' has 1 values for a batch of 4"),
        ("log_extra(3, ['x'] * len(completions))", "log_extra column name must be a string"),
        ("log_metric('m', float('nan'))", "log_metric 'm'.*finite number"),
        ("log_metric('m', 'high')", "log_metric 'm'.*finite number"),
        ("log_metric('', 1.0)", "log_metric name must be a non-empty string"),
        ("log_extra('col', [object()] * len(completions))", "log_extra column 'col': row 0 .*cannot be written"),
        ("log_extra('col', [float('inf')] * len(completions))", "log_extra column 'col': row 0 .*cannot be written"),
        ("log_metric('reward', 1.0)", "log_metric name.*'reward'.*metrics erl_lite logs itself"),
    ],
)
def test_bad_log_calls_name_what_is_wrong(body, message):
    namespace: dict = {}
    exec(
        f"def bad(completions, log_extra, log_metric, **kw):\n    {body}\n    return [0.0] * len(completions)",
        namespace,
    )
    with pytest.raises(RewardFunctionError, match=message):
        trainer_for([namespace["bad"]]).train()
