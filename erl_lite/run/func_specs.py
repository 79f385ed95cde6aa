"""Functions named by text (``module:function``, ``path/to/file.py:function`` or TRL's ``module.function``);
a checkpoint records a reward function's spec so that ``erl-lite eval`` can say what a run was scored by."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any, Callable

from erl_lite.config.field_types import closest


def function_spec(func: Any) -> str:
    """``module:qualname`` of a function: what :func:`load_function` reads back for a top-level function."""
    module = getattr(func, "__module__", None) or type(func).__module__
    name = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{module}:{name}"


def load_function(spec: str, what: str = "function") -> Callable:
    """The function a spec names; modules are looked up in the working directory first, as ``trl grpo`` does.

    ``what`` names the role in errors (``"reward function"``). Raises ValueError naming the spec when it is
    malformed or the module, file or function is missing (errors of the module's own code keep their traceback)."""
    where, sep, name = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
    if not where or not name:
        raise ValueError(f"{what} {spec!r}: expected module:function, path/to/file.py:function or module.function")
    module = _load_module(spec, where)
    obj: Any = module
    for part in name.split("."):  # a qualified name: Class.method
        if not hasattr(obj, part):
            known = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
            guess = closest(name, known)
            hint = f"; did you mean {guess!r}?" if guess else ""
            raise ValueError(f"{spec}: module {where!r} has no function {name!r}{hint}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(
            f"{spec}: not a function (a {type(obj).__name__}); {what}s are called with the "
            "completions and the dataset's columns"
        )
    return obj


def _load_module(spec: str, where: str) -> Any:
    """The module part of a spec: a ``.py`` file by path, or an importable module name."""
    if where.endswith(".py") or "/" in where or os.sep in where:
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise ValueError(f"{spec}: no file {path}")
        name = "_erl_lite_user_" + os.path.splitext(os.path.basename(path))[0]
        loader_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module  # so that pickling and dataclasses inside the file work
        loader_spec.loader.exec_module(module)
        return module
    cwd = os.getcwd()
    if cwd not in sys.path:  # as trl grpo: a module next to where the command runs
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as e:
        if e.name is None or not where.startswith(e.name):  # the module itself imports something missing
            raise
        raise ValueError(
            f"{spec}: no module named {e.name!r} (looked in the working directory {cwd} and on the Python path)"
        ) from e
