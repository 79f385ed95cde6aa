"""Token budgets against the model's context: checked when the trainer is built, and again
right before every ``generate`` call.

A model reads at most its context length of positions (``max_position_embeddings`` and its
aliases). Past it, a model with learned positions (GPT-2) crashes with ``IndexError: index out
of range in self`` deep inside torch, and a RoPE model quietly reads positions it never
trained on. erl_lite sends three kinds of request, each bounded by the config:

* an attempt turn: at most ``max_episode_length`` tokens, its reply included (the rollout
  starts a turn only when a full reply of ``max_completion_length`` still fits; otherwise the
  episode stops, marked truncated);
* a reflection: at most ``max_reflection_prompt_length`` tokens of request (see
  :func:`erl_lite.core.prompts.reflection_messages` for what is cut to fit) plus
  ``max_reflection_length`` new tokens;
* an evaluation turn: like an attempt turn.

:func:`check_lengths` refuses, when the trainer is built, budgets that exceed the context,
a reflection budget too small for the request's own fixed text, and dataset rows whose prompt
leaves no room in ``max_episode_length`` for one reply, naming the field, the row and the
numbers. :func:`check_request` is the last line of defence in
:class:`~erl_lite.core.generation.HFGenerator` (and lives there): a request that would still run past the context
raises :class:`~erl_lite.core.prompts.PromptTooLongError` instead of reaching ``generate``.

Departures from the paper: the reference sets vLLM's ``max_model_len`` and its prompt and
response lengths by hand; erl_lite derives the limit from the model and checks it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

# The sampler's own guard lives beside the sampler; re-exported here with the trainer's checks.
from erl_lite.core.generation import CONTEXT_KEYS, check_request, model_context_length  # noqa: F401
from erl_lite.core.prompts import PromptTooLongError  # noqa: F401 - its home is the prompt fitting

def check_lengths(config: Any, model: Any, tokenizer: Any, env: Any, splits: Mapping[str, Sequence[Any]]) -> None:
    """Refuse budgets the model cannot hold and dataset rows that leave no room for a reply.

    Args:
        config: the :class:`~erl_lite.config.ERLConfig`.
        model, tokenizer: the policy and its tokenizer (the context comes from them).
        env: the environment that renders each task's opening (its initial system prompt).
        splits: ``{name: tasks}``, e.g. ``{"train_dataset": [...], "eval_dataset": [...]}``; the
            tasks with a ``prompt`` (dataset rows) are measured, the others are rendered by their
            environment at play time.
    """
    context = model_context_length(model, tokenizer)
    c = config
    if context is not None:
        source = "the model's config" if model_context_length(model) == context else "tokenizer.model_max_length"
        if c.max_episode_length > context:
            raise ValueError(f"ERLConfig.max_episode_length={c.max_episode_length} is more than the model's context "
                             f"of {context} tokens ({source}): an episode (its prompt and every turn) must fit in "
                             f"it. Set max_episode_length <= {context}.")
        reflection = c.max_reflection_prompt_length + c.max_reflection_length
        if reflection > context:
            raise ValueError(f"ERLConfig.max_reflection_prompt_length + max_reflection_length = "
                             f"{c.max_reflection_prompt_length} + {c.max_reflection_length} = {reflection} is more "
                             f"than the model's context of {context} tokens ({source}); lower one of them.")
    _check_reflection_skeleton(c, tokenizer)
    for name, tasks in splits.items():
        _check_openings(c, tokenizer, env, name, tasks)


def _check_reflection_skeleton(c: Any, tokenizer: Any) -> None:
    """The reflection request's own text (headers, the request) must fit its budget."""
    from erl_lite.core.prompts import reflection_skeleton_length

    needs = reflection_skeleton_length(tokenizer, c.chat_template_kwargs)
    if needs >= c.max_reflection_prompt_length:
        raise ValueError(f"ERLConfig.max_reflection_prompt_length={c.max_reflection_prompt_length} cannot hold a "
                         f"reflection request: its fixed text alone needs {needs} tokens with this tokenizer, "
                         "before any task, attempt or memory. Raise it.")


def _check_openings(c: Any, tokenizer: Any, env: Any, name: str, tasks: Sequence[Any]) -> None:
    """Each dataset row's opening (system prompt, prompt, generation prompt) leaves room for a reply."""
    from erl_lite.core.chat import encode_messages
    from erl_lite.integrations.dataset import split_prompt
    from erl_lite.core.rollout import opening_messages, template_kwargs_for

    room = c.max_episode_length - c.max_completion_length
    for i, task in enumerate(tasks):
        if getattr(task, "prompt", None) is None:
            continue
        _, observation = split_prompt(task.prompt, where=f"{name} row {i}")
        messages = opening_messages(env.initial_system_prompt(task), observation)
        n = len(encode_messages(messages, tokenizer, template_kwargs_for(env, task, c.chat_template_kwargs)))
        if n > room:
            raise ValueError(f"{name} row {i} (task {task.task_id!r}) opens with {n} tokens, which leaves no room "
                             f"for a reply: max_episode_length={c.max_episode_length} - max_completion_length="
                             f"{c.max_completion_length} = {room}. Shorten or drop the row, or raise "
                             "max_episode_length (up to the model's context).")
