"""Dataset rows as tasks: a row's ``prompt`` (a string or chat messages) checked and split, its other
columns kept as the task's data."""

from __future__ import annotations

from typing import Any, Iterable

from erl_lite.records import Task, check_unique_task_ids

Messages = list[dict[str, str]]

_ROLES = ("system", "user", "assistant")


def rows_to_tasks(
    rows: Iterable[dict[str, Any]], prefix: str = "row", where: str = "dataset", start: int = 0
) -> list[Task]:
    """Dataset rows (each with a ``prompt``) to tasks; other columns go to ``Task.data``.

    A row's ``id`` column names its task, else ``"<prefix>-<row>"``, rows counted from ``start`` (as are the rows
    that errors name); duplicate ids are refused."""
    tasks = []
    for i, row in enumerate(rows, start=start):
        if not isinstance(row, dict):
            raise ValueError(f"dataset row {i} is not a mapping of columns: {row!r:.80}")
        if "prompt" not in row:
            raise ValueError(f"dataset row {i} has no 'prompt' column (columns: {sorted(row)})")
        split_prompt(row["prompt"], where=f"dataset row {i}")
        data = {k: v for k, v in row.items() if k != "prompt"}
        tasks.append(Task(task_id=str(row.get("id", f"{prefix}-{i}")), prompt=row["prompt"], data=data))
    return check_unique_task_ids(tasks, where)


def split_prompt(prompt: str | Messages, where: str = "prompt") -> tuple[str | None, str | Messages]:
    """(system message or None, what the model reads before replying) of a dataset prompt, whose turns end with a
    user message: one comes back as text, several as a list. Text parts are joined; others and lone surrogates raise."""
    if isinstance(prompt, str):
        return None, _checked_text(prompt, where)
    if not isinstance(prompt, list) or not prompt:
        raise ValueError(f"{where}: a prompt is a string or a non-empty list of messages; got {prompt!r:.80}")
    messages = []
    for j, m in enumerate(prompt):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"{where}: message {j} needs 'role' and 'content'; got {m!r:.80}")
        if m["role"] not in _ROLES:
            raise ValueError(f"{where}: message {j} has unknown role {m['role']!r}; expected one of {_ROLES}")
        if m["role"] == "system" and j > 0:
            raise ValueError(f"{where}: a system message may appear only as the first message (found at {j})")
        messages.append({**m, "content": _message_text(m["content"], f"{where}: message {j}")})
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    turns = messages[1:] if system is not None else messages
    if not turns or turns[-1]["role"] != "user":
        raise ValueError(
            f"{where}: a conversational prompt must end with a user message; got roles {[m['role'] for m in prompt]}"
        )
    return system, turns[0]["content"] if len(turns) == 1 else turns


def _message_text(content: Any, where: str) -> str:
    """A message's content as one string: itself, or its text parts joined."""
    if isinstance(content, str):
        return _checked_text(content, where)
    if not isinstance(content, list):
        raise ValueError(f"{where}: content is a string or a list of content parts; got {content!r:.80}")
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in (None, "text"):
            raise ValueError(
                f"{where} has an {kind!r} content part (part {k}); erl_lite's policies read text "
                "only: keep the text parts"
            )
        if kind is None or not isinstance(part.get("text"), str):
            raise ValueError(f"{where}: content part {k} is not {{'type': 'text', 'text': <string>}}; got {part!r:.80}")
        texts.append(_checked_text(part["text"], f"{where}, content part {k}"))
    if not texts:
        raise ValueError(f"{where}: the content parts hold no text")
    return "".join(texts)


def _checked_text(text: str, where: str) -> str:
    """``text``, unless it holds a lone surrogate (the tokenizer would fail, naming nothing)."""
    bad = next((i for i, ch in enumerate(text) if "\ud800" <= ch <= "\udfff"), None)
    if bad is not None:
        raise ValueError(
            f"{where}: a lone surrogate {text[bad]!r} at character {bad} (text that is not valid "
            "Unicode, e.g. a JSON '\\ud83d' escape without its pair); fix the data"
        )
    return text
