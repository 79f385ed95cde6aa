"""Tests for erl_lite.viz: plots, the attempt-pair view, and the widgets' static fallback."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure
from synthetic import synthetic_history

from erl_lite.history import History
from erl_lite.records import StepRecord
from erl_lite.viz import (
    attempt_pair_text,
    memory_viewer,
    plot_advantages,
    plot_eval,
    plot_gate_rate,
    plot_losses,
    plot_memory,
    plot_overview,
    plot_rewards,
    reflection_browser,
    rewards_are_binary,
    save_figures,
    show_attempt_pair,
    word_diff,
)
from erl_lite.viz._style import NO_DATA
from erl_lite.viz.pairs import assistant_actions, rule_diff, select_pair
from erl_lite.viz.plots import NO_EVAL
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


def _graded(history: History) -> History:
    """The same run with partial credit: rewards above the success rates."""
    records = []
    for r in history.records:
        r = dict(r)
        for key in [k for k in r if k.startswith("success/") or k == "eval/success"]:
            r[key] = r[key] * 0.8
        records.append(r)
    return History(records=records, samples=history.samples)


def _drawn(ax) -> list:
    """The series a reader sees: labelled curves, then evaluation point sets (error-bar containers)."""
    return [line for line in ax.lines if not line.get_label().startswith("_")] + list(ax.containers)


def _texts(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


# ---------------------------------------------------------------- plots on a full run


@pytest.mark.parametrize(
    "fn, n_lines",
    [
        (plot_rewards, 3),
        (plot_gate_rate, 1),
        (plot_losses, 4),
        (plot_advantages, 3),
        (plot_eval, 1),  # 0/1 rewards: evaluation reward and success are one curve
    ],
)
def test_curve_plots_draw_one_line_per_series(hist, fn, n_lines):
    fig = fn(hist)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    _labelled(ax)
    assert len(_drawn(ax)) == n_lines
    assert ax.get_legend() is not None
    assert NO_DATA not in _texts(fig)


def test_rewards_plot_the_logged_values(hist):
    ax = plot_rewards(hist).axes[0]
    first = next(line for line in ax.lines if line.get_label() == "first attempt")
    assert list(first.get_xdata()) == list(range(1, STEPS + 1))
    assert list(first.get_ydata()) == pytest.approx(hist.series("reward/first")[1])
    assert plot_rewards(hist, metric="success").axes[0].get_ylabel() == "reward = success rate (0–1)"
    assert plot_rewards(_graded(hist), metric="success").axes[0].get_ylabel() == "success rate (0–1)"
    with pytest.raises(ValueError):
        plot_rewards(hist, metric="loss")


def test_baseline_adds_dashed_curves(hist, rlvr):
    ax = plot_rewards(hist, baseline=rlvr).axes[0]
    dashed = [line for line in _drawn(ax)[:-2] if line.get_linestyle() == "--"]
    assert len(_drawn(ax)) == 5 and len(dashed) == 1 and dashed[0].get_label().startswith("RLVR")
    assert [c.get_label()[:4] for c in ax.containers] == ["eval", "RLVR"]
    assert len(plot_eval(hist, baseline=rlvr).axes[0].containers) == 2


def test_overview_has_six_labelled_panels_when_rewards_are_graded(hist, rlvr):
    graded = _graded(hist)
    fig = plot_overview(graded, baseline=_graded(rlvr))
    assert len(fig.axes) == 6
    for ax in fig.axes:
        _labelled(ax)
    titles = [ax.get_title() for ax in fig.axes]
    assert "Reward per phase" in titles and "Success rate per phase" in titles
    assert "RLVR" in fig._suptitle.get_text()


def test_binary_rewards_share_one_panel(hist, rlvr):
    assert rewards_are_binary(hist) and not rewards_are_binary(_graded(hist))
    fig = plot_overview(hist, baseline=rlvr)
    titles = [ax.get_title() for ax in fig.axes]
    assert len(fig.axes) == 5 and "Success rate per phase" not in titles
    reward_ax = fig.axes[0]
    assert reward_ax.get_title() == "Reward = success rate per phase (rewards are 0/1)"
    assert reward_ax.get_ylabel() == "reward = success rate (0–1)"
    # the merged panel spans two of the three columns
    assert reward_ax.get_position().width > 1.8 * fig.axes[1].get_position().width
    _labelled(reward_ax)


def _eval_lines(ax) -> list:
    return [c for c in ax.containers if "evaluation" in str(c.get_label())]


def test_evaluation_is_drawn_whenever_it_was_logged(hist):
    """A run with eval_steps=0 whose evaluations were logged by hand (before and after)."""
    train = [r for r in hist.records if r["kind"] == "train"]
    rows = train + [
        {"kind": "eval", "step": 0, "eval/reward": 0.2, "eval/success": 0.2},
        {"kind": "eval", "step": STEPS, "eval/reward": 0.7, "eval/success": 0.7},
    ]
    for fig in (plot_overview(rows), plot_overview(_graded(History(records=rows)))):
        (points,) = _eval_lines(fig.axes[0])
        assert list(points[0].get_xdata()) == [0, STEPS] and list(points[0].get_ydata()) == [0.2, 0.7]
    assert list(plot_eval(rows).axes[0].containers[0][0].get_ydata()) == [0.2, 0.7]


def test_a_run_without_evaluation_says_so(hist):
    train = [r for r in hist.records if r["kind"] == "train"]
    ax = plot_overview(train).axes[0]
    assert not _eval_lines(ax)
    assert any(NO_EVAL in t.get_text() for t in ax.texts)
    assert not any(NO_EVAL in t.get_text() for t in plot_overview(hist).axes[0].texts)


def test_overlapping_lines_stay_distinguishable(hist):
    """An RLVR run equal to the ERL run must not vanish under it (notebook 06's overlap)."""
    twin = History(records=[dict(r) for r in hist.records])
    ax = plot_rewards(hist, baseline=twin).axes[0]
    drawn = [line for line in ax.lines if not line.get_label().startswith("_")]
    look = lambda line: (
        line.get_linestyle(),
        line.get_marker(),
        str(line.get_markerfacecolor()),
        line.get_markersize(),
    )
    for a in drawn:
        for b in drawn:
            same_data = list(a.get_xdata()) == list(b.get_xdata()) and list(a.get_ydata()) == pytest.approx(
                list(b.get_ydata())
            )
            if a is not b and same_data:
                assert look(a) != look(b), (a.get_label(), b.get_label())
    for line in drawn:
        assert line.get_marker() not in (None, "None", "")
    base = [line for line in drawn if line.get_label().startswith("RLVR")]
    assert base and all(b.get_zorder() > max(x.get_zorder() for x in drawn if x not in base) for b in base)
    assert len({line.get_marker() for line in drawn if line not in base}) == len(drawn) - len(base)


def test_long_runs_keep_markers_on_every_curve():
    long = synthetic_history(steps=120, with_samples=False)
    for line in plot_rewards(long).axes[0].lines:
        assert line.get_marker() not in (None, "None", "")
        every = line.get_markevery()  # None, a stride, or the indices marked
        marks = len(every) if isinstance(every, list) else len(line.get_xdata()) / (every or 1)
        assert marks <= 21 or every in (None, 1)


def test_figures_are_closed_in_pyplot(hist):
    before = set(plt.get_fignums())
    plot_rewards(hist)
    plot_overview(hist)
    assert set(plt.get_fignums()) == before


def test_memory_plot_marks_each_held_rulebook_at_its_steps(hist):
    (ax,) = plot_memory(hist).axes
    _labelled(ax)
    (marks,) = ax.collections
    held = [(s["step"], "\n---\n".join(s["memory_after"])) for s in hist.samples if s["memory_after"]]
    texts = list(dict.fromkeys(t for _, t in held))
    assert [tuple(p) for p in marks.get_offsets()] == [(step, texts.index(t)) for step, t in held]


# ---------------------------------------------------------------- empty and partial runs

ALL_PLOTS = [plot_rewards, plot_gate_rate, plot_memory, plot_losses, plot_advantages, plot_eval, plot_overview]


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
        assert ax.lines or ax.collections
    lo, hi = ax.get_xlim()
    assert hi - lo >= 2  # widened so the integer tick locator stays integer


def test_history_without_eval_or_samples():
    h = synthetic_history(steps=4, with_samples=False)
    assert not h.of_kind("eval") and not h.samples
    assert len(plot_rewards(h).axes[0].lines) == 2
    assert NO_DATA in _texts(plot_eval(h))
    assert NO_DATA in _texts(plot_memory(h))
    assert "no sampled step records" in str(reflection_browser(h, static=True))
    assert "no sampled step records" in str(memory_viewer(h, static=False))
    with pytest.raises(ValueError, match="no sampled step records"):
        show_attempt_pair(h)


def test_hand_written_records_with_missing_keys():
    rows = [
        {"reward/first": 0.2},
        {"reward/first": "n/a"},
        {"reward/first": 0.6},
        {"kind": "eval", "eval/reward": float("nan")},
    ]
    ax = plot_rewards(rows).axes[0]
    (line,) = ax.lines
    assert list(line.get_xdata()) == [1, 3] and list(line.get_ydata()) == [0.2, 0.6]
    assert NO_DATA in _texts(plot_memory(rows))


# ---------------------------------------------------------------- files


def test_save_figures_writes_pngs(tmp_path, hist, rlvr):
    paths = save_figures(hist, tmp_path / "figs", baseline=rlvr)
    names = [p.rsplit("/", 1)[-1] for p in paths]
    assert names == ["rewards.png", "gate_rate.png", "memory.png", "losses.png", "eval.png", "overview.png"]
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
    assert len(_drawn(fig.axes[0])) == 3
    assert len(plot_memory(str(tmp_path)).axes) == 1
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
    assert text.splitlines()[0] == (
        f"=== step {record['step']} · task {target['task_id']} · rollout #{target['index']} ==="
    )
    assert "FIRST ATTEMPT" in text and "SECOND ATTEMPT" in text and "[-" in text
    obj = StepRecord(step=7, tasks=[], first_attempts=[], retries=[], memory_before=[], memory_after=[], metrics={})
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


#: (base prompt, rulebook, the rules a reader must see as new): instructions are a set of rules, so a rule the base
#: states elsewhere, or under another list number, is not new (a word diff marked "H is a hole." new in notebook 01).
RULE_CASES = [
    ("A is you. H is a hole. E is a hole.", "A is you. E is a hole. H is a hole.", []),
    ("A is you. H is a hole.", "A is you. E is a hole. H is a hole. G is a hole.", ["E is a hole.", "G is a hole."]),
    ("1. E is a hole.\n2. H is a hole.", "1. H is a hole.\n2. E is a hole.\n3. Avoid G.", ["3. Avoid G."]),
    ("Reach B. Avoid holes.", "- Avoid holes.\n- Reach B!", ["- Reach B!"]),
    ("", "1. E is a hole.", ["1. E is a hole."]),
]


@pytest.mark.parametrize("base, rulebook, new", RULE_CASES)
def test_instructions_are_compared_rule_by_rule_wherever_a_rule_stands(base, rulebook, new):
    from erl_lite.viz.pairs import diff_html

    ops = rule_diff(base, rulebook)
    assert "".join(t for op, t in ops if op in "=+") == rulebook  # the rulebook whole, in its order
    assert [t.strip() for op, t in ops if op == "+"] == new
    html = diff_html(base, rulebook, rule_diff)
    assert html.count("background:#dfd") == len(new)  # green: new rules only
    # In every view of a reflection: the attempt pair (HTML and text) and the reflection figure.
    record = synthetic_history(steps=2, seed=0).samples[-1]
    record = dict(
        record,
        retries=[
            dict(r, reflection=dict(r["reflection"], base_prompt=base, rulebook=rulebook)) for r in record["retries"]
        ],
    )
    pair = show_attempt_pair(record)
    instructions = pair.split("Instructions: base prompt → rulebook")[1].split("<b>Moves")[0]
    assert instructions.count("background:#dfd") == len(new)
    text = attempt_pair_text(record).split("instructions (base prompt -> rulebook): ")[1].split("\nmoves")[0]
    assert text.count("{+") == len(new)
    from erl_lite.viz import plot_reflection

    flagged = {t.get_text() for t in plot_reflection(record).axes[0].texts if t.get_bbox_patch() is not None}
    assert flagged == {w for rule in new for w in rule.split()}


# ---------------------------------------------------------------- widgets


def test_static_browsers_show_the_first_sample(hist):
    first = hist.samples[0]
    view = reflection_browser(hist, static=True)
    assert isinstance(view, StaticView)
    assert str(view).startswith(f"=== step {first['step']}")
    assert first["retries"][0]["reflection"]["rulebook"].replace("`", "") in view._repr_html_().replace("`", "")
    mem = memory_viewer(hist, static=True, step=hist.samples[-1]["step"])
    assert str(mem).splitlines()[0] == f"=== memory after step {hist.samples[-1]['step']} ==="


def test_static_detection(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("ERL_LITE_STATIC", raising=False)
    assert is_static() is True  # pytest is not an IPython kernel
    assert is_static(False) is False
    monkeypatch.setenv("ERL_LITE_STATIC", "1")
    assert is_static() is True and is_static(False) is False


class _FakeKernel:
    config = {"IPKernelApp": {}}


@pytest.mark.parametrize(
    "env, colab, control_comm, static",
    [
        ({}, False, False, True),  # nbclient / nbconvert: a kernel and no front-end
        ({"JPY_SESSION_NAME": "nb.ipynb"}, False, False, False),  # JupyterLab / Notebook
        ({"VSCODE_PID": "42"}, False, False, False),
        ({}, True, False, False),  # Colab
        ({}, False, True, False),  # a front-end opened the widget control channel
        ({"ERL_LITE_STATIC": "0"}, False, False, False),  # forced widgets
        ({"ERL_LITE_STATIC": "1", "JPY_SESSION_NAME": "nb.ipynb"}, False, False, True),  # forced static
        ({"CI": "true", "JPY_SESSION_NAME": "nb.ipynb"}, False, False, True),
    ],
)
def test_static_fallback_is_chosen_where_no_widget_frontend_is_known(monkeypatch, env, colab, control_comm, static):
    ipywidgets = pytest.importorskip("ipywidgets")
    import sys
    import types

    from erl_lite.viz import widgets

    for var in ("CI", "ERL_LITE_STATIC", "JPY_SESSION_NAME", "VSCODE_PID"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(widgets, "_kernel", lambda: _FakeKernel())
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(ipywidgets.Widget, "_control_comm", object() if control_comm else None)
    assert is_static() is static
    view = memory_viewer(synthetic_history(steps=5))
    assert isinstance(view, StaticView) is static


@pytest.mark.slow
def test_a_headless_notebook_run_gets_static_output_without_settings(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipywidgets")
    import os
    import pathlib

    for var in ("CI", "ERL_LITE_STATIC", "JPY_SESSION_NAME", "VSCODE_PID"):
        monkeypatch.delenv(var, raising=False)
    # the kernel must import this checkout, not another installed copy
    root = str(pathlib.Path(__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import pathlib, erl_lite\n"
                "from erl_lite.viz import is_static, reflection_browser\n"
                "demo = pathlib.Path(erl_lite.__file__).parent / 'assets' / 'demo'\n"
                "print(is_static(), type(reflection_browser(demo)).__name__)"
            )
        ]
    )
    nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    assert nb.cells[0].outputs[0]["text"].strip() == "True StaticView"


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


def test_comparison_plot_gives_each_variant_its_panel_with_its_seeds_median():
    """Ten seeds of six variants on one axes were 60 tangled lines: a panel per variant holds its seeds (thin) and
    their median at each evaluation step (bold), with ERL's median as the reference in the other panels."""
    from erl_lite.viz import plot_comparison

    def run(variant, seed, level):  # evaluations at the same steps (equal iterations), seconds per seed
        return {"variant": variant, "seed": seed, "eval_curve": [[0, 0.0, 0.1], [5, 10.0 + seed, level]]}

    runs = [
        run(v, s, level)
        for v, levels in (("ERL", (0.6, 0.8, 1.0)), ("RLVR", (0.2, 0.3, 0.9)))
        for s, level in zip((0, 1, 2), levels)
    ] + [run("w/o memory", 0, 0.5)]
    panels = [ax for ax in plot_comparison(runs).axes if ax.lines]
    assert [ax.get_title() for ax in panels] == ["ERL (3 seeds)", "RLVR (3 seeds)", "w/o memory (1 seed)"]
    for ax, variant, median in zip(panels, ("ERL", "RLVR", "w/o memory"), (0.8, 0.3, 0.5)):
        labelled = {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}
        seeds = [ln for ln in ax.lines if ln.get_label().startswith("_")]
        assert len(seeds) == sum(r["variant"] == variant for r in runs)  # one thin line per seed, this variant's
        mid = labelled["median over seeds"]
        assert list(mid.get_ydata()) == pytest.approx([0.1, median])  # the median of its seeds at each step
        assert list(mid.get_xdata()) == pytest.approx([0.0, 11.0 if variant != "w/o memory" else 10.0])
        assert ("ERL's median" in labelled) == (variant != "ERL")  # the reference, in the others' panels
    only = [ax for ax in plot_comparison(runs, variants=["RLVR"]).axes if ax.lines]
    assert [ax.get_title() for ax in only] == ["RLVR (3 seeds)"]
    assert NO_DATA in _texts(plot_comparison([]))


# ---------------------------------------------------------------- front-end independent HTML


def _styles(markup: str) -> list[tuple[str, dict[str, str]]]:
    """(tag, declared style) of every element of ``markup``, properties lower-cased."""
    from html.parser import HTMLParser

    found: list[tuple[str, dict[str, str]]] = []

    class Reader(HTMLParser):
        def handle_starttag(self, tag, attrs):
            style = dict(attrs).get("style") or ""
            pairs = [d.split(":", 1) for d in style.split(";") if ":" in d]
            found.append((tag, {k.strip().lower(): v.strip().lower() for k, v in pairs}))

    Reader().feed(markup)
    return found


def _views(hist):
    """Every HTML view the package renders: pairs of reflected and gate-passing rollouts, both browsers."""
    record = hist.samples[0]
    passed = next(a for r in hist.samples for a in r["first_attempts"] if a["success"])
    yield show_attempt_pair(record)
    yield show_attempt_pair(hist, step=None, task_id=passed["task_id"], index=passed["index"])
    yield reflection_browser(hist, static=True)._repr_html_()
    yield memory_viewer(hist, static=True, step=hist.samples[-1]["step"])._repr_html_()


def test_html_views_state_alignment_font_and_wrapping_themselves(hist):
    """JupyterLab right-aligns table cells and breaks words in <pre> by default; a view that states
    alignment, a monospace font and space-only wrapping renders the same in every front-end."""
    for markup in _views(hist):
        styles = _styles(markup)
        pres = [s for tag, s in styles if tag == "pre"]
        assert pres, markup[:200]
        for s in pres:
            assert "monospace" in s.get("font-family", ""), s
            assert s.get("white-space") in ("pre", "pre-wrap"), s
            assert s.get("word-break") == "normal" and s.get("overflow-wrap") == "normal", s
            assert s.get("text-align") == "left", s
        for tag, s in styles:
            if tag in ("td", "div"):
                assert s.get("text-align") == "left", (tag, s)


def test_grids_keep_their_columns_and_prose_wraps_at_spaces(hist):
    """An observation (a grid drawn in letters) must never wrap, or its columns shift; prose wraps."""
    markup = show_attempt_pair(hist.samples[0])
    import html as html_lib
    import re

    first = select_pair(hist.samples[0])["first"]
    grid = next(m["content"] for m in first["messages"] if m["role"] == "user")
    blocks = re.findall(r'<pre style="([^"]*)">(.*?)</pre>', markup, flags=re.S)
    grid_styles = [style for style, body in blocks if html_lib.unescape(body) == grid]
    assert grid_styles and all("white-space:pre;" in s.replace(" ", "") for s in grid_styles)
    prose = [style for style, body in blocks if html_lib.unescape(body) == first["feedback"]]
    assert prose and all("white-space:pre-wrap" in s.replace(" ", "") for s in prose)


def _gate_passed_first(hist) -> History:
    """The run with its first sampled step's rollouts all passing the gate (nothing reflected there)."""
    first = dict(hist.samples[0], retries=[])
    first["first_attempts"] = [dict(a, success=True, reward=1.0) for a in first["first_attempts"]]
    return History(records=hist.records, samples=[first, *hist.samples[1:]])


def test_reflection_browser_opens_on_a_reflected_rollout(hist):
    """Opening on a rollout that passed the gate shows "none: the first attempt passed": nothing to read."""
    run = _gate_passed_first(hist)
    informative = next(r for r in run.samples if any(x.get("reflection") for x in r["retries"]))
    view = reflection_browser(run, static=True)
    assert str(view).startswith(f"=== step {informative['step']}") and "REFLECTION (parsed" in str(view)
    # a rollout that passed the gate listed first in its step must not be the one shown
    record = dict(hist.samples[0])
    firsts = record["first_attempts"]
    reflected = {r["first"] for r in record["retries"]}  # retries point at their first attempt's position
    order = sorted(range(len(firsts)), key=lambda i: i in reflected)
    assert order[0] not in reflected
    record["first_attempts"] = [firsts[i] for i in order]
    record["retries"] = [dict(r, first=order.index(r["first"])) for r in record["retries"]]
    shown = reflection_browser(History(samples=[record]), static=True)
    assert "REFLECTION (parsed" in str(shown)
    pytest.importorskip("ipywidgets")
    box = reflection_browser(run, static=False)
    (slider, picker), out = box.children[0].children, box.children[2]
    assert slider.value == informative["step"] and "2nd –" not in picker.label
    assert "none: the first attempt passed" not in out.value


# ---------------------------------------------------------------- phases drawn as figures


def test_evaluation_is_points_with_intervals_never_a_line(hist):
    """Two evaluations (before and after) joined by a line read as a learning curve that was never measured."""
    from erl_lite.viz.plots import wilson

    rows = [
        {"kind": "eval", "step": 0, "eval/reward": 0.5, "eval/success": 0.5, "eval/num_episodes": 64},
        {"kind": "eval", "step": 30, "eval/reward": 1.0, "eval/success": 1.0, "eval/num_episodes": 64},
    ]
    for fig in (plot_eval(rows), plot_rewards(rows), plot_overview(rows)):
        ax = fig.axes[0]
        assert not [line for line in ax.lines if len(line.get_xdata()) > 1 and line.get_linestyle() != "None"]
        (points,) = ax.containers
        (bars,) = points.lines[2]
        (lo0, hi0), (lo1, hi1) = [sorted(seg[:, 1]) for seg in bars.get_segments()]
        assert (lo0, hi0) == pytest.approx(wilson(0.5, 64)) and (lo1, hi1) == pytest.approx(wilson(1.0, 64))
        assert hi1 == 1.0 and lo1 < 1.0  # a perfect score still carries its uncertainty
    # the interval is the Wilson score interval: 0.5 of 64 -> about ±0.12 (textbook value 0.381-0.619)
    assert wilson(0.5, 64) == pytest.approx((0.381, 0.619), abs=1e-3)


@pytest.mark.parametrize("fn", [plot_losses, plot_advantages])
def test_roles_differ_by_line_style_and_marker_even_when_equal(hist, fn):
    """Reflection and second-attempt advantages share r2, so their curves often coincide on some steps: style, not
    colour alone (curves equal on every step are one curve: test_no_curve_is_hidden_under_an_equal_one)."""
    same = lambda r: {"advantage/reflection": r.get("advantage/second"), "loss/reflection": r.get("loss/second")}
    records = [dict(r, **same(r)) if r["step"] % 2 else r for r in hist.records]
    lines = _drawn(fn(History(records=records)).axes[0])
    looks = [(line.get_linestyle(), line.get_marker()) for line in lines]
    assert len(set(ls for ls, _ in looks)) == len(looks) and len(set(m for _, m in looks)) == len(looks)
    refl = next(line for line in lines if line.get_label() == "reflection")
    assert refl.get_markerfacecolor() == "none" and refl.get_zorder() > max(
        line.get_zorder() for line in lines if line is not refl
    )


def test_legends_never_cover_the_data(hist, rlvr):
    figures = [plot_rewards(hist, rlvr), plot_eval(hist, rlvr), plot_losses(hist), plot_overview(hist, rlvr)]
    for fig in figures:
        fig.canvas.draw()
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None:
                assert not legend.get_window_extent().overlaps(ax.get_window_extent()), ax.get_title()


def _claims(text):
    import re

    return re.findall(r"\b([A-Z]) is a hole", text)


def test_memory_figure_checks_what_memory_names_against_the_truth():
    samples = [
        {"step": 1, "memory_after": []},
        {"step": 2, "memory_after": ["E is a hole."]},
        {"step": 3, "memory_after": ["E is a hole. G is a hole."]},
    ]
    (ax,) = plot_memory(History(samples=samples), claims=_claims, truth=["E", "H"]).axes
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert rows == ["E", "H", "G"]
    marks = {c.get_label(): sorted(tuple(p) for p in c.get_offsets()) for c in ax.collections}
    assert marks == {
        "named, right": [(2, 0), (3, 0)],
        "named, wrong": [(3, 2)],
        "true, not named": [(1, 0), (1, 1), (2, 1), (3, 1)],
    }


def test_the_overview_and_saved_memory_panels_name_letters_when_given_claims(tmp_path):
    """The demo's overview shows which hole letters memory holds, right or wrong, not rulebook rows."""
    import matplotlib.image

    from erl_lite.viz import plot_overview, save_figures

    samples = [{"step": 1, "memory_after": ["E is a hole."]}, {"step": 2, "memory_after": ["G is a hole."]}]
    history = History(samples=samples)
    panel = next(ax for ax in plot_overview(history, None, _claims, ["E"]).axes if "Memory" in ax.get_title())
    assert [t.get_text() for t in panel.get_yticklabels()] == ["E", "G"]
    assert {c.get_label() for c in panel.collections} == {"named, right", "named, wrong", "true, not named"}
    plain = next(ax for ax in plot_overview(history).axes if "Memory" in ax.get_title())
    assert [t.get_text() for t in plain.get_yticklabels()] == ["rulebook 1", "rulebook 2"]
    # the title says what the rows are: named items, or whole rulebooks
    assert (panel.get_title(), plain.get_title()) == (
        "Memory after each step: what it names",
        "Memory after each step: which rulebook it held",
    )
    paths = save_figures(history, tmp_path, memory_claims=_claims, memory_truth=["E"])
    assert all(matplotlib.image.imread(path).size for path in paths)


def test_reflection_figure_marks_new_words_and_checks_claims(hist):
    from erl_lite.viz import plot_reflection

    record = hist.samples[-1]
    refl = select_pair(record)["reflection"]
    fig = plot_reflection(record, claims=_claims, truth=["C", "Q"])
    texts = [t for t in fig.axes[0].texts]
    new = {t.get_text() for t in texts if t.get_bbox_patch() is not None}
    added = {w for op, chunk in rule_diff(refl["base_prompt"], refl["rulebook"]) if op == "+" for w in chunk.split()}
    assert new == added and new
    words = [t.get_text() for t in texts if t.get_fontfamily() == ["monospace"]]
    assert " ".join(words) == " ".join(refl["rulebook"].split())  # the whole rulebook, wrapped at spaces only
    checks = [t.get_text() for t in texts if t.get_text()[:1] in "✓✗○"]
    named = _claims(refl["rulebook"])
    assert checks == [
        f"{'✓' if c in ('C', 'Q') else '✗'} names {c}: {'right' if c in ('C', 'Q') else 'wrong'}" for c in named
    ] + [f"○ misses {t}" for t in ("C", "Q") if t not in named]
    same = dict(
        record,
        retries=[
            dict(r, reflection=dict(r["reflection"], base_prompt=r["reflection"]["rulebook"]))
            for r in record["retries"]
        ],
    )
    texts = plot_reflection(same).axes[0].texts
    assert "= its base prompt" in texts[0].get_text() and not [t for t in texts if t.get_bbox_patch()]
    passed = next(a for a in record["first_attempts"] if a["success"])
    with pytest.raises(ValueError, match="passed the gate"):
        plot_reflection(record, task_id=passed["task_id"], index=passed["index"])


def _loop_script():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "draw_erl_loop.py"
    spec = importlib.util.spec_from_file_location("draw_erl_loop", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_loop_diagram_is_read_from_erl_step():
    import inspect

    from erl_lite.core import phases

    script = _loop_script()
    names = [n for n, _ in script.erl_phases()]
    source = inspect.getsource(phases.erl_step)
    assert names == sorted(names, key=lambda n: source.index(f"{n}("))  # the order erl_step calls them in
    assert {"attempt_first", "gate", "reflect", "attempt_second", "update_memory"} <= set(names)
    shown = [t.get_text().split("\n")[0] for t in script.plot_erl_loop().axes[0].texts if t.get_text()]
    assert shown[: len(names) + 1] == names + ["PolicyUpdater.update"]


def test_the_committed_loop_diagram_is_current(tmp_path):
    """erl_lite/assets/erl_loop.png (README, notebook 01) is what scripts/draw_erl_loop.py draws from the code now."""
    from matplotlib.testing.compare import compare_images

    script = _loop_script()
    fresh = script.draw(tmp_path / "erl_loop.png")
    # tolerance: font hinting differs between FreeType builds by a few RMS units; a moved box differs by far more
    assert compare_images(str(script.OUT), str(fresh), tol=8) is None, (
        "erl_lite/assets/erl_loop.png is stale: run python scripts/draw_erl_loop.py"
    )


# ---------------------------------------------------------------- no line hidden, none drawn through a gap
def _misdrawn(fig: Figure, steps: list[int]) -> list[str]:
    """What a reader would misread: a curve joined across a training step where it has no value (a gap drawn as
    data), and a curve whose every point lies under another's (a series the figure shows but nobody can see)."""
    import numpy as np

    found = []
    for ax in fig.axes:
        lines = [line for line in ax.lines if not line.get_label().startswith("_") and line.get_linestyle() != "None"]
        points = {}
        for line in lines:
            x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
            for x0, y0, x1, y1 in zip(x, y, x[1:], y[1:]):
                if np.isfinite([y0, y1]).all() and any(x0 < s < x1 for s in steps):
                    found.append(f"{ax.get_title()}: {line.get_label()!r} drawn across steps {x0:g}-{x1:g}")
            points[line] = sorted((round(a, 9), round(b, 9)) for a, b in zip(x, y) if np.isfinite(b))
        for a in lines:
            under = [b for b in lines if b is not a and points[a] and points[a] == points[b]]
            if under and a.get_zorder() <= max(b.get_zorder() for b in under):
                found.append(f"{ax.get_title()}: {a.get_label()!r} hidden under {[b.get_label() for b in under]}")
    return found


def _without_second_attempts(history: History, steps: range) -> History:
    """``history`` with no failed first attempt on ``steps``: no second-attempt reward, the roles' rows 0 (the
    update logs their loss and |A| as 0 then), as a run whose gate stops firing late logs it."""
    records = []
    for r in history.records:
        r = dict(r)
        r.update({f"samples/{role}": 4.0 if role == "first" else 2.0 for role in ("first", "reflection", "second")})
        if r.get("step") in steps:
            for key in ("reward/second", "success/second", "reflection/reward"):
                r.pop(key, None)
            r.update(
                {
                    f"{kind}/{role}": 0.0
                    for kind in ("samples", "advantage", "loss")
                    for role in ("reflection", "second")
                }
            )
        records.append(r)
    return History(records=records, samples=history.samples)


def _equal_roles(history: History) -> History:
    """``history`` with reflection and second-attempt advantage and loss equal (both share r2)."""
    same = lambda r: {"advantage/reflection": r.get("advantage/second"), "loss/reflection": r.get("loss/second")}
    return History(records=[dict(r, **same(r)) for r in history.records])


@pytest.mark.parametrize("gap", [range(5, 9), range(9, 12), range(2, 3), range(3, 12, 2)], ids=str)
@pytest.mark.parametrize("fn", [plot_rewards, plot_losses, plot_advantages, plot_overview])
def test_no_curve_is_drawn_across_steps_where_it_has_no_value(hist, fn, gap):
    """Steps without second attempts are gaps in every second-attempt and reflection curve: not a line joining
    the steps around them, not a drop to the 0 the update logs for a role without rows."""
    history = _without_second_attempts(hist, gap)
    fig = fn(history)
    assert _misdrawn(fig, list(range(1, STEPS + 1))) == []
    for ax in fig.axes:
        for line in (x for x in ax.lines if x.get_label().startswith(("second attempt", "reflection"))):
            shown = {s for s, v in zip(line.get_xdata(), line.get_ydata()) if v == v}  # not NaN
            assert not shown & set(gap), f"{ax.get_title()}: {line.get_label()!r} has values on {shown & set(gap)}"
    # a lone step between gaps is a point a reader can see: it carries a marker
    for ax in fig.axes:
        for line in (x for x in ax.lines if "second" in x.get_label()):
            y = list(line.get_ydata())
            alone = [
                i
                for i in range(len(y))
                if y[i] == y[i] and all(not (0 <= j < len(y)) or y[j] != y[j] for j in (i - 1, i + 1))
            ]
            marked = line.get_markevery()
            assert marked is None or set(alone) <= set(marked), (ax.get_title(), line.get_label(), alone, marked)


@pytest.mark.parametrize("fn", [plot_losses, plot_advantages, plot_overview])
def test_no_curve_is_hidden_under_an_equal_one(hist, fn):
    """Reflection and second-attempt |A| share r2: equal point for point, they are one curve labelled with both
    roles, not one line drawn over the other."""
    fig = fn(_equal_roles(hist))
    assert _misdrawn(fig, list(range(1, STEPS + 1))) == []
    for ax in (ax for ax in fig.axes if ax.get_title().startswith(("Advantage", "Loss"))):
        assert "reflection = second attempt" in [line.get_label() for line in ax.lines], ax.get_title()


def test_the_misdrawn_check_finds_a_bridged_gap_and_a_hidden_line():
    """The check itself, on a figure drawn wrong on purpose."""
    fig, ax = plt.subplots()
    ax.set_title("wrong")
    ax.plot([1, 2, 6], [0.1, 0.2, 0.3], label="bridged")
    ax.plot([1, 2, 3], [0.5, 0.5, 0.5], label="under", zorder=1)
    ax.plot([1, 2, 3], [0.5, 0.5, 0.5], label="over", zorder=2)
    ax.plot([1, 2, 3, 4, 5, 6], [0.9, 0.9, float("nan"), float("nan"), 0.9, 0.9], label="gapped")
    found = _misdrawn(fig, [1, 2, 3, 4, 5, 6])
    plt.close(fig)
    assert found == ["wrong: 'bridged' drawn across steps 2-6", "wrong: 'under' hidden under ['over']"]
