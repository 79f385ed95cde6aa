"""The prompts ERL adds around a task: the reflection request (asking for a rulebook inside ``<prompt>…</prompt>``),
and the second attempt's (Δ plus the action reminder, never y1 or f1).

Departures from the paper: own wording; the released code's structure (rulebook in tags, base prompt as fallback).
"""

from __future__ import annotations

import bisect
import re
import warnings
from typing import Any

from erl_lite.config import ERLConfig
from erl_lite.engine.chat import encode, render
from erl_lite.engine.generation import PromptTooLongError

REFLECTION_SYSTEM = (
    "You coach an agent that has just failed a task. You will see the instructions it was "
    "given, what it did step by step, and how it ended. Write better instructions for its next "
    "try at the same kind of task."
)

#: The defaults of the settings ``reflection_request`` and ``retry_instruction``.
REFLECTION_REQUEST, RETRY_HEADER = ERLConfig.reflection_request, ERLConfig.retry_instruction

_PROMPT_TAG = re.compile(r"<prompt>(.*?)</prompt>", re.DOTALL | re.IGNORECASE)
_OPEN, _CLOSE = re.compile(r"<prompt>", re.IGNORECASE), re.compile(r"</prompt>", re.IGNORECASE)
_PART_CLOSE = re.compile(r"<(?:/(?:p(?:r(?:o(?:m(?:p(?:t)?)?)?)?)?)?)?$", re.IGNORECASE)


def parse_rulebook(text: str, base_prompt: str, unclosed: bool = False) -> tuple[str, bool]:
    """Δ from a reflection: the last ``<prompt>…</prompt>`` block that :func:`states_a_rule`; with ``unclosed`` (the
    open tag was prefilled), else a block the length limit cut (no closing tag). None: ``(base_prompt, False)``."""
    blocks = _PROMPT_TAG.findall(text)
    if unclosed and not _CLOSE.search(text):  # without the part of a closing tag the limit cut: "…</pro"
        blocks = [_PART_CLOSE.sub("", _OPEN.split(text, 1)[-1])]
    blocks = [b.strip() for b in blocks if states_a_rule(b)]
    return (blocks[-1], True) if blocks else (base_prompt, False)


#: A line's list marker: a bullet, or a number or single letter closed by ``.`` or ``)``.
_LIST_MARKER = re.compile(r"^\s*(?:[-*+\u2022>#]+|\(?(?:\d+|[^\W\d_])[.):])\s*", re.MULTILINE)
#: A word: two or more letters of any script.
_WORD = re.compile(r"[^\W\d_]{2,}")


def states_a_rule(block: str) -> bool:
    """Whether a rulebook block says something: one of its lines holds a word (two or more letters) beyond its list
    marker, so an empty, number-only or at-once-closed block is none (the prefill ``"<prompt>\\n1."`` alone would
    otherwise count as a rulebook, and its reflection be credited for writing nothing)."""
    return _WORD.search(_LIST_MARKER.sub("", block)) is not None


def end_at_close_tag(ids: list[int], tokenizer: Any) -> int:
    """How many of a reflection's ``ids`` to keep: through the token that completes its first ``</prompt>`` (all when
    none). Backends without stop strings sample on; what follows the block is never read nor trained."""

    def closed(k: int) -> bool:  # whether the first k ids hold the tag: False, then True as k grows
        return _CLOSE.search(tokenizer.decode(ids[:k], skip_special_tokens=True)) is not None

    return min(bisect.bisect_left(range(len(ids) + 1), True, key=closed), len(ids))


def second_attempt_system_prompt(rulebook: str, action_reminder: str) -> str:
    """Δ as the second attempt's system prompt, with the action-format reminder."""
    return f"{rulebook}\n\n{action_reminder}".strip() if action_reminder else rulebook


def retry_system_prompt(initial_prompt: str, trace: str, feedback: str, header: str = RETRY_HEADER) -> str:
    """The "w/o reflection" ablation: the raw first attempt instead of a rulebook. The outcome is stated once:
    the grid and QA episodes' traces already end with it."""
    outcome = "" if feedback in trace else f"\n\nOutcome: {feedback}"
    return f"{initial_prompt}\n\n{header}\n\n{trace.strip()}{outcome}".strip()


#: What stands for a part's cut middle.
MARKER = "\n[... middle of the attempt omitted ...]\n"
#: A request's part longer than this many characters per token of its budget is cut (by characters, with a
#: warning) before it is tokenized: no tokenizer's tokens average more, so nothing that could fit is lost.
CHARS_PER_TOKEN = 16


def cut_middle(text: str, max_chars: int) -> str:
    """``text`` in at most ``max_chars`` characters: its head and tail around :data:`MARKER` (a reader needs both)."""
    if len(text) <= max_chars:
        return text
    keep = max_chars - len(MARKER)
    return text[: keep - keep // 2] + MARKER + text[len(text) - keep // 2 :] if keep > 0 else ""


def _cut_ids(text: str, ids: list[int], keep: int, marker: int, tokenizer: Any) -> str:
    """``text`` (tokenized as ``ids``) shortened to about ``keep`` tokens around the marker (``marker`` tokens)."""
    room = keep - marker
    if len(ids) <= keep or room <= 0:
        return text if len(ids) <= keep else ""
    return tokenizer.decode(ids[: room - room // 2]) + MARKER + tokenizer.decode(ids[len(ids) - room // 2 :])


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
    request: str = REFLECTION_REQUEST,
    prefill: str = "",
) -> tuple[list[dict[str, str]], list[int]]:
    """Messages asking for a rulebook and their token ids, fitted to ``max_tokens`` by cutting the middle of, in
    order: trace (to a quarter), base instructions, trace, task, feedback; a budget too small for the fixed text
    raises :class:`PromptTooLongError`. Each part is tokenized once (past :data:`CHARS_PER_TOKEN` a token, cut
    first, with a warning) and cut on its tokens. The ids end with ``prefill``, the reflection's own first words."""
    parts = {"task_text": task_text, "base_prompt": base_prompt, "trace": trace, "feedback": feedback}
    for name, text in parts.items():
        if len(text) > CHARS_PER_TOKEN * max_tokens:
            shown = {"base_prompt": "base instructions (the memory)", "task_text": "task"}.get(name, name)
            warnings.warn(
                f"reflection request: its {shown} of {len(text):,} characters was cut to "
                f"{CHARS_PER_TOKEN * max_tokens:,} ({CHARS_PER_TOKEN} a token of max_reflection_prompt_length"
                f"={max_tokens}) before tokenizing",
                UserWarning,
                stacklevel=2,
            )
            parts[name] = cut_middle(text, CHARS_PER_TOKEN * max_tokens)
    ids = {name: encode(text, tokenizer) for name, text in parts.items()}
    room = max_tokens - reflection_skeleton_length(tokenizer, template_kwargs, request, prefill)
    marker = len(encode(MARKER, tokenizer))
    order = [("trace", max_tokens // 4), ("base_prompt", 0), ("trace", 0), ("task_text", 0), ("feedback", 0)]
    for _ in range(4):  # tokens merge across a cut: take what the whole request overshot off the room, again
        keep = {name: len(v) for name, v in ids.items()}
        for name, floor in order:
            keep[name] = max(min(keep[name], keep[name] - (sum(keep.values()) - room)), min(floor, keep[name]))
        messages = _reflection_request(
            {n: _cut_ids(parts[n], ids[n], keep[n], marker, tokenizer) for n in parts}, reward, request
        )
        out = _request_ids(messages, tokenizer, template_kwargs, prefill)
        room -= len(out) - max_tokens
        if len(out) <= max_tokens or room < 0:
            break
    if len(out) > max_tokens:
        raise PromptTooLongError(
            f"a reflection request needs {len(out)} tokens even with its task, attempt, memory "
            f"and feedback cut out; max_reflection_prompt_length={max_tokens} is too small"
        )
    return messages, out


def _reflection_request(parts: dict[str, str], reward: float, request: str) -> list[dict[str, str]]:
    """The reflection request's messages from its (possibly shortened) parts."""
    user = "\n\n".join(
        [
            f"## Current instructions\n{parts['base_prompt'] or '(none)'}",
            f"## Task\n{parts['task_text']}",
            f"## What the agent did\n{parts['trace']}",
            f"## Outcome\nreward {reward:g}. {parts['feedback']}",
            request,
        ]
    )
    return [{"role": "system", "content": REFLECTION_SYSTEM}, {"role": "user", "content": user}]


def reflection_skeleton_length(
    tokenizer: Any, template_kwargs: dict[str, Any] | None = None, request: str = REFLECTION_REQUEST, prefill: str = ""
) -> int:
    """Tokens of a reflection request with every part empty: what no cut can remove."""
    empty = _reflection_request({"task_text": "", "base_prompt": "", "trace": "", "feedback": ""}, 0.0, request)
    return len(_request_ids(empty, tokenizer, template_kwargs, prefill))


def _request_ids(messages: list[dict[str, str]], tokenizer: Any, template_kwargs: Any, prefill: str) -> list[int]:
    """A request's ids, the reply's first words (``prefill``) tokenized with the template's text, as it would be."""
    return encode(render(messages, tokenizer, True, template_kwargs) + prefill, tokenizer)
