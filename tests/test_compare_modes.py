"""scripts/compare_modes.py, the toy study's runner: what each run is given (the world, a trial build, the
step-matched control's steps, a CPU budget), how runs of other seeds merge, what it writes; and
scripts/render_docs.py, which holds the findings and bands in README.md and docs/ to the committed results.
The analysis itself is erl_lite.study's (tests/test_study.py)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _script(name="compare_modes"):
    """A script of scripts/ as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(variant, seed, curve, **extra):
    """A run's record: ``curve`` is [step, CPU seconds, eval success] per evaluation."""
    return {
        "variant": variant,
        "seed": seed,
        "steps": curve[-1][0],
        "train_seconds": curve[-1][1],
        "eval_start": curve[0][2],
        "eval_final": curve[-1][2],
        "eval_curve": curve,
        "run_dir": f"/nowhere/{variant}-{seed}",
        **extra,
    }


RESULTS = [
    _result("ERL", 0, [[0, 0, 0.4], [10, 30, 0.92], [20, 60, 0.95]]),
    _result("ERL", 1, [[0, 0, 0.4], [10, 30, 0.6], [20, 60, 0.8]]),
    _result("RLVR", 0, [[0, 0, 0.4], [20, 30, 0.7], [40, 60, 1.0]]),
    _result("RLVR", 1, [[0, 0, 0.4], [20, 30, 0.5], [40, 60, 0.96]]),
]


class Stop(Exception):
    pass


def _trainer_spy(monkeypatch, seen, *keys):
    """Replace demo_trainer with one that records ``keys`` of what it is given and stops the run."""
    import erl_lite.embedded as embedded

    def fake_trainer(seed, **kwargs):
        seen.append(tuple(kwargs.get(k) for k in keys))
        raise Stop

    monkeypatch.setattr(embedded, "demo_trainer", fake_trainer)


def test_a_trial_build_is_passed_to_every_run_and_named_above_the_table(monkeypatch, tmp_path):
    # `--model DIR` compares a build other than the shipped model: every run loads it, the
    # results record it, and the table says which model it measured.
    cm = _script()
    seen = []
    _trainer_spy(monkeypatch, seen, "model_dir")
    with pytest.raises(Stop):
        cm.run("ERL", 0, None, 1, str(tmp_path), model_dir="/builds/three-layers")
    assert seen == [("/builds/three-layers",)]
    results = [{**r, "model": "/builds/three-layers"} for r in RESULTS]
    assert cm.header(results).startswith("Model: `/builds/three-layers`")
    assert cm.header(RESULTS).startswith("Matched by CPU time")  # the shipped model: no line


def test_the_step_matched_control_takes_erl_s_mean_optimizer_steps_of_its_own_seed(monkeypatch, tmp_path):
    # "RLVR, ERL's optimizer steps": per seed, ERL's optimizer steps per iteration, rounded up,
    # passed to that seed's RLVR run.
    cm = _script()
    assert cm.MATCHED in cm.VARIANTS and cm.MATCHED in cm.HEADLINE
    assert [cm.matched_steps({"optim_steps": n, "steps": 20}) for n in (20, 21, 40, 79, 0)] == [1, 2, 2, 4, 1]
    seen = []
    _trainer_spy(monkeypatch, seen, "mode", "steps_per_generation")
    with pytest.raises(Stop):
        cm.run(cm.MATCHED, 0, 60.0, 1, str(tmp_path), overrides={"steps_per_generation": 3})
    assert seen == [("rlvr", 3)]


def test_each_world_writes_its_own_files_and_results_never_mix_worlds_or_matchings(monkeypatch, tmp_path):
    cm = _script()
    assert cm.output_path("a", "demo", "results.json") == "a/compare_results.json"
    assert cm.output_path("a", "sparse", "eval.png") == "a/compare_sparse_eval.png"
    assert cm.output_path("a", "hard", "table.md") == "a/compare_hard_table.md"
    assert cm.world_of(RESULTS) == "demo" and cm.match_of(RESULTS) == "cpu"  # records from before the flags
    with pytest.raises(ValueError, match="mix --world"):
        cm.world_of(RESULTS + [_result("ERL", 0, [[0, 0, 0.1]], world="sparse")])
    with pytest.raises(ValueError, match="mix --match"):
        cm.match_of(RESULTS + [_result("ERL", 0, [[0, 0, 0.1]], match="samples")])
    seen = []
    _trainer_spy(monkeypatch, seen, "world", "output_dir")
    for world in ("demo", "sparse"):
        with pytest.raises(Stop):
            cm.run(cm.MATCHED, 1, None, 1, str(tmp_path), world=world)
    assert seen == [
        ("demo", str(tmp_path / "RLVR,_ERLs_optimizer_steps-1")),
        ("sparse", str(tmp_path / "sparse-RLVR,_ERLs_optimizer_steps-1")),
    ]


def test_runs_of_other_seeds_merge_into_one_table_but_never_twice_or_across_worlds():
    cm = _script()
    first = [r for r in RESULTS if r["seed"] == 0]
    second = [r for r in RESULTS if r["seed"] == 1]
    merged = cm.merge_seeds(second + first)
    assert sorted((r["variant"], r["seed"]) for r in merged) == sorted((r["variant"], r["seed"]) for r in RESULTS)
    assert merged[0] == first[0]  # seed 0's ERL first: the rewards figure draws the first seed
    with pytest.raises(ValueError, match=r"twice: \[\('ERL', 0\)\]"):
        cm.merge_seeds(first + first[:1])
    with pytest.raises(ValueError, match="mix --world"):
        cm.write_outputs(first + [_result("ERL", 2, [[0, 0, 0.1]], world="sparse")], ["ERL"], "/nowhere")


def test_budgets_charge_cpu_time_not_time_spent_waiting():
    # The budget is CPU seconds inside the training steps: a step that waits (here: sleeps, as a run
    # does when another job holds the core) is not charged for the wait; a step that computes is;
    # and the run ends at the step where the budget is reached.
    import time

    cm = _script()

    class Run:
        def __init__(self, work):
            self.step, self.work = 0, work
            self.args = type("Args", (), {"max_steps": 100})()

        def training_step(self):
            self.step += 1
            self.work()

    waiting = Run(lambda: time.sleep(0.2))
    spent = cm.charge_cpu_time(waiting, budget=None)
    for _ in range(3):
        waiting.training_step()
    assert sorted(spent) == [0, 1, 2, 3] and spent[3] < 0.05  # 0.6 s of wall-clock, almost no CPU

    def compute():
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass

    busy = Run(compute)
    spent = cm.charge_cpu_time(busy, budget=0.12)
    for _ in range(5):
        busy.training_step()
        if busy.step >= busy.args.max_steps:
            break
    assert busy.args.max_steps == 3 and 0.12 <= spent[3] < 0.2  # charged, and stopped at the budget


def test_match_samples_runs_every_variant_for_erl_s_iterations(monkeypatch, tmp_path):
    # --match samples: the paper's comparison (ERL n=4 against RLVR n=10 for as many iterations), no CPU
    # budget for the others; the step-matched control still runs beside it; the files say how it was matched.
    cm = _script()
    calls, written = [], []

    def fake_run(job):
        calls.append((job["variant"], job["budget"], job["steps"], job.get("overrides")))
        steps = job["steps"]
        return _result(job["variant"], job["seed"], [[0, 0, 0.4], [steps, 5.0, 0.5]], optim_steps=2 * steps)

    class InProcess:  # the script's spawn pool, run here
        def __init__(self, jobs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, f, jobs):
            return [f(j) for j in jobs]

        def imap(self, f, jobs):
            return (f(j) for j in jobs)

    monkeypatch.setattr(cm, "_run", fake_run)
    monkeypatch.setattr(cm.mp, "get_context", lambda kind: type("Ctx", (), {"Pool": staticmethod(InProcess)}))
    monkeypatch.setattr(cm, "write_outputs", lambda results, variants, out, key=None: written.append((results, key)))
    argv = ["compare_modes.py", "--match", "samples", "--steps", "1", "--seeds", "0", "--out", str(tmp_path)]
    argv += ["--variants", "ERL", "RLVR", cm.MATCHED]
    monkeypatch.setattr(sys, "argv", argv)
    cm.main()
    assert calls == [
        ("ERL", None, 1, None),
        ("RLVR", None, 1, None),
        (cm.MATCHED, None, 1, {"steps_per_generation": 2}),
    ]
    results, key = written[0]
    assert key == "samples" and {r["match"] for r in results} == {"samples"}
    assert cm.file_key("sparse", "samples") == "sparse_samples"
    monkeypatch.setattr(sys, "argv", [argv[0], "--match", "cpu", *argv[3:]])
    calls.clear()
    cm.main()
    assert [budget for _, budget, _, _ in calls] == [None, 5.0, 5.0]  # the default: ERL's CPU seconds


def test_a_replot_merges_seeds_and_writes_the_paired_tables_and_findings(monkeypatch, tmp_path):
    # Seeds run apart (as the held-out seeds 46-50 were) merge into one table: the results file holds every
    # seed, the table the study's paired comparison, the findings file the paragraph the docs show.
    cm = _script()
    evals = lambda final: [[0, 0, 0.01], [4, 8, 0.95 if final > 0.9 else 0.1], [10, 20, final], [30, 60, final]]
    progress = [[s, 2.0 * s, 40 * s, 900 * s, s] for s in range(1, 31)]
    rows = [
        _result(v, s, evals(final), progress=progress, match="samples", world="hard", second_truncated=None)
        for s in range(41, 51)
        for v, final in (("ERL", 0.97), ("RLVR", 0.3))
    ]
    (tmp_path / "compare_hard_samples_results.json").write_text(json.dumps([r for r in rows if r["seed"] < 46]))
    (tmp_path / "new.json").write_text(json.dumps([r for r in rows if r["seed"] >= 46]))
    argv = ["compare_modes.py", "--world", "hard", "--match", "samples", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--replot", "--merge", str(tmp_path / "new.json")])
    cm.main()
    merged = json.loads((tmp_path / "compare_hard_samples_results.json").read_text())
    assert sorted({r["seed"] for r in merged}) == list(range(41, 51))
    table = (tmp_path / "compare_hard_samples_table.md").read_text()
    assert "| RLVR | 10 | +0.67 [+0.67, +0.67]: ERL ahead of RLVR (p = 0.002) |" in table
    text = (tmp_path / "compare_hard_samples_findings.md").read_text()
    assert text.startswith("Hard world, matched by samples") and "10 seeds (41, 42" in text
    assert text == cm.findings(merged) + "\n" and (tmp_path / "compare_hard_samples_eval.png").is_file()


def test_merge_is_refused_without_replot_and_a_results_file_of_the_wrong_shape_is_named(monkeypatch, tmp_path, capsys):
    cm = _script()
    good = tmp_path / "compare_results.json"
    good.write_text(json.dumps([{**r, "match": "cpu"} for r in RESULTS]))

    def main(*argv):
        monkeypatch.setattr(sys, "argv", ["compare_modes.py", "--out", str(tmp_path), *argv])
        with pytest.raises(SystemExit) as stop:
            cm.main()
        return stop.value.code, capsys.readouterr().err

    code, err = main("--merge", str(good))  # would run every variant, and merge nothing
    assert code == 2 and "--merge only goes with --replot" in err
    shapes = {
        "a dict": {"variant": "ERL"},
        "a list of numbers": [1, 2],
        "a row without its variant": [{"seed": 0}],
        "a row whose curve is not a list": [{**RESULTS[0], "eval_curve": 3, "match": "cpu"}],
    }
    for name, content in shapes.items():
        bad = tmp_path / "other.json"
        bad.write_text(json.dumps(content))
        code, err = main("--replot", "--merge", str(bad))
        assert code == 2 and str(bad) in err and "Traceback" not in err, name


def test_where_a_run_knew_its_holes_is_read_from_its_samples():
    """Where the holes were known, per run (erl_lite.embedded.demo.holes_known), kept in the results."""
    from erl_lite.embedded.demo import holes_known
    from erl_lite.embedded.rulebooks import rulebook
    from erl_lite.embedded.world import run_letters
    from erl_lite.history import History

    cm = _script()
    a, b, _ = run_letters(0)
    replies = [f"Avoid {a} or {b}. Up C ok.", f"Avoid {a}. Up C ok.", "Avoid nothing.", f"Avoid {a} or {a} no, Up"]
    retries = [
        {
            "first": 0,
            "reflection": {"task_id": "t", "rulebook": book, "base_prompt": "", "parsed": True},
            "second": {"success": True},
        }
        for book in (rulebook([a, b]), rulebook([a, a]), rulebook([b]))
    ]
    sample = {
        "step": 1,
        "memory_before": [],
        "retries": retries,
        "first_attempts": [{"messages": [{"role": "assistant", "content": r}]} for r in replies],
    }
    known = holes_known(History(samples=[sample]), [a, b])
    assert known == {
        "reflections": 3,
        "both": 1 / 3,
        "repeated": 1 / 3,
        "first_named": 0.5,
        "first_both": 0.25,
        "first_unreadable": 0.25,
    }
    table = cm.knowledge_table([{**RESULTS[0], "knowledge": known}], ["ERL"])
    assert "| ERL | 0.33 | 0.33 | 0.50 | 0.25 | 0.25 |" in table
    assert cm.knowledge_table(RESULTS, ["ERL"]) == ""  # no run carries it: no table
    assert holes_known(History(samples=[{**sample, "retries": []}]), [a, b])["both"] is None  # none written


def _finals(erl, rlvr):
    """Results with these final evaluations per seed (samples-matched, demo world)."""
    rows = [("ERL", s, v) for s, v in enumerate(erl)] + [("RLVR", s, v) for s, v in enumerate(rlvr)]
    return [_result(name, s, [[0, 0, 0.1], [10, 5, v], [30, 9, v]], match="samples") for name, s, v in rows]


def test_findings_blocks_in_markdown_are_rerendered_from_the_results_they_name(tmp_path):
    rd = _script("render_docs")
    results = tmp_path / "r.json"
    results.write_text(json.dumps(_finals([0.9, 0.92, 0.95] * 4, [0.3, 0.35, 0.4] * 4)))
    doc = tmp_path / "doc.md"
    doc.write_text(
        f"Intro.\n<!-- findings {results} -->\nERL 0.99, RLVR 0.10: typed by hand.\n<!-- /findings -->\nEnd.\n"
    )
    assert rd.render_docs([str(doc)], write=False) == [f"{doc}: {results}"]
    assert "typed by hand" in doc.read_text()  # checking writes nothing
    assert rd.render_docs([str(doc)]) == [f"{doc}: {results}"] and rd.render_docs([str(doc)]) == []
    text = doc.read_text()
    assert text.startswith("Intro.\n") and text.endswith("\n<!-- /findings -->\nEnd.\n")
    assert "Demo world, matched by samples" in text and "ERL ahead of RLVR (p = 0.000)" in text


def test_the_readme_and_docs_state_the_study_only_as_rendered_from_its_committed_results():
    # Every findings block in README.md and docs/ is what the committed results file it names renders to
    # (`python scripts/render_docs.py` rewrites them); and the README's section on the
    # embedded model quotes no evaluation figure outside such a block.
    import re

    rd = _script("render_docs")
    docs = [str(ROOT / "README.md"), *map(str, sorted((ROOT / "docs").glob("*.md")))]
    assert rd.render_docs(docs, write=False) == []
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## What the embedded model shows", 1)[1].split("\n## ", 1)[0]
    assert "<!-- findings " in section

    def typed(text):  # lines naming a variant beside an evaluation figure (a target's bound, after >= or <=, is none)
        return [
            line
            for line in text.splitlines()
            if re.search(r"ERL|RLVR", line)
            and re.search(r"\b0\.\d\d\b", re.sub(r"(?:[≥≤]|[<>]=)\s*[+−-]?0\.\d\d", "", line))
        ]

    assert not typed(rd.FINDINGS_BLOCK.sub("", section)), "evaluation figures typed by hand in the README"
    # docs/EMBEDDED.md, the study's page, likewise (a figure of the paper's own runs, named by its model, is a
    # citation, not a result of this study).
    page = rd.BANDS_BLOCK.sub("", rd.FINDINGS_BLOCK.sub("", (ROOT / "docs" / "EMBEDDED.md").read_text()))
    assert not [line for line in typed(page) if "Qwen3" not in line], "figures typed by hand in docs/EMBEDDED.md"
    # The notebooks' markdown, likewise: notebook 06 shows the findings files rendered from the results.
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        assert not typed(markdown), f"{path.name}: evaluation figures typed by hand: {typed(markdown)}"


def test_a_bands_block_is_rerendered_from_the_reports_it_names(tmp_path):
    rd = _script("render_docs")
    run = {
        "first_success": 0.4,
        "parse_rate": 1.0,
        "names_hole_rate": 1.0,
        "contradiction_rate": 0.0,
        "second_success": 0.7,
        "retry_success": 0.3,
        "reflection_gain": 0.4,
        "trace_success": 0.5,
        "trace_truncated": 0.25,
        "shuffled_success": 0.6,
        "swapped_success": 0.0,
        "initial_memory_success": 0.5,
        "good_memory_success": 0.9,
        "memory_gain": 0.4,
        "wrong_memory_success": 0.0,
        "kept_rate": 0.8,
    }
    pooled = {**run, "num_first": 256, "num_failed": 150, "num_memory_cases": 90}
    report = {
        "world": "demo",
        "runs": {"0": run},
        "pooled": pooled,
        "bands_met": {"first_success": True, "trace_truncated": False},
    }
    path = tmp_path / "bands.json"
    path.write_text(json.dumps(report))
    doc = tmp_path / "doc.md"
    doc.write_text(f"<!-- bands {path} -->\n| first-attempt success | 0.99 |\n<!-- /bands -->\n")
    assert rd.render_docs([str(doc)]) == [f"{doc}: {path}"] and rd.render_docs([str(doc)]) == []
    rows = {line.split(" | ")[0].lstrip("| "): line for line in doc.read_text().splitlines()}
    assert "| 0.40, n = 256 ✓ | 0.2–0.7 |" in rows["first-attempt success (what evaluation measures)"]
    assert "| 0.25 ✗ | 0–0.1 |" in rows["… its share cut at a length limit"]  # the w/o reflection retry's cut
    report["pooled"]["trace_truncated"] = 0.05
    path.write_text(json.dumps(report))
    assert rd.render_docs([str(doc)], write=False) == [f"{doc}: {path}"]  # a changed result is a stale table
