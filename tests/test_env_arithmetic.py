"""The single-turn arithmetic example: rows, TRL-signature reward and feedback functions."""

from __future__ import annotations

import ast
import operator
import re

import pytest

from erl_lite.envs.arithmetic import (
    arithmetic_feedback,
    arithmetic_reward,
    make_arithmetic_dataset,
    parse_number,
    small_arithmetic_dataset,
)

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def evaluate(expression: str) -> int:
    """Independent evaluation of the generated expression through Python's parser."""

    def walk(node):
        if isinstance(node, ast.BinOp):
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        assert isinstance(node, ast.Constant)
        return node.value

    return walk(ast.parse(expression, mode="eval").body)


def expression_of(row: dict) -> str:
    text = row["prompt"][0]["content"]
    return text[len("Compute ") : text.index(". Put")]


def test_rows_are_seeded_and_answers_are_right():
    rows = make_arithmetic_dataset(200, seed=3)
    assert rows == make_arithmetic_dataset(200, seed=3) != make_arithmetic_dataset(200, seed=4)
    for row in rows:
        assert set(row) == {"prompt", "answer"} and row["prompt"][0]["role"] == "user"
        assert evaluate(expression_of(row)) == int(row["answer"]), row
    plain = make_arithmetic_dataset(3, seed=3, chat=False)
    assert isinstance(plain[0]["prompt"], str) and plain[0]["answer"] == rows[0]["answer"]
    for row in small_arithmetic_dataset(50):
        a, op, b = expression_of(row).split()
        assert op in "+-*" and 1 <= int(a) <= 9 and 1 <= int(b) <= 9


@pytest.mark.parametrize(
    "completion, value, source",
    [
        (r"so \boxed{14}", 14, "boxed"),
        (r"\boxed{1,024}", None, "boxed"),  # no separators: 1,2 would read as 12
        (r"3 + 4 is 7, and \boxed{-2} is it, not 5", -2, "boxed"),
        ("first 3 then 12", None, "none"),  # only the requested format is read: no last-number fallback
        (r"\boxed{fourteen} 14", None, "boxed"),  # a box wins even when it holds no number
        (r"\boxed{}", None, "boxed"),
        ("no idea", None, "none"),
        ([{"role": "assistant", "content": "It is 9."}], None, "none"),
        ([{"role": "assistant", "content": r"It is \boxed{9}."}], 9, "boxed"),
        ([], None, "none"),
    ],
)
def test_parse_number(completion, value, source):
    assert parse_number(completion) == (value, source)


#: Replies that box something other than the whole number asked for, in ASCII digits, once: (reply, answer).
OTHER_FORMATS = [
    (r"\boxed{١٧١}", "171"),  # Arabic-Indic digits
    (r"\boxed{۱۷۱}", "171"),  # Extended Arabic-Indic
    (r"\boxed{１７１}", "171"),  # fullwidth
    (r"\boxed{१७१}", "171"),  # Devanagari
    (r"\boxed{¹⁷¹}", "171"),  # superscripts
    (r"\boxed{171.0}", "171"),  # a decimal where a whole number is asked
    (r"\boxed{171.}", "171"),
    (r"\boxed{1.71e2}", "171"),
    (r"\boxed{1,2}", "12"),
    (r"\boxed{1 2}", "12"),
    (r"\boxed{1_2}", "12"),
    (r"\boxed{+12}", "12"),
    (r"\boxed{12} or \boxed{13}", "12"),  # two answers: a hedge
    (r"\boxed{13} no wait \boxed{12} or \boxed{11}", "12"),
    (r"\boxed{38028496918914712000}", "38028496918914711000"),  # 1000 apart: equal as floats
    (r"\boxed{9007199254740993}", "9007199254740992"),  # 2**53 + 1: equal as floats
]


@pytest.mark.parametrize("reply, answer", OTHER_FORMATS)
def test_only_the_whole_number_asked_for_pays(reply, answer):
    assert arithmetic_reward(["Compute it."], [reply], answer=[answer]) == [0.0], reply
    note = arithmetic_feedback(["Compute it."], [reply], answer=[answer])[0]
    assert note.startswith("Incorrect") and "Reward 0." in note, note


@pytest.mark.parametrize(
    "reply, answer",
    [
        (r"\boxed{38028496918914711000}", "38028496918914711000"),
        (r"\boxed{ -7 }", "-7"),
        (r"\boxed{12} so once more: \boxed{12}", "12"),  # the same answer twice is one answer
        (r"\boxed{007}", "7"),
    ],
)
def test_the_whole_number_asked_for_pays_exactly(reply, answer):
    assert arithmetic_reward(["Compute it."], [reply], answer=[answer]) == [1.0], reply


def test_reward_and_feedback_with_trl_signature():
    prompts = ["Compute 2 + 3."] * 5
    completions = [
        r"\boxed{5}",
        r"I get \boxed{7}",
        r"\boxed{2}",
        "no number",
        [{"role": "assistant", "content": r"\boxed{5}"}],
    ]
    answers = ["5"] * 5
    assert arithmetic_reward(prompts, completions, answer=answers, extra_column=[0] * 5) == [1.0, 0.0, 0.0, 0.0, 1.0]
    notes = arithmetic_feedback(prompts, completions, answer=answers)
    assert notes[0].startswith("Correct") and "boxed" in notes[0]
    assert "read 7" in notes[1] and "too high" in notes[1]
    assert "too low" in notes[2]
    assert "no answer could be read" in notes[3] and "\\boxed{" in notes[3]
    assert notes[4].startswith("Correct")
    assert not any("last number" in n for n in notes)


def _gaming_replies(row: dict) -> dict[str, str]:
    """Replies that do not answer: what a small model was seen writing (copies, restatements, stray numbers)."""
    prompt, answer, expr = row["prompt"][0]["content"], row["answer"], expression_of(row)
    return {
        "copies the prompt": prompt,
        "restates the question": f"We need to compute {expr}.",
        "restates with the answer unboxed": f"{expr} = {answer}",
        "ends with the answer unboxed": f"1 = {answer}",
        "ends with an unrelated number": f"{prompt} The answer is {int(answer) + 1}",
        "copies the prompt's format": prompt + " " + prompt[prompt.index("\\boxed") :],
    }


@pytest.mark.parametrize("make", [make_arithmetic_dataset, small_arithmetic_dataset])
def test_replies_that_do_not_answer_score_zero(make):
    rows = make(400, seed=5)
    for row in rows:
        for kind, reply in _gaming_replies(row).items():
            assert arithmetic_reward([row["prompt"]], [reply], answer=[row["answer"]]) == [0.0], (kind, reply)
        right = rf"{expression_of(row)} = \boxed{{{row['answer']}}}"
        assert arithmetic_reward([row["prompt"]], [right], answer=[row["answer"]]) == [1.0]


def test_no_prompt_holds_a_valid_answer():
    """No example in the prompt reads as an answer (the old ``\\boxed{42}`` example scored on every task of 42)."""
    for row in make_arithmetic_dataset(2000, seed=0) + small_arithmetic_dataset(200):
        assert parse_number(row["prompt"][0]["content"])[0] is None, row


def test_the_command_line_builds_the_small_task_and_its_options(tmp_path):
    from erl_lite.cli.train import build_environment

    _, rows, kwargs = build_environment("arithmetic", small=True)
    assert len(rows) == 200 and all(len(expression_of(r).split()) == 3 for r in rows)  # one operation, as --small says
    _, rows, kwargs = build_environment("arithmetic", small=False, options={"n": 30, "max_operand": 5})
    assert len(rows) == 30 and all(int(x) <= 5 for r in rows for x in re.findall(r"\d+", expression_of(r)))
    assert len(kwargs["eval_dataset"]) == 64 and kwargs["eval_dataset"] != rows[:64]


def test_plugs_into_the_dataset_environment():
    dataset = pytest.importorskip("erl_lite.integrations.dataset")
    env = dataset.RewardFunctionEnv(arithmetic_reward, feedback_func=arithmetic_feedback)
    from erl_lite.envs.rows import rows_to_tasks

    task = rows_to_tasks(make_arithmetic_dataset(1, seed=0))[0]
    episode = env.new_episode()
    assert episode.reset(task).startswith("Compute")
    episode.step(r"\boxed{" + task.data["answer"] + "}")
    assert episode.success and "Correct" in episode.feedback()
