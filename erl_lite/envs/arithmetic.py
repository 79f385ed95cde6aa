r"""A single-turn example task: arithmetic rows ``{"prompt", "answer"}``, a reward and ERL's textual
feedback, both with TRL's reward signature. The answer read is the last ``\boxed{...}`` and nothing else: no
prompt holds a number in a box, so a reply that copies the prompt or states a number unboxed scores 0.

Departures from the paper: no single-turn task there; this one shows how a user's dataset, reward and feedback plug in.
"""

from __future__ import annotations

import random
import re
from typing import Any

from erl_lite.envs.qa import extract_boxed

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
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


def parse_number(completion: Any) -> tuple[float | None, str]:
    r"""(value read, where: ``"boxed"`` or ``"none"``): the last ``oxed{}`` only, the format the prompt asks for."""
    boxed = extract_boxed(_text(completion))
    if boxed is None:
        return None, "none"
    match = _NUMBER.fullmatch(boxed.replace(",", "").strip())
    return (float(match.group()), "boxed") if match else (None, "boxed")


def arithmetic_reward(prompts: list[Any], completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """1.0 where the parsed number equals the answer, else 0.0 (TRL reward signature)."""
    return [1.0 if parse_number(c)[0] == float(a) else 0.0 for c, a in zip(completions, answer)]


def arithmetic_feedback(prompts: list[Any], completions: list[Any], answer: list[str], **kwargs: Any) -> list[str]:
    """One feedback sentence per completion: what was read, right or wrong, too high or low."""
    out = []
    for completion, gold in zip(completions, answer):
        value, source = parse_number(completion)
        if value is None:
            where = r"the \boxed{} holds no number" if source == "boxed" else r"the reply has no \boxed{}"
            out.append(rf"Incorrect: no answer could be read ({where}); end with \boxed{{number}}. Reward 0.")
        elif value == float(gold):
            out.append(f"Correct: read {value:g} from the {source}. Reward 1.")
        else:
            side = "too high" if value > float(gold) else "too low"
            out.append(f"Incorrect: read {value:g} from the {source}, which is {side}. Reward 0.")
    return out
