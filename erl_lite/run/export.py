"""Export a trained LoRA adapter as one standalone model: merge it into its base, save, push.

A 4-bit (QLoRA) base is reloaded as in training and dequantised before the merge: the adapter was trained
against ``dequant(Q(W))``, not ``W`` (4-bit or not: from the folder's ``erl_lite.json``)."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any, Literal

import torch

from erl_lite.config.checks import AUTO, FOUR_BIT, NO_QUANTIZATION, QUANTIZATIONS, check_choice
from erl_lite.jsonio import read_json
from erl_lite.run.layout import NOTE_FILE, holds_run_record

# What an export writes for certain (refused at the start when there and not erl_lite's), and its weights.
_WEIGHTS = r"(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)(\.index\.json)?"
_MODEL_FILES = re.compile(rf"^({_WEIGHTS}|(generation_)?config\.json|tokenizer(_config)?\.json)$")


@dataclass
class AdapterInfo:
    """What an adapter folder says about the model it belongs to."""

    adapter_dir: str
    base_model: str  # hub name or local folder
    quantization: str  # one of QUANTIZATIONS: how the base was loaded in training
    quantization_source: str  # where quantization was read (for messages)
    has_tokenizer: bool  # else the base's tokenizer is used


@dataclass
class ExportResult:
    """A merged model written by :func:`export_merged`."""

    out_dir: str
    base_model: str
    quantization: str
    dtype: str  # of the saved weights
    files: list[str]  # sorted


def describe_adapter(
    adapter_dir: str | os.PathLike,
    quantization: Literal["auto", "none", "4bit"] = "auto",
    base_model: str | None = None,
) -> AdapterInfo:
    """Read an adapter folder (e.g. ``checkpoint-<step>``): its base model and how that base was loaded
    (``quantization="auto"``: read from the folder); ``base_model`` overrides ``base_model_name_or_path``."""
    folder = run_adapter(os.fspath(adapter_dir))
    config_path = os.path.join(folder, "adapter_config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(_not_an_adapter(folder))
    check_choice("quantization", quantization, (AUTO, *QUANTIZATIONS))
    saved_base = read_json(config_path).get("base_model_name_or_path")
    base = base_model or saved_base
    if not base:
        raise ValueError(f"{config_path} names no base_model_name_or_path; pass base_model=")
    from erl_lite.models import MOVED_BASE_HINT, check_model_source  # (models imports transformers)

    if base_model:
        check_model_source(os.fspath(base_model), what="base_model")
    else:
        check_model_source(base, what=f"the base model that {config_path} records", hint=MOVED_BASE_HINT)
    source = "given"
    if quantization == AUTO:
        quantization, source = _saved_quantization(folder)
    return AdapterInfo(
        adapter_dir=folder,
        base_model=os.fspath(base),
        quantization=quantization,
        quantization_source=source,
        has_tokenizer=os.path.isfile(os.path.join(folder, "tokenizer_config.json")),
    )


def run_adapter(folder: str, find: Any = None) -> str:
    """The adapter of a run or checkpoint folder (of the checkpoint ``find`` picks, checked whole), else ``folder``."""
    from erl_lite.run.checkpoint import find_run, list_checkpoints

    if list_checkpoints(folder) or holds_run_record(folder):
        return (find or find_run)(folder).checkpoint().path
    return folder


def _not_an_adapter(folder: str) -> str:
    """Why ``folder`` cannot be exported, and what to pass instead."""
    checkpoint = next((f for f in (folder, os.path.dirname(os.path.abspath(folder))) if holds_run_record(f)), None)
    if checkpoint is not None:  # (a checkpoint's own adapter is found by run_adapter)
        return (
            f"{folder} holds no LoRA adapter: the checkpoint {checkpoint} is of a run without LoRA (its trained "
            "weights are in trainable.safetensors), and export merges a LoRA adapter into its base; the "
            "trained model is the base with those weights loaded (ERLTrainer.save_model writes it whole)"
        )
    why = "has no adapter_config.json" if os.path.isdir(folder) else "does not exist"
    return (
        f"{folder} is not a LoRA adapter folder: it {why} (pass a checkpoint-<step> folder, a run's output_dir "
        "or a folder written by save_pretrained)"
    )


def _saved_quantization(folder: str) -> tuple[str, str]:
    """``(quantization, where it was read)`` from the folder's note, else the default (none)."""
    note = os.path.join(folder, NOTE_FILE)
    if os.path.isfile(note):
        value = read_json(note).get("base_quantization")
        check_choice(f"{note}: base_quantization", value, QUANTIZATIONS)
        return value, note
    return NO_QUANTIZATION, "default (nothing in the folder says 4-bit)"


def merge_adapter(
    adapter_dir: str | os.PathLike,
    *,
    quantization: Literal["auto", "none", "4bit"] = "auto",
    dtype: str | torch.dtype = "auto",
    base_model: str | None = None,
    trust_remote_code: bool = False,
) -> tuple[Any, Any, AdapterInfo]:
    """Load an adapter's base on the CPU, merge the adapter into it; return ``(model, tokenizer, info)``.
    ``dtype="auto"``: the base's saved dtype. The model comes back in eval mode, without peft."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    info = describe_adapter(adapter_dir, quantization, base_model)
    torch_dtype = _merge_dtype(dtype, info.base_model, trust_remote_code)
    base = _load_base_for_merge(info, torch_dtype, trust_remote_code)
    merged = PeftModel.from_pretrained(base, info.adapter_dir).merge_and_unload()
    merged = merged.to(torch_dtype).eval()
    tokenizer = AutoTokenizer.from_pretrained(
        info.adapter_dir if info.has_tokenizer else info.base_model, trust_remote_code=trust_remote_code
    )
    return merged, tokenizer, info


def _merge_dtype(dtype: str | torch.dtype, base_model: str, trust_remote_code: bool) -> torch.dtype:
    from erl_lite.models import DTYPES, named_dtype  # models imports transformers

    named = named_dtype(dtype)
    if named is not None:
        return named
    from transformers import AutoConfig

    saved = getattr(AutoConfig.from_pretrained(base_model, trust_remote_code=trust_remote_code), "dtype", None)
    if isinstance(saved, str):
        saved = DTYPES.get(saved)
    return saved if isinstance(saved, torch.dtype) and saved.is_floating_point else torch.float32


def _load_base_for_merge(info: AdapterInfo, torch_dtype: torch.dtype, trust_remote_code: bool) -> Any:
    """The base as training saw it, in plain ``Linear`` layers: dequantised when it was 4-bit."""
    from erl_lite.models import _load_base  # the one home of the 4-bit loading settings

    base = _load_base(info.base_model, info.quantization, torch_dtype, torch.device("cpu"), trust_remote_code)
    if info.quantization == FOUR_BIT:
        # No layer has run, so none was repacked for bitsandbytes' CPU kernel: the NF4 blocks are training's.
        base = base.dequantize(dtype=torch_dtype)
        base.is_loaded_in_4bit = False  # transformers leaves the flag; the weights are plain now
    return base


def export_merged(
    adapter_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    quantization: Literal["auto", "none", "4bit"] = "auto",
    dtype: str | torch.dtype = "auto",
    base_model: str | None = None,
    trust_remote_code: bool = False,
    overwrite: bool = False,
) -> ExportResult:
    """Merge the adapter into its base and save model + tokenizer (safetensors) to ``out_dir``, which must be
    empty or an earlier export's unless ``overwrite``. Only files erl_lite wrote there are replaced: a file of a name
    the export writes that erl_lite did not write is refused, ``overwrite`` or not."""
    from erl_lite.run.lock import RunLock, check_out

    out = os.fspath(out_dir)
    if os.path.abspath(out) == os.path.abspath(os.fspath(adapter_dir)):
        raise ValueError(f"out_dir {out!r} is the adapter folder; write the merged model somewhere else")
    with RunLock(out, "export", keep_record=False):  # its host and pid stay out of the model's folder
        check_out(out, "erl-lite export", "export", overwrite, writes=(_MODEL_FILES,))
        model, tokenizer, info = merge_adapter(
            adapter_dir,
            quantization=quantization,
            dtype=dtype,
            base_model=base_model,
            trust_remote_code=trust_remote_code,
        )
        # Saved aside, then moved in: save_pretrained deletes shards it did not write in its folder.
        with tempfile.TemporaryDirectory(prefix=".export-", dir=out) as aside:
            model.save_pretrained(aside)  # safetensors, transformers' default
            tokenizer.save_pretrained(aside)
            _move_in(aside, out)
    dtype_name = str(next(model.parameters()).dtype).removeprefix("torch.")
    return ExportResult(
        out_dir=out,
        base_model=info.base_model,
        quantization=info.quantization,
        dtype=dtype_name,
        files=sorted(os.listdir(out)),
    )


def _move_in(aside: str, out: str) -> None:
    """Move the files saved in ``aside`` into ``out``: over files of the same names only where erl_lite wrote them;
    an earlier export's weights that this one lacks are deleted (from_pretrained could load them instead)."""
    from erl_lite.run.lock import check_out, written

    names = sorted(os.listdir(aside))
    check_out(
        out, "erl-lite export", "export", True, writes=(re.compile("^(" + "|".join(map(re.escape, names)) + ")$"),)
    )
    for stale in written(out) - set(names):
        if re.fullmatch(_WEIGHTS, stale):
            os.remove(os.path.join(out, stale))
    for name in names:
        os.replace(os.path.join(aside, name), os.path.join(out, name))


def push_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = True,
    token: str | None = None,
    commit_message: str = "Upload from erl_lite",
) -> str:
    """Upload ``folder`` (a merged model or an adapter) to the Hub, creating the repository; return its URL.
    Needs a write token (``huggingface-cli login``, ``HF_TOKEN`` or ``token=``)."""
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"repo_id must look like 'user-or-org/name', got {repo_id!r}")
    path = os.fspath(folder)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"nothing to push: {path!r} is not a folder")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    from erl_lite.run.lock import FILES_RECORD, PRIVATE

    api.upload_folder(  # the lock, its record (host, pid) and erl_lite's file record stay home
        folder_path=path,
        repo_id=repo_id,
        repo_type="model",
        commit_message=commit_message,
        ignore_patterns=[PRIVATE, FILES_RECORD],
    )
    return f"https://huggingface.co/{repo_id}"
