"""Task ids that cannot merge GRPO groups, token budgets that fit the model, and cut replies reported.

* ids: every split's task ids are unique, so two tasks never share an advantage group or a
  memory route; duplicates are refused naming the id and both rows.
* lengths: the budgets are checked against the model's context when the trainer is built;
  a dataset row that leaves no room for a reply is refused naming it; a reflection request is
  fitted to its budget (trace, then memory, then the task are cut in the middle); an episode
  stops before a turn that would not fit; the sampler refuses an over-long request.
* truncation: a reply cut at its token limit (no stop token) marks its attempt or reflection
  truncated, in every role, single- and multi-turn.
"""

from __future__ import annotations

import pytest
import torch
from conftest import GuessEnv
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

from erl_lite.config import ERLConfig
from erl_lite.core.phases import PhaseContext, erl_step, reflect
from erl_lite.core.prompts import reflection_messages
from erl_lite.core.rollout import run_episodes
from erl_lite.engine.generation import (
    HFGenerator,
    PromptTooLongError,
    SamplingParams,
    ScriptedGenerator,
    model_context_length,
)
from erl_lite.envs.multi import MultiEnvironment
from erl_lite.envs.rows import rows_to_tasks
from erl_lite.integrations.dataset import RewardFunctionEnv
from erl_lite.records import Attempt, Task
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model


def say_reward(prompts, completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def args(**kw):
    base = dict(
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=2,
        max_completion_length=6,
        max_reflection_length=8,
        eval_steps=0,
        progress_bar=False,
        beta=0.0,
    )
    return ERLConfig.preset("cpu", **{**base, **kw})


def build(tok, rows, script=lambda p: "1", model=None, **kw):
    extra = {k: kw.pop(k) for k in ("eval_dataset", "env") if k in kw}
    funcs = {} if "env" in extra else {"reward_funcs": say_reward, "train_dataset": rows}
    return ERLTrainer(
        model=model or tiny_model(tok),
        processing_class=tok,
        args=args(**kw),
        generator=ScriptedGenerator(tok, script) if script else None,
        **funcs,
        **extra,
    )


def tiny_gpt2(tok, n_positions: int) -> GPT2LMHeadModel:
    """A random one-layer GPT-2 (learned absolute positions: past ``n_positions`` it crashes)."""
    config = GPT2Config(
        vocab_size=len(tok),
        n_positions=n_positions,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config)
    model.generation_config = GenerationConfig(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return model.eval()


def short_llama(tok, positions: int):
    model = tiny_model(tok)
    model.config.max_position_embeddings = positions
    return model


# --- 4. task ids ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ids, shown, rows",
    [
        ([0, 1, 0, 2], "'0'", "rows 0 and 2"),  # two datasets concatenated, each numbered 0..N
        (["a", "b", "c", "b"], "'b'", "rows 1 and 3"),
        ([1, "1"], "'1'", "rows 0 and 1"),  # the id is a string: 1 and "1" are one id
        (["train-1", None], "'train-1'", "rows 0 and 1"),  # a given id equal to another row's default name
    ],
)
def test_duplicate_ids_in_the_train_dataset_are_refused(tok, ids, shown, rows):
    data = [
        {"prompt": f"Say {i}.", "answer": str(i), **({"id": v} if v is not None else {})} for i, v in enumerate(ids)
    ]
    with pytest.raises(ValueError, match=rf"train_dataset.*{shown}.*{rows}"):
        build(tok, data)
    with pytest.raises(ValueError, match=rf"{shown}.*{rows}"):
        rows_to_tasks(data, prefix="train")


def test_duplicate_ids_in_the_eval_dataset_are_refused(tok):
    rows = [{"prompt": "Say 1.", "answer": "1", "id": 7}, {"prompt": "Say 2.", "answer": "2", "id": 7}]
    with pytest.raises(ValueError, match=r"eval_dataset.*'7'.*rows 0 and 1"):
        build(tok, [{"prompt": "Say 1.", "answer": "1"}], eval_dataset=rows)


def test_concatenated_datasets_no_longer_merge_groups(tok):
    """The report's case: two datasets with their own ids 0..N, every task's rollouts equal."""
    first = [{"prompt": f"Say {i}.", "answer": str(i), "id": i} for i in range(2)]
    second = [{"prompt": f"Say {i + 5}.", "answer": "0", "id": i} for i in range(2)]
    with pytest.raises(ValueError, match="'0'"):
        build(tok, first + second, script=lambda p: "0 1")
    renamed = [{**r, "id": f"second/{r['id']}"} for r in second]
    t = build(tok, first + renamed, script=lambda p: "0 1", num_tasks_per_step=4)
    t.train()
    assert t.history.last("advantage/first") == 0.0  # each group's rewards are equal


def test_tasks_given_directly_with_one_id_are_refused(tok):
    tasks = [Task("t", "Say 1.", {"answer": "1"}), Task("t", "Say 2.", {"answer": "2"})]
    with pytest.raises(ValueError, match=r"train_dataset.*'t'.*rows 0 and 1"):
        build(tok, tasks)


class _TwinEnv(GuessEnv):
    def train_tasks(self, n=None):
        return [Task("same", None, {"secret": w}) for w in ("apple", "fig")]


def test_environment_split_with_one_id_twice_is_refused(tok):
    with pytest.raises(ValueError, match=r"train.*'same'.*rows 0 and 1"):
        build(tok, None, env=_TwinEnv())


def test_multi_environment_members_numbering_alike_do_not_collide(tok):
    multi = MultiEnvironment({"a": RewardFunctionEnv(say_reward), "b": RewardFunctionEnv(say_reward)})
    rows = [{"environment": e, "prompt": f"Say {i}.", "answer": str(i), "id": i} for e in "ab" for i in range(2)]
    tasks = multi.tasks_from_rows(rows)
    assert len({t.task_id for t in tasks}) == 4
    # two members' splits numbered alike are told apart by the member name
    assert len({t.task_id for t in MultiEnvironment([GuessEnv(), _Other()]).train_tasks(8)}) == 8
    with pytest.raises(ValueError, match=r"'a/1'.*rows 0 and 2"):
        multi.tasks_from_rows([rows[1], rows[0], {**rows[0], "id": 1}])
    with pytest.raises(ValueError, match=r"'a/1'"):  # an id already carrying the prefix, and one without
        multi.tasks_from_rows([rows[1], {**rows[1], "id": "a/1"}])


class _Other(GuessEnv):
    name = "other"


def test_a_step_refuses_different_tasks_sharing_an_id(tok):
    gen = ScriptedGenerator(tok, lambda p: "1")
    ctx = PhaseContext(gen, tok, RewardFunctionEnv(say_reward), args())
    same = Task("x", "Say 1.", {"answer": "1"})
    erl_step(ctx, [same, same], None)  # one task drawn twice (a small pool) is fine
    with pytest.raises(ValueError, match=r"'x'"):
        erl_step(ctx, [same, Task("x", "Say 2.", {"answer": "2"})], None)


# --- 5. lengths against the model ---------------------------------------------------------------------
def test_context_length_of_models(tok):
    assert model_context_length(tiny_gpt2(tok, 96), tok) == 96
    assert model_context_length(short_llama(tok, 300), tok) == 300


@pytest.mark.parametrize(
    "model, kw, fields, numbers",
    [
        (lambda tok: short_llama(tok, 1024), {}, "max_episode_length", "2048.*1024"),
        (lambda tok: tiny_gpt2(tok, 1024), {}, "max_episode_length", "2048.*1024"),
        (
            lambda tok: short_llama(tok, 2050),
            {"max_reflection_prompt_length": 2048},
            "max_reflection_prompt_length.*max_reflection_length",
            "2048.*8.*2050",
        ),
    ],
)
def test_budgets_larger_than_the_context_are_refused_at_construction(tok, model, kw, fields, numbers):
    with pytest.raises(ValueError, match=rf"{fields}.*{numbers}"):
        build(tok, [{"prompt": "Say 1.", "answer": "1"}], model=model(tok), **kw)


def test_reflection_budget_too_small_for_its_own_text_is_refused(tok):
    with pytest.raises(ValueError, match=r"max_reflection_prompt_length=100.*needs"):
        build(tok, [{"prompt": "Say 1.", "answer": "1"}], max_reflection_prompt_length=100)


@pytest.mark.parametrize("setting", ["reflection_request", "reflection_prefill"])
def test_a_custom_request_or_prefill_counts_in_the_reflection_budget(tok, setting):
    from erl_lite.config import ERLConfig
    from erl_lite.core.prompts import reflection_skeleton_length

    budget = reflection_skeleton_length(tok, None) + 40  # room for the default request, not for 300 more words
    words = "Think about the letters. " * 60
    value = ERLConfig.reflection_request + words if setting == "reflection_request" else "<prompt>\n" + words
    build(tok, [{"prompt": "Say 1.", "answer": "1"}], max_reflection_prompt_length=budget)  # the default fits
    with pytest.raises(ValueError, match=rf"max_reflection_prompt_length={budget}.*needs"):
        build(tok, [{"prompt": "Say 1.", "answer": "1"}], max_reflection_prompt_length=budget, **{setting: value})


@pytest.mark.parametrize("split", ["train_dataset", "eval_dataset"])
def test_a_row_leaving_no_room_for_a_reply_is_refused_naming_it(tok, split):
    rows = [{"prompt": "Say 1.", "answer": "1"}, {"prompt": "Say 1. " + "word " * 300, "answer": "1", "id": "long"}]
    kw = {"eval_dataset": rows} if split == "eval_dataset" else {}
    with pytest.raises(ValueError, match=rf"{split} row 1 \(task 'long'\).*max_episode_length=600"):
        build(tok, rows[:1] if kw else rows, max_episode_length=600, max_reflection_prompt_length=900, **kw)


@pytest.mark.parametrize("part", ["task", "memory", "trace", "all"])
def test_reflection_request_fits_its_budget_whatever_is_long(tok, part):
    long = {p: ("B" + "x" * 3000 + "E") if part in (p, "all") else p for p in ("task", "memory", "trace")}
    budget = 1200
    messages, ids = reflection_messages(
        task_text=long["task"],
        base_prompt=long["memory"],
        trace=long["trace"],
        reward=0.0,
        feedback="wrong",
        tokenizer=tok,
        max_tokens=budget,
    )
    assert len(ids) <= budget
    text = messages[1]["content"]
    assert f"## Task\n{long['task'][:1]}" in text and "wrong" in text  # the task's opening, the outcome


def test_multi_turn_episode_near_the_context_never_overflows_gpt2(tok):
    """Random GPT-2 rarely stops: replies fill their limit until the episode budget is spent."""
    model = tiny_gpt2(tok, 160)
    env = GuessEnv(max_turns=20)
    [task] = env.train_tasks(1)
    [a] = run_episodes(
        HFGenerator(model, tok),
        tok,
        env,
        [task],
        [env.system_prompt],
        SamplingParams(24),
        max_episode_length=160,
        role="first",
        indices=[0],
    )
    assert a.truncated and len(a.prompt_ids) + len(a.completion_ids) <= 160


def test_sampler_refuses_an_over_long_request_naming_the_row(tok):
    gen = HFGenerator(tiny_gpt2(tok, 64), tok)
    with pytest.raises(PromptTooLongError, match=r"row 1.*60.*10.*64"):
        gen.generate([[10] * 5, [10] * 60], SamplingParams(10))


def test_over_long_reflection_request_is_named_by_role_and_task(tok):
    gen = HFGenerator(tiny_gpt2(tok, 1024), tok)
    ctx = PhaseContext(gen, tok, RewardFunctionEnv(say_reward), args(max_reflection_prompt_length=2000))
    failed = Attempt(
        "task-9",
        "first",
        0,
        "S",
        [{"role": "user", "content": "Say 9."}],
        [1],
        [1],
        [1],
        0.0,
        False,
        "wrong",
        "x" * 3000,
        1,
    )
    with pytest.raises(PromptTooLongError, match=r"reflection.*task-9"):
        reflect(ctx, [failed], None)


def test_training_on_a_long_row_near_gpt2_context_runs(tok):
    """A row that fits the episode but not the reflection budget: the request is cut, not sent whole."""
    rows = [{"prompt": "Say 1. " + "word " * 120, "answer": "1"}]
    t = build(
        tok,
        rows,
        script=None,
        model=tiny_gpt2(tok, 1100),
        num_tasks_per_step=1,
        max_completion_length=8,
        max_episode_length=1100,
        max_reflection_prompt_length=1000,
        max_reflection_length=8,
    )
    t.train()
    refl = t.last_outcome.reflections
    assert refl and all(len(r.prompt_ids) <= 1000 for r in refl)


# --- 7. replies cut at their limit ---------------------------------------------------------------------
def _dataset_env():
    return RewardFunctionEnv(say_reward)


@pytest.mark.parametrize(
    "replies, expected",
    [
        (["a" * 20, "b" * 20], [True, True]),  # all cut
        (["1", "2"], [False, False]),  # none cut
        (["a" * 20, "2"], [True, False]),  # some cut
        (["a" * 7, "b" * 8], [False, True]),  # 7 characters + EOS end exactly at the limit: not cut
    ],
)
def test_single_turn_cut_replies_are_truncated(tok, replies, expected):
    tasks = rows_to_tasks([{"prompt": f"Q{i}", "answer": "1"} for i in range(2)])
    gen = ScriptedGenerator(tok, lambda p: replies[0] if "Q0" in p else replies[1])
    out = run_episodes(
        gen,
        tok,
        _dataset_env(),
        tasks,
        ["", ""],
        SamplingParams(8),
        max_episode_length=512,
        role="first",
        indices=[0, 0],
    )
    assert [a.truncated for a in out] == expected


@pytest.mark.parametrize("first_reply, expected", [("z" * 30, True), ("wrong", False)])
def test_multi_turn_cut_reply_is_truncated(tok, first_reply, expected):
    env = GuessEnv(max_turns=2)
    [task] = env.train_tasks(1)
    gen = ScriptedGenerator(tok, lambda p: first_reply if "Try again" not in p else task.data["secret"])
    [a] = run_episodes(
        gen,
        tok,
        env,
        [task],
        [env.system_prompt],
        SamplingParams(12),
        max_episode_length=2048,
        role="first",
        indices=[0],
    )
    assert a.num_turns == 2 and a.reward == 1.0 and a.truncated == expected
    assert "token budget" not in a.feedback  # the episode itself finished


@pytest.mark.parametrize("cut", [True, False])
def test_truncated_metrics_of_every_role(tok, cut):
    def script(prompt):
        if "rulebook" in prompt.lower():
            # a reflection ends at its closing tag, so only a block still open at the limit is cut
            return "<prompt>Say it." + ("r" * 40 if cut else "") + "</prompt>"
        return "q" * 40 if cut else "no"

    t = build(
        tok,
        [{"prompt": "Say 1.", "answer": "1"}],
        script=script,
        num_tasks_per_step=1,
        max_reflection_length=30,
        eval_steps=1,
        eval_dataset=[{"prompt": "Say 2.", "answer": "2"}],
    )
    t.train()
    want = 1.0 if cut else 0.0
    for key in ("truncated/first", "truncated/reflection", "truncated/second"):
        assert t.history.last(key) == want, key
    assert t.history.of_kind("eval")[-1]["eval/truncated"] == want
    assert all(r.truncated == cut for r in t.last_outcome.reflections)
