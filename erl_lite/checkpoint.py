"""Checkpoints: everything needed to continue a run exactly where it stopped, loaded safely.

A checkpoint folder ``<output_dir>/checkpoint-<step>/`` has Hugging Face's layout, so the
tools of that ecosystem read it as they read a ``transformers.Trainer`` checkpoint:

* ``adapter_model.safetensors`` + ``adapter_config.json`` (a LoRA run) — written by PEFT's
  ``save_pretrained``: ``PeftModel.from_pretrained(base, "checkpoint-N")`` and
  ``AutoPeftModelForCausalLM.from_pretrained("checkpoint-N")`` load it, and resume reads it
  through PEFT (``load_peft_weights`` / ``set_peft_model_state_dict``), checked first. A run
  without LoRA writes ``trainable.safetensors`` instead: every trainable tensor by parameter name;
* the tokenizer's files (``AutoTokenizer.from_pretrained("checkpoint-N")``) and ``erl_lite.json``
  (the base model and whether it was 4-bit, which :mod:`erl_lite.integrations.export` needs and PEFT does not record);
* ``trainer_state.json`` — ``transformers.TrainerState`` (``global_step``, ``max_steps``,
  ``log_history`` = the history's records, ...), written and read by its ``save_to_json`` /
  ``load_from_json``;
* ``optimizer.pt`` / ``scheduler.pt`` — their state dicts (tensors, numbers, strings, containers);

and erl_lite's own state, in files of its own:

* ``erl_state.json`` — the layout's ``format``, the step, the files written, the config and the
  model's and tokenizer's identity (:mod:`erl_lite.identity`), which resume compares with the run
  that resumes, and the environment record;
* ``rng.json`` — Python, NumPy, torch (and CUDA) random states as plain integer lists;
* ``memory.json`` — the reflection memory (the peer package forgot it);
* ``history.jsonl`` / ``samples.jsonl`` — the run's records up to this step.

Older layouts: format 2 (the adapter in ``adapter/``, every trainable tensor in
``trainable.safetensors``, erl_lite's own schema in ``trainer_state.json``) is migrated on load:
it resumes, and the checkpoints written after it have this layout. Format 1 (a pickled
``rng.pt``) is refused.

Safety: checkpoints are shared between people, so nothing is unpickled. ``.pt`` files are read
with ``torch.load(weights_only=True)`` (an allowlist of tensors and plain containers; a file
holding anything else is refused and the error names it), the random states are JSON, weights
are safetensors.

Trust: a checkpoint whose trainable weights hold NaN or inf is never written (a run that
diverged keeps its last good checkpoint), and one found on disk is never resumed from; weights
are restored by name, and a file with a tensor missing, extra or of another shape is refused,
naming the tensor; a ``memory.json`` with entries of the wrong type is refused, naming the field.

One run per folder: :func:`previous_run` finds another run's files in an ``output_dir``, which a
fresh run refuses to write over unless told to (:func:`remove_previous_run`).

Atomicity: a checkpoint is written to a hidden temporary folder and renamed into place, and
an existing folder of the same step is only removed once its replacement is complete, so a
crash or a full disk never leaves a half checkpoint and never harms an earlier one.

Departures from the paper: none.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import random
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from erl_lite.history import History
from erl_lite.identity import RESUMABLE_FIELDS, run_differences, run_identity  # noqa: F401 - re-exported
from erl_lite.jsonio import read_json, read_jsonl
from erl_lite.layout import (  # noqa: F401 - re-exported
    ADAPTER_WEIGHTS, ERL_STATE, HF_STATE, TRAINABLE_WEIGHTS, adapter_folder, write_adapter)
from erl_lite.core.losses import first_non_finite
from erl_lite.core.memory import ReflectionMemory, check_memory_state

# 1: the first layout, with a pickled rng.pt (never loaded: it could run code); 2: the adapter in
# adapter/, erl_lite's own schema in trainer_state.json (migrated on load); 3: Hugging Face's layout.
FORMAT = 3
_PATTERN = re.compile(r"^checkpoint-(\d+)$")

class CheckpointError(RuntimeError):
    """A checkpoint could not be read, trusted or written; the message names the file."""


@dataclass
class TrainingState:
    """The state of a run between two steps: read from a checkpoint, or copied from a live
    trainer (on the CPU) so that an interrupted step can be undone."""

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
    weights: str = TRAINABLE_WEIGHTS
    """How ``trainable`` is keyed: by parameter name (``trainable.safetensors``, and live copies),
    or by PEFT's saved names (``adapter_model.safetensors``, loaded through PEFT)."""


# --- random states, as plain JSON -------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch (and, once initialised, CUDA) random states as JSON-able lists."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state = {"python": [version, list(internal), gauss],
             "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
             "torch": torch.get_rng_state().tolist()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`rng_state` (CUDA states only when the device count matches)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in cuda])


def _checked_rng(path: str) -> dict[str, Any]:
    """Read rng.json and prove each state is accepted, on throwaway generators."""
    state = read_json(path)
    version, internal, gauss = state["python"]
    random.Random().setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.RandomState().set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.Generator().set_state(torch.tensor(state["torch"], dtype=torch.uint8))
    return state


# --- writing ----------------------------------------------------------------------------------
def ensure_writable(out_dir: str) -> None:
    """Create ``out_dir`` if needed and prove a file can be written there, or fail naming it."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=out_dir)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise CheckpointError(f"output_dir {out_dir!r} is not a writable folder: {e}") from e


def save_checkpoint(out_dir: str, step: int, model: Any, optimizer: Any, scheduler: Any,
                    memory: ReflectionMemory, history: History, run: dict[str, Any],
                    save_total_limit: int | None = None, tokenizer: Any = None, hf_state: Any = None) -> str:
    """Write ``checkpoint-<step>`` atomically, then keep at most ``save_total_limit`` folders.

    ``run`` is :func:`run_identity`'s result; ``tokenizer`` is saved next to the weights when
    given; ``hf_state`` is the ``transformers.TrainerState`` to write (by default one with
    ``global_step=step`` and the history's records as ``log_history``). A failure (a full disk,
    say) raises :class:`CheckpointError` and leaves every existing checkpoint as it was.
    """
    final = os.path.join(out_dir, f"checkpoint-{step}")
    bad = first_non_finite((n, p) for n, p in model.named_parameters() if p.requires_grad)
    if bad is not None:  # before anything is written or rotated: the last good checkpoint stays
        raise CheckpointError(f"refusing to write {final}: the trainable tensor {bad!r} holds NaN or inf at "
                              f"step {step}; the checkpoints already in {out_dir} are untouched")
    if hf_state is None:
        from transformers import TrainerState

        hf_state = TrainerState(global_step=step, log_history=list(history.records))
    tmp = None
    try:
        os.makedirs(out_dir, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".checkpoint-{step}-", dir=out_dir)
        _write_files(tmp, step, model, tokenizer, optimizer, scheduler, memory, history, run, hf_state)
        _move_into_place(tmp, final)
    except Exception as e:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"could not write {final}: {e}; the checkpoints already in "
                              f"{out_dir} are untouched") from e
    except BaseException:  # Ctrl-C mid-write: drop the partial folder, keep the interrupt
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if save_total_limit is not None:
        _rotate(out_dir, save_total_limit, keep=final)
    return final


def save_weights(folder: str, model: Any, tokenizer: Any = None) -> str:
    """The model's part of a checkpoint (also ``ERLTrainer.save_model``'s): a LoRA policy's adapter
    in PEFT's format with the ``erl_lite.json`` note (:func:`erl_lite.layout.write_adapter`), or,
    without LoRA, ``trainable.safetensors``; the tokenizer next to it. Returns the weights' file name.

    Why a run without LoRA keeps ``trainable.safetensors`` rather than ``save_pretrained``'s
    ``model.safetensors``: that file holds the frozen weights too (all of a 4-bit base, re-saved
    every checkpoint) and drops tied duplicates under the name transformers picks, while resume
    restores exactly the trainable tensors by parameter name. ``ERLTrainer.save_model`` writes the
    full model with ``save_pretrained`` for users.
    """
    if hasattr(model, "peft_config"):
        write_adapter(model, tokenizer, folder)
        return ADAPTER_WEIGHTS
    tensors = {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}
    save_file(tensors, os.path.join(folder, TRAINABLE_WEIGHTS))
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return TRAINABLE_WEIGHTS


def _write_files(folder: str, step: int, model: Any, tokenizer: Any, optimizer: Any, scheduler: Any,
                 memory: ReflectionMemory, history: History, run: dict[str, Any], hf_state: Any) -> None:
    weights = save_weights(folder, model, tokenizer)
    files = [weights, "optimizer.pt", "rng.json", "memory.json", "history.jsonl", "samples.jsonl", HF_STATE]
    torch.save(optimizer.state_dict(), os.path.join(folder, "optimizer.pt"))
    if scheduler is not None:
        torch.save(scheduler.state_dict(), os.path.join(folder, "scheduler.pt"))
        files.append("scheduler.pt")
    _write_json(os.path.join(folder, "rng.json"), rng_state())
    _write_json(os.path.join(folder, "memory.json"), memory.state_dict())
    History(records=list(history.records), samples=list(history.samples), out_dir=folder).rewrite()
    hf_state.save_to_json(os.path.join(folder, HF_STATE))
    _write_json(os.path.join(folder, ERL_STATE),
                {"format": FORMAT, "step": step, "weights": weights, "files": sorted(files), **run})


def _move_into_place(tmp: str, final: str) -> None:
    """Rename ``tmp`` to ``final``; an existing ``final`` is set aside first and removed last."""
    old = None
    if os.path.exists(final):
        old = tmp + ".old"
        os.replace(final, old)
    try:
        os.replace(tmp, final)
    except BaseException:
        if old:
            os.replace(old, final)
        raise
    if old:
        shutil.rmtree(old, ignore_errors=True)


def _rotate(out_dir: str, limit: int, keep: str) -> None:
    """Delete the lowest-numbered checkpoints until ``limit`` remain, never ``keep`` (the one
    just written) nor the highest-numbered one. transformers' ``rotate_checkpoints`` protects
    only the latter, which may be a stale folder left by an abandoned longer run."""
    found = list_checkpoints(out_dir)  # newest first
    protected = {os.path.abspath(keep), os.path.abspath(found[0])} if found else set()
    excess = len(found) - max(limit, len(protected))
    for path in reversed(found):
        if excess <= 0:
            break
        if os.path.abspath(path) not in protected:
            shutil.rmtree(path, ignore_errors=True)
            excess -= 1


# --- reading ----------------------------------------------------------------------------------
def list_checkpoints(out_dir: str) -> list[str]:
    """The ``checkpoint-<step>`` folders in ``out_dir``, highest step first."""
    if not os.path.isdir(out_dir):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(out_dir)
             if (m := _PATTERN.match(name)) and os.path.isdir(os.path.join(out_dir, name))]
    return [os.path.join(out_dir, name) for _, name in sorted(found, reverse=True)]


def run_record(path: str) -> dict[str, Any]:
    """erl_lite's record of the run a checkpoint folder belongs to (``format``, ``step``, ``files``,
    ``config``, ``model``, ``env``...): ``erl_state.json``, or a format-2 checkpoint's
    ``trainer_state.json``. Raises :class:`CheckpointError` naming the file."""
    name = ERL_STATE
    if not os.path.isfile(os.path.join(path, ERL_STATE)) and os.path.isfile(os.path.join(path, HF_STATE)):
        old = _read(path, HF_STATE, read_json)
        if not (isinstance(old, dict) and "global_step" in old):  # format 2 kept its record there
            name = HF_STATE
    meta = _read(path, name, read_json)
    if not (isinstance(meta, dict) and isinstance(meta.get("step"), int) and isinstance(meta.get("config"), dict)):
        old = " (a format-2 checkpoint's erl_lite record)" if name == HF_STATE else ""
        raise CheckpointError(f"{os.path.join(path, name)} is not an erl_lite run record{old}: it needs "
                              "'step' and 'config'")
    if meta.get("format", 2) not in (2, FORMAT):
        raise CheckpointError(f"{os.path.join(path, name)} has format {meta.get('format')!r}; this erl_lite "
                              f"reads formats 2 and {FORMAT}")
    return meta


def read_checkpoint(path: str) -> TrainingState:
    """Read and check every file of a checkpoint folder (format 3, or 2 migrated); changes nothing.

    Raises :class:`CheckpointError` naming the file when one is missing, truncated, not what
    it should be, or holds objects other than tensors and plain containers.
    """
    if not os.path.isdir(path):
        raise CheckpointError(f"no checkpoint folder at {path}")
    meta = run_record(path)
    files = meta.get("files") or []
    if meta.get("format", 2) == FORMAT:  # format 2 has no TrainerState; its step is in the record
        hf = _read(path, HF_STATE, _read_trainer_state)
        if hf.global_step != meta["step"]:
            raise CheckpointError(f"{os.path.join(path, HF_STATE)} says global_step {hf.global_step} but "
                                  f"{os.path.join(path, ERL_STATE)} says step {meta['step']}: the folder mixes "
                                  "two checkpoints")
    weights = meta.get("weights", TRAINABLE_WEIGHTS)
    if weights not in (ADAPTER_WEIGHTS, TRAINABLE_WEIGHTS):
        raise CheckpointError(f"{os.path.join(path, ERL_STATE)}: 'weights' must be {ADAPTER_WEIGHTS!r} or "
                              f"{TRAINABLE_WEIGHTS!r}, got {weights!r}")
    optimizer = _read(path, "optimizer.pt", _read_torch)
    if not (isinstance(optimizer, dict) and {"state", "param_groups"} <= set(optimizer)):
        raise CheckpointError(f"{os.path.join(path, 'optimizer.pt')} is not an optimizer state dict")
    trainable = _read(path, weights, _read_adapter if weights == ADAPTER_WEIGHTS else load_file)
    bad = first_non_finite(trainable.items())
    if bad is not None:
        raise CheckpointError(f"{os.path.join(path, weights)} holds NaN or inf in the tensor "
                              f"{bad!r}: a diverged state is never resumed from")
    return TrainingState(
        step=meta["step"],
        trainable=trainable,
        optimizer=optimizer,
        scheduler=_read(path, "scheduler.pt", _read_torch) if "scheduler.pt" in files else None,
        rng=_read(path, "rng.json", _checked_rng),
        memory=_read(path, "memory.json", _read_memory),
        records=_read(path, "history.jsonl", _read_jsonl),
        samples=_read(path, "samples.jsonl", _read_jsonl),
        run={"config": meta["config"], "model": meta.get("model", {}),
             **({"tokenizer": meta["tokenizer"]} if "tokenizer" in meta else {})},
        path=path,
        weights=weights,
    )


def previous_run(out_dir: str) -> list[str]:
    """What of another run ``out_dir`` holds: its ``checkpoint-<step>`` folders (newest first)
    and ``history.jsonl`` when it has a record; empty when a fresh run may start there.

    Example:
        >>> import tempfile
        >>> previous_run(tempfile.mkdtemp())
        []
    """
    found = [os.path.basename(p) for p in list_checkpoints(out_dir)]
    history = os.path.join(out_dir, "history.jsonl")
    if os.path.isfile(history):
        with open(history, encoding="utf-8", errors="replace") as f:
            records = sum(1 for line in f if line.strip())
        if records:
            found.append(f"history.jsonl with {records} record{'s' * (records != 1)}")
    return found


def remove_previous_run(out_dir: str) -> None:
    """Delete a previous run's own files from ``out_dir`` (``overwrite_output_dir``): its
    checkpoint folders (finished or half-written), ``history.jsonl`` and ``samples.jsonl``.
    Every other file (figures, reports, tracker logs, a user's notes) stays."""
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if os.path.isdir(path) and (_PATTERN.match(name) or name.startswith(".checkpoint-")):
            shutil.rmtree(path)
        elif name in ("history.jsonl", "samples.jsonl") and os.path.isfile(path):
            os.remove(path)


def latest_good_checkpoint(out_dir: str) -> TrainingState:
    """The highest-step checkpoint in ``out_dir`` that reads cleanly; each one skipped on the
    way is named in a warning. Raises :class:`CheckpointError` naming the folder when none does."""
    skipped = []
    for path in list_checkpoints(out_dir):
        try:
            return read_checkpoint(path)
        except CheckpointError as e:
            warnings.warn(f"skipping {path}: {e}", stacklevel=3)
            skipped.append(f"  {os.path.basename(path)}: {e}")
    if not skipped:
        raise CheckpointError(f"nothing to resume: no checkpoint-<step> folder in {out_dir}")
    raise CheckpointError(f"nothing to resume in {out_dir}: every checkpoint is damaged:\n" + "\n".join(skipped))


def apply_state(state: TrainingState, model: Any, optimizer: Any, scheduler: Any,
                memory: ReflectionMemory) -> None:
    """Load ``state`` into the live objects (the caller sets the step and the history).

    Everything that can be checked is checked before the weights are touched: the tensors must
    be exactly the model's trainable ones (for an adapter: the ones PEFT saves for it), by name
    and shape.
    """
    where = os.path.join(state.path or "the saved state", state.weights)
    through_peft = state.weights == ADAPTER_WEIGHTS
    if through_peft:
        from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

        if not hasattr(model, "peft_config"):
            raise CheckpointError(f"{where} is a LoRA adapter, and this run's model has no adapter (it trains "
                                  "without LoRA); load the model with LoRA as the checkpoint's run did")
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
    problems = ([f"not in this model: {unknown[:3]}"] if unknown else []) + (
        [f"missing from the file: {absent[:3]}"] if absent else []) + (
        ["other shape: " + ", ".join(f"{n} is {tuple(found[n].shape)} in the file, {tuple(expected[n])} in the "
                                      "model" for n in reshaped[:3])] if reshaped else [])
    if problems:
        raise CheckpointError(f"{where} does not fit this model's trainable parameters ("
                              + "; ".join(problems) + ")")


def capture_state(step: int, model: Any, optimizer: Any, scheduler: Any, memory: ReflectionMemory,
                  history: History) -> TrainingState:
    """A CPU copy of the live state (trainable tensors and optimizer moments included), to
    roll back a step that was cut short. Costs about three copies of the trainable weights."""
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


# --- helpers ----------------------------------------------------------------------------------
def _read_adapter(path: str) -> dict[str, torch.Tensor]:
    """An adapter's tensors, read by PEFT (under the names it saves them with)."""
    from peft.utils import load_peft_weights

    return load_peft_weights(os.path.dirname(path), device="cpu")


def _read_trainer_state(path: str) -> Any:
    from transformers import TrainerState

    state = TrainerState.load_from_json(path)
    if not isinstance(state.global_step, int):
        raise ValueError(f"global_step must be an integer, got {state.global_step!r}")
    return state


def _read_memory(path: str) -> Any:
    """memory.json, refused (naming the field) when its entries are not what a memory holds."""
    state = read_json(path)
    check_memory_state(state)
    return state


def _read(folder: str, name: str, reader: Callable[[str], Any]) -> Any:
    """``reader(folder/name)``; any failure becomes a CheckpointError naming the file."""
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        hint = (" (this checkpoint has the older layout with a pickled rng.pt, which is never "
                "loaded because it could run code)") if name == "rng.json" and os.path.exists(
                os.path.join(folder, "rng.pt")) else ""
        raise CheckpointError(f"{path} is missing{hint}")
    try:
        return reader(path)
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{path} is damaged or not what it should be: {_short(e)}") from e


def _apply(where: str, name: str, load: Callable[[Any], None], value: Any) -> None:
    try:
        load(value)
    except Exception as e:
        raise CheckpointError(f"{os.path.join(where, name)} does not fit this run: {_short(e)}") from e


def _read_torch(path: str) -> Any:
    """``torch.load`` restricted to tensors and plain containers: a planted object is refused."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's message advises weights_only=False; keep only the line naming what was found.
        found = [ln.strip() for ln in str(e).splitlines() if "global" in ln.lower()] or ["refused"]
        raise CheckpointError(f"{path} was refused: it holds objects other than tensors and plain "
                              f"containers, and loading them could run code ({found[0]})") from e


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    # written whole before the checkpoint folder is moved into place: a torn line is damage
    return read_jsonl(path, torn_tail="error")


def _write_json(path: str, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)


def _cpu_copy(obj: Any) -> Any:
    """A deep copy of a state dict with every tensor cloned onto the CPU."""
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
