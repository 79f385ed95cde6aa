"""``erl-lite compare``: the toy study's tables and paired findings for a user's own run folders."""

from __future__ import annotations

import json

from erl_lite.cli import main


def _run_folder(path, evals, settings=None, steps=30):
    """A run folder with a history (``evals`` {iteration: evaluation}) and, when given, its saved settings."""
    path.mkdir(parents=True)
    rows = [{"kind": "eval", "step": 0, "eval/success": evals[0]}]
    for step in range(1, steps + 1):
        rows.append(
            {"kind": "train", "step": step, "time/step": 2.0, "optim/steps": 1, "samples/first": 40, "tokens/first": 9}
        )
        if step in evals:
            rows.append({"kind": "eval", "step": step, "eval/success": evals[step]})
    (path / "history.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    if settings is not None:
        (path / "training_args.json").write_text(json.dumps(settings))
    return str(path)


def _pairs(tmp_path, seeds, erl=0.95, rlvr=0.3):
    runs = []
    for seed in seeds:
        runs.append(_run_folder(tmp_path / f"erl{seed}", {0: 0.01, 5: 0.92, 10: erl, 30: erl}, {"seed": seed}))
        late = {0: 0.01, 10: rlvr / 2, 30: rlvr}
        runs.append(_run_folder(tmp_path / f"rlvr{seed}", late, {"seed": seed, "mode": "rlvr"}))
    return runs


def test_compare_prints_the_study_s_tables_for_run_folders_paired_by_seed(tmp_path, capsys):
    assert main(["compare", *_pairs(tmp_path, range(10))]) == 0
    out = capsys.readouterr().out
    assert "| ERL | 10 | 30 |" in out and "| RLVR | 10 | 30 |" in out  # variants and seeds from the settings
    assert "| RLVR | 10 | +0.65 [+0.65, +0.65]: ERL ahead of RLVR (p = 0.002) |" in out
    assert "The runs compared, 10 seeds (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), compared paired by seed." in out
    assert "Reaching 0.90 and staying there: ERL 10 of 10, RLVR 0 of 10" in out
    # The seconds are the runs' own time/step: ERL reached 0.9 at iteration 5, 10 s in.
    assert "| ERL | 10 of 10 | 5 | 200 | 45 | 5 | 10 |" in out


def test_compare_names_a_run_by_name_reads_results_files_and_calls_nothing_ahead_on_few_seeds(tmp_path, capsys):
    erl = _run_folder(tmp_path / "mine", {0: 0.01, 10: 0.9, 30: 0.96})  # no settings: named on the command line
    other = _run_folder(tmp_path / "base", {0: 0.01, 10: 0.2, 30: 0.4})
    assert main(["compare", f"ERL={erl}", f"baseline={other}"]) == 0
    out = capsys.readouterr().out
    assert (
        "| baseline | 1 |" in out
        and "ahead of" not in out
        and "over 1 seed (where the test's smallest p is 1.000" in out
    )
    assert "| 0.96 | 0.96 |" in out and "[0.96" not in out  # one seed: its value, no interval
    # A results file of scripts/compare_modes.py: its records as they are, beside a folder's.
    from erl_lite.history import History
    from erl_lite.study.runs import run_record

    record = run_record(History.load(other), "RLVR", 7)
    (tmp_path / "results.json").write_text(json.dumps([{**run_record(History.load(erl), "ERL", 7)}, record]))
    assert main(["compare", str(tmp_path / "results.json")]) == 0
    assert "| RLVR | 1 |" in capsys.readouterr().out


def test_compare_refuses_what_it_cannot_pair_in_one_paragraph(tmp_path, capsys):
    unnamed = _run_folder(tmp_path / "unnamed", {0: 0.1, 30: 0.5})
    erl = _run_folder(tmp_path / "erl", {0: 0.1, 30: 0.9}, {"seed": 1})
    twin = _run_folder(tmp_path / "twin", {0: 0.1, 30: 0.8}, {"seed": 1})
    rlvr = _run_folder(tmp_path / "rlvr", {0: 0.1, 30: 0.5}, {"seed": 1, "mode": "rlvr"})
    cases = {
        (erl, unnamed): "no saved settings (training_args.json or a checkpoint) tell which variant",
        (erl, twin): "hold these (variant, seed) twice: [('ERL', 1)]",
        (rlvr,): "every variant is compared with ERL, and no run is one (found RLVR)",
        (str(tmp_path / "missing"),): "no run folder or history file",
    }
    for runs, message in cases.items():
        assert main(["compare", *runs]) == 2
        err = capsys.readouterr().err
        assert err.startswith("erl-lite compare: error:") and message in err and "Traceback" not in err, message
