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
        (r"so \boxed{14}", 14.0, "boxed"),
        (r"\boxed{1,024}", 1024.0, "boxed"),
        (r"3 + 4 is 7, and \boxed{-2} is it, not 5", -2.0, "boxed"),
        ("first 3 then 12", None, "none"),  # only the requested format is read: no last-number fallback
        (r"\boxed{fourteen} 14", None, "boxed"),  # a box wins even when it holds no number
        (r"\boxed{}", None, "boxed"),
        ("no idea", None, "none"),
        ([{"role": "assistant", "content": "It is 9."}], None, "none"),
        ([{"role": "assistant", "content": r"It is \boxed{9}."}], 9.0, "boxed"),
        ([], None, "none"),
    ],
)
def test_parse_number(completion, value, source):
    assert parse_number(completion) == (value, source)


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
