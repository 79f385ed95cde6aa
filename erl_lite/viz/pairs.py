"""One task's ERL story from a sampled step record: first attempt → reflection → second attempt, as
HTML or text, with word diffs of base prompt against rulebook and first against second moves.
"""

from __future__ import annotations

import difflib
import html
import re
from typing import Any, Callable

from erl_lite.records import FIRST, REFLECTION, SECOND, retries_by_first
from erl_lite.viz._style import COLORS, HistoryLike, as_history

Record = dict[str, Any]
MAX_CHARS = 2000  # per message: keeps a long multi-turn episode readable


def step_record(source: HistoryLike | Record | Any, step: int | None = None) -> Record:
    """The sampled record of ``step`` (default: the first) from a step record or a run (``as_history``)."""
    if hasattr(source, "to_dict") and hasattr(source, "first_attempts"):
        source = source.to_dict()
    if isinstance(source, dict) and "first_attempts" in source:
        return source
    samples = as_history(source).samples
    if not samples:
        raise ValueError(
            "this history holds no sampled step records (History.samples is "
            "empty); the trainer keeps one every `sample_every` steps"
        )
    if step is None:
        return samples[0]
    for record in samples:
        if int(record.get("step", -1)) == step:
            return record
    have = [s.get("step") for s in samples]
    raise ValueError(f"no sampled step record for step {step}; sampled steps: {have}")


def list_pairs(record: Record) -> list[dict[str, Any]]:
    """Every first attempt of a step: task_id, index, first/second success (None if not gated)."""
    retried = retries_by_first(record)
    return [
        {
            "task_id": a.get("task_id"),
            "index": a.get("index"),
            "first_success": bool(a.get("success")),
            "second_success": None if second is None else bool(second.get("success")),
        }
        for i, a in enumerate(record.get("first_attempts", []))
        for second in [retried[i]["second"] if i in retried else None]
    ]


def select_pair(record: Record, task_id: str | None = None, index: int | None = None) -> dict[str, Record | None]:
    """Pick {first, reflection, second} (in that order) for one rollout; by default the first reflected one."""
    firsts = record.get("first_attempts", [])
    candidates = [
        i
        for i, a in enumerate(firsts)
        if (task_id is None or a.get("task_id") == task_id) and (index is None or a.get("index") == index)
    ]
    if not candidates:
        raise ValueError(f"no first attempt with task_id={task_id!r}, index={index!r} at step {record.get('step')}")
    retried = retries_by_first(record)
    reflected = [i for i in candidates if retried.get(i, {}).get("reflection")]
    chosen = (reflected or candidates)[0]
    retry = retried.get(chosen, {})
    return {FIRST: firsts[chosen], REFLECTION: retry.get("reflection"), SECOND: retry.get("second")}


def assistant_actions(attempt: Record | None) -> str:
    """The model's own turns of an attempt, one per line."""
    if not attempt:
        return ""
    return "\n".join(m.get("content", "") for m in attempt.get("messages", []) if m.get("role") == "assistant")


def word_diff(a: str, b: str) -> list[tuple[str, str]]:
    """Word-level diff as ``[(op, text)]`` with op ``"="`` kept, ``"-"`` removed, ``"+"`` added."""
    ta, tb = re.split(r"(\s+)", a), re.split(r"(\s+)", b)  # keep whitespace as tokens
    # chunks: ("=", text, text) kept, or ("~", old, new) changed (either side may be "").
    chunks: list[tuple[str, str, str]] = []
    matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        chunk = ("=" if tag == "equal" else "~", "".join(ta[i1:i2]), "".join(tb[j1:j2]))
        # Fold a lone space between two edits into one: "[-a b-]{+c d+}", not "[-a-]{+c+} [-b-]{+d+}".
        if chunk[0] == "~" and [c[0] for c in chunks[-2:]] == ["~", "="] and chunks[-1][1].isspace():
            space, prev = chunks.pop()[1], chunks.pop()
            chunk = ("~", prev[1] + space + chunk[1], prev[2] + space + chunk[2])
        chunks.append(chunk)
    pairs = ([("=", old)] if tag == "=" else [("-", old), ("+", new)] for tag, old, new in chunks)
    return [(op, text) for pair in pairs for op, text in pair if text]


#: One rule of a prompt or rulebook: a sentence or a line, with the space before it and its list marker.
_RULE = re.compile(r"\s*(?:(?:\d+[.)]|[-*•])\s+)?[^\n.!?]*[.!?]*")
_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+")


def rule_diff(a: str, b: str) -> list[tuple[str, str]]:
    """:func:`word_diff`'s ops for instructions, rule by rule: ``b``'s rules in order, kept (``"="``, ``a`` states
    it anywhere, under any list marker) or added (``"+"``), then ``a``'s rules ``b`` drops (``"-"``). A rule moved
    is not new: a word diff aligns the words in order, and marked a moved rule removed here and added there."""
    rules_a, rules_b = ([m.group(0) for m in _RULE.finditer(t) if m.group(0)] for t in (a, b))
    in_a, in_b = {_key(r) for r in rules_a}, {_key(r) for r in rules_b}
    kept = [("=" if _key(r) in in_a or not _key(r) else "+", r) for r in rules_b]
    return kept + [("-", r) for r in rules_a if _key(r) and _key(r) not in in_b]


def _key(rule: str) -> str:
    """A rule without its list marker and spacing: what two rules must share to be the same."""
    return " ".join(_MARKER.sub("", rule).split())


def diff_text(a: str, b: str, diff: Callable[[str, str], list[tuple[str, str]]] = word_diff) -> str:
    """wdiff-style markup: ``[-removed-]{+added+}`` (``diff``: :func:`word_diff`, or :func:`rule_diff`)."""
    marks = {"=": "{}", "-": "[-{}-]", "+": "{{+{}+}}"}
    return "".join(marks[op].format(text) for op, text in diff(a, b))


def diff_html(a: str, b: str, diff: Callable[[str, str], list[tuple[str, str]]] = word_diff) -> str:
    """Removed words struck through in red, added words in green (``diff`` as in :func:`diff_text`)."""
    style = {"-": "background:#fdd;color:#900;text-decoration:line-through", "+": "background:#dfd;color:#060"}
    words = [(op, html.escape(text)) for op, text in diff(a, b)]
    marked = "".join(text if op == "=" else f'<span style="{style[op]}">{text}</span>' for op, text in words)
    return _pre(marked, escaped=True)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + " …"


#: Stated in full, as front-ends differ (JupyterLab right-aligns cells and breaks words inside <pre>).
LEFT = "text-align:left"
_PRE = (
    "margin:2px 0;padding:4px;background:#f6f8fa;font-size:12px;font-family:ui-monospace,Menlo,Consolas,"
    f"monospace;word-break:normal;overflow-wrap:normal;{LEFT}"
)


def _pre(text: str, escaped: bool = False) -> str:
    """A monospace block: a grid (short lines) never wraps, lest its columns shift; prose wraps at spaces only."""
    body = text if escaped else html.escape(_clip(text))
    grid = "\n" in text.strip() and max(map(len, text.splitlines())) <= 60
    wrap = "white-space:pre;overflow-x:auto" if grid else "white-space:pre-wrap"
    return f'<pre style="{wrap};{_PRE}">{body}</pre>'


def _outcome(attempt: Record) -> str:
    verdict = "succeeded" if attempt.get("success") else "failed"
    return f"reward {float(attempt.get('reward', 0.0)):.2f}, {verdict}"


def _attempt_html(title: str, attempt: Record | None, color: str) -> str:
    if attempt is None:
        return f"<b style='color:{color}'>{title}</b><p><i>not run (passed the gate)</i></p>"
    turns = "".join(
        f"<div style='{LEFT}'><small><b>{html.escape(m.get('role', '?'))}</b></small>{_pre(m.get('content', ''))}</div>"
        for m in attempt.get("messages", [])
        if m.get("role") != "system"
    )
    return (
        f"<b style='color:{color}'>{title}</b> <small>({_outcome(attempt)}, "
        f"{attempt.get('num_turns', '?')} turns)</small>"
        f"<details><summary>system prompt</summary>{_pre(attempt.get('system_prompt', ''))}"
        f"</details>{turns}<b>feedback</b>{_pre(attempt.get('feedback', ''))}"
    )


def _reflection_html(refl: Record | None) -> str:
    color = COLORS["reflection"]
    if refl is None:
        return f"<b style='color:{color}'>Reflection</b><p><i>none: the first attempt passed</i></p>"
    parsed = "parsed" if refl.get("parsed") else "no &lt;prompt&gt; block: base prompt reused"
    return (
        f"<b style='color:{color}'>Reflection → rulebook</b> <small>({parsed}, "
        f"r̃ = {float(refl.get('reward', 0.0)):.2f})</small>{_pre(refl.get('rulebook', ''))}"
        f"<details><summary>raw reflection text</summary>{_pre(refl.get('text', ''))}</details>"
    )


def show_attempt_pair(
    history_or_step_record: HistoryLike | Record | Any,
    step: int | None = None,
    task_id: str | None = None,
    index: int | None = None,
) -> str:
    """HTML of one rollout's first attempt, reflection and second attempt, with diffs."""
    record = step_record(history_or_step_record, step)
    first, refl, second = select_pair(record, task_id, index).values()
    cell = f'<td style="vertical-align:top;width:31%;padding:4px;{LEFT}">{{}}</td>'
    arrow = f'<td style="vertical-align:middle;width:3%;font-size:20px;color:#999;{LEFT}">→</td>'
    row = arrow.join(
        cell.format(x)
        for x in (
            _attempt_html("First attempt", first, COLORS["first"]),
            _reflection_html(refl),
            _attempt_html("Second attempt", second, COLORS["second"]),
        )
    )
    changed = ""
    if refl is not None:
        changed += "<b>Instructions: base prompt → rulebook</b>" + diff_html(
            refl.get("base_prompt", ""), refl.get("rulebook", ""), rule_diff
        )
    if second is not None:
        changed += "<b>Moves: first attempt → second attempt</b>" + diff_html(
            assistant_actions(first), assistant_actions(second)
        )
    head = f"Step {record.get('step')} · task {html.escape(str(first.get('task_id')))} · rollout #{first.get('index')}"
    return (
        f'<div style="font-family:sans-serif;font-size:13px;{LEFT}"><h4>{head}</h4>'
        f'<table style="width:100%;table-layout:fixed"><tr>{row}</tr></table>'
        + (f"<h4>What changed</h4>{changed}" if changed else "")
        + "</div>"
    )


def _attempt_text(title: str, attempt: Record | None) -> list[str]:
    if attempt is None:
        return [f"-- {title}: not run (passed the gate) --"]
    lines = [f"-- {title} ({_outcome(attempt)}) --", f"system: {_clip(attempt.get('system_prompt', ''))}"]
    lines += [
        f"{m.get('role')}: {_clip(m.get('content', ''))}"
        for m in attempt.get("messages", [])
        if m.get("role") != "system"
    ]
    return lines + [f"feedback: {attempt.get('feedback', '')}"]


def attempt_pair_text(
    history_or_step_record: HistoryLike | Record | Any,
    step: int | None = None,
    task_id: str | None = None,
    index: int | None = None,
) -> str:
    """Plain-text version of :func:`show_attempt_pair` (diffs as ``[-old-]{+new+}``)."""
    record = step_record(history_or_step_record, step)
    first, refl, second = select_pair(record, task_id, index).values()
    lines = [f"=== step {record.get('step')} · task {first.get('task_id')} · rollout #{first.get('index')} ==="]
    lines += _attempt_text("FIRST ATTEMPT", first)
    if refl is None:
        lines.append("-- REFLECTION: none, the first attempt passed the gate --")
    else:
        lines += [
            f"-- REFLECTION (parsed={bool(refl.get('parsed'))}, r~={float(refl.get('reward', 0.0)):.2f}) --",
            _clip(refl.get("rulebook", "")),
        ]
    lines += _attempt_text("SECOND ATTEMPT", second)
    if refl is not None:
        lines += [
            "-- WHAT CHANGED --",
            "instructions (base prompt -> rulebook): "
            + diff_text(refl.get("base_prompt", ""), refl.get("rulebook", ""), rule_diff),
        ]
    if second is not None:
        lines.append("moves (first -> second): " + diff_text(assistant_actions(first), assistant_actions(second)))
    return "\n".join(lines)
