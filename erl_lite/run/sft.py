"""The internalization set as TRL prompt-completion rows, and a short warm start on it with TRL's ``SFTTrainer``.

:func:`warm_start` tokenizes the rows as rollouts do and passes ``assistant_masks``, so observations stay out
of the loss with any chat template (TRL's ``assistant_only_loss`` needs template markers).
Departures from the paper: the paper internalizes online, inside the RL step; this is an extra."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from erl_lite.engine.chat import encode, encode_messages, glue_text
from erl_lite.jsonio import read_jsonl
from erl_lite.records import FIRST, SECOND, Retry, StepRecord, retries_by_first, succeeded


def internalization_rows(source: Any, threshold: float | None = None) -> list[dict[str, Any]]:
    """The successful second attempts (``r2 ≥ τ``) under their original prompt, as SFT rows (``{"prompt",
    "completion", "task_id", "reward"}``, the completion ending on a model turn). ``source``: an ERLTrainer, a
    History, a run folder or ``samples.jsonl``, or ``Retry``/``StepRecord`` objects or dicts; ``threshold`` (τ) is
    required unless ``source`` is a trainer or a run folder."""
    pairs, default_threshold = _retry_pairs(source)
    tau = threshold if threshold is not None else default_threshold
    if tau is None:
        raise ValueError(
            f"internalization_rows: pass threshold= (τ, the run's ERLConfig.reward_threshold) "
            f"for a {type(source).__name__} source; only a trainer or a run folder carries its config"
        )
    rows = []
    for first, second in pairs:
        if not succeeded(second["reward"], tau):
            continue
        completion = second["messages"][_opening_length(second) :]
        while completion and completion[-1]["role"] != "assistant":
            completion = completion[:-1]  # an observation after the last reply teaches nothing
        if not completion:
            continue
        rows.append(
            {
                "prompt": [dict(m) for m in first["messages"][: _opening_length(first)]],
                "completion": [dict(m) for m in completion],
                "task_id": first["task_id"],
                "reward": float(second["reward"]),
            }
        )
    return rows


def internalization_dataset(source: Any, threshold: float | None = None) -> Any:
    """:func:`internalization_rows` as a ``datasets.Dataset`` (multi-turn rows need ``assistant_only_loss``)."""
    from datasets import Dataset

    rows = internalization_rows(source, threshold)
    if not rows:
        raise ValueError("no successful second attempt (r2 ≥ τ) in the source: nothing to export")
    return Dataset.from_list(rows)


def tokenize_row(
    row: dict[str, Any], tokenizer: Any, template_kwargs: dict[str, Any] | None = None
) -> dict[str, list[int]]:
    """``{"input_ids", "assistant_masks"}`` of a row, built as rollouts build episodes (1 on replies and their eos)."""
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
            glue = encode(glue_text(messages, m["content"], tokenizer, tokenizer.eos_token, template_kwargs), tokenizer)
            ids, mask = ids + glue, mask + [0] * len(glue)
        messages.append(dict(m))
    return {"input_ids": ids, "assistant_masks": mask}


def warm_start(
    model: Any,
    tokenizer: Any,
    source: Any,
    *,
    threshold: float | None = None,
    peft_config: Any = None,
    max_steps: int = 10,
    learning_rate: float = 1e-4,
    per_device_train_batch_size: int = 4,
    output_dir: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    **sft_args: Any,
) -> Any:
    """A short SFT on the internalization set with TRL's ``SFTTrainer``; returns the trainer. ``source``,
    ``threshold``: as in :func:`internalization_rows`; ``peft_config``: a LoRA for SFTTrainer to add (None: train
    ``model`` as is); ``sft_args``: more ``SFTConfig`` fields (defaults: no reporting, no max_length)."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rows = internalization_rows(source, threshold)
    if not rows:
        raise ValueError("no successful second attempt (r2 ≥ τ) in the source: nothing to warm-start on")
    data = Dataset.from_list([tokenize_row(r, tokenizer, chat_template_kwargs) for r in rows])
    settings = dict(
        output_dir=output_dir or tempfile.mkdtemp(prefix="erl_sft_"),
        max_steps=max_steps,
        learning_rate=learning_rate,
        per_device_train_batch_size=per_device_train_batch_size,
        report_to="none",
        push_to_hub=False,
        save_strategy="no",
        max_length=None,
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        logging_steps=1,
    )
    args = SFTConfig(**{**settings, **sft_args})
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=data, processing_class=tokenizer, peft_config=peft_config
    )
    trainer.train()
    return trainer


def _retry_pairs(source: Any) -> tuple[list[tuple[dict, dict]], float | None]:
    """(first, second) attempt dicts of every retry in ``source``, and the source's own τ."""
    threshold = None
    if hasattr(source, "history") and hasattr(source, "args"):  # an ERLTrainer
        threshold = source.args.reward_threshold
        source = source.history
    if hasattr(source, "samples") and not isinstance(source, (list, tuple)):  # a History
        source = source.samples
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():  # a run folder: its training_args.json (or checkpoint) holds its τ
            from erl_lite.run.report import load_run

            threshold = (load_run(path)[1] or {}).get("reward_threshold")
        source = read_jsonl(path / "samples.jsonl" if path.is_dir() else path)
    return [pair for item in source for pair in _pairs_of(item)], threshold


def _pairs_of(item: Any) -> Iterable[tuple[dict, dict]]:
    if isinstance(item, Retry):
        return [(item.first.to_dict(), item.second.to_dict())]
    if isinstance(item, StepRecord):
        item = item.to_dict()
    if isinstance(item, dict) and "retries" in item:
        return [(r[FIRST], r[SECOND]) for r in retries_by_first(item).values()]
    raise TypeError(
        f"cannot read retries from {type(item).__name__}: pass Retry or StepRecord objects, "
        "StepRecord.to_dict() dicts, a History, a trainer or a samples.jsonl path"
    )


def _opening_length(attempt: dict[str, Any]) -> int:
    """How many messages precede the first generated reply (counted from the end: an opening may hold replies)."""
    messages, turns = attempt["messages"], attempt["num_turns"]
    replies = (i for i in reversed(range(len(messages))) if messages[i]["role"] == "assistant")  # the last first
    # the turns-th of them; no such reply at all: everything is opening
    return next((i for seen, i in enumerate(replies, start=1) if seen == turns), len(messages))
