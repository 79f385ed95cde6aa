"""Checkpoints on disk: everything needed to continue a run exactly where it stopped, loaded safely.

``checkpoint-<step>/`` has Hugging Face's layout (PEFT's adapter or ``trainable.safetensors``, the tokenizer,
``trainer_state.json``, ``optimizer.pt`` / ``scheduler.pt``) plus erl_lite's ``erl_state.json``, ``rng.json``,
``memory.json``, ``history.jsonl`` / ``samples.jsonl`` and, written last, ``manifest.json`` (each file's size and
sha256, the step, the record counts). Files are synced before the folder is renamed into place; nothing is
unpickled; NaN/inf weights are never written nor resumed from. :func:`find_run` picks a run folder's checkpoint."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
import shutil
import tempfile
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from safetensors.torch import load_file, save_file

from erl_lite.core.losses import first_non_finite
from erl_lite.core.memory import ReflectionMemory, check_memory_state
from erl_lite.history import History
from erl_lite.jsonio import read_json, read_jsonl
from erl_lite.metric_names import current_names
from erl_lite.run.layout import (
    ADAPTER_WEIGHTS,
    ERL_STATE,
    HF_STATE,
    MANIFEST,
    TRAINABLE_WEIGHTS,
    holds_run_record,
    write_adapter,
    write_json,
)
from erl_lite.run.state import CheckpointError, TrainingState, _short, rng_state, set_rng_state

# Hugging Face's layout with manifest.json. Formats 1-3 were written by development versions before the first
# release, which had no users to carry over: they are refused, as a newer one is.
FORMAT = 4
_PATTERN = re.compile(r"^checkpoint-(\d+)$")
#: What a run writes at its folder's root: history, save_model's final model, tokenizer, args and card, a demo's report.
_ROOT_FILES = re.compile(
    r"^((history|samples)\.jsonl(\.tmp)?|training_args\.json|(README|report)\.md|erl_lite\.json|"
    r"adapter_(config\.json|model\.safetensors)|(trainable|model(-\d+-of-\d+)?)\.safetensors"
    r"(\.index\.json)?|(generation_)?config\.json|tokenizer(_config\.json|\.json|\.model)|"
    r"(special_tokens_map|added_tokens)\.json|chat_template\.(jinja|json)|(vocab|merges)\.\w+)$"
)
FIGURES = re.compile(r"^(rewards|gate_rate|memory|losses|eval|overview)\.png$")  # the demo's, with its report
RUN_NAMES = (_PATTERN, _ROOT_FILES, FIGURES)  # every name a run writes in its folder
# The checkpoint a run wrote last: the lineage to resume when a resume from an earlier step left higher ones behind.
LAST_WRITTEN = ".erl_lite.last_checkpoint.json"


def ensure_writable(out_dir: str) -> None:
    """Create ``out_dir`` if needed and prove a file can be written there, or fail naming it."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=out_dir)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise CheckpointError(f"output_dir {out_dir!r} is not a writable folder: {e}") from e


def save_checkpoint(
    out_dir: str,
    step: int,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    memory: ReflectionMemory,
    history: History,
    run: dict[str, Any],
    hf_state: Any,
    save_total_limit: int | None = None,
    tokenizer: Any = None,
) -> str:
    """Write ``checkpoint-<step>`` atomically, then rotate; a failure raises CheckpointError, changing nothing."""
    final = os.path.join(out_dir, f"checkpoint-{step}")
    bad = first_non_finite((n, p) for n, p in model.named_parameters() if p.requires_grad)
    if bad is not None:  # before anything is written or rotated: the last good checkpoint stays
        raise CheckpointError(
            f"refusing to write {final}: the trainable tensor {bad!r} holds NaN or inf at "
            f"step {step}; the checkpoints already in {out_dir} are untouched"
        )
    tmp = None
    try:
        os.makedirs(out_dir, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".checkpoint-{step}-", dir=out_dir)
        weights = save_weights(tmp, model, tokenizer)
        files = [weights, "optimizer.pt", "rng.json", "memory.json", "history.jsonl", "samples.jsonl", HF_STATE]
        torch.save(optimizer.state_dict(), os.path.join(tmp, "optimizer.pt"))
        if scheduler is not None:
            torch.save(scheduler.state_dict(), os.path.join(tmp, "scheduler.pt"))
            files.append("scheduler.pt")
        write_json(os.path.join(tmp, "rng.json"), rng_state())
        write_json(os.path.join(tmp, "memory.json"), memory.state_dict())
        History(records=list(history.records), samples=list(history.samples), out_dir=tmp).rewrite()
        hf_state.save_to_json(os.path.join(tmp, HF_STATE))
        write_json(
            os.path.join(tmp, ERL_STATE),
            {"format": FORMAT, "step": step, "weights": weights, "files": sorted(files), **run},
        )
        # Last, once every file is on disk: a folder without it was never finished.
        digests = {
            name: _digest(os.path.join(tmp, name), sync=True)
            for name in sorted(os.listdir(tmp))
            if os.path.isfile(os.path.join(tmp, name))
        }
        write_json(
            os.path.join(tmp, MANIFEST),
            {
                "step": step,
                "files": digests,
                "records": {"history.jsonl": len(history.records), "samples.jsonl": len(history.samples)},
            },
        )
        for name in (MANIFEST, "."):
            _sync(os.path.join(tmp, name))
        _move_into_place(tmp, final)
        _sync(out_dir)  # the rename itself
        mark_last_written(out_dir, step)
    except BaseException as e:  # Ctrl-C mid-write too: drop the partial folder, keep the interrupt
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(e, Exception):
            raise
        raise CheckpointError(
            f"could not write {final}: {e}; the checkpoints already in {out_dir} are untouched"
        ) from e
    if save_total_limit is not None:
        _rotate(out_dir, save_total_limit, keep=final)
    return final


def save_weights(folder: str, model: Any, tokenizer: Any = None) -> str:
    """Write a LoRA adapter, else ``trainable.safetensors`` (not ``save_pretrained``, which keeps frozen
    weights and drops tied ones), and the tokenizer; returns the weights' file name."""
    if hasattr(model, "peft_config"):
        write_adapter(model, tokenizer, folder)
        return ADAPTER_WEIGHTS
    tensors = {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}
    save_file(tensors, os.path.join(folder, TRAINABLE_WEIGHTS))
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return TRAINABLE_WEIGHTS


def _digest(path: str, sync: bool = False) -> dict[str, Any]:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
        if sync:
            os.fsync(f.fileno())
    return {"size": os.path.getsize(path), "sha256": h.hexdigest()}


def _sync(path: str) -> None:
    """fsync a file or a folder (a rename is in its folder's entries); where a folder cannot be synced, nothing."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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
    """Delete the oldest checkpoints down to ``limit``, never ``keep`` (transformers' would) nor the highest."""
    # Only folders whose name agrees with the step inside them: a renamed or copied one would misorder the run,
    # and it is not a name this run wrote, so it is neither counted nor deleted.
    found = [p for p in list_checkpoints(out_dir) if named_for_its_step(p)]  # newest first
    protected = {os.path.abspath(keep), os.path.abspath(found[0])} if found else set()
    excess = len(found) - max(limit, len(protected))
    oldest_first = [p for p in reversed(found) if os.path.abspath(p) not in protected]
    for path in oldest_first[: max(excess, 0)]:
        # Out of the checkpoint names first, in one rename: a command reading the run meanwhile (erl-lite eval)
        # finds the folder whole or gone, never half-deleted, and looks again (find_run). A crash before the
        # rmtree leaves a .checkpoint-* folder, which the next run's clean-up removes.
        doomed = os.path.join(out_dir, f".{os.path.basename(path)}-rotated-{uuid.uuid4().hex[:8]}")
        with contextlib.suppress(OSError):  # not renamed: kept, and rotated at the next save
            os.rename(path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)


def list_checkpoints(out_dir: str) -> list[str]:
    """The ``checkpoint-<step>`` folders in ``out_dir``, highest step first."""
    if not os.path.isdir(out_dir):
        return []
    found = [
        (int(m.group(1)), name)
        for name in os.listdir(out_dir)
        if (m := _PATTERN.match(name)) and os.path.isdir(os.path.join(out_dir, name))
    ]
    return [os.path.join(out_dir, name) for _, name in sorted(found, reverse=True)]


def named_for_its_step(path: str) -> bool:
    """Whether a ``checkpoint-<step>`` folder holds that step by its record (one that cannot be read is not held
    against its name: reading the checkpoint reports that damage)."""
    try:
        return run_record(path)["step"] == int(_PATTERN.match(os.path.basename(path)).group(1))
    except CheckpointError:
        return True


def run_record(path: str) -> dict[str, Any]:
    """erl_lite's record of a checkpoint's run (``erl_state.json``)."""
    where = os.path.join(path, ERL_STATE)
    meta = _read(path, ERL_STATE, read_json)
    if not (isinstance(meta, dict) and isinstance(meta.get("step"), int) and isinstance(meta.get("config"), dict)):
        raise CheckpointError(f"{where} is not an erl_lite run record: it needs 'step' and 'config'")
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{where} has format {meta.get('format')!r}; this erl_lite reads format {FORMAT} alone")
    return meta


def read_checkpoint(path: str) -> TrainingState:
    """Read and check every file of a checkpoint folder; :class:`CheckpointError` names a bad one."""
    if not os.path.isdir(path):
        raise CheckpointError(f"no checkpoint folder at {path}")
    meta = run_record(path)
    named = _PATTERN.match(os.path.basename(os.path.normpath(path)))
    if named and int(named.group(1)) != meta["step"]:  # renamed or copied: its name would misplace it in the run
        raise CheckpointError(
            f"{path} is named for step {named.group(1)} but holds step {meta['step']} (by the "
            "records inside it): a checkpoint is known by its content, not by its name"
        )
    counts = _check_manifest(path, meta)
    files = meta.get("files") or []
    hf = _read(path, HF_STATE, _read_trainer_state)
    if hf.global_step != meta["step"]:
        raise CheckpointError(
            f"{os.path.join(path, HF_STATE)} says global_step {hf.global_step} but "
            f"{os.path.join(path, ERL_STATE)} says step {meta['step']}: the folder mixes two checkpoints"
        )
    weights = meta.get("weights", TRAINABLE_WEIGHTS)
    if weights not in (ADAPTER_WEIGHTS, TRAINABLE_WEIGHTS):
        raise CheckpointError(
            f"{os.path.join(path, ERL_STATE)}: 'weights' must be {ADAPTER_WEIGHTS!r} or "
            f"{TRAINABLE_WEIGHTS!r}, got {weights!r}"
        )
    optimizer = _read(path, "optimizer.pt", _read_torch)
    if not (isinstance(optimizer, dict) and {"state", "param_groups"} <= set(optimizer)):
        raise CheckpointError(f"{os.path.join(path, 'optimizer.pt')} is not an optimizer state dict")
    trainable = _read(path, weights, load_file)  # an adapter too: peft.utils.load_peft_weights reads it with load_file
    bad = first_non_finite(trainable.items())
    if bad is not None:
        raise CheckpointError(
            f"{os.path.join(path, weights)} holds NaN or inf in the tensor "
            f"{bad!r}: a diverged state is never resumed from"
        )
    rows = {name: _read(path, name, _read_jsonl) for name in ("history.jsonl", "samples.jsonl")}
    if bad := [
        f"{name} holds {len(rows.get(name, ()))} records, not {n}"
        for name, n in counts.items()
        if len(rows.get(name, ())) != n
    ]:
        raise CheckpointError(f"{path}: {'; '.join(bad)} ({MANIFEST})")
    return TrainingState(
        step=meta["step"],
        trainable=trainable,
        optimizer=optimizer,
        scheduler=_read(path, "scheduler.pt", _read_torch) if "scheduler.pt" in files else None,
        rng=_read(path, "rng.json", read_json, lambda state: set_rng_state(state, check_only=True)),
        memory=_read(path, "memory.json", read_json, check_memory_state),
        records=rows["history.jsonl"],
        samples=rows["samples.jsonl"],
        path=path,
        weights=weights,
        run={k: meta[k] for k in ("config", "model", "tokenizer", "env") if k in meta},
    )


def _check_manifest(path: str, meta: dict[str, Any]) -> dict[str, int]:
    """Every file against ``manifest.json`` (size, then sha256); its record counts."""
    where = os.path.join(path, MANIFEST)
    manifest = _read(path, MANIFEST, read_json)
    files, counts = (manifest.get(k) if isinstance(manifest, dict) else None for k in ("files", "records"))
    if not (
        isinstance(files, dict)
        and all(isinstance(v, dict) for v in files.values())
        and isinstance(counts, dict)
        and manifest.get("step") == meta["step"]
    ):
        raise CheckpointError(
            f"{where} is not the manifest of step {meta['step']}: it needs 'step', 'files', 'records'"
        )
    # Every file of the folder is one the manifest checks: one it leaves out (emptied by hand) is unchecked. Hidden
    # ones (a file browser's .DS_Store) are no part of a checkpoint.
    unlisted = sorted(n for n in os.listdir(path) if n not in files and n != MANIFEST and not n.startswith("."))
    if unlisted:
        raise CheckpointError(f"{where} does not list {', '.join(unlisted)}: those files cannot be checked")
    for name, want in sorted(files.items()):
        file = os.path.join(path, name)
        size = os.path.getsize(file) if os.path.isfile(file) else None
        if size != want.get("size"):
            what = "missing" if size is None else f"{size} bytes, not {want.get('size')}"
        elif _digest(file) != want:
            what = "its sha256 differs"
        else:
            continue
        raise CheckpointError(f"{file} is not the file {MANIFEST} records ({what}): it was cut, changed or lost")
    return counts


def previous_run(out_dir: str, names: set[str]) -> list[str]:
    """Another run's files among ``names`` (what erl_lite wrote in ``out_dir``): checkpoints, a non-empty
    ``history.jsonl``, and the files a run writes at its root (``training_args.json``, the final model and
    tokenizer, a demo's ``report.md``)."""
    if not names:
        return []
    found = [os.path.basename(p) for p in list_checkpoints(out_dir)]
    with (
        contextlib.suppress(OSError),
        open(os.path.join(out_dir, "history.jsonl"), encoding="utf-8", errors="replace") as f,
    ):
        if records := sum(1 for line in f if line.strip()):
            found.append(f"history.jsonl with {records} record{'s' * (records != 1)}")
    found += sorted(n for n in names if _ROOT_FILES.match(n) and not n.startswith(("history.", "samples.")))
    return [f for f in found if f.split(" ")[0] in names]


def remove_previous_run(out_dir: str, names: set[str]) -> None:
    """Delete what a previous run wrote in ``out_dir``: of ``names`` (what erl_lite recorded writing there), the
    checkpoints, history, final model and its files, and a demo's report and figures; and a half-written checkpoint."""
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if name.startswith(".checkpoint-") and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # save_checkpoint's temporary folder, left by a crash
        elif name not in names or not any(p.match(name) for p in RUN_NAMES):
            continue
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


@dataclass
class RunChoice:
    """What :func:`find_run` decided: the run folder and its checkpoint (None: none, or every one ``skipped``)."""

    folder: str
    state: TrainingState | None
    skipped: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        picked = (
            f"{os.path.basename(self.state.path or '')} (step {self.state.step})" if self.state else "no checkpoint"
        )
        return f"run {self.folder}: {picked}" + (f", {len(self.skipped)} damaged skipped" if self.skipped else "")

    def checkpoint(self) -> TrainingState:
        """The checkpoint chosen, or CheckpointError naming each damaged one."""
        if self.state is None:
            why = ["every checkpoint is damaged:", *self.skipped] if self.skipped else ["no checkpoint-<step> folder"]
            raise CheckpointError(f"no good checkpoint at {self.folder}: " + "\n".join(why))
        return self.state


def find_run(path: str | os.PathLike) -> RunChoice:
    """Which run and checkpoint ``path`` means, for resume and every command: a checkpoint folder itself, else
    the newest checkpoint of a run folder that is whole (each damaged one skipped with a warning naming it)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise CheckpointError(f"no run or checkpoint folder at {path}")
    if _PATTERN.match(os.path.basename(os.path.abspath(path))) or holds_run_record(path):
        return RunChoice(os.path.dirname(os.path.abspath(path)), read_checkpoint(path))
    skipped, last = [], _last_written(path)
    left = [c for c in list_checkpoints(path) if last is not None and _step_of(c) > last and named_for_its_step(c)]
    if left:  # higher steps of a branch a resume from an earlier checkpoint abandoned: never taken, never deleted
        warnings.warn(
            f"skipping {', '.join(map(os.path.basename, left))} in {path}: the run last wrote "
            f"checkpoint-{last} (it resumed from an earlier step), so those belong to the branch it abandoned",
            stacklevel=2,
        )
    damaged, looks = set(), 0
    candidates = [c for c in list_checkpoints(path) if c not in left]
    while candidates:
        checkpoint = candidates.pop(0)
        try:
            return RunChoice(path, read_checkpoint(checkpoint), skipped)
        except CheckpointError as e:
            if not os.path.isdir(checkpoint) and looks < 3:  # rotated away while read: a newer one took its place
                looks += 1
                candidates = [c for c in list_checkpoints(path) if c not in left and c not in damaged]
                continue
            warnings.warn(f"skipping {checkpoint}: {e}", stacklevel=2)
            skipped.append(f"  {os.path.basename(checkpoint)}: {e}")
            damaged.add(checkpoint)
    return RunChoice(path, None, skipped + [f"  {os.path.basename(c)}: of the abandoned branch" for c in left])


def mark_last_written(out_dir: str, step: int) -> None:
    """Record ``checkpoint-<step>`` as the head of the run in ``out_dir`` (written, or resumed from)."""
    write_json(os.path.join(out_dir, LAST_WRITTEN), {"checkpoint": f"checkpoint-{step}", "step": step})


def _step_of(checkpoint: str) -> int:
    return int(_PATTERN.match(os.path.basename(checkpoint)).group(1))


def _last_written(folder: str) -> int | None:
    """The step of the checkpoint the run in ``folder`` wrote last, while that checkpoint is there (else None)."""
    try:
        step = read_json(os.path.join(folder, LAST_WRITTEN)).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and os.path.isdir(os.path.join(folder, f"checkpoint-{step}")) else None


def _read_trainer_state(path: str) -> Any:
    from transformers import TrainerState

    state = TrainerState.load_from_json(path)
    if not isinstance(state.global_step, int):
        raise ValueError(f"global_step must be an integer, got {state.global_step!r}")
    return state


def _read(folder: str, name: str, reader: Callable[[str], Any], check: Callable[[Any], Any] | None = None) -> Any:
    """``reader(folder/name)``, then ``check`` on its value; any failure becomes a CheckpointError naming the file."""
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise CheckpointError(f"{path} is missing")
    try:
        value = reader(path)
        if check is not None:
            check(value)
        return value
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{path} is damaged or not what it should be: {_short(e)}") from e


def _read_torch(path: str) -> Any:
    """``torch.load`` restricted to tensors and plain containers: a planted object is refused."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's message advises weights_only=False; keep only the line naming what was found.
        found = [ln.strip() for ln in str(e).splitlines() if "global" in ln.lower()] or ["refused"]
        raise CheckpointError(
            f"{path} was refused: it holds objects other than tensors and plain "
            f"containers, and loading them could run code ({found[0]})"
        ) from e


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    # written whole before the folder is moved into place: a torn line is damage; old keys in today's names
    return [current_names(row) for row in read_jsonl(path, torn_tail="error")]
