"""Where dataset rows come from: a file path, a dataset name, a list, or a ``datasets.Dataset``.

Departures from TRL: TRL takes only ``Dataset`` objects; paths and names are a convenience.
"""

from __future__ import annotations

import os
from typing import Any

from erl_lite.config.checks import check_choice

FILE_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
#: Splits tried, in order, of a dataset with several splits, for training / evaluation.
SPLITS = {"train": ("train",), "eval": ("test", "validation")}


def load_rows(data: Any, split: str = "train") -> list[Any]:
    """The rows of ``data``: rows (dicts or Tasks), a ``Dataset``/``DatasetDict``, a file of :data:`FILE_FORMATS`
    or ``save_to_disk`` folder (a bad JSON line is named), or a dataset name (the local cache only under
    ``HF_HUB_OFFLINE``). ``split``: ``"train"`` or ``"eval"``, of a multi-split dataset."""
    check_choice("split", split, sorted(SPLITS))
    if isinstance(data, (str, os.PathLike)):
        return _load_named(os.fspath(data), split)
    if isinstance(data, dict) and not _is_dataset_dict(data):
        raise TypeError(
            "a dataset is a list of rows (dicts), not one dict; wrap it in a list or use "
            "datasets.Dataset.from_dict(...)"
        )
    if _is_dataset_dict(data):
        return list(_pick_split(data, split, where=type(data).__name__))
    try:
        return list(data)
    except TypeError:
        raise TypeError(
            f"cannot read rows from {type(data).__name__}: pass a list of dicts, a "
            "datasets.Dataset, a .jsonl/.json/.csv/.parquet path or a dataset name"
        ) from None


def _load_named(name: str, split: str) -> list[Any]:
    """A file, a ``save_to_disk`` folder, or a dataset name (local cache only when offline)."""
    import datasets

    suffix = os.path.splitext(name)[1].lower()
    if os.path.isfile(name):
        if suffix not in FILE_FORMATS:
            raise ValueError(
                f"unknown dataset file format {suffix or '(no suffix)'!r} of {name}; "
                f"expected one of {sorted(FILE_FORMATS)}"
            )
        try:
            return list(getattr(datasets.Dataset, f"from_{FILE_FORMATS[suffix]}")(name))  # load_dataset pings S3
        except Exception:  # datasets names a byte position at best: find the line
            if suffix in (".jsonl", ".json"):
                _find_bad_json(name, suffix)
            raise
    if os.path.isdir(name) and any(os.path.exists(os.path.join(name, f)) for f in ("dataset_dict.json", "state.json")):
        loaded = datasets.load_from_disk(name)  # a folder written by save_to_disk
        return list(_pick_split(loaded, split, where=name) if _is_dataset_dict(loaded) else loaded)
    if not os.path.isdir(name) and (suffix in FILE_FORMATS or name.startswith((".", os.sep, "~"))):
        raise FileNotFoundError(f"dataset file not found: {name}")
    return list(_from_hub_or_cache(name, split))


def _find_bad_json(path: str, suffix: str) -> None:
    """Raise the ValueError naming the first line that is not JSON, if one is (else return)."""
    from erl_lite.jsonio import read_json, read_jsonl

    try:
        read_jsonl(path)
    except ValueError:
        if suffix == ".jsonl":
            raise
        read_json(path)  # a .json file that is one document (an array of rows) rather than lines


def _from_hub_or_cache(name: str, split: str) -> Any:
    import datasets

    try:
        loaded = datasets.load_dataset(name)
    except Exception as err:  # datasets raises several types (ConnectionError, FileNotFoundError, ...)
        where = (
            "HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set, so only the local cache is searched, and it is not there"
            if datasets.config.HF_HUB_OFFLINE
            else "it is neither a local path nor a dataset datasets could load"
        )
        raise ValueError(
            f"dataset {name!r} is not available: {where} ({type(err).__name__}: {err}). "
            "Pass a .jsonl/.csv path, a list of rows, or a loaded datasets.Dataset."
        ) from err
    return _pick_split(loaded, split, where=name) if _is_dataset_dict(loaded) else loaded


def _is_dataset_dict(data: Any) -> bool:
    return type(data).__name__ in ("DatasetDict", "IterableDatasetDict")


def _pick_split(data: Any, split: str, where: str) -> Any:
    for name in SPLITS[split]:
        if name in data:
            return data[name]
    raise ValueError(
        f"{where} has splits {sorted(data)}; for {split} erl_lite takes {' or '.join(SPLITS[split])}. "
        "Load the split you want with datasets.load_dataset(..., split=...) and pass it"
    )
