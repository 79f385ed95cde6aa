"""The prompts ERL adds around a task: the reflection request, and the second attempt's.

* :func:`reflection_messages` asks the model to rewrite its instructions after a failed
  attempt. It shows the base instructions (memory if it holds something, else the initial
  system prompt), the task, the whole first-attempt trace, the reward and the feedback, and
  asks for a complete replacement system prompt — a rulebook — inside ``<prompt>…</prompt>``.
  When the context would exceed its token budget the attempt trace is shortened first (its
  middle is cut, keeping the opening and the ending), then the base instructions; the task
  is never cut (the peer package truncates from the left and loses the task first).
* :func:`parse_rulebook` extracts Δ, falling back to the base prompt when the tags are missing.
* :func:`second_attempt_system_prompt` is Δ plus the environment's action-format reminder; the
  second attempt sees *only* that — not y1, not f1 — so any gain is carried by Δ.
* :func:`retry_system_prompt` is the "w/o reflection" ablation's context: the initial prompt
  plus the first attempt's trace and feedback.

Departures from the paper: the wording is erl_lite's own; the structure follows the paper's
released code (rulebook in tags, fallback to the base prompt).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from erl_lite.chat import encode, render

REFLECTION_SYSTEM = (
    "You coach an agent that has just failed a task. You will see the instructions it was "
    "given, what it did step by step, and how it ended. Write better instructions for its next "
    "try at the same kind of task."
)

REFLECTION_REQUEST = (
    "Write a complete new system prompt for the agent: a short rulebook that says what each "
    "symbol or piece of information means, what each action does, how the task is won or lost, "
    "and a strategy that avoids the mistake above. Keep what the current instructions got right. "
    "Put the whole rulebook between <prompt> and </prompt>."
)

RETRY_HEADER = (
    "You have tried this task before and did not succeed. Here is your previous attempt and "
    "how it ended; use it to do better this time."
)

_PROMPT_TAG = re.compile(r"<prompt>(.*?)</prompt>", re.DOTALL | re.IGNORECASE)


def parse_rulebook(text: str, base_prompt: str) -> tuple[str, bool]:
    """Δ from a reflection: the last non-empty ``<prompt>…</prompt>`` block.

    Example:
        >>> parse_rulebook("thinking... <prompt>C is a hole.</prompt>", "base")
        ('C is a hole.', True)
        >>> parse_rulebook("no tags here", "base")
        ('base', False)
    """
    blocks = [b.strip() for b in _PROMPT_TAG.findall(text) if b.strip()]
    if not blocks:
        return base_prompt, False
    return blocks[-1], True


def second_attempt_system_prompt(rulebook: str, action_reminder: str) -> str:
    """Δ as the second attempt's system prompt, with the action-format reminder."""
    return f"{rulebook}\n\n{action_reminder}".strip() if action_reminder else rulebook


def retry_system_prompt(initial_prompt: str, trace: str, feedback: str) -> str:
    """The "w/o reflection" ablation: the raw first attempt instead of a rulebook."""
    return f"{initial_prompt}\n\n{RETRY_HEADER}\n\n{trace}\n\nOutcome: {feedback}".strip()


def _section(title: str, body: str) -> str:
    return f"## {title}\n{body}"


def _user_message(task_text: str, base_prompt: str, trace: str, reward: float, feedback: str) -> str:
    return "\n\n".join([
        _section("Current instructions", base_prompt or "(none)"),
        _section("Task", task_text),
        _section("What the agent did", trace),
        _section("Outcome", f"reward {reward:g}. {feedback}"),
        REFLECTION_REQUEST,
    ])


def cut_middle(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """Shorten ``text`` to at most ``max_tokens`` by removing its middle.

    The opening (what the task looked like) and the ending (how the attempt failed) are the
    parts a reflector needs most, so they are kept in equal shares.
    """
    if count(text) <= max_tokens:
        return text
    marker = "\n[... middle of the attempt omitted ...]\n"
    if max_tokens <= count(marker):
        return ""
    lo, hi = 0, len(text) // 2
    while lo < hi:  # largest k such that head k + marker + tail k fits
        k = (lo + hi + 1) // 2
        if count(text[:k] + marker + text[-k:]) <= max_tokens:
            lo = k
        else:
            hi = k - 1
    return text[:lo] + marker + text[-lo:] if lo else marker.strip()


def reflection_messages(
    *,
    task_text: str,
    base_prompt: str,
    trace: str,
    reward: float,
    feedback: str,
    tokenizer: Any,
    max_tokens: int,
    template_kwargs: dict[str, Any] | None = None,
) -> tuple[list[dict[str, str]], list[int]]:
    """Messages asking for a rulebook, fitted to ``max_tokens``, and their token ids.

    Truncation order: the trace first (down to a small floor), then the base instructions;
    the task, reward and feedback are kept whole even if that exceeds the budget.
    ``template_kwargs`` go to the chat template (``ERLConfig.chat_template_kwargs``).
    """
    def build(b: str, t: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": REFLECTION_SYSTEM},
            {"role": "user", "content": _user_message(task_text, b, t, reward, feedback)},
        ]

    def size(msgs: list[dict[str, str]]) -> int:
        return len(encode(render(msgs, tokenizer, template_kwargs=template_kwargs), tokenizer))

    def count(s: str) -> int:
        return len(encode(s, tokenizer))

    messages = build(base_prompt, trace)
    over = size(messages) - max_tokens
    if over > 0:  # shorten the trace, keeping at least a quarter of the budget for it
        floor = max_tokens // 4
        trace = cut_middle(trace, max(count(trace) - over, floor), count)
        messages = build(base_prompt, trace)
        over = size(messages) - max_tokens
    if over > 0:  # then the base instructions (memory)
        base_prompt = cut_middle(base_prompt, max(count(base_prompt) - over, 0), count)
        messages = build(base_prompt, trace)
    return messages, encode(render(messages, tokenizer, template_kwargs=template_kwargs), tokenizer)
