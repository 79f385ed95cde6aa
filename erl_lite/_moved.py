"""Old import paths: ``import erl_lite.phases`` warns (``DeprecationWarning``) and hands back the module at
its new home, the same object. One finder on ``sys.meta_path`` does it, with no stub file per old name."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: old module (or package) -> its new home; an old package's submodules follow it.
MOVED = {
    "erl_lite.envs.base": "erl_lite.core.env",
    **{f"erl_lite.{name}": f"erl_lite.core.{name}" for name in (
        "chat", "prompts", "memory", "advantages", "losses", "logprobs", "generation", "rollout",
        "phases", "update", "progress")},
    **{f"erl_lite.{name}": f"erl_lite.integrations.{name}" for name in (
        "distributed", "reporting", "budget", "colab")},
    **{f"erl_lite.envs.{name}": f"erl_lite.integrations.{name}" for name in (
        "trl_adapter", "dataset", "reward_calls", "data_sources")},
    **{f"erl_lite.{old}": f"erl_lite.config.{new}" for old, new in (
        ("config_checks", "checks"), ("field_types", "field_types"), ("presets", "presets"),
        ("trl_fields", "trl_fields"))},
    **{f"erl_lite.{old}": f"erl_lite.run.{new}" for old, new in (
        ("trainer", "trainer"), ("trainer_saving", "saving"), ("trainer_args", "args"),
        ("checkpoint", "checkpoint"), ("run_state", "state"), ("identity", "identity"), ("layout", "layout"),
        ("lengths", "lengths"), ("func_specs", "func_specs"), ("callbacks", "callbacks"), ("export", "export"),
        ("sft", "sft"))},
    **{f"erl_lite.integrations.{name}": f"erl_lite.run.{name}" for name in ("callbacks", "export", "sft")},
    "erl_lite.diagnostics.report": "erl_lite.run.report",
    "erl_lite.integrations.multi": "erl_lite.envs.multi",
    "erl_lite.exercises": "erl_lite.teach.exercises",
    "erl_lite.results": "erl_lite.teach.results",
    "erl_lite.config_cli": "erl_lite.cli.config_args",
}


def new_home(name: str) -> str | None:
    """Where module ``name`` lives now, or None when it did not move."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, module: ModuleType) -> None:
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        """Already executed under its new name."""


class MovedFinder(importlib.abc.MetaPathFinder):
    """Resolves an old name to the module at its new home, with a ``DeprecationWarning``."""

    def find_spec(self, name, path=None, target=None):
        new = new_home(name)
        if new is None:
            return None
        warnings.warn(f"{name} moved to {new}; the old name goes in the next release", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        return importlib.machinery.ModuleSpec(name, _Alias(module), is_package=hasattr(module, "__path__"))


def install() -> None:
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
