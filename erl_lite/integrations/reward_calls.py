"""Calling TRL-style reward and feedback functions on a batch, and checking what they return.

TRL 1.16's call: one per function for the whole batch, by keyword (TRL's keywords and every task column).
``None`` is "not applicable"; a ``(score, feedback)`` pair gives ERL its feedback text. Departures from TRL:
a row every function scores None, a bad ``log_metric`` value and a ``log_extra`` column of the wrong length
are errors (TRL trains on 0, logs NaN or misaligns); reward models (``nn.Module``): wrap one in a function.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from erl_lite.config.checks import check_reward_weights
from erl_lite.config.field_types import float_or_none
from erl_lite.engine.chat import completion_text
from erl_lite.records import Task

_CALL_KEYS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"})
_UNSLICED_KEYS = frozenset({"trainer_state", "log_extra", "log_metric"})  # passed whole when a row is retried alone
#: The largest reward accepted: squared in float64 (the group std), ``A = r`` in the float32 loss.
MAX_ABS_REWARD = 1e10
_DROPPED_COLUMNS = frozenset({"prompt", "completion", "completion_ids"})  # TRL drops them before the call


class RewardFunctionError(ValueError):
    """A reward or feedback function raised, or returned something that cannot be used."""


@dataclass(frozen=True)
class RunState:
    """``trainer_state`` outside a trainer (phase-level use): nothing has been trained yet."""

    global_step: int = 0
    max_steps: int = 0  # 0: unknown
    epoch: float = 0.0


class RewardLog:
    """What reward functions log through TRL's ``log_metric`` and ``log_extra``, until taken."""

    def __init__(self) -> None:
        self.metrics: list[tuple[str, float]] = []
        self.extra: dict[str, list[Any]] = {}

    def log_metric(self, name: str, value: float) -> None:
        """One scalar for this batch, averaged over the iteration."""
        if not isinstance(name, str) or not name:
            raise RewardFunctionError(f"log_metric name must be a non-empty string, got {name!r:.60}")
        number = None if isinstance(value, (str, bytes)) else float_or_none(value)
        if number is None or not math.isfinite(number):
            raise RewardFunctionError(f"log_metric {name!r}: the value {value!r:.60} is not a finite number")
        self.metrics.append((name, number))

    def log_extra(self, column: str, values: Sequence[Any]) -> None:
        if not isinstance(column, str) or not column:
            raise RewardFunctionError(f"log_extra column name must be a string, got {column!r:.60}")
        if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
            raise RewardFunctionError(
                f"log_extra column {column!r}: expected a list of values, one per row, got {type(values).__name__}"
            )
        self.extra.setdefault(column, []).extend(values)

    def take_extra(self, tasks: Sequence[Task]) -> list[dict[str, Any]]:
        """The logged columns of the batch of ``tasks``, as one dict per row; clears them."""
        extra, self.extra = self.extra, {}
        for column, values in extra.items():
            if len(values) != len(tasks):
                raise RewardFunctionError(
                    f"log_extra column {column!r} has {len(values)} values for a batch of "
                    f"{len(tasks)} completions; log one value per completion"
                )
        return [
            {column: _json_value(values[i], column, i, tasks) for column, values in extra.items()}
            for i in range(len(tasks))
        ]

    def take_metrics(self) -> list[tuple[str, float]]:
        out, self.metrics = self.metrics, []
        return out


def mean_metrics(pairs: Sequence[tuple[str, float]]) -> dict[str, float]:
    """The mean value of each name in ``(name, value)`` pairs (TRL: sum / count over processes)."""
    sums: dict[str, list[float]] = {}
    for name, value in pairs:
        sums.setdefault(name, []).append(value)
    return {name: sum(v) / len(v) for name, v in sorted(sums.items())}


@dataclass
class Scores:
    """A scored batch, per row: weighted reward, feedback notes, each function's value or None."""

    rewards: list[float]
    notes: list[list[str]]
    parts: list[dict[str, float | None]] = field(default_factory=list)


def reward_sources(
    reward_funcs: Callable | Sequence[Callable] | None, reward_weights: Sequence[float] | None
) -> tuple[list[Callable], list[float]]:
    """``reward_funcs`` as plain callables with their weights (default 1); TypeError for a reward model or a
    non-callable, ValueError for a weight count that does not match."""
    if reward_funcs is None:
        funcs = []
    elif isinstance(reward_funcs, (list, tuple)):
        funcs = list(reward_funcs)
    else:
        funcs = [reward_funcs]
    torch_nn = sys.modules.get("torch.nn")  # no torch import here: only an imported torch has modules
    for i, f in enumerate(funcs):
        if not callable(f) or (torch_nn is not None and isinstance(f, torch_nn.Module)):
            raise TypeError(
                f"reward function {i} ({f!r:.60}) is not a plain callable; reward models "
                "are not supported: wrap one in a function f(prompts, completions, **kw)"
            )
    weights = check_reward_weights(reward_weights, [reward_func_name(f) for f in funcs])
    return funcs, [1.0] * len(funcs) if weights is None else weights


def call_arguments(
    tasks: Sequence[Task],
    completions: Sequence[str],
    completion_ids: Sequence[list[int]],
    trainer_state: Any = None,
    log: RewardLog | None = None,
) -> dict[str, Any]:
    """The keyword arguments of one TRL-style call on a batch of replies (``log`` takes ``log_metric`` and
    ``log_extra``)."""
    columns = sorted({k for t in tasks for k in t.data} - _DROPPED_COLUMNS)
    clash = _CALL_KEYS.intersection(columns)
    if clash:
        raise RewardFunctionError(
            f"dataset column(s) {sorted(clash)} clash with the reward-function keywords of the same name; rename them"
        )
    kwargs: dict[str, Any] = {
        "prompts": [t.prompt for t in tasks],
        "completions": [completion_text(c, not isinstance(t.prompt, str)) for t, c in zip(tasks, completions)],
        "completion_ids": [list(i) for i in completion_ids],
        "trainer_state": trainer_state if trainer_state is not None else RunState(),
    }
    log = log if log is not None else RewardLog()
    kwargs["log_extra"], kwargs["log_metric"] = log.log_extra, log.log_metric
    kwargs.update({k: [t.data.get(k) for t in tasks] for k in columns})
    return kwargs


def weighted_rewards(
    funcs: Sequence[Callable], weights: Sequence[float], kwargs: dict[str, Any], tasks: Sequence[Task]
) -> Scores:
    """The weighted reward, feedback texts and each function's value, per row."""
    n = len(tasks)
    outputs = [call_checked(f, kwargs, tasks, "reward") for f in funcs]
    totals, notes, parts = [], [[] for _ in range(n)], [{} for _ in range(n)]
    for i in range(n):
        total, applicable = 0.0, 0
        for func, weight, out in zip(funcs, weights, outputs):
            value, note = _reward_value(out[i], func, i, tasks)
            if note is not None:
                notes[i].append(note)
            # Two functions of the same name share a key, as in TRL: the later one's value is kept.
            parts[i][reward_func_name(func)] = value
            if value is not None:
                total, applicable = total + weight * value, applicable + 1
        if not applicable:
            raise RewardFunctionError(
                f"{_row(i, tasks)}: every reward function returned None "
                f"({[_name(f) for f in funcs]}); at least one must score it"
            )
        if not abs(total) <= MAX_ABS_REWARD:  # large reward_weights can push a sum of bounded rewards out
            raise RewardFunctionError(
                f"{_row(i, tasks)}: the weighted sum of the rewards of "
                f"{[_name(f) for f in funcs]} is {total!r}, beyond ±{MAX_ABS_REWARD:g}; "
                "lower reward_weights or rescale the rewards"
            )
        totals.append(total)
    return Scores(totals, notes, parts)


def feedback_texts(func: Callable, kwargs: dict[str, Any], tasks: Sequence[Task]) -> list[str | None]:
    """One feedback string (or None: none for this row) per row, from one call of ``func``."""
    out = call_checked(func, kwargs, tasks, "feedback")
    for i, text in enumerate(out):
        if text is not None and not isinstance(text, str):
            raise RewardFunctionError(
                f"feedback function {_name(func)!r}: {_row(i, tasks)} is not a string "
                f"but {type(text).__name__} ({text!r:.60})"
            )
    return out


def call_checked(func: Callable, kwargs: dict[str, Any], tasks: Sequence[Task], kind: str) -> list[Any]:
    """Call ``func`` by keyword on the batch; check it returned one value per task."""
    n = len(tasks)
    try:
        out = func(**kwargs)
    except Exception as err:  # name the function, and the row if one row alone fails
        where = _failing_row(func, kwargs, tasks, type(err))
        hint = ""
        if isinstance(err, TypeError):
            hint = " (reward functions are called by keyword, as TRL does: def f(prompts, completions, **kwargs))"
        raise RewardFunctionError(
            f"{kind} function {_name(func)!r} raised {type(err).__name__}: {err} "
            f"on a batch of {n} completions{where}{hint}"
        ) from err
    if isinstance(out, (str, bytes, dict)) or not hasattr(out, "__len__") or not hasattr(out, "__getitem__"):
        raise RewardFunctionError(
            f"{kind} function {_name(func)!r} returned {type(out).__name__}, not a list "
            f"of {n} values (one per completion)"
        )
    if len(out) != n:
        raise RewardFunctionError(f"{kind} function {_name(func)!r} returned {len(out)} values for {n} completions")
    return list(out)


def _failing_row(func: Callable, kwargs: dict[str, Any], tasks: Sequence[Task], kind: type) -> str:
    """The first row whose one-row call raises ``kind`` (unless all do)."""
    n = len(tasks)
    if n < 2:
        return f"; {_row(0, tasks)}" if n == 1 else ""
    failing = []
    for i in range(n):
        one = {k: (v if k in _UNSLICED_KEYS else v[i : i + 1]) for k, v in kwargs.items()}
        try:
            func(**one)
        except kind:
            failing.append(i)
        except Exception:
            continue
    if not failing or len(failing) == n:
        return ""
    return f"; {_row(failing[0], tasks)} raises it when called alone"


def _reward_value(value: Any, func: Callable, i: int, tasks: Sequence[Task]) -> tuple[float | None, str | None]:
    """(finite float or None, feedback text or None) of one reward output."""
    note = None
    if isinstance(value, tuple):
        if len(value) != 2 or not isinstance(value[1], str):
            raise RewardFunctionError(
                f"reward function {_name(func)!r}: {_row(i, tasks)} is a tuple {value!r:.60}; "
                "a tuple must be (score, feedback) with a string feedback"
            )
        value, note = value
    if value is None:
        return None, note
    number = None if isinstance(value, (str, bytes)) else float_or_none(value)
    if number is None:
        raise RewardFunctionError(
            f"reward function {_name(func)!r}: {_row(i, tasks)} is {type(value).__name__} {value!r:.60}, not a number"
        )
    if not math.isfinite(number):
        raise RewardFunctionError(
            f"reward function {_name(func)!r}: {_row(i, tasks)} is {number}; "
            "rewards must be finite (return None for 'not applicable')"
        )
    if abs(number) > MAX_ABS_REWARD:
        raise RewardFunctionError(
            f"reward function {_name(func)!r}: {_row(i, tasks)} is {number!r}, beyond "
            f"±{MAX_ABS_REWARD:g}: advantages and the loss would overflow; rescale it"
        )
    return number, note


def _json_value(value: Any, column: str, i: int, tasks: Sequence[Task]) -> Any:
    """``value`` as JSON can hold it (a numpy/torch scalar as its Python value), refused here if not."""
    candidates = [value]
    if callable(getattr(value, "item", None)):
        with contextlib.suppress(TypeError, ValueError, RuntimeError):  # e.g. a tensor of several values
            candidates.append(value.item())
    for candidate in candidates:
        with contextlib.suppress(TypeError, ValueError):
            json.dumps(candidate, allow_nan=False)
            return candidate
    raise RewardFunctionError(
        f"log_extra column {column!r}: {_row(i, tasks)} is {type(value).__name__} "
        f"{value!r:.60}, which cannot be written to the history as JSON"
    )


def reward_func_name(func: Any) -> str:
    """TRL's display name of a reward function: a ``functools.partial``'s function, an object's class."""
    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__name__", None) or type(func).__name__


_name = reward_func_name


def _row(i: int, tasks: Sequence[Task]) -> str:
    return f"row {i} (task {tasks[i].task_id!r})"
