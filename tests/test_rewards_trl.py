"""Reward and feedback functions called as TRL calls them; bad outputs; TRL-shaped trainer calls.

TRL 1.16's ``GRPOTrainer._calculate_rewards`` calls every reward function once per batch, by
keyword: ``prompts=``, ``completions=``, ``completion_ids=``, ``trainer_state=`` and every
dataset column as a keyword list. These tests hold erl_lite to the same contract.
"""

from __future__ import annotations

import math

import pytest

from erl_lite.config import ERLConfig
from erl_lite.core.rollout import run_episodes
from erl_lite.engine.generation import SamplingParams, ScriptedGenerator
from erl_lite.envs.qa import score_answer
from erl_lite.envs.rows import rows_to_tasks, split_prompt
from erl_lite.integrations.dataset import RewardFunctionEnv
from erl_lite.integrations.reward_calls import RewardFunctionError
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model

ROWS = [{"prompt": f"Add {i} and {i}.", "answer": str(2 * i)} for i in range(4)]
REPLIES = {"Add 0": "0", "Add 1": "two", "Add 2": "it is 4", "Add 3": "the answer is six"}


def reply_for(prompt_text: str) -> str:
    return next(r for key, r in REPLIES.items() if key in prompt_text)


def play(env, tok, rows=ROWS, reply=reply_for, max_episode_length=400):
    tasks = rows_to_tasks(rows)
    gen = ScriptedGenerator(tok, reply)
    attempts = run_episodes(
        gen,
        tok,
        env,
        tasks,
        [env.initial_system_prompt(t) for t in tasks],
        SamplingParams(64),
        max_episode_length=max_episode_length,
        role="first",
        indices=[0] * len(tasks),
    )
    return attempts, gen


def reward_len(completions, **kwargs):
    """TRL's quick-start reward, verbatim."""
    return [-abs(20 - len(completion)) for completion in completions]


# --- the TRL call ---------------------------------------------------------------------------
def test_trl_quickstart_reward_runs(tok):
    attempts, _ = play(RewardFunctionEnv(reward_len), tok)
    assert [a.reward for a in attempts] == [-abs(20 - len(REPLIES[f"Add {i}"])) for i in range(4)]


def test_reward_functions_receive_trl_keywords(tok):
    seen = []

    def spy(**kwargs):
        seen.append(kwargs)
        return [1.0] * len(kwargs["completions"])

    env = RewardFunctionEnv(spy)
    attempts, _ = play(env, tok)
    [call] = seen
    assert set(call) == {
        "prompts",
        "completions",
        "completion_ids",
        "trainer_state",
        "answer",
        "log_extra",
        "log_metric",
    }  # TRL 1.16 passes the last two as well
    assert call["prompts"] == [r["prompt"] for r in ROWS]
    assert call["completions"] == [REPLIES[f"Add {i}"] for i in range(4)]
    assert call["answer"] == ["0", "2", "4", "6"]
    # the sampled ids, exactly (TRL: the completion's tokens up to and including EOS)
    assert call["completion_ids"] == [a.completion_ids for a in attempts]
    assert call["trainer_state"].global_step == 0


def test_conversational_completions_are_message_lists(tok):
    seen = []

    def spy(prompts, completions, **kw):
        seen.append((prompts, completions))
        return [0.0] * len(completions)

    rows = [{"prompt": [{"role": "user", "content": "Add 1 and 1."}]}]
    play(RewardFunctionEnv(spy), tok, rows)
    assert seen == [([rows[0]["prompt"]], [[{"role": "assistant", "content": "two"}]])]


def test_a_batch_normalising_reward_sees_the_whole_phase(tok):
    def zscore(completions, **kw):
        lengths = [len(c) for c in completions]
        mean = sum(lengths) / len(lengths)
        std = math.sqrt(sum((x - mean) ** 2 for x in lengths) / len(lengths))
        return [(x - mean) / std for x in lengths]

    attempts, _ = play(RewardFunctionEnv(zscore), tok)
    expected = zscore([REPLIES[f"Add {i}"] for i in range(4)])
    assert [a.reward for a in attempts] == pytest.approx(expected)
    assert sum(a.reward for a in attempts) == pytest.approx(0.0)


def test_one_call_per_phase_for_rewards_and_feedback(tok):
    calls = {"reward": 0, "feedback": 0}

    def reward(completions, **kw):
        calls["reward"] += 1
        return [0.0] * len(completions)

    def feedback(completions, **kw):
        calls["feedback"] += 1
        return [f"len {len(c)}" for c in completions]

    attempts, _ = play(RewardFunctionEnv(reward, feedback_func=feedback), tok, ROWS * 3)
    assert len(attempts) == 12 and calls == {"reward": 1, "feedback": 1}
    assert attempts[0].feedback == "len 1" and "len 1" in attempts[0].trace


def test_several_functions_weighted_and_none_skipped(tok):
    def only_even(completions, answer, **kw):  # "not applicable" to odd answers
        return [1.0 if int(a) % 4 == 0 else None for a in answer]

    def always(completions, **kw):
        return [0.5] * len(completions)

    attempts, _ = play(RewardFunctionEnv([only_even, always], reward_weights=[2.0, 1.0]), tok)
    assert [a.reward for a in attempts] == [2.5, 0.5, 2.5, 0.5]


def test_standalone_episode_scores_itself(tok):
    env = RewardFunctionEnv(reward_len)
    ep = env.new_episode()
    ep.reset(rows_to_tasks(ROWS)[:1][0])
    ep.step("x" * 18)
    assert ep.reward == -2 and not ep.success and ep.feedback() == "Reward: -2."


# --- bad outputs ----------------------------------------------------------------------------
def _returning(values):
    def bad_reward(completions, **kw):
        return values(len(completions)) if callable(values) else values

    return bad_reward


@pytest.mark.parametrize(
    "output, message",
    [
        (lambda n: [1.0] * (n - 1), r"'bad_reward' returned 3 values for 4 completions"),
        (lambda n: [1.0, float("nan"), 1.0, 1.0], r"'bad_reward'.*row 1 \(task 'row-1'\).*nan"),
        (lambda n: [1.0, 1.0, float("inf"), 1.0], r"'bad_reward'.*row 2 \(task 'row-2'\).*inf"),
        (lambda n: [1.0, 1.0, 1.0, None], r"row 3 \(task 'row-3'\).*every reward function returned None"),
        (lambda n: ["1.0"] * n, r"'bad_reward'.*row 0 \(task 'row-0'\).*'1.0'"),
        (lambda n: [[1.0]] * n, r"'bad_reward'.*row 0 .*\[1.0\]"),
        (1.0, r"'bad_reward' returned float, not a list"),
        (None, r"'bad_reward' returned NoneType, not a list"),
        (lambda n: [(1.0, 2)] * n, r"'bad_reward'.*row 0 .*\(score, feedback\)"),
    ],
)
def test_bad_reward_outputs_name_the_function_and_row(tok, output, message):
    with pytest.raises(RewardFunctionError, match=message):
        play(RewardFunctionEnv(_returning(output)), tok)


def test_a_raising_reward_function_is_named_with_its_row(tok):
    def fragile(completions, answer, **kw):
        return [1.0 / (int(a) - 4) for a in answer]  # row 2 divides by zero

    with pytest.raises(RewardFunctionError, match=r"'fragile' raised ZeroDivisionError.*row 2 \(task 'row-2'\)") as err:
        play(RewardFunctionEnv(fragile), tok)
    assert isinstance(err.value.__cause__, ZeroDivisionError)


def test_a_positional_only_reward_function_gets_a_clear_error(tok):
    def positional(p, c):
        return [0.0] * len(c)

    with pytest.raises(RewardFunctionError, match=r"'positional' raised TypeError.*keyword"):
        play(RewardFunctionEnv(positional), tok)


@pytest.mark.parametrize(
    "output, message",
    [
        (lambda n: ["ok"] * (n + 1), r"'bad_feedback' returned 5 values for 4 completions"),
        (lambda n: ["ok", 3, "ok", "ok"], r"'bad_feedback'.*row 1 \(task 'row-1'\).*not a string"),
        ("ok", r"'bad_feedback' returned str, not a list"),
    ],
)
def test_bad_feedback_outputs_name_the_function_and_row(tok, output, message):
    def bad_feedback(completions, **kw):
        return output(len(completions)) if callable(output) else output

    with pytest.raises(RewardFunctionError, match=message):
        play(RewardFunctionEnv(reward_len, feedback_func=bad_feedback), tok)


def test_feedback_none_means_the_default_verdict(tok):
    def sparse(completions, **kw):
        return ["nice"] + [None] * (len(completions) - 1)

    attempts, _ = play(RewardFunctionEnv(reward_len, feedback_func=sparse), tok)
    assert attempts[0].feedback == "nice" and attempts[1].feedback == f"Reward: {attempts[1].reward:g}."


def test_a_raising_feedback_function_is_named(tok):
    def broken_feedback(completions, **kw):
        raise KeyError("missing")

    with pytest.raises(RewardFunctionError, match=r"feedback function 'broken_feedback' raised KeyError"):
        play(RewardFunctionEnv(reward_len, feedback_func=broken_feedback), tok)


# --- dataset rows ---------------------------------------------------------------------------
def test_rows_without_prompt_and_empty_datasets(tok):
    with pytest.raises(ValueError, match=r"row 1 has no 'prompt'.*\['question'\]"):
        rows_to_tasks([{"prompt": "a"}, {"question": "b"}])
    with pytest.raises(ValueError, match="row 0 is not a mapping"):
        rows_to_tasks(["just a string"])
    model = tiny_model(tok)
    with pytest.raises(ValueError, match="train_dataset is empty"):
        ERLTrainer(model, reward_len, small_args(), [], processing_class=tok)
    with pytest.raises(ValueError, match="eval_dataset is empty"):
        ERLTrainer(model, reward_len, small_args(), ROWS, [], processing_class=tok)


def test_multi_turn_conversational_prompts_keep_the_whole_context(tok):
    convo = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Add 1 and 1."},
        {"role": "assistant", "content": "3"},
        {"role": "user", "content": "Wrong. Add 2 and 2."},
    ]
    seen = []

    def spy(prompts, completions, **kw):
        seen.append(prompts)
        return [0.0] * len(completions)

    env = RewardFunctionEnv(spy)
    attempts, gen = play(env, tok, [{"prompt": convo}], reply=lambda p: "4")
    header = tok.decode(attempts[0].prompt_ids)
    for m in convo:
        assert m["content"] in header
    assert header.index("Add 1 and 1.") < header.index("3") < header.index("Wrong. Add 2")
    assert attempts[0].messages[:4] == convo and attempts[0].messages[4]["content"] == "4"
    assert seen == [[convo]]
    assert "Add 1 and 1." in attempts[0].trace and "Wrong. Add 2 and 2." in attempts[0].trace


@pytest.mark.parametrize(
    "prompt, message",
    [
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "must end with a user message"),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], "only as the first message"),
        ([{"role": "tool", "content": "a"}, {"role": "user", "content": "b"}], "unknown role 'tool'"),
        ([], "empty"),
        ([{"content": "a"}], "'role' and 'content'"),
    ],
)
def test_bad_conversational_prompts(prompt, message):
    with pytest.raises(ValueError, match=message):
        split_prompt(prompt)


# --- the trainer, called as GRPOTrainer is ----------------------------------------------------
def small_args(**kw):
    base = dict(
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=2,
        max_completion_length=8,
        max_reflection_length=8,
        max_reflection_prompt_length=700,
        eval_steps=0,
        progress_bar=False,
    )
    return ERLConfig.preset("cpu", **{**base, **kw})


def test_trl_quickstart_call_shape(tok):
    model = tiny_model(tok)
    gen = ScriptedGenerator(tok, lambda p: "short")
    by_keyword = ERLTrainer(
        model=model, reward_funcs=reward_len, args=small_args(), train_dataset=ROWS, processing_class=tok, generator=gen
    )
    positional = ERLTrainer(model, reward_len, small_args(), ROWS, ROWS[:1], tok, generator=gen)
    assert positional.eval_tasks[0].task_id == "eval-0" and positional.env.reward_funcs == [reward_len]
    history = by_keyword.train()
    assert history.records[-1]["reward/first"] == -15.0


def test_trainer_state_is_the_running_step(tok):
    steps = []

    def curriculum(completions, trainer_state, **kw):
        steps.append((trainer_state.global_step, trainer_state.max_steps))
        return [0.0] * len(completions)

    gen = ScriptedGenerator(tok, lambda p: "x")
    trainer = ERLTrainer(
        tiny_model(tok), curriculum, small_args(max_steps=2), ROWS, processing_class=tok, generator=gen
    )
    trainer.train()
    # one call per phase: first and second attempts of steps 1 and 2
    assert steps == [(1, 2), (1, 2), (2, 2), (2, 2)]


@pytest.mark.parametrize("name", ["reward_processing_classes", "tools", "rollout_func"])
@pytest.mark.parametrize("value", [None, [print]])
def test_trl_arguments_erl_lite_has_no_use_for_are_not_parameters(tok, name, value):
    """GRPOTrainer's reward_processing_classes, tools and rollout_func are not taken: Python names them."""
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        ERLTrainer(tiny_model(tok), reward_len, small_args(), ROWS, processing_class=tok, **{name: value})


def test_extras_are_keyword_only_and_trl_extras_are_answered(tok):
    model = tiny_model(tok)
    with pytest.raises(TypeError, match="positional"):
        # past processing_class, TRL's order holds reward_processing_classes: keyword-only here, so a
        # positional TRL call fails loudly instead of shifting its arguments one slot
        ERLTrainer(model, reward_len, small_args(), ROWS, None, tok, None)
    with pytest.raises(ValueError, match="environment_factory object: .*callable reset"):
        ERLTrainer(model, reward_len, small_args(), ROWS, processing_class=tok, environment_factory=object)
    with pytest.raises(ValueError, match="quantization_config .*not a 4-bit config"):
        ERLTrainer(
            model,
            reward_len,
            small_args(),
            ROWS,
            processing_class=tok,
            quantization_config=type("EightBit", (), {"load_in_8bit": True})(),
        )
    with pytest.raises(TypeError, match="args must be an ERLConfig"):
        ERLTrainer(model, reward_len, {"max_steps": 1}, ROWS, processing_class=tok)
    with pytest.raises(TypeError, match="reward function 1 .*some/reward-model.*not supported"):
        ERLTrainer(model, [reward_len, "some/reward-model"], small_args(), ROWS, processing_class=tok)


def test_callbacks_plain_functions_work_and_look_alike_objects_are_refused(tok):
    seen = []
    trainer = ERLTrainer(
        tiny_model(tok),
        reward_len,
        small_args(),
        ROWS,
        processing_class=tok,
        callbacks=[lambda t, record: seen.append(record.step)],
        generator=ScriptedGenerator(tok, lambda p: "x"),
    )
    trainer.train()
    assert seen == [1]
    # TrainerCallback objects are honoured (tests/test_trainer_callbacks.py); a look-alike is not one
    look_alike = type("LooksLikeOne", (), {"on_step_end": lambda self, *a, **k: None})()
    with pytest.raises(TypeError, match="must subclass transformers.TrainerCallback"):
        ERLTrainer(tiny_model(tok), reward_len, small_args(), ROWS, processing_class=tok, callbacks=[look_alike])


def test_optimizers_pair_is_used(tok):
    import torch

    model = tiny_model(tok)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.1)
    trainer = ERLTrainer(model, reward_len, small_args(), ROWS, processing_class=tok, optimizers=(opt, None))
    assert trainer.optimizer is opt and trainer.scheduler.optimizer is opt


# --- QA: success and reward agree -------------------------------------------------------------
def test_qa_word_order_is_not_a_full_reward():
    reward, exact, f1 = score_answer("Smith John", "John Smith")
    assert f1 == 1.0 and not exact and reward < 1.0
    assert score_answer("John Smith", "john smith")[0] == 1.0


def test_qa_success_iff_reward_reaches_one():
    from erl_lite.envs.qa import MultiHopQA

    env = MultiHopQA()
    swapped = 0
    for task in env.train_tasks(5):
        gold = str(task.data["answer"])
        words = gold.split()
        swapped += len(words) > 1
        for answer in {gold, " ".join(reversed(words)), words[0], "nothing like it"}:
            ep = env.new_episode()
            ep.reset(task)
            ep.step("\\boxed{" + answer + "}")
            assert ep.success == (ep.reward >= 1.0), (answer, gold, ep.reward)
    assert swapped  # a two-word answer was tried in the wrong order
