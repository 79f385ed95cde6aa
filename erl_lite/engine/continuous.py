"""Continuous batching: :class:`ContinuousGenerator` samples with transformers' ``ContinuousBatchingManager`` behind
:class:`~erl_lite.engine.generation.HFGenerator`'s interface (``ERLConfig(generation_backend="continuous")``).

Against ``model.generate``: a finished row leaves the batch at once (no decode steps on stopped rows, no prefill
padding), and the paged cache lives for the whole rollout phase with block sharing on, so a later turn prefills only
what its conversation gained since its last full page, and the G copies of a prompt share its pages. The trainer
calls :meth:`ContinuousGenerator.flush` when a phase ends, so no page computed with old weights outlives a step.

The manager's pitfalls, and what this module does about each:

* it sizes its cache from free device memory (60% of RAM on a CPU): here the run's budget sizes it
  (:func:`cache_tokens_for`);
* it drops what its logits processors cannot do (``repetition_penalty``, ``min_new_tokens``, stopping criteria):
  any ``generation_kwargs`` is refused;
* it puts the base model in eval mode under a PEFT wrapper that still says training: the wrapper's mode is
  restored after each call, and a 4-bit model put back on its differentiable path
  (:func:`~erl_lite.engine.policy.keep_4bit_trainable`);
* it re-seeds the global torch generator and samples from it in its own thread: each call runs inside
  ``torch.random.fork_rng`` under :meth:`ContinuousGenerator.call_seed`, one draw from the caller's generator (which a
  checkpoint restores: a resumed run samples what the uninterrupted one does), so calls and ranks draw fresh streams.

Departures from the paper: the reference samples with vLLM in a separate engine; this is the same idea inside
transformers, in the training process. Samples differ from ``model.generate``'s in draw order, not in distribution.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from erl_lite.config.checks import refuse_generation_kwargs
from erl_lite.engine.generation import SamplingParams, check_request, model_context_length
from erl_lite.engine.policy import base_model, eos_token_ids, keep_4bit_trainable, note_sampled, weight_versions

#: Tokens per cache page. Small pages let a later turn reuse all but < 16 tokens of its conversation;
#: the manager's default (256) would re-prefill up to 255 tokens of every turn.
PAGE_SIZE = 16
#: Most tokens in one forward of the manager (prefill chunks): bounds the activations, not the cache.
MAX_BATCH_TOKENS = 4096
#: Seconds to wait for one result before asking whether the manager's thread is still alive.
_POLL_S = 1.0


def cache_tokens_for(config: Any) -> int:
    """Cache tokens for the largest rollout phase (G rollouts of each task, or an evaluation), every row at its longest.

    Example:
        >>> from erl_lite.config import ERLConfig
        >>> cache_tokens_for(ERLConfig.preset("demo"))  # 8 tasks x 4 rollouts x 1088 tokens
        34816
    """
    rows = config.num_tasks_per_step * max(config.num_generations or 1, config.eval_num_generations)
    longest = max(config.max_episode_length, config.max_reflection_prompt_length + config.max_reflection_length)
    return rows * longest


class ContinuousGenerator:
    """Samples with one ``ContinuousBatchingManager`` per rollout phase; :meth:`flush` ends the phase.

    ``cache_tokens``: how many tokens the paged cache holds (rows waiting for room queue, nothing fails); ``seed``
    and ``rank``: the base of every call's sampling seed. ``last_logprobs``: per row of the last call, each sampled
    token's log-prob after temperature, top-p and top-k."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        cache_tokens: int,
        seed: int = 0,
        rank: int = 0,
        stop_ids: list[int] | None = None,
    ) -> None:
        if cache_tokens < 1:
            raise ValueError(f"cache_tokens must be >= 1, got {cache_tokens}")
        self.model, self.tokenizer = model, tokenizer
        self.stop_ids = list(eos_token_ids(model, tokenizer) if stop_ids is None else stop_ids)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.stop_ids[0]
        self.context = model_context_length(model, tokenizer)
        self.cache_tokens, self.seed, self.rank = cache_tokens, seed, rank
        self._batching_config(seed)  # an older transformers is refused now, not at the first rollout
        self.last_logprobs: list[list[float]] = []
        self.calls = 0
        self.managers_started = 0  # one per rollout phase, and one more at each change of top-p / top-k use
        self._manager: Any = None
        self._needs: set[str] = set()  # the logits processors the manager must hold: "top_p", "top_k"

    # -- the manager -----------------------------------------------------------------------------
    def _start(self, seed: int) -> Any:
        from transformers import GenerationConfig

        base = base_model(self.model)
        # The processors exist only if the manager's own config asks for them; each request then sets
        # its own value. Temperature is always there (0.7 is a placeholder: every request sets its own).
        config = GenerationConfig(
            do_sample=True,
            temperature=0.7,
            max_new_tokens=1,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            top_k=50 if "top_k" in self._needs else None,
            top_p=0.9 if "top_p" in self._needs else None,
        )
        cb = self._batching_config(seed)
        manager = base.init_continuous_batching(generation_config=config, continuous_batching_config=cb)
        manager.start()
        self.managers_started += 1
        return manager

    def _batching_config(self, seed: int) -> Any:
        import transformers

        try:  # a transformers before 5.19 lacks the class or some of these settings
            return transformers.ContinuousBatchingConfig(
                page_size=PAGE_SIZE,
                num_blocks=max(2, math.ceil(self.cache_tokens / PAGE_SIZE)),
                max_batch_tokens=min(MAX_BATCH_TOKENS, self.cache_tokens),
                allow_block_sharing=True,
                per_request_processors=True,
                auto_switch_to_flash=False,
                seed=seed,
                use_cuda_graph=False,
                return_logprobs=True,
            )
        except (AttributeError, TypeError) as e:
            raise ImportError(
                f"generation_backend='continuous' needs transformers >= 5.19, and {transformers.__version__} is "
                f"installed ({e}): pip install -U 'transformers>=5.19', or use generation_backend='generate'"
            ) from e

    def flush(self) -> None:
        """End the phase: stop the manager's thread and drop its cache (pages computed with these weights)."""
        manager, self._manager = self._manager, None
        if manager is None:
            return
        try:
            manager.stop(block=True)
        finally:
            manager.destroy()
            keep_4bit_trainable(self.model)

    def call_seed(self) -> int:
        """This call's seed: a draw from the global generator (a checkpoint restores it; a count of calls would
        restart at 0), per rank."""
        return (self.seed * 1_000_003 + self.rank * 7_919 + int(torch.randint(2**62, ()))) % 2**62

    # -- one call ----------------------------------------------------------------------------------
    def _request_kwargs(self, params: SamplingParams) -> dict[str, Any]:
        """Each request's processor settings (the manager holds the processors ``params`` use, no other)."""
        kwargs: dict[str, Any] = {"temperature": float(params.temperature)}
        if "top_p" in self._needs:
            kwargs["top_p"] = float(params.top_p)
        if "top_k" in self._needs:
            kwargs["top_k"] = int(params.top_k)
        return kwargs

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        check_request([len(p) for p in prompts], params.max_new_tokens, self.context)
        refuse_generation_kwargs(params.generation_kwargs)
        # A manager holds exactly the processors its calls need: one it holds but a call does not use
        # still runs (a no-op top-p sorts the whole vocabulary at every token), so a change means a new one.
        needs = {name for name, on in (("top_p", params.top_p < 1), ("top_k", params.top_k > 0)) if on}
        if needs != self._needs:
            self.flush()
            self._needs = needs
        self.calls += 1
        device = next(self.model.parameters()).device
        keep_4bit_trainable(self.model)
        was_training = self.model.training
        seed = self.call_seed()
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(seed)  # the manager samples from the global generator
                if self._manager is None:
                    self._manager = self._start(seed)
                self.model.eval()
                outs = self._run(self._manager, prompts, params)
        except BaseException:
            self.flush()  # a half-finished phase: nothing of it is kept
            raise
        finally:
            self.model.train(was_training)
            keep_4bit_trainable(self.model)
        note_sampled(self.model, weight_versions(self.model))  # the on-policy check compares them with the update's
        return outs

    def _run(self, manager: Any, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        # Added while paused, so the loop sees the whole batch at once: its batches (and therefore the
        # order of its random draws) depend on the requests only, not on thread timing.
        with manager.pause():
            ids = manager.add_requests(
                inputs=prompts, max_new_tokens=params.max_new_tokens, **self._request_kwargs(params)
            )
        done: dict[str, Any] = {}
        while len(done) < len(ids):
            result = manager.get_result(timeout=_POLL_S)
            if result is None:
                if not manager.is_running():
                    raise RuntimeError(
                        f"continuous batching stopped with {len(ids) - len(done)} of {len(ids)} "
                        "requests unfinished (see transformers' log above)"
                    )
                continue
            if result.is_finished():
                done[result.request_id] = result
        for row, request_id in enumerate(ids):
            if done[request_id].error is not None:
                raise RuntimeError(f"continuous batching failed on request row {row}: {done[request_id].error}")
        self.last_logprobs = [list(done[i].logprobs) for i in ids]
        return [list(done[i].generated_tokens) for i in ids]


def end_phase(generator: Any) -> None:
    """Flush ``generator`` if it keeps state across calls (:meth:`ContinuousGenerator.flush`); others have none."""
    flush = getattr(generator, "flush", None)
    if callable(flush):
        flush()
