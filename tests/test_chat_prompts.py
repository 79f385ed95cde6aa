"""Rendering (chat template exactly once, plain fallback), multi-turn glue, reflection prompts."""

from __future__ import annotations

import pytest

from erl_lite.core.prompts import cut_middle, parse_rulebook, reflection_messages
from erl_lite.core.rollout import run_episodes
from erl_lite.engine.chat import encode, encode_messages, render
from erl_lite.engine.generation import PromptTooLongError, SamplingParams, ScriptedGenerator


def play(env, tok, reply, system="SYS"):
    gen = ScriptedGenerator(tok, reply)
    tasks = env.train_tasks(2)
    return run_episodes(
        gen, tok, env, tasks, [system] * 2, SamplingParams(40), max_episode_length=1000, role="first", indices=[0, 0]
    )


def test_chat_template_is_applied_exactly_once(tok, guess_env):
    ids = encode_messages([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], tok)
    text = tok.decode(ids)
    assert text.count("<|im_start|>system") == 1 and text.count("<|im_start|>") == 3
    attempt = play(guess_env, tok, lambda p: "x")[0]
    header = tok.decode(attempt.prompt_ids)
    assert header.count("<|im_start|>system") == 1 and header.count("<|im_start|>user") == 1


@pytest.mark.parametrize("fixture", ["tok", "tok_plain"])
def test_multi_turn_sequence_equals_the_rendered_conversation(fixture, request, guess_env):
    tokenizer = request.getfixturevalue(fixture)
    attempt = play(guess_env, tokenizer, lambda p: "wrong")[0]
    assert attempt.num_turns == 2
    full = tokenizer.decode(attempt.prompt_ids + attempt.completion_ids)
    rendered = render(attempt.messages, tokenizer, add_generation_prompt=False)
    # the rendered conversation may add a newline after the final end-of-turn token
    assert rendered.startswith(full) and len(rendered) - len(full) <= 2


@pytest.mark.parametrize("fixture", ["tok", "tok_plain"])
def test_loss_mask_covers_exactly_the_model_replies(fixture, request, guess_env):
    tokenizer = request.getfixturevalue(fixture)
    attempt = play(guess_env, tokenizer, lambda p: "wrong")[0]
    gen = [t for t, m in zip(attempt.completion_ids, attempt.completion_mask) if m]
    glue = [t for t, m in zip(attempt.completion_ids, attempt.completion_mask) if not m]
    eos = tokenizer.eos_token_id
    assert gen == encode("wrong", tokenizer) + [eos] + encode("wrong", tokenizer) + [eos]
    assert "Wrong guess #1" in tokenizer.decode(glue) and "wrong" not in tokenizer.decode(glue).replace("Wrong", "")


def test_plain_format_without_chat_template(tok_plain):
    text = render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], tok_plain)
    assert text == "<|bos|>### System\nS\n\n### User\nU\n\n### Assistant\n"
    with pytest.raises(ValueError, match="unknown chat role"):
        render([{"role": "tool", "content": "x"}], tok_plain)


def test_parse_rulebook():
    assert parse_rulebook("a <prompt> one </prompt> b <PROMPT>two</PROMPT>", "base") == ("two", True)
    assert parse_rulebook("<prompt>   </prompt>", "base") == ("base", False)
    assert parse_rulebook("<prompt>unclosed", "base") == ("base", False)


#: Blocks that state no rule: nothing, whitespace, list numbers, bullets, single letters, punctuation, digits.
EMPTY_BLOCKS = [
    "",
    " ",
    "\n\n",
    "1.",
    "\n1.",
    "1.\n2.\n3.",
    "1) 2)",
    "- \n* \n•",
    "a)\nb)",
    "1. a",
    "...",
    "1. 42 = 7",
    "#",
]
#: Blocks with at least one line that says something beyond its list marker.
RULE_BLOCKS = ["Avoid H.", "1. Avoid H.", "1.\n2. Go right", "- go down", "a) Reach G", "C is a hole.", "1. 规则"]


@pytest.mark.parametrize("block", EMPTY_BLOCKS)
def test_a_block_that_states_no_rule_is_no_rulebook_whatever_the_prefill(block):
    assert parse_rulebook(f"<prompt>{block}</prompt>", "base") == ("base", False)
    assert parse_rulebook(f"thinking <prompt>{block}</prompt> done", "base", unclosed=True) == ("base", False)
    # the prefilled path: the open tag (and a list number) already written, the model closed at once or was cut
    for prefill in ["<prompt>", "<prompt>\n1.", "<PROMPT>\n"]:
        assert parse_rulebook(f"{prefill}{block}</prompt>", "base", unclosed=True) == ("base", False), prefill
        assert parse_rulebook(f"{prefill}{block}", "base", unclosed=True) == ("base", False), prefill
        assert parse_rulebook(f"{prefill}{block}</prom", "base", unclosed=True) == ("base", False), prefill


@pytest.mark.parametrize("block", RULE_BLOCKS)
def test_a_block_that_states_a_rule_is_the_rulebook(block):
    assert parse_rulebook(f"x <prompt>{block}</prompt>", "base") == (block.strip(), True)
    assert parse_rulebook(f"<prompt>\n{block}", "base", unclosed=True) == (block.strip(), True)  # cut by the limit
    assert parse_rulebook(f"<prompt>\n{block}</pr", "base", unclosed=True) == (block.strip(), True)  # in its tag
    assert parse_rulebook(f"<prompt>\n{block}", "base") == ("base", False)  # unclosed without the prefill
    # the last block that states a rule wins over a later empty one
    assert parse_rulebook(f"<prompt>{block}</prompt><prompt>1.</prompt>", "base") == (block.strip(), True)


def test_cut_middle_keeps_head_and_tail():
    text = "HEAD " + "x" * 500 + " TAIL"
    out = cut_middle(text, 60)
    assert len(out) <= 60 and out.startswith("HEAD") and out.endswith("TAIL") and "omitted" in out
    assert cut_middle("short", 60) == "short" and cut_middle(text, 10) == ""


def test_reflection_truncates_trace_then_memory_then_the_task(tok):
    task = "TASK-START " + "q" * 200 + " TASK-END"
    trace = "TRACE-START " + "step " * 400 + "TRACE-END"
    memory = "MEM-START " + "rule " * 200 + "MEM-END"
    msgs, ids = reflection_messages(
        task_text=task,
        base_prompt=memory,
        trace=trace,
        reward=0.0,
        feedback="FELL-IN-HOLE",
        tokenizer=tok,
        max_tokens=1400,
    )
    user = msgs[1]["content"]
    assert len(ids) <= 1400
    assert task in user and "FELL-IN-HOLE" in user
    assert "TRACE-START" in user and "TRACE-END" in user and "omitted" in user
    # with a tighter budget the memory is cut too, and the task still survives whole
    msgs, ids = reflection_messages(
        task_text=task,
        base_prompt=memory,
        trace=trace,
        reward=0.0,
        feedback="FELL-IN-HOLE",
        tokenizer=tok,
        max_tokens=1300,
    )
    user = msgs[1]["content"]
    assert task in user and user.count("omitted") == 2 and len(ids) <= 1300
    assert "MEM-START" in user and "MEM-END" in user
    # a budget too small for the task: the trace and memory go first, then the task's middle
    msgs, ids = reflection_messages(
        task_text=task,
        base_prompt=memory,
        trace=trace,
        reward=0.0,
        feedback="FELL-IN-HOLE",
        tokenizer=tok,
        max_tokens=800,
    )
    user = msgs[1]["content"]
    assert len(ids) <= 800 and "MEM-" not in user and "TRACE-" not in user
    assert "TASK-START" in user and "TASK-END" in user and task not in user
    # a budget smaller than the request's own text is refused, not exceeded
    with pytest.raises(PromptTooLongError, match="max_reflection_prompt_length=100"):
        reflection_messages(
            task_text=task,
            base_prompt=memory,
            trace=trace,
            reward=0.0,
            feedback="FELL-IN-HOLE",
            tokenizer=tok,
            max_tokens=100,
        )


def test_a_plain_retry_states_the_outcome_once():
    # "w/o reflection": the trace of a grid or QA episode already ends with its outcome line; a trace
    # from an environment of one's own may not. Either way the retry's system prompt states it once.
    from erl_lite.core.prompts import retry_system_prompt

    feedback = "Failure: the agent fell into a hole on action 1. Reward 0."
    for trace in (
        "Start:\nA B\nAction 1: Right -> fell",
        f"Start:\nA B\nAction 1: Right -> fell\nOutcome: {feedback}",
        f"Q: 2+2?\nA: 5\nOutcome: {feedback}\n",
    ):
        text = retry_system_prompt("Play.", trace, feedback)
        assert text.count(feedback) == 1, text
        assert text.startswith("Play.") and text.rstrip().endswith(feedback)
