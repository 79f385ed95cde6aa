"""Shared plumbing for the plots (private): house style, input coercion."""

from __future__ import annotations

import math
import os
from typing import Any, Union

import matplotlib.pyplot as plt  # without a display, matplotlib falls back to Agg by itself
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from erl_lite.history import History
from erl_lite.records import FIRST, INTERNALIZATION, REFLECTION, SECOND

#: What every public function accepts as "a run".
HistoryLike = Union[History, str, os.PathLike, list, None]

DPI = 110
#: Font sizes chosen to stay legible when GitHub scales a PNG down to ~800 px wide.
RC = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

#: One colour per ERL phase / role, reused by every plot so a reader learns them once.
COLORS = {
    FIRST: "#1f77b4",
    REFLECTION: "#9467bd",
    SECOND: "#2ca02c",
    INTERNALIZATION: "#ff7f0e",
    "eval": "#d62728",
    "success": "#e377c2",
    "gate": "#8c564b",
    "memory": "#17becf",
    "baseline": "#7f7f7f",
}
#: One marker per series kind: a curve hidden under an equal one still shows its marker.
MARKERS = {
    FIRST: "o",
    REFLECTION: "v",
    SECOND: "^",
    INTERNALIZATION: "D",
    "eval": "s",
    "success": "x",
    "gate": "o",
    "memory": "o",
    "baseline": "o",
}
#: One line style per role: curves of equal values (reflection and second attempt share r2) stay apart.
LINESTYLES = {FIRST: "-", REFLECTION: ":", SECOND: "--", INTERNALIZATION: "-."}
#: At most this many markers per curve; longer curves mark every k-th point.
MAX_MARKERS = 20
NO_DATA = "no data yet"
#: Between the rulebooks of a memory holding several (the FIFO option), wherever they are shown.
RULEBOOK_SEPARATOR = "\n---\n"


def joined_rulebooks(rulebooks: list[str] | None) -> str:
    return RULEBOOK_SEPARATOR.join(rulebooks or [])


def as_history(obj: HistoryLike) -> History:
    """A History from a History, a run folder / ``history.jsonl``, None, or a list of records and step records."""
    if obj is None:
        return History()
    if isinstance(obj, History):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return History.load(obj)
    if isinstance(obj, (list, tuple)):
        rows = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in obj]
        samples = [r for r in rows if "first_attempts" in r]
        records = [r for r in rows if "first_attempts" not in r]
        return History(records=records, samples=samples)
    raise TypeError(f"expected a History, a path or a list of records, got {type(obj).__name__}")


def new_axes(ax: Axes | None, figsize: tuple[float, float] = (6.4, 3.8)) -> tuple[Figure, Axes, bool]:
    """Return (figure, axes, owned); ``owned`` figures are detached from pyplot by :func:`done`."""
    if ax is not None:
        return ax.figure, ax, False
    fig, ax = plt.subplots(figsize=figsize, dpi=DPI)
    return fig, ax, True


#: Runs a plotting function under the house style (text takes its size when created): matplotlib's rc_context is a
#: decorator too (a ``contextlib.contextmanager``, tested as one by matplotlib), entered afresh at each call.
styled = plt.rc_context(RC)


def done(fig: Figure, owned: bool) -> Figure:
    """Tidy and close a figure we created (else a notebook draws it twice; closed, it still renders)."""
    if owned:
        fig.tight_layout()
        plt.close(fig)
    return fig


def note(ax: Axes, x: float, y: float, text: str, **place: Any) -> None:
    """Grey italic text at (x, y) in axes fractions: a remark on the panel, not data."""
    ax.text(x, y, text, transform=ax.transAxes, color="0.45", style="italic", **place)


def decorate(ax: Axes, title: str, xlabel: str, ylabel: str, has_data: bool, unit: bool = False) -> None:
    """Title, axis labels, integer step ticks, a [0, 1] y axis if ``unit``, and the legend or the "no data" note."""
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if unit:
        ax.set_ylim(-0.03, 1.03)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    lo, hi = ax.get_xlim()
    if hi - lo < 2:  # one step: widen, or the integer locator falls back to 0.005 ticks
        mid = round((lo + hi) / 2)
        ax.set_xlim(mid - 1, mid + 1)
    if not has_data:
        note(ax, 0.5, 0.5, NO_DATA, ha="center", va="center", fontsize=11)
        return
    handles, labels = ax.get_legend_handles_labels()
    if handles:  # under the axes, never over the data
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(0, -0.17), ncol=2, frameon=False)


def plot_series(
    ax: Axes,
    steps: list[int],
    values: list[float],
    *,
    label: str,
    color: str,
    ls: str = "-",
    marker: str = "o",
    hollow: bool = False,
) -> Line2D:
    """One curve with markers (every point between two gaps, NaN, has one); a ``hollow`` one (a baseline, a role
    equal to another) goes on top with larger hollow markers, so where it equals another curve its marker rings the
    filled one."""
    shown = [i for i, v in enumerate(values) if v == v]  # not NaN
    alone = [i for i in shown if all(j not in shown for j in (i - 1, i + 1))]
    every = sorted({*shown[:: max(1, math.ceil(len(shown) / MAX_MARKERS))], *alone})
    look = dict(markersize=4, zorder=2)
    if hollow:
        look = dict(markersize=6.5, markerfacecolor="none", markeredgewidth=1.3, zorder=3)
    return ax.plot(steps, values, ls, color=color, label=label, marker=marker, markevery=every, linewidth=1.8, **look)[
        0
    ]
