"""The internalization set as SFT data, and a short warm start with TRL's ``SFTTrainer``.

Internalization (:func:`erl_lite.core.phases.internalize`) trains each second attempt under the
*first* attempt's initial context: the initial system prompt and the task, never the
rulebook Δ that produced it. The same pairs are plain supervised data. This module writes
them in TRL's **conversational prompt-completion** format::

    {"prompt":     [{"role": "system", "content": <initial system prompt>},
                    {"role": "user", "content": <task>}],
     "completion": [{"role": "assistant", ...}, {"role": "user", <observation>}, ...,
                    {"role": "assistant", ...}],            # always ends on a model turn
     "task_id": ..., "reward": r2}

Why this format (checked against TRL 1.16's ``sft_trainer.py``): the prompt is never trained
(``completion_only_loss`` defaults to True for prompt-completion rows), so a single-turn row
trains exactly the reply and its end-of-turn token, as the default ``SFTTrainer`` call does.
A multi-turn row also holds the environment's observations (user turns) inside the
completion, which must stay context; TRL drops them from the loss only with
``assistant_only_loss=True``, which needs a chat template with ``{% generation %}`` markers —
TRL patches in its own for the templates it knows (Qwen2.5, Qwen3, Llama 3, ...) and refuses
others. The messages format would need the same, so prompt-completion degrades best.

:func:`warm_start` does not depend on markers: it tokenizes the rows the way rollouts build
episodes (:mod:`erl_lite.core.chat`: the template applied once, each reply followed by the
end-of-turn token, observations as untrained glue) and hands ``SFTTrainer`` ready
``input_ids`` with an ``assistant_masks`` column, which TRL turns into labels. So it works
with any template (or none), and the supervised tokens are the ones internalization trains.

Which second attempts count as successful: ``r2 ≥ τ`` (``ERLConfig.reward_threshold``), the
rule memory uses to store a rulebook. Internalization inside a run also trains failed second
attempts, with weight ``max(r2, 0)``; a warm start on supervised data keeps only successes.

Departures from the paper: the paper internalizes online, inside the RL step; exporting the
set and fine-tuning on it first (or on its own) is an extra, not part of the algorithm.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from erl_lite.core.chat import encode, encode_messages, glue_text
from erl_lite.records import FIRST, SECOND, Retry, StepRecord, retries_by_first


def internalization_rows(source: Any, threshold: float | None = None) -> list[dict[str, Any]]:
    """The successful second attempts (``r2 ≥ τ``) under their original prompt, as SFT rows.

    Args:
        source: an :class:`~erl_lite.ERLTrainer` (its ``history.samples``: every step when
            ``sample_every`` is 1, the default), a :class:`~erl_lite.History`, a run folder or
            ``samples.jsonl`` path, or an iterable of :class:`~erl_lite.Retry`,
            :class:`~erl_lite.StepRecord` or ``StepRecord.to_dict()`` dicts.
        threshold: τ. Default: the trainer's ``args.reward_threshold`` when ``source`` is a
            trainer; required otherwise (a history does not record its config).

    Returns:
        Rows ``{"prompt", "completion", "task_id", "reward"}`` (see the module docstring).

    Example:
        >>> from erl_lite.records import Attempt, Retry
        >>> def attempt(system, replies, reward):
        ...     msgs = [{"role": "system", "content": system}, {"role": "user", "content": "2+2?"}]
        ...     msgs += [{"role": "assistant", "content": r} for r in replies]
        ...     return Attempt("t0", "x", 0, system, msgs, [], [], [], reward, reward > 0, "", "", len(replies))
        >>> retry = Retry(attempt("Be brief.", ["5"], 0.0), None, attempt("RULEBOOK: add.", ["4"], 1.0))
        >>> row = internalization_rows([retry], threshold=1.0)[0]
        >>> row["prompt"]
        [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2+2?'}]
        >>> row["completion"]
        [{'role': 'assistant', 'content': '4'}]
    """
    pairs, default_threshold = _retry_pairs(source)
    tau = threshold if threshold is not None else default_threshold
    if tau is None:
        raise ValueError(f"internalization_rows: pass threshold= (τ, the run's ERLConfig.reward_threshold) "
                         f"for a {type(source).__name__} source; only a trainer carries its config")
    rows = []
    for first, second in pairs:
        if second["reward"] < tau:
            continue
        completion = second["messages"][_opening_length(second):]
        while completion and completion[-1]["role"] != "assistant":
            completion = completion[:-1]  # an observation after the last reply teaches nothing
        if not completion:
            continue
        rows.append({"prompt": [dict(m) for m in first["messages"][:_opening_length(first)]],
                     "completion": [dict(m) for m in completion],
                     "task_id": first["task_id"], "reward": float(second["reward"])})
    return rows


def internalization_dataset(source: Any, threshold: float | None = None) -> Any:
    """:func:`internalization_rows` as a ``datasets.Dataset`` (what ``SFTTrainer`` takes).

    For multi-turn rows, train with ``SFTConfig(assistant_only_loss=True)`` so observations
    stay context (needs a template TRL can mark); :func:`warm_start` needs no markers.
    """
    from datasets import Dataset

    rows = internalization_rows(source, threshold)
    if not rows:
        raise ValueError("no successful second attempt (r2 ≥ τ) in the source: nothing to export")
    return Dataset.from_list(rows)


def tokenize_row(row: dict[str, Any], tokenizer: Any,
                 template_kwargs: dict[str, Any] | None = None) -> dict[str, list[int]]:
    """``{"input_ids", "assistant_masks"}`` of a row, built the way rollouts build episodes
    (``template_kwargs``: the run's ``ERLConfig.chat_template_kwargs``).

    The prompt is rendered with the generation prompt; each assistant reply is its text
    followed by the end-of-turn (eos) token, both trained (mask 1); each observation is the
    template's glue between turns, untrained (mask 0).

    Example:
        >>> from erl_lite.testing import tiny_tokenizer
        >>> tok = tiny_tokenizer()
        >>> row = {"prompt": [{"role": "user", "content": "hi"}],
        ...        "completion": [{"role": "assistant", "content": "yo"}]}
        >>> out = tokenize_row(row, tok)
        >>> tok.decode([t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m])
        'yo<|im_end|>'
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos token: each trained reply must end with one")
    messages = [dict(m) for m in row["prompt"]]
    ids = encode_messages(messages, tokenizer, template_kwargs)
    mask = [0] * len(ids)
    for m in row["completion"]:
        if m["role"] == "assistant":
            reply = encode(m["content"], tokenizer) + [eos]
            ids, mask = ids + reply, mask + [1] * len(reply)
        else:
            glue = encode(glue_text(messages, m["content"], tokenizer, tokenizer.eos_token, template_kwargs),
                          tokenizer)
            ids, mask = ids + glue, mask + [0] * len(glue)
        messages.append(dict(m))
    return {"input_ids": ids, "assistant_masks": mask}


def warm_start(model: Any, tokenizer: Any, source: Any, *, threshold: float | None = None,
               peft_config: Any = None, max_steps: int = 10, learning_rate: float = 1e-4,
               per_device_train_batch_size: int = 4, output_dir: str | None = None,
               chat_template_kwargs: dict[str, Any] | None = None, **sft_args: Any) -> Any:
    """A short SFT on the internalization set with TRL's ``SFTTrainer``; returns the trainer.

    The warm-started policy is ``trainer.model`` (a ``PeftModel`` when ``peft_config`` is
    given), ready for :class:`~erl_lite.ERLTrainer`; ``trainer.state.log_history`` has the loss.

    Args:
        model, tokenizer: a loaded causal LM (or ``PeftModel``) and its tokenizer.
        source, threshold: as in :func:`internalization_rows`.
        peft_config: a ``peft.LoraConfig`` for SFTTrainer to add (None: train ``model`` as is).
        max_steps, learning_rate, per_device_train_batch_size: the SFTConfig values.
        output_dir: SFTConfig's; a temporary folder when None (nothing is saved:
            ``save_strategy="no"``).
        chat_template_kwargs: the run's ``ERLConfig.chat_template_kwargs``, so the rows are
            rendered as the rollouts were.
        sft_args: any other ``SFTConfig`` field (they win over the defaults set here:
            ``report_to="none"``, no hub, ``max_length=None`` so no reply is silently cut,
            ``bf16`` only where the GPU supports it — TRL's default would fail on a T4).
    """
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rows = internalization_rows(source, threshold)
    if not rows:
        raise ValueError("no successful second attempt (r2 ≥ τ) in the source: nothing to warm-start on")
    data = Dataset.from_list([tokenize_row(r, tokenizer, chat_template_kwargs) for r in rows])
    settings = dict(output_dir=output_dir or tempfile.mkdtemp(prefix="erl_sft_"), max_steps=max_steps,
                    learning_rate=learning_rate, per_device_train_batch_size=per_device_train_batch_size,
                    report_to="none", push_to_hub=False, save_strategy="no", max_length=None,
                    bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(), logging_steps=1)
    args = SFTConfig(**{**settings, **sft_args})
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                         peft_config=peft_config)
    trainer.train()
    return trainer


# --- reading the sources ------------------------------------------------------------------------


def _retry_pairs(source: Any) -> tuple[list[tuple[dict, dict]], float | None]:
    """(first, second) attempt dicts of every retry in ``source``, and the source's own τ."""
    threshold = None
    if hasattr(source, "history") and hasattr(source, "args"):  # an ERLTrainer
        threshold = source.args.reward_threshold
        source = source.history
    if hasattr(source, "samples") and not isinstance(source, (list, tuple)):  # a History
        source = source.samples
    elif isinstance(source, (str, os.PathLike)):
        source = _read_samples(Path(source))
    pairs = []
    for item in source:
        pairs.extend(_pairs_of(item))
    return pairs, threshold


def _pairs_of(item: Any) -> Iterable[tuple[dict, dict]]:
    if isinstance(item, Retry):
        return [(item.first.to_dict(), item.second.to_dict())]
    if isinstance(item, StepRecord):
        item = item.to_dict()
    if isinstance(item, dict) and "retries" in item:
        return [(r[FIRST], r[SECOND]) for r in retries_by_first(item).values()]
    raise TypeError(f"cannot read retries from {type(item).__name__}: pass Retry or StepRecord objects, "
                    "StepRecord.to_dict() dicts, a History, a trainer or a samples.jsonl path")


def _read_samples(path: Path) -> list[dict[str, Any]]:
    file = path / "samples.jsonl" if path.is_dir() else path
    if not file.exists():
        raise FileNotFoundError(f"no samples.jsonl at {file}")
    with open(file, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _opening_length(attempt: dict[str, Any]) -> int:
    """How many of the attempt's messages came before its first generated reply.

    Counted from the end (the last ``num_turns`` assistant messages are the model's), because
    an opening may itself hold assistant turns (a conversational prompt with examples).
    """
    messages, turns = attempt["messages"], attempt["num_turns"]
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            seen += 1
            if seen == turns:
                return i
    return len(messages)  # no reply at all: everything is opening
