"""What ``ERLTrainer`` does with the arguments it shares with TRL's ``GRPOTrainer`` (what it cannot honour
is refused, never ignored); ``trainer_state``; the default optimizer and schedule."""

from __future__ import annotations

from typing import Any, Sequence

from erl_lite.config import ERLConfig


class TrainerStateView:
    """``trainer_state`` for reward functions: a live, read-only view of a trainer's progress."""

    def __init__(self, trainer: Any) -> None:
        self._trainer = trainer

    @property
    def global_step(self) -> int:
        return self._trainer.step

    @property
    def max_steps(self) -> int:
        return self._trainer.args.max_steps

    @property
    def epoch(self) -> float:
        t = self._trainer
        return t.step * t.args.num_tasks_per_step / max(len(getattr(t, "train_tasks", ())), 1)

    def __repr__(self) -> str:
        return f"TrainerStateView(global_step={self.global_step}, max_steps={self.max_steps})"


def check_callbacks(callbacks: Sequence[Any] | None) -> list[Any]:
    """TrainerCallbacks and functions ``f(trainer, record)`` as given; anything else is refused, naming its index."""
    from erl_lite.run.callbacks import is_trainer_callback

    for i, cb in enumerate(callbacks or ()):
        if not is_trainer_callback(cb) and (isinstance(cb, type) or hasattr(cb, "on_step_end") or not callable(cb)):
            raise TypeError(
                f"callbacks[{i}] ({cb!r:.60}) is neither a transformers TrainerCallback (an instance or a "
                "subclass: its events are run by transformers' CallbackHandler) nor a function f(trainer, "
                "record) called after each iteration (record: a StepRecord with .step and .metrics); an "
                "object with on_* methods must subclass transformers.TrainerCallback"
            )
    return list(callbacks or ())


def wants_4bit(quantization_config: Any, config: ERLConfig) -> bool:
    """Whether to load a named model in 4-bit: ``config.load_in_4bit`` or a 4-bit BitsAndBytesConfig."""
    if quantization_config is None:
        return config.load_in_4bit
    if getattr(quantization_config, "load_in_4bit", False):
        return True
    raise ValueError(
        f"quantization_config {type(quantization_config).__name__} is not a 4-bit config; "
        "erl_lite loads named models in 4-bit NF4 (load_in_4bit=True) or unquantized"
    )


LORA_FIELDS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")


def adapter_settings(config: ERLConfig, peft_config: Any) -> dict[str, Any]:
    """:func:`erl_lite.models.load_policy`'s adapter keywords: ``peft_config``, else LoRA from ``config.lora_*``."""
    return dict(
        peft=peft_config if peft_config is not None else "lora",
        lora_r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.lora_target_modules,
        gradient_checkpointing=config.gradient_checkpointing,
    )


def adopt_model_object(
    model: Any, tokenizer: Any, config: ERLConfig, peft_config: Any, quantization_config: Any
) -> tuple[Any, Any]:
    """A model object with the model settings of ``config`` applied or refused, never ignored.

    ``lora_*`` fields off their defaults (or ``peft_config``) add an adapter, or are refused on one with an adapter."""
    from peft import PeftModel

    from erl_lite.engine.policy import base_model, is_4bit
    from erl_lite.models import _enable_checkpointing, load_policy

    if tokenizer is None:
        raise ValueError("processing_class (the tokenizer) is required when model is an object")
    if wants_4bit(quantization_config, config) and not is_4bit(model):
        how = "quantization_config (4-bit)" if quantization_config is not None else "ERLConfig.load_in_4bit=True"
        raise ValueError(
            f"{how} asks for a 4-bit model, but the model passed is an already-loaded full-precision "
            "object, which erl_lite cannot quantize: pass the model's name or path instead (the "
            "trainer then loads it in 4-bit), or quantize it yourself, e.g. "
            "erl_lite.models.load_policy(name, quantization='4bit'), and pass that"
        )
    default = ERLConfig()
    lora_set = [f"{n}={getattr(config, n)!r}" for n in LORA_FIELDS if getattr(config, n) != getattr(default, n)]
    if isinstance(model, PeftModel):
        active = model.peft_config.get(model.active_adapter)
        shape = f" (r={active.r})" if hasattr(active, "r") else ""
        if peft_config is not None:
            raise ValueError(
                f"peft_config was given, but the model passed already carries a PEFT adapter{shape}, "
                "which erl_lite trains as it is: drop peft_config, or pass the model without its "
                "adapter (model.get_base_model() or the name)"
            )
        if lora_set:
            raise ValueError(
                f"ERLConfig {', '.join(lora_set)} would shape a new LoRA adapter, but the model passed "
                f"already carries a PEFT adapter{shape}, which erl_lite trains as it is: leave "
                f"{'it' if len(lora_set) == 1 else 'them'} at the default, or pass the model without "
                "an adapter (or its name)"
            )
    elif peft_config is not None or lora_set:
        return load_policy(model, tokenizer, **adapter_settings(config, peft_config))
    if config.gradient_checkpointing:
        _enable_checkpointing(base_model(model))  # idempotent: an object loaded with it stays as it was
    return model, tokenizer


def build_optimizer(params: list[Any], config: ERLConfig) -> Any:
    """The optimizer ``config.optim`` names over ``params``: ``torch.optim.AdamW`` or a bitsandbytes 8-bit AdamW."""
    if not params:
        raise ValueError("the model has no trainable parameters (pass peft_config or an unfrozen model)")
    kwargs = dict(lr=config.learning_rate, weight_decay=config.weight_decay)
    if config.optim == "adamw_torch":
        import torch

        return torch.optim.AdamW(params, **kwargs)
    import bitsandbytes as bnb  # a dependency of erl_lite

    cls = {"adamw_8bit": bnb.optim.AdamW8bit, "paged_adamw_8bit": bnb.optim.PagedAdamW8bit}[config.optim]
    return cls(params, **kwargs)


def build_scheduler(optimizer: Any, config: ERLConfig) -> Any:
    """transformers' ``config.lr_scheduler_type`` schedule over ``max_steps × max_optimizer_steps()`` steps."""
    from transformers import get_scheduler

    total = config.max_steps * config.max_optimizer_steps()
    warmup = config.num_warmup_steps(total)  # 0 for "constant" (the config refuses a warm-up with it)
    return get_scheduler(config.lr_scheduler_type, optimizer, num_warmup_steps=warmup, num_training_steps=total)
