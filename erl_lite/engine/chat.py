"""Chat messages to token ids: the chat template, applied once. Multi-turn episodes grow by *glue* (end of turn,
next observation, next generation prompt), found for any template by :func:`glue_text`: no re-tokenizing.
"""

from __future__ import annotations

from typing import Any

#: Stand-in for the model's last reply when locating the glue between turns.
_SENTINEL = "\u2063ERL_LITE_REPLY\u2063"

#: Headings of the plain format, used when a tokenizer has no chat template.
PLAIN_HEADINGS = {"system": "### System", "user": "### User", "assistant": "### Assistant"}


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


#: A tool no real template would name otherwise: its name shows whether ``tools=`` is rendered.
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "erl_lite_probe_tool",
        "description": "Probe.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def template_renders_tools(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> bool:
    """Whether the chat template renders ``tools=`` (read from its output with a probe tool, not its source)."""
    if not has_chat_template(tokenizer):
        return False
    messages = [{"role": "user", "content": "hi"}]
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True, **(template_kwargs or {})
        )
    except Exception:  # noqa: BLE001 - a template that fails on tools= does not support them
        return False
    return _PROBE_TOOL["function"]["name"] in text


def render_plain(messages: list[dict[str, str]], tokenizer: Any, add_generation_prompt: bool) -> str:
    """The chat format of tokenizers without a template: BOS, then ``### Role`` headings; replies end with EOS."""
    parts = [tokenizer.bos_token or ""]
    for m in messages:
        heading = PLAIN_HEADINGS.get(m["role"])
        if heading is None:
            raise ValueError(f"unknown chat role {m['role']!r}; expected one of {list(PLAIN_HEADINGS)}")
        end = tokenizer.eos_token if m["role"] == "assistant" else ""
        parts.append(f"{heading}\n{m['content']}{end}\n\n")
    if add_generation_prompt:
        parts.append(PLAIN_HEADINGS["assistant"] + "\n")
    return "".join(parts)


def render(
    messages: list[dict[str, str]],
    tokenizer: Any,
    add_generation_prompt: bool = True,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **(template_kwargs or {})
        )
    return render_plain(messages, tokenizer, add_generation_prompt)


def encode(text: str, tokenizer: Any) -> list[int]:
    """Tokenize rendered text without adding special tokens (the template has them)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_messages(
    messages: list[dict[str, str]], tokenizer: Any, template_kwargs: dict[str, Any] | None = None
) -> list[int]:
    return encode(render(messages, tokenizer, add_generation_prompt=True, template_kwargs=template_kwargs), tokenizer)


def glue_text(
    messages: list[dict[str, str]],
    observation: str,
    tokenizer: Any,
    reply_ended_with: str | None,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    """Text between the last assistant reply and the next generation, ``observation`` the next user
    turn; ``reply_ended_with``: the reply's stop token text (not repeated), None if it was cut."""
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError("glue_text needs a conversation that ends with an assistant reply")
    probe = messages[:-1] + [{"role": "assistant", "content": _SENTINEL}, {"role": "user", "content": observation}]
    text = render(probe, tokenizer, add_generation_prompt=True, template_kwargs=template_kwargs)
    cut = text.rfind(_SENTINEL)
    if cut < 0:
        raise ValueError("the chat template dropped the assistant reply; cannot build multi-turn episodes")
    glue = text[cut + len(_SENTINEL) :]
    if reply_ended_with and glue.startswith(reply_ended_with):
        glue = glue[len(reply_ended_with) :]
    return glue


def end_of_turn_id(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> int | None:
    """The token that closes an assistant turn: the glue's first token when special (``<|im_end|>``), else eos."""
    conversation = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]
    ids = encode(glue_text(conversation, "?", tokenizer, None, template_kwargs), tokenizer)
    if ids and _is_special(tokenizer, ids[0]):
        return ids[0]
    return tokenizer.eos_token_id


def _is_special(tokenizer: Any, token_id: int) -> bool:
    """Listed as special, or an added token marked special (Qwen's ``<|im_end|>``)."""
    added = getattr(tokenizer, "added_tokens_decoder", {}).get(token_id)
    return token_id in tokenizer.all_special_ids or bool(added is not None and added.special)


def completion_text(completion: str, as_messages: bool) -> Any:
    """A completion in TRL's reward-function form: a string, or ``[{"role": "assistant", ...}]``."""
    return [{"role": "assistant", "content": completion}] if as_messages else completion
