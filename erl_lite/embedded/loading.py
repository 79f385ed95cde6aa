"""Loading the embedded tiny model (package data, :data:`EMBEDDED_DIR`) offline, as a hub model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EMBEDDED_DIR: Path = Path(__file__).resolve().parent.parent / "data" / "embedded"


def load_embedded(
    peft: str = "lora", quantization: str = "none", model_dir: str | Path | None = None, **kwargs: Any
) -> tuple[Any, Any]:
    """Load the embedded model and tokenizer through :func:`erl_lite.models.load_policy`; ``model_dir``: another
    build (``scripts/build_embedded_model.py --out DIR``) instead of the shipped one.

    Example:
        >>> model, tok = load_embedded(quantization="4bit", lora_r=4)
        >>> tok.eos_token
        '<|im_end|>'
    """
    from erl_lite.models import load_policy  # torch and transformers load on first use

    return load_policy(str(check_build(model_dir)), quantization=quantization, peft=peft, **kwargs)


def check_build(model_dir: str | Path | None = None) -> Path:
    """The folder of an embedded-model build (default: the shipped one), or FileNotFoundError saying how to build it."""
    where = Path(model_dir) if model_dir is not None else EMBEDDED_DIR
    if not (where / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"no embedded model in {where}; build it with `python scripts/build_embedded_model.py --out {where}`"
        )
    return where
