"""A run's state between two steps, in memory: a copy of the live trainer (to undo a step cut short),
the random states as plain lists, and loading a state back, checked before anything is touched."""

from __future__ import annotations

import copy
import os
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from erl_lite.core.memory import ReflectionMemory
from erl_lite.history import History
from erl_lite.run.layout import ADAPTER_WEIGHTS, TRAINABLE_WEIGHTS


class CheckpointError(RuntimeError):
    """A checkpoint could not be read, trusted or written; the message names the file."""


class ResumeRefused(CheckpointError, ValueError):
    """A checkpoint this run's settings cannot continue (a ValueError: a setting is wrong; one message, no steps)."""


@dataclass
class TrainingState:
    """The state of a run between two steps: read from a checkpoint, or a CPU copy of a live trainer."""

    step: int
    trainable: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any] | None
    rng: dict[str, Any]
    memory: dict[str, Any]
    records: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    run: dict[str, Any] = field(default_factory=dict)  # {"config": ..., "model": ...}
    path: str | None = None  # the checkpoint folder it was read from
    weights: str = TRAINABLE_WEIGHTS  # keys of ``trainable``: parameter names, or PEFT's (ADAPTER_WEIGHTS)


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch (and, once initialised, CUDA) random states as JSON-able lists."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any], check_only: bool = False) -> None:
    """Inverse of :func:`rng_state`; ``check_only`` proves each state loads, on throwaway generators."""
    fresh = (random.Random(), np.random.RandomState(), torch.Generator())
    py, npr, gen = fresh if check_only else (random, np.random, torch.default_generator)
    version, internal, gauss = state["python"]
    py.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    npr.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    gen.set_state(torch.tensor(state["torch"], dtype=torch.uint8))
    cuda = state.get("cuda")
    if not check_only and cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in cuda])


def capture_state(
    step: int, model: Any, optimizer: Any, scheduler: Any, memory: ReflectionMemory, history: History
) -> TrainingState:
    """A CPU copy of the live state, to roll back a step cut short (about 3x the trainable weights)."""
    return TrainingState(
        step=step,
        trainable={n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad},
        optimizer=_cpu_copy(optimizer.state_dict()),
        scheduler=_cpu_copy(scheduler.state_dict()) if scheduler is not None else None,
        rng=rng_state(),
        memory=copy.deepcopy(memory.state_dict()),
        records=list(history.records),
        samples=list(history.samples),
    )


def apply_state(state: TrainingState, model: Any, optimizer: Any, scheduler: Any, memory: ReflectionMemory) -> None:
    """Load ``state`` (exactly the trainable tensors, by name and shape) into the live objects, bar step and history."""
    where = os.path.join(state.path or "the saved state", state.weights)
    through_peft = state.weights == ADAPTER_WEIGHTS
    if through_peft:
        from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

        if not hasattr(model, "peft_config"):
            raise CheckpointError(
                f"{where} is a LoRA adapter, and this run's model has no adapter (it trains "
                "without LoRA); load the model with LoRA as the checkpoint's run did"
            )
        expected = {n: t.shape for n, t in get_peft_model_state_dict(model).items()}
    else:
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        expected = {n: p.shape for n, p in params.items()}
    _check_tensors(where, state.trainable, expected)
    if scheduler is not None and state.scheduler is None:
        raise CheckpointError(f"{os.path.join(state.path or 'the saved state', 'scheduler.pt')} is missing")
    folder = state.path or "the saved state"
    _apply(folder, "optimizer.pt", optimizer.load_state_dict, state.optimizer)
    if scheduler is not None:
        _apply(folder, "scheduler.pt", scheduler.load_state_dict, state.scheduler)
    _apply(folder, "memory.json", memory.load_state_dict, state.memory)
    if through_peft:
        result = set_peft_model_state_dict(model, state.trainable)
        if result.unexpected_keys:  # cannot happen after the check above; never a silent partial load
            raise CheckpointError(f"{where}: PEFT did not place {sorted(result.unexpected_keys)[:3]}")
    else:
        with torch.no_grad():
            for name, value in state.trainable.items():
                params[name].copy_(value.to(params[name].device))
    set_rng_state(state.rng)


def _check_tensors(where: str, found: dict[str, torch.Tensor], expected: dict[str, Any]) -> None:
    """Refuse ``found`` unless it has exactly the ``expected`` names and shapes, naming the tensors."""
    unknown = sorted(set(found) - set(expected))
    absent = sorted(set(expected) - set(found))
    reshaped = sorted(n for n in set(found) & set(expected) if tuple(found[n].shape) != tuple(expected[n]))
    problems = []
    if unknown:
        problems.append(f"not in this model: {unknown[:3]}")
    if absent:
        problems.append(f"missing from the file: {absent[:3]}")
    if reshaped:
        shapes = (
            f"{n} is {tuple(found[n].shape)} in the file, {tuple(expected[n])} in the model" for n in reshaped[:3]
        )
        problems.append("other shape: " + ", ".join(shapes))
    if problems:
        raise CheckpointError(f"{where} does not fit this model's trainable parameters (" + "; ".join(problems) + ")")


def _apply(where: str, name: str, load: Callable[[Any], None], value: Any) -> None:
    try:
        load(value)
    except Exception as e:
        raise CheckpointError(f"{os.path.join(where, name)} does not fit this run: {_short(e)}") from e


def _cpu_copy(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu_copy(v) for v in obj)
    return copy.deepcopy(obj)


def _short(e: BaseException) -> str:
    """The first line of an exception, with its type (library messages can run long)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
