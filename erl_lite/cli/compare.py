"""``erl-lite compare RUN ...``: the toy study's tables and findings (:mod:`erl_lite.study`) for any runs, ERL
against every other variant, paired by seed. A RUN is a run folder (or its ``history.jsonl``), ``NAME=FOLDER`` to
name its variant, or a results file of ``scripts/compare_modes.py``. A folder's variant and seed are read from its
saved settings (``mode``, the ablation switches, ``seed``). Exit code 2: a run that cannot be read or paired.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from erl_lite.cli.errors import usage_error, user_errors
from erl_lite.jsonio import read_json
from erl_lite.study.runs import by_variant, merge_seeds, read_results, run_record
from erl_lite.study.tables import REFERENCE, findings, tables

#: The ablation switches a variant's name tells (``ERL w/o memory``), as the paper's Table 1 names them.
ABLATIONS = {"use_memory": "memory", "use_reflection": "reflection", "use_internalization": "internalization"}


def add_compare_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="ERL against other runs, paired by seed: the toy study's tables for yours")
    p.add_argument("runs", nargs="+", metavar="RUN", help="a run folder, NAME=FOLDER, or a compare_modes results file")


def variant_of(settings: dict[str, Any]) -> str:
    """A run's variant, named from its settings as the study names them."""
    mode = settings.get("mode", "erl")
    if mode == "rlvr":
        return "RLVR"
    off = "".join(f" w/o {name}" for field, name in ABLATIONS.items() if settings.get(field) is False)
    return ("ERL" if mode == "erl" else mode) + off


def read_runs(specs: list[str]) -> list[dict]:
    """One record per run (:func:`erl_lite.study.runs.run_record`), every results file's records added; refused
    when a (variant, seed) comes twice or no run is ERL, the reference every variant is compared with."""
    from erl_lite.run.report import load_run

    records = []
    for spec in specs:
        name, _, path = spec.partition("=") if "=" in spec and not os.path.exists(spec) else ("", "", spec)
        if path.endswith(".json") and os.path.isfile(path):
            records += read_results(read_json(path), path)
            continue
        history, settings, _ = load_run(path)
        if settings is None and not name:
            raise ValueError(
                f"{path}: no saved settings (training_args.json or a checkpoint) tell which variant this run is; "
                f"give it as NAME={path}"
            )
        records.append(run_record(history, name or variant_of(settings), (settings or {}).get("seed", 0)))
    if REFERENCE not in by_variant(records):
        found = ", ".join(by_variant(records))
        raise ValueError(f"every variant is compared with {REFERENCE}, and no run is one (found {found}): name one")
    return merge_seeds(records)


def run_compare(args: argparse.Namespace) -> int:
    try:
        records = read_runs(args.runs)
    except user_errors() as e:
        return usage_error("compare", e)
    controls = [v for v in by_variant(records) if v != REFERENCE]
    print(tables(records))
    print(findings(records, "The runs compared", controls))
    return 0
