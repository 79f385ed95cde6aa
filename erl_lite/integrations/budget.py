"""GPU memory arithmetic: will a QLoRA ERL run fit, before it is started?

:func:`estimate_memory` adds up, in GiB, the **static** part (NF4 weights, fp32 embedding, LoRA weights,
gradients, optimizer moments), the **update** (one micro-batch: checkpointed layer inputs, one recomputed
layer, one log-prob tile) and the **rollout** (KV cache and prefill of one ``generate``); peak = static +
max(update, rollout), fp32 activations (peft upcasts norms); CUDA context, fragmentation (0.5-1 GiB) left out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from erl_lite.config import ERLConfig
from erl_lite.config.checks import check_choice

#: Shipped architectures, by file name (without ``.json``) under ``data/model_configs``.
MODEL_CONFIGS = ("qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct", "qwen3-4b-instruct-2507")
GIB = 2**30
# NF4, double-quantized (bitsandbytes' defaults): 4 bits a weight, an 8-bit absmax per 64, an fp32 one per 256 blocks.
_NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
_RESIDUAL_BYTES = 4  # fp32 residual stream and cache (see the module docstring)
_OPTIMIZER_BYTES = {"adamw_torch": 8, "adamw_8bit": 2, "paged_adamw_8bit": 2}  # two moments per weight
_LOGPROB_COPIES = 3  # fp32 copies of a log-prob tile alive at once


def model_config(name: str) -> dict[str, Any]:
    """The shipped architecture fields of ``name``, for ``transformers.AutoConfig.for_model(**fields)``."""
    check_choice("model config", name, MODEL_CONFIGS)
    text = resources.files("erl_lite").joinpath("data", "model_configs", f"{name}.json").read_text()
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only Qwen2/Qwen3 architecture that decide its memory."""

    name: str
    family: str  # "qwen2" (q/k/v bias) or "qwen3" (q/k RMSNorm)
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    @classmethod
    def load(cls, name: str) -> "ModelShape":
        c = model_config(name)
        return cls(
            name,
            c["model_type"],
            c["hidden_size"],
            c["intermediate_size"],
            c["num_hidden_layers"],
            c["num_attention_heads"],
            c["num_key_value_heads"],
            c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
            c["vocab_size"],
            c["tie_word_embeddings"],
        )

    def linear_shapes(self) -> list[tuple[int, int]]:
        """``(in, out)`` of the seven projections of one layer (q, k, v, o, gate, up, down)."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]

    def linear_parameters(self) -> int:
        """Weights of every decoder projection (what bitsandbytes quantizes to 4 bit)."""
        return self.layers * sum(a * b for a, b in self.linear_shapes())

    def other_parameters(self) -> int:
        """Embedding, untied lm-head, norms, q/k/v biases (Qwen2), q/k norms (Qwen3)."""
        per_layer = 2 * self.hidden  # input and post-attention RMSNorm
        if self.family == "qwen2":
            per_layer += (self.heads + 2 * self.kv_heads) * self.head_dim
        else:
            per_layer += 2 * self.head_dim
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        return embed + self.layers * per_layer + self.hidden

    def parameter_count(self) -> int:
        """All parameters (equals the published count for the shipped configs)."""
        return self.linear_parameters() + self.other_parameters()

    def lora_parameters(self, r: int) -> int:
        """LoRA weights with rank ``r`` on every projection ("all-linear", lm-head excluded)."""
        return self.layers * sum(r * (a + b) for a, b in self.linear_shapes())

    def kv_bytes_per_token(self) -> int:
        """Key/value cache per token, all layers."""
        return self.layers * 2 * self.kv_heads * self.head_dim * _RESIDUAL_BYTES


def _layer_bytes_per_token(shape: ModelShape) -> int:
    """Bytes per token one decoder layer holds while it is recomputed and back-propagated."""
    # ~10 hidden-width fp32 values (norms, q/k/v and rotated copies, attention output, residual) and
    # ~6.5 intermediate-width ones (gate, up, silu, product and its fp16 copy, two gradients).
    return int(_RESIDUAL_BYTES * (10 * shape.hidden + 6.5 * shape.intermediate))


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated GPU memory of one step, by part, in GiB (see the module docstring)."""

    weights: float
    lora: float
    gradients: float
    optimizer: float
    checkpoints: float
    layer_backward: float
    logprob_chunk: float
    kv_cache: float
    prefill: float
    engine: float = 0.0  # vLLM's weights and KV cache, held for the whole run

    @property
    def static_gib(self) -> float:
        return self.weights + self.lora + self.gradients + self.optimizer + self.engine

    @property
    def update_gib(self) -> float:
        return self.checkpoints + self.layer_backward + self.logprob_chunk

    @property
    def rollout_gib(self) -> float:
        return self.kv_cache + self.prefill

    @property
    def peak_gib(self) -> float:
        return self.static_gib + max(self.update_gib, self.rollout_gib)


def estimate_memory(config: ERLConfig, shape: ModelShape) -> MemoryEstimate:
    """Peak GPU memory of a 4-bit QLoRA step of ``config`` (LoRA rank ``config.lora_r``, every projection) on ``shape``.

    Example:
        >>> estimate_memory(ERLConfig.preset("gpu"), ModelShape.load("qwen2.5-1.5b-instruct")).peak_gib < 13
        True
    """
    seq = max(config.max_episode_length, config.max_reflection_prompt_length + config.max_reflection_length)
    rows = config.per_device_train_batch_size
    lora = shape.lora_parameters(config.lora_r)
    hidden_row = seq * shape.hidden * _RESIDUAL_BYTES  # one row's (T, h) fp32 activations
    layer_row = seq * _layer_bytes_per_token(shape)
    if config.gradient_checkpointing:
        checkpoints = shape.layers * rows * hidden_row  # the input of every layer
        layer_backward = rows * layer_row
    else:
        checkpoints, layer_backward = shape.layers * rows * layer_row, 0.0
    from erl_lite.engine.logprobs import VOCAB_TILE

    if config.logprob_chunk_size is None:  # full logits: every position against the whole vocabulary
        tile = rows * seq * shape.vocab
    else:  # one (chunk, tile) block at a time, recomputed in the backward
        tile = min(config.logprob_chunk_size, rows * seq) * min(VOCAB_TILE, shape.vocab)
    rollout_tokens = config.num_tasks_per_step * config.num_generations * seq
    # Prefill without grad: silu(gate), up and their product alive at once, plus the LoRA
    # branch's output: four (tokens, intermediate) fp32 tensors in the widest layer.
    prefill = rollout_tokens * 4 * shape.intermediate * _RESIDUAL_BYTES
    weights = shape.linear_parameters() * _NF4_BYTES + shape.other_parameters() * 4
    kv_cache, engine = rollout_tokens * shape.kv_bytes_per_token(), 0.0
    if config.generation_backend == "vllm":  # no 4-bit base: 16-bit weights, twice (the policy's and the engine's)
        from erl_lite.engine.continuous import cache_tokens_for
        from erl_lite.integrations.vllm import BATCHED_TOKENS

        weights = shape.parameter_count() * 2
        engine = weights + cache_tokens_for(config) * shape.kv_bytes_per_token() // 2  # 16-bit keys and values
        kv_cache, prefill = 0, BATCHED_TOKENS * 4 * shape.intermediate * 2
    return MemoryEstimate(
        weights=weights / GIB,
        engine=engine / GIB,
        lora=lora * 4 / GIB,
        gradients=lora * 4 / GIB,
        optimizer=lora * _OPTIMIZER_BYTES[config.optim] / GIB,
        checkpoints=checkpoints / GIB,
        layer_backward=layer_backward / GIB,
        logprob_chunk=tile * 4 * _LOGPROB_COPIES / GIB,
        kv_cache=kv_cache / GIB,
        prefill=prefill / GIB,
    )


def memory_table(config: ERLConfig, names: tuple[str, ...] = MODEL_CONFIGS) -> str:
    """A Markdown table of :func:`estimate_memory` for each architecture (``erl-lite budget``, docs/GPU.md)."""
    vllm = config.generation_backend == "vllm"
    columns = [  # (heading, its value in an estimate)
        ("weights (16-bit)" if vllm else "weights (4-bit)", lambda e: e.weights),
        *([("vLLM (weights + KV)", lambda e: e.engine)] if vllm else []),
        ("LoRA + grads", lambda e: e.lora + e.gradients),
        ("optimizer", lambda e: e.optimizer),
        ("checkpoints", lambda e: e.checkpoints),
        ("layer backward", lambda e: e.layer_backward),
        ("log-prob chunk", lambda e: e.logprob_chunk),
        ("update", lambda e: e.update_gib),
        ("KV cache", lambda e: e.kv_cache),
        ("prefill", lambda e: e.prefill),
        ("rollout", lambda e: e.rollout_gib),
        ("peak", lambda e: e.peak_gib),
    ]
    lines = ["| model | " + " | ".join(heading for heading, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name in names:
        e = estimate_memory(config, ModelShape.load(name))
        lines.append(f"| {name} | " + " | ".join(f"{value(e):.2f}" for _, value in columns) + " |")
    return "\n".join(lines)
