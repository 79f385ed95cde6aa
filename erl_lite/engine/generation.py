"""Batched sampling: a *generator* turns a batch of token-id prompts into completions, each cut after (and
keeping) its first stop token: :class:`HFGenerator`, or :class:`ScriptedGenerator`'s canned replies for tests.

Departures from the paper: the reference samples with vLLM; here ``transformers.generate`` (slower, but no extra
engine to install on a consumer GPU) or transformers' continuous batching (:mod:`erl_lite.engine.continuous`).
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import torch

from erl_lite.engine.policy import (
    base_model,
    cache_name,
    eos_token_ids,
    keep_4bit_trainable,
    note_sampled,
    shared_rows,
    weight_versions,
)


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one batch; ``generation_kwargs`` go to ``model.generate`` (others may ignore them)."""

    max_new_tokens: int
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    generation_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)
    stop: tuple[str, ...] = ()  # texts that end a reply early (vLLM's name); a backend without them samples on


class Generator(Protocol):
    """Anything that samples completions for a batch of token-id prompts."""

    calls: int

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]: ...


#: Config attributes that hold a model's context length (transformers' families spell it these ways).
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
#: A tokenizer without a limit reports transformers' VERY_LARGE_INTEGER (1e30): not a context length.
_NO_LIMIT = 10**9


class PromptTooLongError(ValueError):
    """A request past the model's context; ``row`` is its position in the batch (to name its task)."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


def model_context_length(model: Any, tokenizer: Any = None) -> int | None:
    """The positions ``model`` can read (its config's, else the tokenizer's limit), or None."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    for key in CONTEXT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    return value if isinstance(value, int) and 0 < value < _NO_LIMIT else None


def check_request(prompt_lengths: Sequence[int], max_new_tokens: int, context: int | None) -> None:
    """Raise :class:`PromptTooLongError` for the first request of a batch that cannot fit."""
    if context is None:
        return
    for row, n in enumerate(prompt_lengths):
        if n + max_new_tokens > context:
            raise PromptTooLongError(
                f"request row {row} has {n} prompt tokens + max_new_tokens={max_new_tokens} = "
                f"{n + max_new_tokens}, more than the model's context of {context} tokens",
                row=row,
            )


def reply_was_cut(ids: list[int], max_new_tokens: int, stop_ids: Any) -> bool:
    """Whether the token limit, not the model, ended a reply (TRL's ``completions/clipped_ratio``)."""
    return len(ids) >= max_new_tokens and not (ids and ids[-1] in stop_ids)


def sampler_stop_ids(generator: Any, tokenizer: Any) -> list[int]:
    """The ids that end a reply: the sampler's own (eos and end-of-turn), else the tokenizer's eos."""
    return list(getattr(generator, "stop_ids", None) or [tokenizer.eos_token_id])


def generate_named(
    generator: "Generator", prompts: list[list[int]], params: SamplingParams, names: list[str]
) -> list[list[int]]:
    """``generator.generate``, with an over-long request named by ``names[row]`` (role and task)."""
    try:
        return generator.generate(prompts, params)
    except PromptTooLongError as err:
        if err.row is None or not 0 <= err.row < len(names):
            raise
        raise PromptTooLongError(f"{names[err.row]}: {err}", row=err.row) from None


def _cut_at_stop(ids: list[int], stop_ids: set[int], pad_id: int) -> list[int]:
    """Keep tokens up to and including the first stop token; drop trailing padding."""
    for i, t in enumerate(ids):
        if t in stop_ids:
            return ids[: i + 1]
    while ids and ids[-1] == pad_id:
        ids = ids[:-1]
    return ids


class HFGenerator:
    """Samples with ``model.generate``, the whole batch in one call, from ``softmax(z / T)`` (then top-p, top-k)
    alone: the model's own ``generation_config`` gives only its end and pad tokens. ``last_logprobs``: per row of
    the last call, each token's log-prob under the distribution it was drawn from.

    Example:
        >>> from erl_lite.testing import tiny_tokenizer, tiny_model
        >>> tok = tiny_tokenizer(); gen = HFGenerator(tiny_model(tok), tok)
        >>> outs = gen.generate([tok("hi").input_ids, tok("hello").input_ids], SamplingParams(5))
        >>> len(outs), all(len(o) <= 5 for o in outs), [len(o) for o in outs] == [len(p) for p in gen.last_logprobs]
        (2, True, True)
    """

    def __init__(self, model: Any, tokenizer: Any, stop_ids: list[int] | None = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.stop_ids = list(eos_token_ids(model, tokenizer) if stop_ids is None else stop_ids)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.stop_ids or [0])[0]
        self.calls = 0
        self.last_logprobs: list[list[float]] = []
        self.context = model_context_length(model, tokenizer)  # None: the model states no limit
        self.share_prompts = True  # run a repeated prompt once (see _shared_prompts); False: every row whole

    def sampling_config(self, params: SamplingParams) -> Any:
        """The whole ``GenerationConfig`` of a call: ``params`` and the end and pad ids, nothing else."""
        from transformers import GenerationConfig

        return GenerationConfig(
            do_sample=True,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            max_new_tokens=params.max_new_tokens,
            use_cache=True,
            eos_token_id=self.stop_ids or None,
            pad_token_id=self.pad_id,
            stop_strings=list(params.stop) or None,
            **params.generation_kwargs,
        )

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            self.last_logprobs = []
            return []
        # Past its positions GPT-2 fails with "IndexError: index out of range in self": refuse first.
        check_request([len(p) for p in prompts], params.max_new_tokens, self.context)
        self.calls += 1
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        # (B, width) left-padded so every prompt ends at the same position.
        input_ids = torch.tensor([[self.pad_id] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)
        # Eval mode without grad makes bitsandbytes repack a 4-bit CPU layer for inference only.
        keep_4bit_trainable(self.model)
        was_training = self.model.training
        self.model.eval()
        recorder = _Recorder()
        try:
            input_ids, attention = input_ids.to(device), attention.to(device)
            share = self.share_prompts and "cache_implementation" not in params.generation_kwargs
            shared = self._shared_prompts(input_ids, attention) if share else None
            cached = {} if shared is None else {cache_name(self.model): shared}
            with _own_settings(base_model(self.model), recorder):
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention,
                    generation_config=self.sampling_config(params),
                    tokenizer=self.tokenizer,
                    **cached,
                )
        finally:
            self.model.train(was_training)
        note_sampled(self.model, weight_versions(self.model))  # the on-policy check compares them with the update's
        new = out[:, width:]  # (B, <= max_new_tokens)
        logprobs = recorder.finish(new).tolist()
        stops = set(self.stop_ids)
        rows = [_cut_at_stop(row, stops, self.pad_id) for row in new.tolist()]
        self.last_logprobs = [lp[: len(row)] for lp, row in zip(logprobs, rows)]
        return rows

    def _shared_prompts(self, input_ids: torch.Tensor, attention: torch.Tensor) -> Any:
        """The keys and values ``(B, ..., width - 1, ...)`` of every prompt but its last token, each distinct one run
        once (GRPO's G copies), or None; ``generate`` prefills the last column: same positions, mask and draws."""
        groups = shared_rows(input_ids[:, :-1], attention[:, :-1]) if input_ids.shape[1] > 1 else None
        if groups is None:
            return None
        first, rows = groups
        # Positions as generate computes them from the mask (pads at 0): the cache must hold the same keys.
        positions = (attention.cumsum(-1) - 1).masked_fill(attention == 0, 0)
        takes = inspect.signature(base_model(self.model).forward).parameters
        keep = {"logits_to_keep": 1} if "logits_to_keep" in takes else {}
        out = self.model(
            input_ids=input_ids[first, :-1],
            attention_mask=attention[first, :-1],
            position_ids=positions[first, :-1],
            use_cache=True,
            **keep,
        )
        cache = getattr(out, cache_name(self.model), None)
        if not hasattr(cache, "reorder_cache"):  # no cache, or a legacy tuple: generate prefills every row
            return None
        cache.reorder_cache(rows)  # (U, ...) -> (B, ...)
        return cache


class _Recorder:
    """The last logits processor of a ``generate`` call: keeps ``log_softmax`` of the scores each token is
    drawn from ``(B, V)``, and reads off the drawn token's entry when the next step shows it."""

    def __init__(self) -> None:
        self.pending: torch.Tensor | None = None  # (B, V) the step's sampling log-probs
        self.picked: list[torch.Tensor] = []  # per step (B,)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._take(input_ids[:, -1])
        self.pending = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def _take(self, drawn: torch.Tensor) -> None:
        if self.pending is not None:
            self.picked.append(self.pending.gather(-1, drawn[:, None].to(self.pending.device))[:, 0].cpu())
            self.pending = None

    def finish(self, new: torch.Tensor) -> torch.Tensor:
        """Log-probs ``(B, N)`` of the ``new`` tokens ``(B, N)`` (0 where none was recorded)."""
        if new.shape[1]:
            self._take(new[:, -1])
        out = torch.zeros(new.shape, dtype=torch.float32)
        for j, col in enumerate(self.picked[: new.shape[1]]):
            out[:, j] = col
        return out


@contextmanager
def _own_settings(model: Any, recorder: _Recorder) -> Any:
    """``model.generate`` with an empty ``generation_config`` (transformers fills unset settings from it: Qwen2.5's
    repetition penalty, top-k, top-p) and ``recorder`` appended to the processors it builds, after its warpers."""
    from transformers import GenerationConfig

    saved, build = model.generation_config, model._get_logits_processor

    def processors(*args: Any, **kwargs: Any) -> Any:
        out = build(*args, **kwargs)
        out.append(recorder)
        return out

    model.generation_config = GenerationConfig()
    model._get_logits_processor = processors
    try:
        yield
    finally:
        model.generation_config = saved
        del model._get_logits_processor


class ScriptedGenerator:
    """Canned completions ``script(prompt_text) -> reply_text``; ``prompts_seen`` keeps every prompt shown."""

    def __init__(self, tokenizer: Any, script: Callable[[str], str]) -> None:
        self.tokenizer, self.script = tokenizer, script
        self.calls = 0
        self.prompts_seen: list[str] = []

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        self.calls += 1
        outs = []
        for ids in prompts:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            self.prompts_seen.append(text)
            reply = self.tokenizer(self.script(text), add_special_tokens=False)["input_ids"]
            outs.append((list(reply) + [self.tokenizer.eos_token_id])[: params.max_new_tokens])
        return outs
