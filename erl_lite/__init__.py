"""erl_lite: Experiential Reinforcement Learning, small enough to read and to run on one GPU.

Example:
    >>> from erl_lite import ERLConfig
    >>> ERLConfig.preset("cpu").mode
    'erl'
"""

from __future__ import annotations

import importlib
import importlib.abc
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


class _BitsandbytesOffline(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports bitsandbytes, whoever asks for it first after erl_lite (peft does), with the Hugging Face Hub offline.
    Imported on a CPU with AVX512-BF16, bitsandbytes 0.50 asks the Hub for a 4-bit CPU kernel (``kernels.get_kernel``);
    offline it reads the local cache only, else keeps its own CPU code (the same numbers). The flag is put back after,
    and the warnings logged meanwhile (the failed lookup's: nothing to act on) are not shown; errors are. An import
    hook, not a call at each entry point: the command line, the notebooks and the Python API all reach peft."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "bitsandbytes":
            return None
        sys.meta_path.remove(self)  # once; and the real spec is found by the finders after this one
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:  # a source package: the default module creation
            self.loader, spec.loader = spec.loader, self
        return spec

    def exec_module(self, module: Any) -> None:
        from huggingface_hub import constants

        offline, muted = constants.HF_HUB_OFFLINE, logging.root.manager.disable
        constants.HF_HUB_OFFLINE = True
        logging.disable(logging.WARNING)
        try:
            self.loader.exec_module(module)
        finally:
            constants.HF_HUB_OFFLINE = offline
            logging.disable(muted)
            module.__loader__ = module.__spec__.loader = self.loader


if "bitsandbytes" not in sys.modules and not any(isinstance(f, _BitsandbytesOffline) for f in sys.meta_path):
    sys.meta_path.insert(0, _BitsandbytesOffline())


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
