"""Teaching: what the notebooks stand on (:func:`setup`, the exercises' checks, the helpers that finish a run)."""

from erl_lite.teach.setup import GPU_MODEL, Setup, setup

__all__ = ["GPU_MODEL", "Setup", "setup"]
