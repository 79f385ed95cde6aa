"""erl_lite: Experiential Reinforcement Learning, small enough to read and to run on one GPU.

Example:
    >>> from erl_lite import ERLConfig
    >>> ERLConfig.preset("cpu").mode
    'erl'
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from typing import Any, Callable

__version__ = "0.1.0"

#: Where the notebooks install erl_lite (and take its badges, constraints and figures) from, and the ref they
#: pin. To publish elsewhere, change these two lines and run `python scripts/sync_notebooks.py`.
REPOSITORY_URL = "https://github.com/erl-lite/erl_lite"
RELEASE_REF = f"v{__version__}"

# Imported on first use, so `import erl_lite` stays light (torch/transformers load lazily).
_EXPORTS = {
    "ERLConfig": "config",
    "PRESETS": "config.presets",
    "ERLTrainer": "run.trainer",
    "History": "history",
    "METRIC_GLOSSARY": "metrics",
    "diagnose": "run.report",
    "doctor": "run.report",
    "DiagnosticError": "diagnostics.monitor",
    "ReflectionMemory": "core.memory",
    "load_policy": "models",
    "Task": "records",
    "Attempt": "records",
    "Reflection": "records",
    "Retry": "records",
    "StepRecord": "records",
}
__all__ = sorted(_EXPORTS)


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module ``__getattr__`` and ``__dir__`` (PEP 562) for ``exports``, {name: the submodule that defines
    it}: each name is imported on first use. Ours, not ``lazy_loader``'s: twelve lines do not earn a dependency."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


def import_bitsandbytes_offline() -> None:
    """Import bitsandbytes (when installed, once) with the Hugging Face Hub offline, before transformers or peft do:
    called where erl_lite starts a run of its own (the demo, the command line, the notebooks' setup, the tests).
    Imported on a CPU with AVX512-BF16, bitsandbytes 0.50 asks the Hub for a 4-bit CPU kernel (``kernels.get_kernel``);
    offline it reads the local cache only, else keeps its own CPU code (the same numbers). The flag is put back after,
    and the warnings logged meanwhile (the failed lookup's: nothing to act on) are not shown; errors are."""
    if "bitsandbytes" in sys.modules or importlib.util.find_spec("bitsandbytes") is None:
        return
    from huggingface_hub import constants

    offline, muted = constants.HF_HUB_OFFLINE, logging.root.manager.disable
    constants.HF_HUB_OFFLINE = True
    logging.disable(logging.WARNING)
    try:
        import bitsandbytes  # noqa: F401
    finally:
        constants.HF_HUB_OFFLINE = offline
        logging.disable(muted)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
