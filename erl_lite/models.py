"""Load a policy (plain, LoRA, or 4-bit QLoRA) and describe it; :mod:`erl_lite.engine.policy` acts on it.

Departures from the paper: the paper fully fine-tunes 4B/7B models on 8xH100 in bf16; erl_lite defaults
to LoRA (optionally on a 4-bit base) so that one consumer GPU suffices; the KL reference is the frozen base."""

from __future__ import annotations

import os
import re
from typing import Literal

import torch
from peft import LoraConfig, PeftConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BitsAndBytesConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from erl_lite.config.checks import FOUR_BIT, QUANTIZATIONS, check_choice, check_whole
from erl_lite.engine.policy import base_model, is_4bit, keep_4bit_trainable, unwrap

#: The dtype names ``load_policy`` and ``export`` accept (besides ``"auto"`` and a ``torch.dtype``).
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_CHECKPOINT_KWARGS = {"use_reentrant": False}  # reentrant checkpointing drops grads of frozen-input graphs


def load_policy(
    model: str | os.PathLike | PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | str | os.PathLike | None = None,
    *,
    quantization: Literal["none", "4bit"] = "none",
    peft: Literal["lora", "none"] | LoraConfig = "lora",
    lora_r: int = 16,
    lora_alpha: float = 32,
    lora_dropout: float = 0.0,
    target_modules: str | list[str] = "all-linear",
    gradient_checkpointing: bool = False,
    dtype: str | torch.dtype = "auto",
    device: str | None = None,
    trust_remote_code: bool = False,
    base_model: str | os.PathLike | None = None,
) -> tuple[PreTrainedModel | PeftModel, PreTrainedTokenizerBase]:
    """Load a causal LM policy and its tokenizer (left padding, a pad token), optionally 4-bit and LoRA-wrapped.

    ``model``: a hub name, a checkpoint, a LoRA adapter folder (on ``base_model``, else the base it records) or
    a built model. ``dtype="auto"``: bf16 on a CUDA device with native bf16, else float32; ``device``: CUDA if any.

    Example:
        >>> import tempfile
        >>> from erl_lite.testing import save_tiny_model
        >>> path = save_tiny_model(tempfile.mkdtemp())
        >>> policy, tok = load_policy(path, quantization="4bit", lora_r=4, device="cpu")
        >>> describe_policy(policy).startswith("LlamaForCausalLM")
        True
    """
    check_choice("quantization", quantization, QUANTIZATIONS)
    if not (isinstance(peft, LoraConfig) or peft in ("lora", "none")):
        raise ValueError(f"peft must be 'lora', 'none' or a peft.LoraConfig, got {peft!r}")
    check_whole("load_policy", "lora_r", lora_r, minimum=1)
    if not isinstance(lora_alpha, (int, float)) or lora_alpha <= 0:
        raise ValueError(f"lora_alpha must be a positive number, got {lora_alpha!r}")
    if not isinstance(lora_dropout, (int, float)) or not 0.0 <= lora_dropout < 1.0:
        raise ValueError(f"lora_dropout must be in [0, 1), got {lora_dropout!r}")
    if not isinstance(gradient_checkpointing, bool):
        raise ValueError(f"gradient_checkpointing must be a bool, got {gradient_checkpointing!r}")
    built = isinstance(model, torch.nn.Module)
    if not built and not isinstance(model, (str, os.PathLike)):
        raise ValueError(f"model must be a name, a path or a PreTrainedModel, got {type(model).__name__}")
    device = _resolve_device(device, default_to_accelerator=not built)
    torch_dtype = _resolve_dtype(dtype, device)

    if built:
        policy = _adopt_built_model(model, quantization, peft, device, dtype, torch_dtype)
        tok_source = tokenizer if tokenizer is not None else _name_or_path(policy)
    else:
        check_model_source(os.fspath(model))
        policy, tok_source = _load_from_path(
            os.fspath(model), quantization, peft, torch_dtype, device, trust_remote_code, base_model
        )
        tok_source = tokenizer if tokenizer is not None else tok_source

    if not isinstance(policy, PeftModel):
        policy = _prepare(policy, gradient_checkpointing, peft != "none")
        if peft != "none":
            policy = get_peft_model(policy, _lora_config(peft, lora_r, lora_alpha, lora_dropout, target_modules))
    elif gradient_checkpointing:
        _enable_checkpointing(policy.get_base_model())

    keep_4bit_trainable(policy)
    return policy, _load_tokenizer(tok_source, policy, trust_remote_code)


def _load_tokenizer(
    source: PreTrainedTokenizerBase | str | os.PathLike | None, policy: torch.nn.Module, trust_remote_code: bool
) -> PreTrainedTokenizerBase:
    if source is None:
        raise ValueError("tokenizer is required: the model does not say where it was loaded from")
    if not isinstance(source, PreTrainedTokenizerBase):
        source = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    return _prepare_tokenizer(source, policy)


def _lora_config(peft: str | LoraConfig, r: int, alpha: float, dropout: float, targets: str | list[str]) -> LoraConfig:
    if isinstance(peft, LoraConfig):
        return peft
    return LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none", task_type="CAUSAL_LM"
    )


#: What to do when an adapter's recorded base folder is gone (load_policy, export, erl-lite eval/export).
MOVED_BASE_HINT = (
    "moved or deleted? Point at it with base_model=DIR (erl-lite eval / erl-lite export: --base-model DIR)"
)
#: A hub repository id: ``name`` or ``org/name`` (letters, digits, ``-``, ``_``, ``.``).
_HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def pretrained(model: torch.nn.Module) -> bool:
    """Whether ``model``'s weights are pretrained ones: loaded from a folder that is no embedded-model build (which
    holds the BUILD_INFO.json of scripts/build_embedded_model.py), and not :func:`erl_lite.testing.tiny_model`'s
    random ones (a model built in memory from a config has no source)."""
    config = getattr(base_model(model), "config", None)
    source = str(getattr(config, "_name_or_path", "") or "")
    if not source or getattr(config, "erl_lite_from_scratch", False):
        return False
    return not os.path.isfile(os.path.join(source, "BUILD_INFO.json"))


def check_model_source(name: str, what: str = "model", hint: str = "") -> None:
    """Raise FileNotFoundError when ``name`` is meant as a local folder and is not there.

    A local path: it starts with ``/``, ``./``, ``../`` or ``~``, is not of a hub id's form (``org/name``),
    or its first part is a folder here (``runs/model``); transformers would answer "Repo id must be ..."."""
    if os.path.exists(os.path.expanduser(name)):
        return
    first = name.split("/", 1)[0]
    local = (
        name.startswith(("/", "./", "../", "~", ".\\", "..\\"))
        or name in (".", "..")
        or not _HUB_ID.fullmatch(name)
        or ("/" in name and os.path.isdir(first))
    )
    if local:
        raise FileNotFoundError(
            f"{what} {name} does not exist ({hint or 'no such folder'}; a hub name has the form 'org/name')"
        )


def _resolve_device(device: str | None, default_to_accelerator: bool) -> torch.device | None:
    if device is None:
        if not default_to_accelerator:
            return None
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must name a torch device ('cpu', 'cuda:0'), got {device!r}") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available here; use device='cpu'")
    return resolved


def _native_bf16(device: torch.device | None) -> bool:
    on_cuda = device is not None and device.type == "cuda"
    return on_cuda and torch.cuda.is_bf16_supported(including_emulation=False)


def named_dtype(dtype: str | torch.dtype) -> torch.dtype | None:
    """A ``dtype`` argument as a torch dtype, or None for ``"auto"`` (the caller decides); else ValueError."""
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    if dtype != "auto":
        raise ValueError(f"dtype must be 'auto', one of {sorted(DTYPES)} or a torch.dtype, got {dtype!r}")
    return None


def _resolve_dtype(dtype: str | torch.dtype, device: torch.device | None) -> torch.dtype:
    return named_dtype(dtype) or (torch.bfloat16 if _native_bf16(device) else torch.float32)


def _load_base(
    name: str, quantization: str, torch_dtype: torch.dtype, device: torch.device, trust_remote_code: bool
) -> PreTrainedModel:
    # use_kernels=False: transformers 5.x kernelizes by default, and on a CUDA GPU that downloads
    # layers from the Hub at load time (a network call on the default path, and unpinned code).
    kwargs = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code, "use_kernels": False}
    if quantization == FOUR_BIT:
        compute = torch.float32
        if device.type == "cuda":
            compute = torch.bfloat16 if _native_bf16(device) else torch.float16
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=compute
        )
        kwargs["device_map"] = {"": device}  # bitsandbytes quantizes while placing the weights
        return AutoModelForCausalLM.from_pretrained(name, **kwargs)
    return AutoModelForCausalLM.from_pretrained(name, **kwargs).to(device)


def _load_from_path(
    source: str,
    quantization: str,
    peft,
    torch_dtype: torch.dtype,
    device: torch.device,
    trust_remote_code: bool,
    base_model: str | os.PathLike | None = None,
) -> tuple[PreTrainedModel | PeftModel, str]:
    """Load a checkpoint, or a saved LoRA adapter on top of its base; return (model, tokenizer dir)."""
    adapter_dir = os.path.isfile(os.path.join(source, "adapter_config.json"))
    base_name = source
    if adapter_dir and base_model is not None:
        base_name = os.fspath(base_model)
        check_model_source(base_name, what="base_model")
    elif adapter_dir:
        base_name = PeftConfig.from_pretrained(source).base_model_name_or_path
        check_model_source(base_name, what=f"the base model that {source} records", hint=MOVED_BASE_HINT)
    policy = _load_base(base_name, quantization, torch_dtype, device, trust_remote_code)
    if not adapter_dir:
        return policy, source
    if peft == "none":
        raise ValueError(f"peft='none' but model={source!r} is a LoRA adapter directory")
    # Checkpointing, if asked, is switched on by the caller once the adapter is in place.
    policy = PeftModel.from_pretrained(_prepare(policy, False, True), source, is_trainable=True)
    has_tokenizer = os.path.isfile(os.path.join(source, "tokenizer_config.json"))
    return policy, source if has_tokenizer else base_name


def _adopt_built_model(model, quantization, peft, device, dtype, torch_dtype):
    """Accept an already-built model: check it fits the arguments, then move/cast it."""
    if quantization == FOUR_BIT and not is_4bit(model):
        raise ValueError(
            "quantization='4bit' needs a model name or path (an already-built model "
            "cannot be quantized here); load it with load_policy(path, quantization='4bit')"
        )
    if isinstance(model, PeftModel) and peft == "none":
        raise ValueError("peft='none' but model already carries an adapter; pass model.get_base_model()")
    if not is_4bit(model):  # bitsandbytes weights stay where they were quantized
        model = model.to(device=device) if device is not None else model
        model = model.to(dtype=torch_dtype) if dtype != "auto" else model
    return model


def _prepare(model: PreTrainedModel, gradient_checkpointing: bool, adapter: bool) -> PreTrainedModel:
    """Freeze/upcast a 4-bit base for k-bit training and switch on checkpointing if asked."""
    if is_4bit(model):
        if adapter:
            # Freezes the base, upcasts norms to fp32; checkpointing is switched on below instead.
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        else:
            model.requires_grad_(False)  # 4-bit weights cannot be trained; inference only
    if gradient_checkpointing:
        _enable_checkpointing(model)
    return model


def _enable_checkpointing(model: PreTrainedModel) -> None:
    """Non-reentrant activation checkpointing; inputs require grad so frozen bases still backprop."""
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=dict(_CHECKPOINT_KWARGS))
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(_CHECKPOINT_KWARGS))
    if not getattr(model, "_require_grads_hooks", None) and not getattr(model, "_require_grads_hook", None):
        model.enable_input_require_grads()


def _prepare_tokenizer(tokenizer: PreTrainedTokenizerBase, model: torch.nn.Module) -> PreTrainedTokenizerBase:
    """Ensure a pad token (eos if missing) and left padding; mirror the pad id into the model."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError("tokenizer has neither a pad token nor an eos token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # generation appends on the right, so prompts pad on the left
    base = base_model(model)
    for config in (base.config, getattr(base, "generation_config", None)):
        if config is not None and getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = tokenizer.pad_token_id
    return tokenizer


def trainable_parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached copies of every trainable parameter, by name: snapshot before/after a step."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts; 4-bit weights count as their unpacked size."""
    trainable = total = 0
    for param in model.parameters():
        n = param.numel()
        if param.__class__.__name__ == "Params4bit":
            n *= 2 * param.element_size()  # two 4-bit values per byte of storage
        total += n
        trainable += n if param.requires_grad else 0
    return trainable, total


def describe_policy(model: torch.nn.Module) -> str:
    """One line: base class, quantization, adapter, trainable/total parameters, dtype and device."""
    inner, base = unwrap(model), base_model(model)
    parts = [type(base).__name__, "4-bit NF4" if is_4bit(base) else "full precision"]
    if isinstance(inner, PeftModel):
        cfg = inner.peft_config[inner.active_adapter]
        targets = cfg.target_modules
        # A reloaded adapter lists full module paths; the leaf names are what a reader wants.
        if not isinstance(targets, str):
            targets = ",".join(sorted({t.rsplit(".", 1)[-1] for t in targets}))
        parts.append(f"LoRA r={cfg.r} alpha={cfg.lora_alpha} on {targets}")
    else:
        parts.append("no adapter")
    trainable, total = count_parameters(model)
    parts.append(f"trainable {trainable:,} / {total:,} params ({100 * trainable / max(total, 1):.2f}%)")
    param = next(base.parameters(), None)
    if param is not None:
        dtype = str(getattr(base, "dtype", param.dtype)).removeprefix("torch.")
        parts.append(f"{dtype} on {param.device}")
    return " | ".join(parts)


def _name_or_path(model: torch.nn.Module) -> str | None:
    return getattr(base_model(model).config, "_name_or_path", None) or None
