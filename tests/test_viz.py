"""Tests for erl_lite.viz: plots, the attempt-pair view, and the widgets' static fallback."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure

from erl_lite.history import History
from erl_lite.records import StepRecord
from erl_lite.viz import (attempt_pair_text, memory_table, memory_viewer, plot_advantages,
                          plot_eval, plot_gate_rate, plot_losses, plot_memory, plot_overview,
                          plot_rewards, reflection_browser, save_figures, show_attempt_pair,
                          synthetic_history, word_diff)
from erl_lite.viz._style import NO_DATA, smooth
from erl_lite.viz.pairs import assistant_actions, select_pair
from erl_lite.viz.widgets import StaticView, is_static

STEPS = 12


@pytest.fixture(scope="module")
def hist() -> History:
    return synthetic_history(steps=STEPS, seed=0)


@pytest.fixture(scope="module")
def rlvr() -> History:
    return synthetic_history(steps=STEPS, seed=1, baseline=True)


def _labelled(ax) -> None:
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


def _texts(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


# ---------------------------------------------------------------- plots on a full run

@pytest.mark.parametrize("fn, n_lines", [
    (plot_rewards, 3), (plot_gate_rate, 1), (plot_losses, 4), (plot_advantages, 3),
    (plot_eval, 2),
])
def test_curve_plots_draw_one_line_per_series(hist, fn, n_lines):
    fig = fn(hist)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    _labelled(ax)
    assert len(ax.lines) == n_lines
    assert ax.get_legend() is not None
    assert NO_DATA not in _texts(fig)


def test_rewards_plot_the_logged_values(hist):
    ax = plot_rewards(hist).axes[0]
    first = next(line for line in ax.lines if line.get_label() == "first attempt")
    assert list(first.get_xdata()) == list(range(1, STEPS + 1))
    assert list(first.get_ydata()) == pytest.approx(hist.series("reward/first")[1])
    assert plot_rewards(hist, metric="success").axes[0].get_ylabel() == "success rate (0–1)"
    with pytest.raises(ValueError):
        plot_rewards(hist, metric="loss")


def test_baseline_adds_dashed_curves(hist, rlvr):
    ax = plot_rewards(hist, baseline=rlvr).axes[0]
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(ax.lines) == 5 and len(dashed) == 2
    assert all(line.get_label().startswith("RLVR") for line in dashed)
    assert len(plot_eval(hist, baseline=rlvr).axes[0].lines) == 4


def test_smoothing_keeps_raw_faint_and_smooths(hist):
    ax = plot_gate_rate(hist, smoothing=0.6).axes[0]
    raw, smoothed = ax.lines
    assert raw.get_alpha() == pytest.approx(0.25)
    assert list(raw.get_ydata()) != pytest.approx(list(smoothed.get_ydata()))
    assert smooth([0.5] * 5, 0.9) == pytest.approx([0.5] * 5)  # debiased: no pull to zero


def test_memory_plot_has_bars_and_size_line(hist):
    fig = plot_memory(hist)
    ax, right = fig.axes
    _labelled(ax)
    assert right.get_ylabel() == "rulebooks held"
    assert len(ax.patches) == STEPS  # one bar per step (zero-height ones included)
    assert [p.get_height() for p in ax.patches] == hist.series("memory/writes")[1]
    assert len(right.lines) == 1


def test_overview_has_six_labelled_panels(hist, rlvr):
    fig = plot_overview(hist, baseline=rlvr)
    panels = fig.axes[:6]
    for ax in panels:
        _labelled(ax)
    assert "RLVR" in fig._suptitle.get_text()


def test_figures_are_closed_in_pyplot(hist):
    before = set(plt.get_fignums())
    plot_rewards(hist)
    plot_overview(hist)
    assert set(plt.get_fignums()) == before


def test_memory_table_follows_samples(hist):
    table = memory_table(hist)
    assert [step for step, _ in table] == [s["step"] for s in hist.samples]
    for (step, text), sample in zip(table, hist.samples):
        assert text == "\n---\n".join(sample["memory_after"])
    assert any(text for _, text in table)  # the synthetic run does fill memory


# ---------------------------------------------------------------- empty and partial runs

ALL_PLOTS = [plot_rewards, plot_gate_rate, plot_memory, plot_losses, plot_advantages,
             plot_eval, plot_overview]


@pytest.mark.parametrize("fn", ALL_PLOTS)
def test_empty_history_says_no_data(fn):
    fig = fn(History())
    assert NO_DATA in _texts(fig)
    for ax in fig.axes:
        assert not ax.lines
        _labelled(ax)


@pytest.mark.parametrize("fn", ALL_PLOTS)
def test_single_step_history(fn):
    fig = fn(synthetic_history(steps=1))
    ax = fig.axes[0]
    if fn is plot_eval:  # the synthetic run evaluates every 5 steps
        assert NO_DATA in _texts(fig)
    else:
        assert ax.lines or ax.patches
    lo, hi = ax.get_xlim()
    assert hi - lo >= 2  # widened so the integer tick locator stays integer


def test_history_without_eval_or_samples():
    h = synthetic_history(steps=4, with_samples=False)
    assert not h.of_kind("eval") and not h.samples
    assert len(plot_rewards(h).axes[0].lines) == 2
    assert NO_DATA in _texts(plot_eval(h))
    assert memory_table(h) == []
    assert "no sampled step records" in str(reflection_browser(h, static=True))
    assert "no sampled step records" in str(memory_viewer(h, static=False))
    with pytest.raises(ValueError, match="no sampled step records"):
        show_attempt_pair(h)


def test_hand_written_records_with_missing_keys():
    rows = [{"reward/first": 0.2}, {"reward/first": "n/a"}, {"reward/first": 0.6},
            {"kind": "eval", "eval/reward": float("nan")}]
    ax = plot_rewards(rows).axes[0]
    (line,) = ax.lines
    assert list(line.get_xdata()) == [1, 3] and list(line.get_ydata()) == [0.2, 0.6]
    assert NO_DATA in _texts(plot_memory(rows))


def test_memory_size_falls_back_to_samples(hist):
    trimmed = [{k: v for k, v in r.items() if not k.startswith("memory/")}
               for r in hist.records]
    fig = plot_memory(History(records=trimmed, samples=hist.samples))
    (line,) = fig.axes[1].lines
    assert list(line.get_xdata()) == [s["step"] for s in hist.samples]


# ---------------------------------------------------------------- files

def test_save_figures_writes_pngs(tmp_path, hist, rlvr):
    paths = save_figures(hist, tmp_path / "figs", baseline=rlvr)
    names = [p.rsplit("/", 1)[-1] for p in paths]
    assert names == ["rewards.png", "gate_rate.png", "memory.png", "losses.png", "eval.png",
                     "overview.png"]
    for p in paths:
        with open(p, "rb") as f:
            data = f.read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert len(save_figures(History(), tmp_path / "empty")) == 6


def test_load_from_history_jsonl(tmp_path, hist):
    on_disk = History(out_dir=str(tmp_path))
    for r in hist.records:
        on_disk.log({k: v for k, v in r.items() if k != "kind"}, kind=r["kind"])
    for s in hist.samples:
        on_disk.log_sample(s)
    fig = plot_rewards(tmp_path / "history.jsonl")
    assert len(fig.axes[0].lines) == 3
    assert len(plot_memory(str(tmp_path)).axes) == 2
    view = reflection_browser(str(tmp_path / "history.jsonl"), static=True)
    assert f"step {hist.samples[0]['step']}" in str(view)


# ---------------------------------------------------------------- the attempt pair

def test_attempt_pair_html_shows_every_phase(hist):
    record = hist.samples[0]
    pair = select_pair(record)
    refl, first, second = pair["reflection"], pair["first"], pair["second"]
    assert refl is not None and second is not None
    html_text = show_attempt_pair(hist)
    assert refl["rulebook"].replace("`", "") in html_text.replace("`", "")
    for attempt in (first, second):
        for line in assistant_actions(attempt).splitlines():
            assert line in html_text
    assert first["feedback"] in html_text and second["feedback"] in html_text
    assert "&lt;prompt&gt;" in html_text and "<prompt>" not in html_text  # escaped
    assert "line-through" in html_text  # the diff marks a removed word


def test_attempt_pair_text_and_selection(hist):
    record = next(r for r in hist.samples[1:] if r["retries"])
    target = record["retries"][-1]["reflection"]
    text = attempt_pair_text(record, task_id=target["task_id"], index=target["index"])
    assert text.splitlines()[0] == (f"=== step {record['step']} · task {target['task_id']} · "
                                    f"rollout #{target['index']} ===")
    assert "FIRST ATTEMPT" in text and "SECOND ATTEMPT" in text and "[-" in text
    obj = StepRecord(step=7, tasks=[], first_attempts=[], retries=[],
                     memory_before=[], memory_after=[], metrics={})
    with pytest.raises(ValueError, match="no first attempt"):
        show_attempt_pair(obj)
    with pytest.raises(ValueError, match="sampled steps"):
        show_attempt_pair(hist, step=999)


def test_pair_of_a_rollout_that_passed_the_gate(hist):
    for record in hist.samples:
        passed = [a for a in record["first_attempts"] if a["success"]]
        if passed:
            a = passed[0]
            text = attempt_pair_text(record, task_id=a["task_id"], index=a["index"])
            assert "passed the gate" in text and "WHAT CHANGED" not in text
            return
    pytest.fail("synthetic run has no successful first attempt")


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab \n", max_size=30), st.text(alphabet="ab \n", max_size=30))
def test_word_diff_reconstructs_both_sides(a, b):
    ops = word_diff(a, b)
    assert "".join(t for op, t in ops if op in "=-") == a
    assert "".join(t for op, t in ops if op in "=+") == b


# ---------------------------------------------------------------- widgets

def test_static_browsers_show_the_first_sample(hist):
    first = hist.samples[0]
    view = reflection_browser(hist, static=True)
    assert isinstance(view, StaticView)
    assert str(view).startswith(f"=== step {first['step']}")
    assert first["retries"][0]["reflection"]["rulebook"].replace("`", "") in view._repr_html_().replace(
        "`", "")
    mem = memory_viewer(hist, static=True, step=hist.samples[-1]["step"])
    assert str(mem).splitlines()[0] == f"=== memory after step {hist.samples[-1]['step']} ==="


def test_static_detection(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("ERL_LITE_STATIC", raising=False)
    assert is_static() is True  # pytest is not an IPython kernel
    assert is_static(False) is False
    monkeypatch.setenv("ERL_LITE_STATIC", "1")
    assert is_static() is True and is_static(False) is False


def test_interactive_browser_follows_the_slider(hist):
    pytest.importorskip("ipywidgets")
    box = reflection_browser(hist, static=False)
    (slider, picker), mode, out = box.children[0].children, box.children[1], box.children[2]
    assert f"Step {hist.samples[0]['step']}" in out.value
    slider.value = hist.samples[1]["step"]
    assert f"Step {hist.samples[1]['step']}" in out.value
    mode.value = "passed gate"
    assert all("2nd –" in label for label, _ in picker.options)
    viewer = memory_viewer(hist, static=False)
    viewer.children[0].value = hist.samples[-1]["step"]
    assert f"after step {hist.samples[-1]['step']}" in viewer.children[1].value
