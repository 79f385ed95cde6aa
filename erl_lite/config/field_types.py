"""Checking a value against its field's type annotation or its setting's range, with a message naming it:
``bool`` takes only True/False, ``int`` an integer or a whole float, ``float`` a finite real number, not a bool."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import functools
import math
import numbers
import os
import re
import types
import typing
from typing import Any, Iterable, Mapping


class UnexpandedPath(ValueError, argparse.ArgumentTypeError):
    """A path naming a variable that is not set, or the home of no user (argparse shows the message as it is)."""


def expand_path(path: str | os.PathLike, name: str = "path") -> str:
    """``path`` with ``~`` and ``$VAR`` / ``${VAR}`` expanded, as a shell and transformers' TrainingArguments do; an
    unset variable or unknown ``~user`` is refused (``os.path`` would keep it, making a folder named ``$VAR``)."""
    text = os.fspath(path)
    unset = [m[0] for m in re.finditer(r"\$(\w+|\{([^}]*)\})", text) if (m[2] or m[1]) not in os.environ]
    if unset or os.path.expanduser(text).startswith("~"):
        what = f"the variable {unset[0]} is not set" if unset else f"{text.split('/')[0]} is no user's home"
        raise UnexpandedPath(f"{name}={text!r}: {what} here; set the variable or write the path out")
    return os.path.expandvars(os.path.expanduser(text))


class _Mismatch(Exception):
    """The value is not of the annotation's kind (internal: becomes a ValueError naming the field)."""


def conform(name: str, value: Any, annotation: Any, owner: str = "ERLConfig") -> Any:
    """``value`` as field ``name`` stores it, or ValueError naming ``owner.name`` and what it takes."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isfinite(value):
        raise ValueError(f"{owner}.{name} must be a finite number, got {value!r}")
    try:
        return _conform(value, annotation, convert=True)
    except _Mismatch:
        raise ValueError(
            f"{owner}.{name} must be {describe(annotation)}, got {value!r:.80} ({type(value).__name__})"
        ) from None


def conform_fields(obj: Any) -> None:
    """Check (and store, converted) every init field of the dataclass instance ``obj``."""
    hints = field_types(type(obj))
    for f in dataclasses.fields(obj):
        if f.init and f.name in hints:
            setattr(obj, f.name, conform(f.name, getattr(obj, f.name), hints[f.name], type(obj).__name__))


@functools.lru_cache(maxsize=None)
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotation of each field of dataclass ``cls`` (string annotations evaluated)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def _conform(value: Any, annotation: Any, convert: bool) -> Any:
    """The value, converted where ``convert`` allows (a whole float to an int); _Mismatch if it does not fit."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return value
    if annotation is None or annotation is type(None):
        if value is None:
            return None
    elif origin in (typing.Union, types.UnionType):
        # An exact fit to any member first: 3.0 stays a float in `int | float`.
        tries = [(member, False) for member in args] + ([(member, True) for member in args] if convert else [])
        for member, conv in tries:
            with contextlib.suppress(_Mismatch):
                return _conform(value, member, conv)
    elif annotation is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if convert and isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer():
            return int(value)
    elif annotation is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return value
    elif origin in (list, tuple, typing.Sequence) or annotation in (list, tuple):
        if isinstance(value, (list, tuple)):
            item = args[0] if args else Any
            return type(value)(_conform(v, item, convert) for v in value)
    elif origin is dict or annotation is dict:
        if isinstance(value, dict):
            key, val = args if args else (Any, Any)
            return {_conform(k, key, convert): _conform(v, val, convert) for k, v in value.items()}
    else:  # a class (bool, str, ...): an instance of it
        if isinstance(annotation, type) and isinstance(value, annotation):
            return value
    raise _Mismatch


def describe(annotation: Any) -> str:
    """What a field of this type takes, in words."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin in (list, tuple, typing.Sequence):
        return f"a list of {_plural(describe(args[0]))}" if args else "a list"
    if origin is dict:
        return f"a dict with {describe(args[0]).split()[-1]} keys" if args else "a dict"
    words = {
        bool: "true or false",
        int: "an integer",
        float: "a finite number",
        str: "a string",
        type(None): "None",
    }
    return words.get(annotation, f"a {getattr(annotation, '__name__', annotation)}")


def _plural(words: str) -> str:
    return {"an integer": "integers", "a finite number": "numbers", "a string": "strings"}.get(words, words)


def closest(name: str, known: Iterable[str], aliases: Mapping[str, str] | None = None) -> str | None:
    """The known name a mistyped ``name`` meant (``aliases``, else difflib above 0.6), or None: the "did you mean"."""
    return (aliases or {}).get(name) or next(iter(difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)), None)


def float_or_none(value: Any) -> float | None:
    """``float(value)``, or None where ``float`` refuses it (TypeError or ValueError: not a number)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
