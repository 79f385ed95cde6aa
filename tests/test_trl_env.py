"""A class written for TRL's ``environment_factory`` trains under ERLTrainer through the adapter."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from erl_lite.config import ERLConfig
from erl_lite.core.prompts import REFLECTION_REQUEST
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.envs.multi import MultiEnvironment
from erl_lite.integrations.trl_adapter import TRLEnvironment, parse_tool_calls, tool_methods
from erl_lite.records import Task
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from trl_env_counter import DATASET, CounterEnv  # noqa: E402


def call(step) -> str:
    return f"<tool_call>\n{json.dumps({'name': 'increment', 'arguments': {'step': step}})}\n</tool_call>"


def counter_player(prompt: str) -> str:
    """First attempts overshoot by one; with the rulebook ("add exactly the target") they hit it."""
    if REFLECTION_REQUEST in prompt:
        return "<prompt>Add exactly the target once, then say done.</prompt>"
    target = int(re.search(r"Make it exactly (\d+)", prompt).group(1))
    turns = prompt.count("<|im_start|>assistant\n") - 1  # replies so far
    if turns:
        return "done"
    return call(target if "Add exactly the target" in prompt else target + 1)


def test_tools_and_parsing_follow_trl():
    assert tool_methods(CounterEnv) == ["increment"]  # reset/get_reward/_private are not tools
    assert parse_tool_calls(call(2)) == [{"name": "increment", "arguments": {"step": 2}}]
    env = TRLEnvironment(CounterEnv)
    schema_line = next(line for line in env.system_prompt.splitlines() if '"increment"' in line)
    assert json.loads(schema_line)["function"]["parameters"]["required"] == ["step"]


def test_an_episode_calls_tools_and_reads_get_reward():
    env = TRLEnvironment(CounterEnv)
    ep = env.new_episode()
    first = ep.reset(Task("t", DATASET[0]["prompt"], {"target": 2}))
    assert first == "Use the counter tool.\nThe counter is at 0. Make it exactly 2, then say done."
    obs, _, done, _ = ep.step(call(1) + call(1))
    assert not done and obs.count("The counter is at") == 2 and "at 2." in obs
    obs, _, done, _ = ep.step(
        '<tool_call>{"name": "decrement", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "increment", "arguments": {"stride": 1}}</tool_call>'
    )
    assert '"error": "Tool decrement not found."' in obs and "unexpected keyword" in obs  # TRL's error results
    _, _, done, _ = ep.step("done")
    assert done and ep.reward == 1.0 and ep.success
    assert "4 tool call(s), 2 failed" in ep.feedback() and "Turn 3 reply:\ndone" in ep.trace()


def test_reward_funcs_receive_the_environments():
    seen = {}

    def closeness(completions, environments, target, **kw):
        seen.update(completions=completions, target=target)
        return [-abs(e.value - t) / 10 for e, t in zip(environments, target)]

    env = TRLEnvironment(CounterEnv, reward_funcs=closeness)
    episodes = []
    for target, step in ((2, 5), (3, 3)):
        ep = env.new_episode()
        ep.reset(Task(f"t{target}", DATASET[0]["prompt"], {"target": target}))
        ep.step(call(step)), ep.step("done")
        episodes.append(ep)
    env.score_batch(episodes, [[], []])
    assert [ep.reward for ep in episodes] == [pytest.approx(-0.3), 1.0]  # get_reward added with weight 1
    assert seen["target"] == [2, 3] and seen["completions"][0][0] == {"role": "assistant", "content": call(5)}


def test_clear_errors():
    with pytest.raises(ValueError, match="callable reset"):
        TRLEnvironment(object)

    class NoReward:
        def reset(self, **kw):
            return None

    with pytest.raises(ValueError, match="no reward source for NoReward"):
        TRLEnvironment(NoReward)

    class Undocumented(CounterEnv):
        def peek(self, x):
            return x

    with pytest.raises(ValueError, match="tool Undocumented.peek: cannot build its JSON schema"):
        TRLEnvironment(Undocumented)


def test_erl_trainer_trains_a_trl_environment():
    tok = tiny_tokenizer()
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=2,
        eval_steps=0,
        max_completion_length=96,
        max_reflection_length=64,
        max_episode_length=2048,
        max_reflection_prompt_length=4000,
        progress_bar=False,
    )  # + 64 fits 4096
    trainer = ERLTrainer(
        tiny_model(tok),
        args=args,
        train_dataset=DATASET[:2],
        processing_class=tok,
        environment_factory=CounterEnv,
        generator=ScriptedGenerator(tok, counter_player),
    )
    trainer._batch = lambda step: list(trainer.train_tasks)
    record = trainer.training_step()
    assert [a.reward for a in record.first_attempts] == [0.0] * 4  # overshoot
    assert [a.num_turns for a in record.first_attempts] == [2] * 4  # a tool call, then the answer
    assert [r.second.reward for r in record.retries] == [1.0] * 4  # the rulebook fixes it
    assert "<tools>" in record.first_attempts[0].system_prompt
    assert all("<tools>" in r.second.system_prompt for r in record.retries)  # the tools stay listed
    assert trainer.memory.entries == ["Add exactly the target once, then say done."]
    assert record.metrics["reward/first"] == 0.0 and record.metrics["reward/second"] == 1.0


def test_a_dict_factory_routes_by_the_environment_column():
    class Doubler(CounterEnv):
        def double(self) -> str:
            """Double the counter."""
            self.value *= 2
            return f"The counter is at {self.value}."

    tok = tiny_tokenizer()
    rows = [{**DATASET[0], "environment": "count"}, {**DATASET[1], "environment": "double"}]
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=1,
        eval_steps=0,
        max_completion_length=96,
        max_episode_length=2048,
        progress_bar=False,
    )
    trainer = ERLTrainer(
        tiny_model(tok),
        args=args,
        train_dataset=rows,
        processing_class=tok,
        environment_factory={"count": CounterEnv, "double": Doubler},
        generator=ScriptedGenerator(tok, counter_player),
    )
    assert isinstance(trainer.env, MultiEnvironment)
    assert [t.task_id for t in trainer.train_tasks] == ["count/train-0", "double/train-1"]
    assert '"double"' not in trainer.env.initial_system_prompt(trainer.train_tasks[0])  # only its own tools
    assert '"double"' in trainer.env.initial_system_prompt(trainer.train_tasks[1])


class OwnsItsData:
    """TRL 1.16's dataset-free mode: ``reset`` ignores the (placeholder) row and returns the prompt."""

    def reset(self, **kwargs) -> str:
        self.value, self.target = 0, 3
        return "The counter is at 0. Make it exactly 3, then say done."

    def increment(self, step: int) -> str:
        """Add to the counter.

        Args:
            step: how much to add.
        """
        self.value += int(step)
        return f"The counter is at {self.value}."

    def get_reward(self) -> float:
        return float(self.value == self.target)


@pytest.mark.parametrize("num_tasks_per_step,max_steps", [(1, 1), (2, 2)])
def test_environment_factory_without_a_dataset_trains(num_tasks_per_step, max_steps):
    tok = tiny_tokenizer()
    args = ERLConfig.preset(
        "cpu",
        max_steps=max_steps,
        num_tasks_per_step=num_tasks_per_step,
        num_generations=2,
        eval_steps=0,
        max_completion_length=96,
        max_reflection_length=64,
        max_episode_length=2048,
        max_reflection_prompt_length=4000,
        progress_bar=False,
    )
    trainer = ERLTrainer(
        tiny_model(tok),
        args=args,
        processing_class=tok,
        environment_factory=OwnsItsData,
        generator=ScriptedGenerator(tok, counter_player),
    )
    # TRL's placeholder rows: one empty user message per task of a step, cycled.
    assert len(trainer.train_tasks) == num_tasks_per_step
    assert all(t.prompt == [{"role": "user", "content": ""}] for t in trainer.train_tasks)
    history = trainer.train()
    record = history.of_kind("train")[-1]
    assert record["reward/first"] == 0.0 and record["reward/second"] == 1.0
    first = trainer.last_outcome.first_attempts[0]
    user = [m for m in first.messages if m["role"] == "user"][0]["content"]
    assert user == "The counter is at 0. Make it exactly 3, then say done."  # as TRL appends: no leading newline


@pytest.mark.parametrize(
    "factory,settings,match",
    [
        ({"a": OwnsItsData, "b": OwnsItsData}, {}, "requires a train_dataset with an 'environment' column"),
        (OwnsItsData, {"max_steps": None, "num_train_epochs": 1}, "max_steps must be set"),
    ],
)
def test_environment_factory_without_a_dataset_refusals(factory, settings, match):
    tok = tiny_tokenizer()
    args = ERLConfig.preset("cpu", **{"max_steps": 1, "eval_steps": 0, "progress_bar": False, **settings})
    with pytest.raises(ValueError, match=match):
        ERLTrainer(tiny_model(tok), args=args, processing_class=tok, environment_factory=factory)


# --- tools rendered by the tokenizer's chat template ------------------------------------------
QWEN3 = "/work/shared/qwen3_tokenizer"


def qwen3_tokenizer():
    if not os.path.isfile(os.path.join(QWEN3, "tokenizer_config.json")):
        pytest.skip(f"the real Qwen3 tokenizer is not at {QWEN3}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(QWEN3)


def test_which_templates_render_tools():
    from erl_lite.engine.chat import template_renders_tools

    assert not template_renders_tools(tiny_tokenizer())  # a template that ignores tools=
    assert not template_renders_tools(tiny_tokenizer(chat_template=False))  # no template at all
    assert template_renders_tools(qwen3_tokenizer())


class Doubler(CounterEnv):
    def double(self) -> str:
        """Double the counter."""
        self.value *= 2
        return f"The counter is at {self.value}."


@pytest.mark.parametrize("factory", ["single", "dict"])
def test_tools_are_rendered_by_a_template_that_supports_them(factory):
    from transformers.utils import get_json_schema

    tok = qwen3_tokenizer()
    rows = (
        DATASET[:2]
        if factory == "single"
        else [{**DATASET[0], "environment": "count"}, {**DATASET[1], "environment": "double"}]
    )
    factories = CounterEnv if factory == "single" else {"count": CounterEnv, "double": Doubler}
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=2,
        eval_steps=0,
        max_completion_length=96,
        max_reflection_length=64,
        max_episode_length=2048,
        max_reflection_prompt_length=4000,
        progress_bar=False,
        chat_template_kwargs={"enable_thinking": False},
    )
    trainer = ERLTrainer(
        tiny_model(tok, hidden_size=64),
        args=args,
        train_dataset=rows,
        processing_class=tok,
        environment_factory=factories,
        generator=ScriptedGenerator(tok, counter_player),
    )
    trainer._batch = lambda step: list(trainer.train_tasks)
    record = trainer.training_step()
    for attempt in record.first_attempts + [r.second for r in record.retries]:
        cls = CounterEnv if "count" in attempt.task_id or factory == "single" else Doubler
        schemas = [get_json_schema(getattr(cls, name)) for name in tool_methods(cls)]
        expected = tok.apply_chat_template(
            attempt.messages[:2], tools=schemas, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        assert tok.decode(attempt.prompt_ids) == expected  # the template's own rendering, tools included
        assert expected.count("# Tools") == 1  # not erl_lite's text block as well
    assert [r.second.reward for r in record.retries] == [1.0] * len(record.retries)  # the rulebook still works
