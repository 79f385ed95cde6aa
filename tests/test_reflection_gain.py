"""scripts/reflection_gain.py: the real-model reflection-gain measurement, its statistics, and the findings block in
docs/TRAINING.md that is rendered from its committed results."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("reflection_gain", ROOT / "scripts" / "reflection_gain.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rg():
    return _script()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from erl_lite.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_the_smoke_path_runs_every_task_and_keeps_each_failed_attempt(rg, tiny_dir, tmp_path):
    out = tmp_path / "gain.json"
    results = rg.main(["--model", tiny_dir, "--tiny", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))  # what was saved is what ran
    assert set(results["tasks"]) == set(rg.TASKS)
    for entry in results["tasks"].values():
        assert entry["rounds"][0]["seed"] == rg.SEEDS[0] and entry["rounds"][0]["first_attempts"] == 4
        assert len(entry["failed"]) == sum(r["failed"] for r in entry["rounds"]) > 0  # a random model fails
        for row in entry["failed"]:
            assert row["first"] < entry["threshold"] and row["reflection"].startswith(rg.PREFILL)
            assert {"task_id", "own", "plain", "fresh", "parsed"} <= set(row)
    text = rg.findings(results, "x.json")
    assert f"- arithmetic: `python scripts/reflection_gain.py --model {tiny_dir} --tiny --out {out}`" in text
    assert all(f"| {name} | 4 |" in text for name in rg.TASKS) and "Only 4 failed first attempts" in text


def test_a_second_run_into_the_same_results_keeps_the_other_tasks(rg, tiny_dir, tmp_path):
    out = tmp_path / "gain.json"
    kept = {**_entry([1, 0], [0, 0], [0, 1])}
    out.write_text(json.dumps({"model": "m", "command": "first run", "settings": {}, "tasks": {"frozenlake": kept}}))
    results = rg.main(["--model", tiny_dir, "--tiny", "--tasks", "arithmetic", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(results)) and "command" not in saved
    assert saved["tasks"]["frozenlake"] == {**kept, "command": "first run"}
    assert saved["tasks"]["arithmetic"]["command"].endswith(f"--tasks arithmetic --out {out}")


def _scripted(rg, tiny_dir, reflection: str):
    """An arithmetic trainer whose sampler answers right only under a system prompt holding "carry the ones",
    and writes ``reflection`` after the prefill; everything else is the library's."""
    from erl_lite.engine.generation import ScriptedGenerator

    trainer = rg.build(tiny_dir, "arithmetic", tiny=True)
    trainer.args.max_completion_length = trainer.args.max_reflection_length = 64

    def script(prompt: str) -> str:
        if prompt.endswith(rg.PREFILL):
            return reflection
        a, op, b = re.findall(r"Compute (\d+) ([-+*]) (\d+)\.", prompt)[-1]
        value = eval(f"{a} {op} {b}")  # one operation on two digits, from the dataset's own prompt
        return f"\\boxed{{{value if 'carry the ones' in prompt else value + 1}}}"

    trainer.ctx.generator = ScriptedGenerator(trainer.tokenizer, script)
    return trainer


def test_the_own_arm_is_the_second_attempt_under_the_reflection_written(rg, tiny_dir):
    trainer = _scripted(rg, tiny_dir, " Always carry the ones.</prompt>")
    played, rows = rg.measure_round(trainer, trainer.train_tasks[:6], seed=1)
    assert played == 6 and len(rows) == 6  # every first attempt is wrong
    assert [(r["own"], r["plain"], r["fresh"]) for r in rows] == [(1.0, 0.0, 0.0)] * 6
    entry = {"threshold": 1.0, "rounds": [{"seed": 1, "first_attempts": 6, "failed": 6}], "failed": rows}
    s = rg.summary(entry)
    assert s["own"][0] == 6 and s["plain"][0] == s["fresh"][0] == 0 and s["recorded"] == s["strict"] == 1.0
    assert s["own_vs_plain"] == (6, 0, pytest.approx(2 / 64))
    # Negative control: a reflection that says nothing guides nothing, and the strict rule does not count it parsed.
    trainer = _scripted(rg, tiny_dir, "</prompt>")
    _, rows = rg.measure_round(trainer, trainer.train_tasks[:6], seed=1)
    s = rg.summary({**entry, "failed": rows})
    assert s["own"][0] == 0 and s["recorded"] == s["strict"] == 0.0 and s["loose"] == 1.0


@pytest.mark.parametrize(
    "text, strict, loose",
    [
        ("<prompt>\n1. Avoid the hole at row 2.</prompt>", 1, 1),
        ("<prompt>\n1. Go Right first", 1, 1),  # cut by the length limit, but a rule
        ("<prompt>\n1.", 0, 1),  # the prefill alone: parsed by the earlier rule
        ("<prompt>\n1.</prompt>", 0, 1),  # closed at once
        ("<prompt>\n1.   \n  </prompt>", 0, 1),
        ("<prompt>\n1. 2.\n3. 4", 0, 1),  # numbers only
        ("<prompt>  </PROMPT>", 0, 0),
    ],
)
def test_parse_rates_under_the_librarys_rule_and_the_earlier_one(rg, text, strict, loose):
    rates = rg.parse_rates([{"reflection": text, "parsed": False}])
    assert {k: rates[k] for k in ("recorded", "strict", "loose")} == {"recorded": 0, "strict": strict, "loose": loose}
    # Which rule the run applied is read from its recorded flags.
    assert rates["rule"] == ("strict" if not strict else "neither")
    assert rg.parse_rates([{"reflection": text, "parsed": bool(loose)}])["rule"] == (
        "strict" if strict == loose else "loose"
    )


def test_the_statistics(rg):
    assert rg.mcnemar(5, 5) == 1.0 and rg.mcnemar(0, 0) == 1.0
    assert rg.mcnemar(10, 0) == pytest.approx(2 / 1024) and rg.mcnemar(0, 10) == rg.mcnemar(10, 0)
    assert rg.mcnemar(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    lo, hi = rg.wilson(0, 64)
    assert lo == 0.0 and hi == pytest.approx(1.96**2 / (64 + 1.96**2))  # Wilson's upper bound at k = 0
    lo, hi = rg.wilson(32, 64)
    assert lo < 0.5 < hi and hi - lo == pytest.approx(0.2373, abs=1e-3)


def _entry(own: list[int], plain: list[int], fresh: list[int]) -> dict:
    rows = [
        {"own": float(o), "plain": float(p), "fresh": float(f), "reflection": "<prompt>\n1. Go.", "parsed": True}
        for o, p, f in zip(own, plain, fresh)
    ]
    return {
        "threshold": 1.0,
        "rounds": [{"seed": 0, "first_attempts": 2 * len(rows), "failed": len(rows)}],
        "failed": rows,
    }


def test_the_verdict_says_beats_only_on_a_significant_paired_difference(rg):
    n = 64
    ahead = rg.verdict("t", rg.summary(_entry([1] * 20 + [0] * 44, [0] * n, [0] * n)))
    assert 'beats the "w/o reflection" retry' in ahead and "beats a fresh first attempt" in ahead
    tied = rg.verdict("t", rg.summary(_entry([1] * 10 + [0] * 54, [0] * 5 + [1] * 5 + [0] * 54, [1] * 10 + [0] * 54)))
    assert tied.count("is not told apart") == 2 and "beats" not in tied and "Only" not in tied and "None" not in tied
    nothing = rg.verdict("t", rg.summary(_entry([0] * n, [0] * n, [0] * n)))
    assert "None of the three won a single one of the 64 tasks." in nothing
    unplayed = {"threshold": 1.0, "rounds": [], "failed": []}
    assert rg.verdict("t", rg.summary(unplayed)) == "- t: not measured (no round finished in the time the run had)."
    all_won = {**unplayed, "rounds": [{"seed": 0, "first_attempts": 24, "failed": 0}]}
    assert rg.verdict("t", rg.summary(all_won)) == "- t: not measured (no failed first attempt)."
    behind = rg.verdict("t", rg.summary(_entry([0] * 30, [1] * 20 + [0] * 10, [0] * 30)))
    assert 'loses to the "w/o reflection" retry' in behind and "Only 30 failed first attempts" in behind


def test_a_findings_block_is_rerendered_from_the_results_it_names(rg, tmp_path):
    results = {"model": "m", "settings": {}, "tasks": {"t": {**_entry([1, 0], [0, 0], [0, 1]), "command": "c"}}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(results))
    doc = tmp_path / "doc.md"
    doc.write_text(f"A.\n<!-- reflection_gain {path} -->\ntyped by hand\n<!-- /reflection_gain -->\nB.\n")
    assert rg.render_docs([str(doc)], write=False) == [f"{doc}: {path}"] and "typed by hand" in doc.read_text()
    assert rg.render_docs([str(doc)]) == [f"{doc}: {path}"] and rg.render_docs([str(doc)]) == []
    assert "| t | 4 | 0.50 | 2 |" in doc.read_text()


def test_docs_training_states_the_committed_measurement(rg):
    text = (ROOT / "docs" / "TRAINING.md").read_text()
    blocks = rg.BLOCK.findall(text)
    assert len(blocks) == 1 and (ROOT / blocks[0][1]).is_file()
    assert rg.render_docs([str(ROOT / "docs" / "TRAINING.md")], write=False) == []
    results = json.loads((ROOT / blocks[0][1]).read_text())
    assert set(results["tasks"]) == set(rg.TASKS) and results["model"] == "model"
    for entry in results["tasks"].values():  # the run applied one of the two rules the block names
        assert rg.parse_rates(entry["failed"])["rule"] in ("strict", "loose")
    assert "parse 1.00" not in text and "second attempts with a rulebook 1.00" not in text
