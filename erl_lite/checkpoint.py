"""Checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint folder ``<output_dir>/checkpoint-<step>/`` holds

* ``trainable.safetensors`` — every trainable tensor by name (the LoRA adapter, or all
  weights when fully fine-tuning), restored by name on resume;
* ``adapter/`` — the same adapter in PEFT's own format, loadable with ``PeftModel.from_pretrained``;
* ``optimizer.pt`` / ``scheduler.pt`` — their state dicts;
* ``rng.pt`` — Python, NumPy and torch random states;
* ``memory.json`` — the reflection memory (the peer package forgot it);
* ``history.jsonl`` / ``samples.jsonl`` — the run's records up to this step;
* ``trainer_state.json`` — the step reached and the config.

It is written to a temporary folder first and renamed into place, so a crash mid-write never
leaves a half checkpoint behind.

Departures from the paper: none.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from erl_lite.history import History
from erl_lite.memory import ReflectionMemory

_PATTERN = re.compile(r"^checkpoint-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint could not be read, trusted or written; the message names the file."""


def save_checkpoint(out_dir: str, step: int, model: Any, optimizer: Any, scheduler: Any,
                    memory: ReflectionMemory, history: History, config: dict[str, Any]) -> str:
    """Write ``checkpoint-<step>`` atomically and return its path."""
    os.makedirs(out_dir, exist_ok=True)
    final = os.path.join(out_dir, f"checkpoint-{step}")
    tmp = tempfile.mkdtemp(prefix=f".checkpoint-{step}-", dir=out_dir)
    try:
        tensors = {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}
        save_file(tensors, os.path.join(tmp, "trainable.safetensors"))
        if hasattr(model, "peft_config"):
            model.save_pretrained(os.path.join(tmp, "adapter"))
        torch.save(optimizer.state_dict(), os.path.join(tmp, "optimizer.pt"))
        if scheduler is not None:
            torch.save(scheduler.state_dict(), os.path.join(tmp, "scheduler.pt"))
        torch.save({"python": random.getstate(), "numpy": np.random.get_state(),
                    "torch": torch.get_rng_state()}, os.path.join(tmp, "rng.pt"))
        _write_json(os.path.join(tmp, "memory.json"), memory.state_dict())
        snapshot = History(records=list(history.records), samples=list(history.samples), out_dir=tmp)
        snapshot.rewrite()
        _write_json(os.path.join(tmp, "trainer_state.json"), {"step": step, "config": config})
        if os.path.exists(final):
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def latest_checkpoint(out_dir: str) -> str | None:
    """The checkpoint with the highest step in ``out_dir``, or None."""
    if not os.path.isdir(out_dir):
        return None
    found = [(int(m.group(1)), name) for name in os.listdir(out_dir) if (m := _PATTERN.match(name))]
    return os.path.join(out_dir, max(found)[1]) if found else None


def load_checkpoint(path: str, model: Any, optimizer: Any, scheduler: Any,
                    memory: ReflectionMemory) -> tuple[int, History]:
    """Restore state in place; returns (step reached, history up to that step)."""
    if not os.path.isfile(os.path.join(path, "trainer_state.json")):
        raise FileNotFoundError(f"{path} is not an erl_lite checkpoint (no trainer_state.json)")
    tensors = load_file(os.path.join(path, "trainable.safetensors"))
    params = dict(model.named_parameters())
    missing = [n for n in tensors if n not in params]
    if missing:
        raise ValueError(f"checkpoint tensors not found in the model: {missing[:3]}...")
    with torch.no_grad():
        for name, value in tensors.items():
            params[name].copy_(value.to(params[name].device))
    optimizer.load_state_dict(torch.load(os.path.join(path, "optimizer.pt"), weights_only=False))
    if scheduler is not None and os.path.exists(os.path.join(path, "scheduler.pt")):
        scheduler.load_state_dict(torch.load(os.path.join(path, "scheduler.pt"), weights_only=False))
    rng = torch.load(os.path.join(path, "rng.pt"), weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    with open(os.path.join(path, "memory.json"), encoding="utf-8") as f:
        memory.load_state_dict(json.load(f))
    with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as f:
        step = int(json.load(f)["step"])
    return step, History.load(path)


def _write_json(path: str, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
