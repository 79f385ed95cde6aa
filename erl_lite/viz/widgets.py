"""Notebook browsers of reflections and memory; a :class:`StaticView` where no widget front-end can draw them."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from erl_lite.viz import pairs
from erl_lite.viz._style import HistoryLike, as_history, joined_rulebooks

#: Outcome filters of the reflection browser: label -> predicate on a :func:`list_pairs` row.
FILTERS = {
    "all": lambda r: True,
    "reflected": lambda r: r["second_success"] is not None,
    "2nd succeeded": lambda r: r["second_success"] is True,
    "2nd failed": lambda r: r["second_success"] is False,
    "passed gate": lambda r: r["second_success"] is None,
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _kernel() -> Any:
    """The running IPython kernel's shell, or None (plain Python, a terminal IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell if shell is not None and "IPKernelApp" in getattr(shell, "config", {}) else None


def widget_frontend() -> str | None:
    """The connected front-end that draws widgets, read from the traces each leaves, or None (nbclient)."""
    if "google.colab" in sys.modules:
        return "colab"
    widgets = sys.modules.get("ipywidgets")
    if widgets is not None and getattr(widgets.Widget, "_control_comm", None) is not None:
        return "jupyter widgets"
    if os.environ.get("JPY_SESSION_NAME"):
        return "jupyter server"
    if os.environ.get("VSCODE_PID"):
        return "vscode"
    return None


def is_static(static: bool | None = None) -> bool:
    """Whether the browsers render static output: ``static`` wins; then ``ERL_LITE_STATIC`` and ``CI``;
    else widgets only in a kernel with ``ipywidgets`` and a known front-end (:func:`widget_frontend`)."""
    if static is not None:
        return static
    forced = os.environ.get("ERL_LITE_STATIC", "").strip().lower()
    if forced in _TRUE or (os.environ.get("CI", "").strip().lower() in _TRUE and forced not in _FALSE):
        return True
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return True
    return _kernel() is None or (forced not in _FALSE and widget_frontend() is None)


@dataclass
class StaticView:
    """A widget's static stand-in: HTML in a notebook, plain text in a terminal."""

    html: str
    text: str

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def _no_samples() -> StaticView:
    msg = "no sampled step records yet (History.samples is empty)"
    return StaticView(f"<p><i>{msg}</i></p>", msg)


def _steps(history: HistoryLike) -> tuple[Any, list[int]]:
    h = as_history(history)
    return h, [int(s.get("step", i)) for i, s in enumerate(h.samples, start=1)]


def _rollout_options(record: pairs.Record, mode: str) -> list[tuple[str, tuple[str, int]]]:
    """Dropdown entries ``(label, (task_id, index))`` of one step, filtered by outcome."""
    mark = {True: "✓", False: "✗", None: "–"}
    return [
        (
            f"{r['task_id']} #{r['index']} · 1st {mark[r['first_success']]} → 2nd {mark[r['second_success']]}",
            (r["task_id"], r["index"]),
        )
        for r in pairs.list_pairs(record)
        if FILTERS[mode](r)
    ]


def reflection_browser(history: HistoryLike, static: bool | None = None, step: int | None = None) -> Any:
    """Browse sampled steps: pick a rollout, see first attempt → reflection → second attempt.
    Returns an ``ipywidgets.VBox``, or (``static``, see :func:`is_static`) a :class:`StaticView`."""
    h, steps = _steps(history)
    if not steps:
        return _no_samples()
    # Open on a step with a gated rollout: one that passed the gate has no reflection to read.
    start = step if step in steps else next((s for s, rec in zip(steps, h.samples) if rec.get("retries")), steps[0])
    if is_static(static):
        return StaticView(pairs.show_attempt_pair(h, start), pairs.attempt_pair_text(h, start))
    import ipywidgets as W

    slider = W.SelectionSlider(options=steps, value=start, description="step")
    mode = W.ToggleButtons(options=list(FILTERS), value="all", description="show")
    picker = W.Dropdown(description="rollout", layout=W.Layout(width="420px"))
    out = W.HTML()

    def render(*_: Any) -> None:
        if picker.value is None:
            out.value = "<p><i>no rollout matches this filter at this step</i></p>"
            return
        task_id, index = picker.value
        out.value = pairs.show_attempt_pair(h, slider.value, task_id=task_id, index=index)

    def refresh(*_: Any) -> None:
        options = _rollout_options(pairs.step_record(h, slider.value), mode.value)
        values = [v for _, v in options]
        gated = [v for _, v in _rollout_options(pairs.step_record(h, slider.value), "reflected") if v in values]
        # Keep the same rollout across steps when it is there; else the first gated one, else the first.
        keep = picker.value if picker.value in values else next(iter(gated + values), None)
        picker.options = options or [("(none)", None)]
        picker.value = keep
        render()  # the value may not change between steps

    slider.observe(refresh, "value")
    mode.observe(refresh, "value")
    picker.observe(render, "value")
    refresh()
    return W.VBox([W.HBox([slider, picker]), mode, out])


def _memory(record: pairs.Record) -> tuple[str, str]:
    return joined_rulebooks(record.get("memory_before")), joined_rulebooks(record.get("memory_after"))


def memory_html(record: pairs.Record) -> str:
    """HTML of what memory held after one step, with a diff against what it held before."""
    before, after = _memory(record)
    n = len(record.get("memory_after") or [])
    head = f"<h4>Memory after step {record.get('step')} ({n} rulebook{'s' * (n != 1)})</h4>"
    if not after:
        return head + "<p><i>empty: no second attempt has succeeded yet</i></p>"
    body = pairs._pre(after)
    if before != after:
        body += "<b>changed this step (before → after)</b>" + pairs.diff_html(before, after, pairs.rule_diff)
    return head + body


def memory_text(record: pairs.Record) -> str:
    """Plain-text twin of :func:`memory_html`."""
    before, after = _memory(record)
    lines = [f"=== memory after step {record.get('step')} ===", after or "(empty: no second attempt has succeeded yet)"]
    if after and before != after:
        lines.append("changed this step: " + pairs.diff_text(before, after, pairs.rule_diff))
    return "\n".join(lines)


def memory_viewer(history: HistoryLike, static: bool | None = None, step: int | None = None) -> Any:
    """A slider over sampled steps showing the memory after each step (or a :class:`StaticView`)."""
    h, steps = _steps(history)
    if not steps:
        return _no_samples()
    if is_static(static):
        record = pairs.step_record(h, step)
        return StaticView(memory_html(record), memory_text(record))
    import ipywidgets as W

    slider = W.SelectionSlider(options=steps, value=step if step in steps else steps[0], description="step")
    out = W.HTML()

    def render(*_: Any) -> None:
        out.value = memory_html(pairs.step_record(h, slider.value))

    slider.observe(render, "value")
    render()
    return W.VBox([slider, out])
