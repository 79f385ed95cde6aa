"""What a run is, for resume: the settings, model, adapter and tokenizer a resuming run must match.

Compared: ERLConfig but :data:`RESUMABLE_FIELDS`, the model (its name, architecture and tensors) and LoRA
settings, the tokenizer, the env (its class, reward functions and settings)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

#: ERLConfig fields a resume may change: how a run is watched, saved or micro-batched, not what it computes.
RESUMABLE_FIELDS = frozenset(
    {
        "max_steps",
        "output_dir",
        "overwrite_output_dir",
        "save_steps",
        "save_total_limit",
        "eval_steps",
        "eval_num_generations",
        "eval_temperature",
        "sample_every",
        "progress_bar",
        "diagnostics",
        "generation_backend",
        "gradient_checkpointing",
        "per_device_train_batch_size",
        "extra",
        "report_to",
        "logging_steps",
        "num_train_epochs",
        "eval_top_p",
        "eval_top_k",
        "logprob_chunk_size",
        "push_to_hub",
        "hub_model_id",
        "hub_private_repo",
        "project",
        "preset_name",
        "vllm_gpu_memory_utilization",
    }
)

#: ``peft.LoraConfig`` fields recorded besides ``r``, ``lora_alpha`` and ``target_modules``: each changes
#: the adapter's output or which tensors train (initialisation is not recorded: a resume overwrites it).
LORA_FIELDS = (
    "use_rslora",
    "use_dora",
    "lora_dropout",
    "bias",
    "lora_bias",
    "modules_to_save",
    "exclude_modules",
    "layers_to_transform",
    "layers_pattern",
    "rank_pattern",
    "alpha_pattern",
    "trainable_token_indices",
    "target_parameters",
    "layer_replication",
    "fan_in_fan_out",
)


def run_identity(
    config: dict[str, Any], model: Any, tokenizer: Any = None, env: Any = None, weights: dict[str, str] | None = None
) -> dict[str, Any]:
    """The config, model, tokenizer and env identities a checkpoint records (``weights``: :func:`model_fingerprint`)."""
    # config.name_or_path is what from_pretrained records (a PeftModel forwards to its base).
    name = getattr(getattr(model, "config", None), "name_or_path", None) or getattr(model, "name_or_path", "")
    ident: dict[str, Any] = {"model": name or "", **(weights or {})}
    peft = getattr(model, "peft_config", None)
    if peft:
        active = getattr(model, "active_adapter", None)
        cfg = peft.get(active if isinstance(active, str) else "default") or next(iter(peft.values()))
        ident["lora.r"] = getattr(cfg, "r", None)
        ident["lora.alpha"] = getattr(cfg, "lora_alpha", None)
        ident["lora.target_modules"] = _plain(getattr(cfg, "target_modules", None))
        ident.update({f"lora.{key}": _plain(getattr(cfg, key, None)) for key in LORA_FIELDS})
    out = {"config": config, "model": ident}
    if tokenizer is not None:
        out["tokenizer"] = tokenizer_identity(tokenizer)
    if env is not None:
        out["env"] = environment_identity(env)
    # A JSON round trip makes tuples lists, as they will be when read back from a checkpoint.
    return json.loads(json.dumps(out, default=repr))


def model_fingerprint(model: Any) -> dict[str, str]:
    """Hashes of the architecture config and of the tensors (256 values sampled evenly from each: the same on
    any device), the trained LoRA tensors aside; another model under the same path differs."""
    import torch

    config = getattr(model, "config", None)
    shape = {
        k: v
        for k, v in (config.to_dict() if config is not None else {}).items()
        if not k.startswith("_") and k not in ("transformers_version", "use_cache")
    }
    h, lora = hashlib.sha256(), hasattr(model, "peft_config")
    for param in model.parameters():
        if not (lora and param.requires_grad or param.is_meta):
            flat = param.detach().reshape(-1)
            n, k = flat.numel(), min(flat.numel(), 256)  # whole-number positions: float32 ones overrun past 2**24
            picked = flat[torch.arange(k, device=flat.device) * (n - 1) // max(k - 1, 1)]
            h.update(repr(tuple(param.shape)).encode() + picked.float().cpu().numpy().tobytes())
    return {"model.architecture": _digest(shape), "model.weights": h.hexdigest()[:16]}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def environment_identity(env: Any) -> dict[str, Any]:
    """The environment's ``name``, class and (dataset rows) ``module:function`` reward and feedback specs."""
    from erl_lite.run.func_specs import function_spec

    cls = type(env)
    ident: dict[str, Any] = {"name": getattr(env, "name", ""), "class": f"{cls.__module__}.{cls.__qualname__}"}
    funcs = getattr(env, "reward_funcs", None)
    if isinstance(funcs, (list, tuple)):
        ident["reward_funcs"] = [function_spec(f) for f in funcs]
        feedback = getattr(env, "feedback_func", None)
        ident["feedback_func"] = None if feedback is None else function_spec(feedback)
    for key, value in getattr(env, "__dict__", {}).items():  # settings: public plain values (not a retriever)
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):
            continue
        if not key.startswith("_"):
            ident.setdefault(key, value if len(text) <= 200 else _digest(value))  # a long prompt by its hash
    return ident


def tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    """What of a tokenizer changes a run's token ids: its chat template's hash, EOS and pad tokens, and size."""
    template = getattr(tokenizer, "chat_template", None)
    return {
        "chat_template": None if template is None else _digest(template),
        "eos": [getattr(tokenizer, "eos_token_id", None), getattr(tokenizer, "eos_token", None)],
        "pad": [getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "pad_token", None)],
        "vocab_size": len(tokenizer),
    }


def run_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """One line ``field: checkpoint <old>, this run <new>`` per setting that differs."""
    lines = []
    for part in ("config", "model", "tokenizer", "env"):
        skip = RESUMABLE_FIELDS if part == "config" else frozenset()
        old, new = saved.get(part, {}), current.get(part, {})
        # A field added after the checkpoint was written: it ran with that field's default.
        known = _config_defaults() if part == "config" else _lora_defaults() if "lora.r" in old else {}
        # An env setting recorded only since the checkpoint was written (by an older erl_lite) is not compared.
        later = set(new) - set(old) if part == "env" else set()
        where = part + "." if part in ("tokenizer", "env") else ""
        for key in sorted((set(old) | set(new)) - skip - later):
            a, b = old.get(key, known.get(key, "<absent>")), new.get(key, "<absent>")
            if a != b:
                lines.append(
                    f"{where}{key}: checkpoint {a!r}, this run {b!r}"
                    + (" (another model under the same name or path)" if key == "model.weights" else "")
                )
    return lines


def _plain(value: Any) -> Any:
    """A set (peft resolves ``"all-linear"`` to one) as a sorted list; anything else as it is."""
    return sorted(value) if isinstance(value, (set, frozenset)) else value


def _config_defaults() -> dict[str, Any]:
    """``ERLConfig()``'s fields as a checkpoint stores them."""
    from erl_lite.config import ERLConfig

    return json.loads(json.dumps(ERLConfig().to_dict()))


def _lora_defaults() -> dict[str, Any]:
    """peft's defaults of :data:`LORA_FIELDS`, keyed as :func:`run_identity` keys them."""
    from peft import LoraConfig

    blank = LoraConfig()
    return json.loads(json.dumps({f"lora.{k}": _plain(getattr(blank, k, None)) for k in LORA_FIELDS}, default=repr))
