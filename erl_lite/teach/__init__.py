"""Teaching: what the notebooks stand on. For now, :func:`setup` (the model, tokenizer,
environment and config of a notebook in one call); the exercises, results and figures move
here later.
"""

from erl_lite.teach.setup import GPU_MODEL, Setup, setup

__all__ = ["GPU_MODEL", "Setup", "setup"]
