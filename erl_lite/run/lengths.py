"""Token budgets against the model's context, checked when the trainer is built: budgets and dataset rows
that do not fit are refused, naming the field, the row and the numbers.
Departures from the paper: the reference sets vLLM's ``max_model_len`` by hand; erl_lite derives it."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from erl_lite.core.prompts import reflection_skeleton_length
from erl_lite.core.rollout import opening_messages, template_kwargs_for
from erl_lite.engine.chat import encode_messages
from erl_lite.engine.generation import model_context_length
from erl_lite.envs.rows import split_prompt
from erl_lite.records import TaskPool


def check_lengths(config: Any, model: Any, tokenizer: Any, env: Any, splits: Mapping[str, Sequence[Any]]) -> None:
    """Refuse budgets the model cannot hold and ``splits`` rows (``{name: tasks}``) that leave no room for a reply."""
    context = model_context_length(model, tokenizer)
    c = config
    if context is not None:
        source = "the model's config" if model_context_length(model) == context else "tokenizer.model_max_length"
        if c.max_episode_length > context:
            raise ValueError(
                f"ERLConfig.max_episode_length={c.max_episode_length} is more than the model's context "
                f"of {context} tokens ({source}): an episode (its prompt and every turn) must fit in "
                f"it. Set max_episode_length <= {context}."
            )
        reflection = c.max_reflection_prompt_length + c.max_reflection_length
        if reflection > context:
            raise ValueError(
                f"ERLConfig.max_reflection_prompt_length + max_reflection_length = "
                f"{c.max_reflection_prompt_length} + {c.max_reflection_length} = {reflection} is more "
                f"than the model's context of {context} tokens ({source}); lower one of them."
            )
    _check_reflection_skeleton(c, tokenizer)
    for name, tasks in splits.items():
        _check_openings(c, tokenizer, env, name, tasks)


def _check_reflection_skeleton(c: Any, tokenizer: Any) -> None:
    needs = reflection_skeleton_length(tokenizer, c.chat_template_kwargs, c.reflection_request, c.reflection_prefill)
    if needs >= c.max_reflection_prompt_length:
        raise ValueError(
            f"ERLConfig.max_reflection_prompt_length={c.max_reflection_prompt_length} cannot hold a "
            f"reflection request: its fixed text (reflection_request and reflection_prefill included) "
            f"alone needs {needs} tokens with this tokenizer, before any task, attempt or memory. "
            "Raise it, or shorten those settings."
        )


def _check_openings(c: Any, tokenizer: Any, env: Any, name: str, tasks: Sequence[Any]) -> None:
    """Each dataset row's opening (system prompt, prompt, generation prompt) leaves room for a reply."""
    if isinstance(tasks, TaskPool):  # an environment's own split: no dataset prompts, and reading it draws it
        return
    room = c.max_episode_length - c.max_completion_length
    for i, task in enumerate(tasks):
        if getattr(task, "prompt", None) is None:
            continue
        _, observation = split_prompt(task.prompt, where=f"{name} row {i}")
        messages = opening_messages(env.initial_system_prompt(task), observation)
        n = len(encode_messages(messages, tokenizer, template_kwargs_for(env, task, c.chat_template_kwargs)))
        if n > room:
            raise ValueError(
                f"{name} row {i} (task {task.task_id!r}) opens with {n} tokens, which leaves no room "
                f"for a reply: max_episode_length={c.max_episode_length} - max_completion_length="
                f"{c.max_completion_length} = {room}. Shorten or drop the row, or raise "
                "max_episode_length (up to the model's context)."
            )
