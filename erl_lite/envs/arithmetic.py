r"""A single-turn example task: arithmetic rows ``{"prompt", "answer"}``, a reward and ERL's textual
feedback, both with TRL's reward signature. The answer read is the ``\boxed{...}`` and nothing else: no
prompt holds a number in a box, so a reply that copies the prompt or states a number unboxed scores 0. Only the
answer asked for pays: a whole number in ASCII digits (``-?[0-9]+``: no other script's digits, no ``171.0``, no
``1,2``), compared exactly as an integer; a reply boxing two different answers has none.

Departures from the paper: no single-turn task there; this one shows how a user's dataset, reward and feedback plug in.
"""

from __future__ import annotations

import random
import re
from typing import Any

from erl_lite.config.checks import check_flag, check_sizes, check_whole
from erl_lite.envs.qa import extract_boxed, several_answers

_WHOLE = re.compile(r"-?[0-9]+")  # [0-9], not \d: \d also matches Arabic-Indic and fullwidth digits
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def make_expression(rng: random.Random, n_ops: int, max_operand: int) -> tuple[str, int]:
    """A random expression with ``n_ops`` operators and its value, e.g. ``('(3 + 4) * 2', 14)``."""
    value = rng.randint(1, max_operand)
    text = str(value)
    for i in range(n_ops):
        op, b = rng.choice(sorted(_OPS)), rng.randint(1, max_operand)
        left = f"({text})" if i > 0 else text
        text, value = f"{left} {op} {b}", _OPS[op](value, b)
    return text, value


def make_arithmetic_dataset(
    n: int = 1000, seed: int = 0, n_ops: tuple[int, int] = (1, 3), max_operand: int = 20, chat: bool = True
) -> list[dict[str, Any]]:
    r"""``n`` seeded rows ``{"prompt", "answer"}``; answers are integers written as strings."""
    for name, count, least in (("n", n, 0), ("seed", seed, 0), ("max_operand", max_operand, 1)):
        check_whole("make_arithmetic_dataset", name, count, least)
    check_sizes("make_arithmetic_dataset", n_ops, 1, name="n_ops")
    check_flag("make_arithmetic_dataset", "chat", chat)
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        expr, value = make_expression(rng, rng.randint(*n_ops), max_operand)
        text = f"Compute {expr}. Put the final answer, a whole number, in \\boxed{{}}."
        prompt: Any = [{"role": "user", "content": text}] if chat else text
        rows.append({"prompt": prompt, "answer": str(value)})
    return rows


#: ``--small``'s task: 200 rows of one operation on numbers up to 9.
SMALL: dict[str, Any] = {"n": 200, "n_ops": (1, 1), "max_operand": 9}


def small_arithmetic_dataset(n: int = 200, seed: int = 0, chat: bool = True) -> list[dict[str, Any]]:
    """A CPU-sized variant: one operation on numbers up to 9."""
    return make_arithmetic_dataset(**{**SMALL, "n": n, "seed": seed, "chat": chat})


def _text(completion: Any) -> str:
    """A completion as text (chat messages: the last message's content)."""
    last = completion[-1] if isinstance(completion, list) and completion else completion
    return last if isinstance(last, str) else str(last.get("content", "")) if isinstance(last, dict) else ""


def parse_number(completion: Any) -> tuple[int | None, str]:
    r"""(whole number read, where: ``"boxed"``, ``"several"`` (boxes that differ) or ``"none"``): the ``oxed{}``
    only, the format the prompt asks for."""
    text = _text(completion)
    boxed = extract_boxed(text)
    if boxed is None:
        return None, "none"
    if several_answers(text, str.strip):
        return None, "several"
    return (int(boxed), "boxed") if _WHOLE.fullmatch(boxed) else (None, "boxed")


def arithmetic_reward(prompts: list[Any], completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """1.0 where the number read equals the answer as an integer, exactly; else 0.0 (TRL reward signature)."""
    return [1.0 if parse_number(c)[0] == int(a) else 0.0 for c, a in zip(completions, answer)]


def arithmetic_feedback(prompts: list[Any], completions: list[Any], answer: list[str], **kwargs: Any) -> list[str]:
    """One feedback sentence per completion: what was read, right or wrong, too high or low."""
    out = []
    for completion, gold in zip(completions, answer):
        value, source = parse_number(completion)
        if value is None:
            where = {
                "boxed": r"the \boxed{} holds no whole number in digits 0-9",
                "several": r"the reply boxes several different answers",
            }.get(source, r"the reply has no \boxed{}")
            out.append(rf"Incorrect: no answer could be read ({where}); end with one \boxed{{number}}. Reward 0.")
        elif value == int(gold):
            out.append(f"Correct: read {value} from the {source}. Reward 1.")
        else:
            side = "too high" if value > int(gold) else "too low"
            out.append(f"Incorrect: read {value} from the {source}, which is {side}. Reward 0.")
    return out
