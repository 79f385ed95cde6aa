"""What a run saves, by name: Hugging Face's file layout, and a LoRA adapter written with its note."""

from __future__ import annotations

import json
import os
from typing import Any

from erl_lite.config.checks import quantization_name

ADAPTER_WEIGHTS = "adapter_model.safetensors"  # peft.utils.constants.SAFETENSORS_WEIGHTS_NAME
TRAINABLE_WEIGHTS = "trainable.safetensors"
ERL_STATE = "erl_state.json"
HF_STATE = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME
NOTE_FILE = "erl_lite.json"
MANIFEST = "manifest.json"  # a checkpoint's files, sizes and hashes, written last


def holds_run_record(path: str) -> bool:
    """Whether ``path`` holds a checkpoint's ``erl_state.json``."""
    return os.path.isfile(os.path.join(path, ERL_STATE))


def write_adapter(model: Any, tokenizer: Any, folder: str, evaluation: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write a LoRA adapter, the tokenizer and the :data:`NOTE_FILE` note (base model, 4-bit: merging needs them)."""
    from erl_lite.engine.policy import base_model, is_4bit

    if not hasattr(model, "peft_config"):
        raise ValueError(
            "save_adapter needs a LoRA policy (a peft model); a fully fine-tuned model "
            "is saved with model.save_pretrained(folder)"
        )
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    note = {
        "base_model": getattr(base_model(model).config, "_name_or_path", "") or "",
        "base_quantization": quantization_name(is_4bit(model)),
        "evaluation": evaluation,
    }
    write_json(os.path.join(folder, NOTE_FILE), note)
    return note


def write_json(path: str, obj: Any) -> None:
    """``obj`` as indented JSON at ``path`` (every JSON file a run writes)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
