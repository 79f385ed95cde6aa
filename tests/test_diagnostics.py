"""The health checks (issue "Is it learning?"): every check fires on a broken history and stays silent
on a healthy one; one noisy step never fires; a live run and the report agree; warnings reach the
terminal, ``history.jsonl`` and the trackers; ``raise`` stops a run keeping its work; the pre-flight
sees a missing template, a doubled one, bad special tokens and misnamed target modules; and
``erl-lite doctor`` reports on finished, crashed and broken runs.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from erl_lite.cli import main
from erl_lite.config import ERLConfig
from erl_lite.diagnostics import CHECKS, CHECKS_BY_NAME, DiagnosticError, RunFacts, scan
from erl_lite.diagnostics.checks import fired_at
from erl_lite.diagnostics.preflight import chat_findings, token_findings, trainable_findings
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.history import History
from erl_lite.integrations.reporting import Reporter
from erl_lite.metric_names import (
    ADVANTAGE_KEYS,
    DIAGNOSTICS_PREFIX,
    GATE_RATE,
    GRAD_NORM,
    INTERNALIZATION_WEIGHT,
    KL,
    LOSS_TOTAL,
    MEMORY_TOTAL_WRITES,
    OPTIM_SKIPPED_STEPS,
    OPTIM_STEPS,
    REFLECTION_PARSE_RATE,
    REWARD_FIRST_GATED,
    REWARD_SECOND,
    SAMPLES_KEYS,
    SUCCESS_FIRST,
    SUCCESS_SECOND,
    TRUNCATED_FIRST,
    TRUNCATED_REFLECTION,
    TRUNCATED_SECOND,
    WEIGHT_UPDATE,
    ZERO_STD_FIRST,
)
from erl_lite.metrics import METRIC_GLOSSARY
from erl_lite.records import FIRST, INTERNALIZATION
from erl_lite.run.report import diagnose
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def healthy(step: int) -> dict:
    """A step record of a run that learns: some groups silent, reflections parse, second attempts help."""
    return {
        "kind": "train",
        "step": step,
        ZERO_STD_FIRST: 0.4 + 0.05 * (step % 3),
        SUCCESS_FIRST: 0.5,
        SUCCESS_SECOND: 0.7,
        REWARD_SECOND: 0.7,
        REWARD_FIRST_GATED: 0.0,
        GATE_RATE: 0.5,
        REFLECTION_PARSE_RATE: 1.0,
        MEMORY_TOTAL_WRITES: 5.0 * step,
        SAMPLES_KEYS[INTERNALIZATION]: 8.0,
        INTERNALIZATION_WEIGHT: 0.7,
        TRUNCATED_FIRST: 0.0,
        TRUNCATED_REFLECTION: 0.1,
        TRUNCATED_SECOND: 0.0,
        OPTIM_STEPS: 2.0,
        WEIGHT_UPDATE: 1e-4,
        GRAD_NORM: 0.8,
        ADVANTAGE_KEYS[FIRST]: 0.5,
        OPTIM_SKIPPED_STEPS: 0.0,
        LOSS_TOTAL: 0.1,
        KL: 0.01 + 0.001 * (step % 2),
    }


#: What breaks each check, as the records' values at step s.
BROKEN = {
    "solved": lambda s: {ZERO_STD_FIRST: 0.875, SUCCESS_FIRST: 0.97, GATE_RATE: 0.03},
    "stuck": lambda s: {ZERO_STD_FIRST: 1.0, SUCCESS_FIRST: 0.0, SUCCESS_SECOND: 0.0, GATE_RATE: 1.0},
    "no_signal": lambda s: {ZERO_STD_FIRST: 1.0, SUCCESS_FIRST: 0.5},
    "parse_rate": lambda s: {REFLECTION_PARSE_RATE: 0.1},
    "memory_empty": lambda s: {MEMORY_TOTAL_WRITES: 0.0},
    # τ sorts nothing: rewards differ within groups (the healthy 0.4-0.5 silent share) but the gate is fixed
    "gate_always": lambda s: {GATE_RATE: 1.0, SUCCESS_FIRST: 0.0, SUCCESS_SECOND: 0.0},
    "gate_never": lambda s: {
        GATE_RATE: 0.0,
        SUCCESS_FIRST: 1.0,
        SUCCESS_SECOND: None,
        REWARD_SECOND: None,
        REWARD_FIRST_GATED: None,
    },
    "second_not_better": lambda s: {REWARD_SECOND: 0.2, REWARD_FIRST_GATED: 0.3},
    "internalization_zero": lambda s: {INTERNALIZATION_WEIGHT: 0.0},
    "truncation": lambda s: {TRUNCATED_REFLECTION: 0.8},
    "frozen_weights": lambda s: {WEIGHT_UPDATE: 0.0},
    "zero_grad": lambda s: {GRAD_NORM: 0.0},
    "large_step": lambda s: {WEIGHT_UPDATE: 0.2},  # 10% of the weights' norm a step (2 steps)
    "non_finite": lambda s: {OPTIM_SKIPPED_STEPS: 1.0, GRAD_NORM: math.nan},
    "kl_growth": lambda s: {KL: 0.01 * 2**s},
    "off_policy": lambda s: {"onpolicy/tokens": 40.0, "onpolicy/gap_mean/first": 0.3},
}


def history(steps: int = 8, broken: str | None = None, at: set[int] | None = None) -> list[dict]:
    """``steps`` records, broken the ``broken`` way at the steps ``at`` (default: all)."""
    rows = []
    for s in range(1, steps + 1):
        row = healthy(s)
        if broken and (at is None or s in at):
            row.update(BROKEN[broken](s))
        rows.append(row)
    return rows


def names(findings) -> list[str]:
    return [f.name for f in findings]


def test_every_check_has_a_broken_history_here():
    assert set(BROKEN) == set(CHECKS_BY_NAME)


def test_a_healthy_history_fires_nothing():
    assert scan(history(12), RunFacts()) == []


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_check_fires_on_its_broken_history(name):
    found = [f for f in scan(history(8, name), RunFacts()) if f.name == name]
    assert len(found) == 1, names(scan(history(8, name), RunFacts()))
    f = found[0]
    assert f.step == CHECKS_BY_NAME[name].window  # as soon as its window is full
    assert f.saw and f.means and f.tries and name in f.message()


@pytest.mark.parametrize("name", sorted(n for n in BROKEN if CHECKS_BY_NAME[n].window > 1))  # large_step: one is
def test_one_noisy_step_never_fires(name):  # enough, by design
    assert name not in names(scan(history(8, name, at={4}), RunFacts()))


def test_once_per_episode_and_again_after_a_healthy_stretch():
    rows = history(20, "parse_rate", at=set(range(1, 8)) | set(range(12, 21)))
    found = [f for f in scan(rows, RunFacts()) if f.name == "parse_rate"]
    assert [(f.step, f.last_step) for f in found] == [(3, 7), (14, 20)]


@pytest.mark.parametrize("name", ["parse_rate", "kl_growth", "memory_empty", "solved"])
def test_the_live_checks_and_the_report_agree(name):
    rows = history(15, name, at=set(range(1, 7)) | set(range(10, 16)))
    live = [(f.name, f.step) for i in range(1, len(rows) + 1) for f in fired_at(rows[:i], RunFacts())]
    assert sorted(live) == sorted((f.name, f.step) for f in scan(rows, RunFacts()))


def test_solved_is_told_from_stuck():
    """High zero-variance share: success near 1 is a note (solved), near 0 a warning (stuck)."""
    solved = diagnose(history(6, "solved"))
    stuck = diagnose(history(6, "stuck"))
    assert names(solved.findings) == ["solved"] and solved.healthy
    assert "stuck" in names(stuck.warnings) and "solved" not in names(stuck.findings)


def test_not_stuck_while_second_attempts_succeed():
    """ERL learns from successful second attempts even when first-attempt groups are silent."""
    rows = history(6, "stuck")
    for r in rows:
        r[SUCCESS_SECOND] = 0.6
    assert "stuck" not in names(scan(rows, RunFacts()))
    assert "stuck" in names(scan(rows, RunFacts(mode="rlvr")))


@pytest.mark.parametrize("name", ["gate_always", "gate_never", "parse_rate", "memory_empty", "second_not_better"])
def test_erl_only_checks_are_silent_under_rlvr(name):
    assert name not in names(scan(history(8, name), RunFacts(mode="rlvr")))


def test_memory_check_is_silent_without_memory():
    assert "memory_empty" not in names(scan(history(8, "memory_empty"), RunFacts(use_memory=False)))


def test_every_metric_a_check_reads_is_in_the_glossary():
    missing = {(c.name, key) for c in CHECKS for key in c.reads if key not in METRIC_GLOSSARY}
    assert not missing


def test_the_health_page_lists_every_check_with_what_it_reads():
    """docs/HEALTH.md's table of the checks (name, level, window, the metrics read) is CHECKS's, row for row."""
    rows = ["| check | level | window (steps) | reads |", "|---|---|---|---|"]
    rows += [f"| `{c.name}` | {c.level} | {c.window} | " + ", ".join(f"`{k}`" for k in c.reads) + " |" for c in CHECKS]
    with open(os.path.join(REPO, "docs", "HEALTH.md"), encoding="utf-8") as f:
        page = f.read()
    assert "\n".join(rows) in page


def test_the_committed_demo_run_has_no_warning_and_ends_solved():
    """``erl-lite demo``'s committed run (erl_lite/assets/demo, regenerated by scripts/make_assets.py)."""
    report = diagnose(History.load(os.path.join(REPO, "erl_lite", "assets", "demo")))
    assert report.healthy, str(report)
    assert names(report.findings)[-1] == "solved"
    assert report.findings[-1].last_step == report.steps  # solved to the end


# --- a live run ---------------------------------------------------------------------------------

ROWS = [{"prompt": f"Say {i}.", "answer": str(i)} for i in range(2)]


def hit(completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def trainer(tmp_path=None, script=lambda p: "1", tok=None, rows=ROWS, generator=None, **kw) -> ERLTrainer:
    tok = tok or tiny_tokenizer()
    settings = {
        "max_steps": 4,
        "num_tasks_per_step": 2,
        "num_generations": 2,
        "max_completion_length": 4,
        "max_reflection_length": 8,
        "eval_steps": 0,
        "progress_bar": False,
        "beta": 0.0,
        "output_dir": str(tmp_path) if tmp_path else None,
        **kw,
    }
    return ERLTrainer(
        tiny_model(tok),
        hit,
        ERLConfig.preset("cpu", **settings),
        rows,
        processing_class=tok,
        generator=generator or ScriptedGenerator(tok, script),
    )


def never_parses(prompt: str) -> str:
    """Answers wrong, and reflects without the <prompt> block (as SmolLM2 wrote '## Rewrite' forty times)."""
    return "## Rewrite" if "Reflect" in prompt or "rulebook" in prompt.lower() else "x"


def test_reflections_that_never_parse_warn_within_the_window(tmp_path, capsys):
    t = trainer(tmp_path, never_parses)
    t.train()
    window = CHECKS_BY_NAME["parse_rate"].window
    err = capsys.readouterr().err
    assert f"[parse_rate] at step {window}" in err and "reflection/parse_rate was 0.00" in err
    assert err.count("[parse_rate]") == 1  # once for the episode, not once per step
    events = [json.loads(line) for line in open(tmp_path / "history.jsonl")]
    marks = [e for e in events if e["kind"] == "diagnostic" and DIAGNOSTICS_PREFIX + "parse_rate" in e]
    assert [e["step"] for e in marks] == [window]
    assert "reflection/parse_rate" in marks[0]["message"]


@pytest.mark.parametrize("written", ["", " ", "</prompt>", " 2.\n3.</prompt>"])
def test_a_reflection_that_writes_nothing_after_the_prefill_fires_parse_rate(tmp_path, capsys, written):
    """The negative control of reflection/parse_rate under the documented prefill: the open tag and the list number
    are the prefill's, not the model's, so a model that adds no rule parses nothing and the check fires."""
    t = trainer(
        tmp_path,
        lambda p: written if "Reflect" in p or "rulebook" in p.lower() else "x",
        max_steps=3,
        reflection_prefill="<prompt>\n1.",
    )
    t.train()
    rates = [
        e.get(REFLECTION_PARSE_RATE) for e in map(json.loads, open(tmp_path / "history.jsonl")) if e["kind"] == "train"
    ]
    assert rates == [0.0, 0.0, 0.0]
    assert "[parse_rate] at step 3" in capsys.readouterr().err


def test_a_prefilled_reflection_that_states_a_rule_parses(tmp_path, capsys):
    """The positive side of the same setting: one word of rule after the prefill parses, and the check is silent."""
    t = trainer(
        tmp_path,
        lambda p: " Say 1.</prompt>" if "Reflect" in p or "rulebook" in p.lower() else "x",
        max_steps=3,
        reflection_prefill="<prompt>\n1.",
    )
    t.train()
    rates = [
        e.get(REFLECTION_PARSE_RATE) for e in map(json.loads, open(tmp_path / "history.jsonl")) if e["kind"] == "train"
    ]
    assert rates == [1.0, 1.0, 1.0] and "[parse_rate]" not in capsys.readouterr().err


def test_trackers_receive_the_diagnostic_marker():
    sent = []

    class Tracker:
        def __init__(self, config):
            pass

        def log_scalars(self, values, step):
            sent.append((step, values))

        def log_table(self, *a):
            pass

        def close(self):
            pass

    reporter = Reporter(ERLConfig(max_steps=4), ["rec"], {"rec": Tracker})
    h = History(reporter=reporter)
    from erl_lite.diagnostics import Monitor

    monitor = Monitor(lambda: "warn", RunFacts(), show=lambda text: None)
    for row in history(4, "parse_rate"):
        h.log({k: v for k, v in row.items() if k != "kind"})
        monitor.after_step(h)
    assert (3, {DIAGNOSTICS_PREFIX + "parse_rate": 1.0}) in sent


def test_raise_stops_the_run_and_keeps_the_finished_steps(tmp_path):
    t = trainer(tmp_path, never_parses, diagnostics="raise", max_steps=6)
    with pytest.raises(DiagnosticError, match="parse_rate") as caught:
        t.train()
    assert t.step == 3 and os.path.isdir(tmp_path / "checkpoint-3")
    assert any("saved in" in note for note in getattr(caught.value, "__notes__", []))
    t.args.diagnostics = "warn"  # fixed, or accepted: the same trainer continues
    t.train()
    assert t.step == 6


def test_off_runs_no_check(tmp_path, capsys):
    t = trainer(tmp_path, never_parses, diagnostics="off", tok=tiny_tokenizer(chat_template=False))
    t.train()
    assert "erl_lite warning" not in capsys.readouterr().err
    assert not [r for r in t.history.records if r["kind"] == "diagnostic"]


@pytest.mark.parametrize("level", ["off", "warn", "raise"])
def test_the_monitor_computes_pre_flight_findings_unless_off(level):
    """The monitor owns the level: under ``off`` it does not even compute the findings (the trainer hands it the
    computation), so no caller has to check the level first."""
    from erl_lite.diagnostics import Monitor
    from erl_lite.diagnostics.checks import NOTE, Finding

    calls, shown = [], []
    note = Finding("system_dropped", NOTE, 0, "saw", "means", "tries")
    Monitor(lambda: level, RunFacts(), show=shown.append).preflight(lambda: calls.append(1) or [note])
    assert (len(calls), len(shown)) == ((0, 0) if level == "off" else (1, 1))


def test_frozen_weights_fire_in_a_real_run_with_a_vanishing_learning_rate(tmp_path):
    """weights/update_ratio is measured: lr 1e-12 moves nothing, lr 1e-2 moves the adapter (the second
    attempts succeed under a rulebook, so internalization has rows to learn from)."""

    def learns(prompt):
        if "Reflect" in prompt or "rulebook" in prompt.lower():
            return "<prompt>ZZ</prompt>"
        return ("1" if "1" in prompt.split("Say")[-1] else "0") if "ZZ" in prompt else "x"

    frozen = trainer(None, learns, learning_rate=1e-12, max_steps=4, max_reflection_length=24).train()
    moving = trainer(None, learns, learning_rate=1e-2, max_steps=4, max_reflection_length=24).train()
    assert "frozen_weights" in names(diagnose(frozen, RunFacts(learning_rate=1e-12)).warnings)
    assert "frozen_weights" not in names(diagnose(moving).warnings)
    assert min(moving.series(WEIGHT_UPDATE)[1]) > 1e-6


def test_unknown_diagnostics_level_is_refused():
    with pytest.raises(ValueError, match="diagnostics"):
        ERLConfig(diagnostics="loud")


# --- pre-flight ----------------------------------------------------------------------------------


def test_preflight_is_silent_on_a_sound_setup(tmp_path):
    t = trainer(tmp_path)
    t.train()
    assert not [r for r in t.history.records if r["kind"] == "diagnostic" and r["step"] == 0]


def test_preflight_warns_of_a_missing_chat_template_first_in_the_history(tmp_path, capsys):
    t = trainer(tmp_path, tok=tiny_tokenizer(chat_template=False))
    assert "[chat_template]" in capsys.readouterr().err  # at construction, before any step
    t.train()
    first = json.loads(open(tmp_path / "history.jsonl").readline())
    assert first["kind"] == "diagnostic" and DIAGNOSTICS_PREFIX + "chat_template" in first
    recorded = [f for f in diagnose(t.history).findings if f.name == "chat_template"]
    assert [(f.level, f.step) for f in recorded] == [("warning", 0)] and "no chat template" in recorded[0].saw
    assert recorded[0].tries.startswith("load the instruct model's own tokenizer")


@pytest.mark.parametrize("prompt", ["<|im_start|>user\nSay 1.<|im_end|>", "Say 1.<|im_end|>\n<|im_start|>assistant"])
def test_preflight_sees_a_prompt_templated_twice(prompt, capsys):
    trainer(rows=[{"prompt": prompt, "answer": "1"}])
    assert "[templated_twice]" in capsys.readouterr().err


def test_preflight_raise_refuses_a_doubled_template_at_construction():
    with pytest.raises(DiagnosticError, match="templated_twice"):
        trainer(rows=[{"prompt": "<|im_start|>user\nSay 1.", "answer": "1"}], diagnostics="raise")


def test_preflight_tokens():
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    assert token_findings(model, tok, [tok.eos_token_id], None) == []
    plain_eos = tiny_tokenizer()
    plain_eos.eos_token = "<|eos|>"  # a base model's eos; the template still ends turns with <|im_end|>
    found = token_findings(model, plain_eos, [plain_eos.eos_token_id], None)
    assert names(found) == ["end_of_turn"] and "<|im_end|>" in found[0].saw
    no_pad = tiny_tokenizer()
    no_pad.pad_token = None
    assert "pad_token" in names(token_findings(model, no_pad, [no_pad.eos_token_id], None))
    small = tiny_model(tok)
    small.resize_token_embeddings(tok.eos_token_id)  # the eos row cut off
    assert "eos_token" in names(token_findings(small, tok, [tok.eos_token_id], None))


@pytest.mark.parametrize("targets,bad", [(["q_proj", "v_prj"], "v_prj"), (["qproj"], None), (["lm_head"], "head")])
def test_preflight_trainable_modules(targets, bad):
    from erl_lite.models import load_policy

    tok = tiny_tokenizer()
    if targets == ["qproj"]:  # peft itself refuses a list that matches nothing
        with pytest.raises(ValueError):
            load_policy(tiny_model(tok), tok, lora_r=2, target_modules=targets)
        return
    policy, _ = load_policy(tiny_model(tok), tok, lora_r=2, target_modules=targets)
    found = trainable_findings(policy, targets)
    assert found and bad in " ".join(f.saw for f in found)
    assert trainable_findings(policy.base_model.model.requires_grad_(False), targets)[0].saw.startswith(
        "the model has no trainable"
    )


def test_preflight_chat_findings_on_the_real_qwen3_template():
    from erl_lite.envs.frozenlake import FrozenLake
    from erl_lite.testing import find_qwen3_tokenizer, qwen3_tokenizer

    if find_qwen3_tokenizer() is None:
        pytest.skip("the Qwen3 tokenizer is not on this machine")
    env = FrozenLake()
    assert chat_findings(qwen3_tokenizer(), env, env.train_tasks(1)[0], {"enable_thinking": False}) == []


# --- erl-lite doctor -------------------------------------------------------------------------------


def write_run(folder, rows, settings=None):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "history.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    if settings is not None:
        with open(os.path.join(folder, "training_args.json"), "w") as f:
            json.dump(settings, f)


def test_doctor_on_a_healthy_run_prints_a_clean_report(tmp_path, capsys):
    write_run(tmp_path, history(10), {"max_steps": 10, "mode": "erl"})
    assert main(["doctor", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "No warning" in out and "10 training steps of 10" in out


def test_doctor_names_what_broke(tmp_path, capsys):
    write_run(tmp_path, history(10, "truncation"), {"max_steps": 10, "max_reflection_length": 96})
    assert main(["doctor", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "truncation (steps 3-10)" in out and "max_reflection_length=96" in out


def test_doctor_on_a_crashed_run_reads_its_checkpoint_and_torn_history(tmp_path, capsys):
    """A run stopped by an error: no training_args.json at the root, the last line cut mid-write."""
    t = trainer(tmp_path, never_parses, max_steps=6, save_steps=2)
    t.train()
    os.remove(tmp_path / "training_args.json")
    with open(tmp_path / "history.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 7, "rew')
    assert main(["doctor", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "parse_rate" in captured.out and "6 training steps of 6" in captured.out
    assert "erl-lite doctor: warning:" in captured.err and "the last line was cut off" in captured.err


def test_doctor_says_when_a_run_stopped_early(tmp_path, capsys):
    write_run(tmp_path, history(4), {"max_steps": 30})
    main(["doctor", str(tmp_path)])
    assert "stopped, or is still running, at step 4" in capsys.readouterr().out


@pytest.mark.parametrize("make", ["missing", "empty_folder"])
def test_doctor_refuses_what_is_not_a_run(tmp_path, capsys, make):
    folder = tmp_path / "nope" if make == "missing" else tmp_path
    assert main(["doctor", str(folder)]) == 2
    assert "erl-lite doctor: error:" in capsys.readouterr().err


# --- what the doctor is given that is no erl_lite run ------------------------------------------------
def _trl_log(step: int) -> dict:
    """A GRPOTrainer-style log line: it shares ``kl`` and ``grad_norm`` (and TRL's reward names) with erl_lite's."""
    return {
        "step": step,
        "loss": 0.1,
        "grad_norm": 0.5,
        "kl": 0.01,
        "learning_rate": 1e-6,
        "epoch": step / 10,
        "reward": 0.5,
        "reward_std": 0.2,
        "frac_reward_zero_std": 0.3,
        "completions/mean_length": 40.0,
    }


@pytest.mark.parametrize(
    "rows",
    [
        [_trl_log(s) for s in range(1, 11)],
        [{"kind": "train", **_trl_log(s)} for s in range(1, 11)],  # even one tagged as erl_lite tags its records
        [{"step": s, "kl": 0.01 * s, "grad_norm": 1.0, "clip_ratio": 0.0} for s in range(1, 11)],
    ],
    ids=["grpo_log", "grpo_log_with_kind", "kl_and_grad_norm_only"],
)
def test_doctor_gives_a_foreign_history_no_clean_bill(tmp_path, capsys, rows):
    write_run(tmp_path, rows)
    assert main(["doctor", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "No warning" not in captured.out
    assert "not an erl_lite history" in captured.err and "grad_norm" in captured.err and "kl" in captured.err


@pytest.mark.parametrize("given", ["folder", "file"])
def test_doctor_names_a_trl_run_it_is_given(tmp_path, capsys, given):
    state = {
        "global_step": 10,
        "log_history": [{"step": s, "loss": 0.1, "grad_norm": 0.5, "kl": 0.01} for s in range(1, 11)],
    }
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    target = tmp_path if given == "folder" else tmp_path / "trainer_state.json"
    assert main(["doctor", str(target)]) == 2
    err = capsys.readouterr().err
    assert "trainer_state.json" in err and "transformers" in err and "not an erl_lite run" in err
    assert "Traceback" not in err


def test_doctor_still_judges_an_erl_lite_history_that_also_holds_kl(tmp_path, capsys):
    write_run(tmp_path, history(10, "kl_growth"), {"max_steps": 10})
    assert main(["doctor", str(tmp_path)]) == 1
    assert "kl_growth" in capsys.readouterr().out
