"""Matplotlib figures for each ERL phase, drawn from a run's :class:`~erl_lite.history.History`.

Every function accepts a ``History``, a run folder or ``history.jsonl`` path, or a list of
record dicts; draws on ``ax`` when given (so the dashboard can reuse it); returns the
``Figure`` and never calls ``plt.show()``. Missing metrics, an empty run or a single step give
a labelled, empty panel with a "no data yet" note rather than an error.

Departures from the paper: the paper shows training reward before/after reflection and eval
reward; the gate, memory, loss and advantage panels are additions for inspecting a run.
"""

from __future__ import annotations

import os

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from erl_lite.viz import _style as S
from erl_lite.viz._style import COLORS, HistoryLike, as_history, series

STEP = "training step"
ROLE_LABELS = {"first": "first attempt", "reflection": "reflection",
               "second": "second attempt", "distill": "internalization"}

# (key, kind, label, colour) of one curve.
Spec = tuple[str, str, str, str]


def _curves(ax: Axes, history: HistoryLike, specs: list[Spec], weight: float = 0.0,
            dashed: bool = False, prefix: str = "") -> int:
    """Draw every spec that has data; returns how many curves were drawn."""
    drawn = 0
    for key, kind, label, color in specs:
        steps, values = series(history, key, kind)
        if values:
            S.plot_series(ax, steps, values, label=prefix + label, color=color,
                          weight=weight, dashed=dashed)
            drawn += 1
    return drawn


@S.styled
def plot_rewards(history: HistoryLike, baseline: HistoryLike = None, ax: Axes | None = None,
                 metric: str = "reward", smoothing: float = 0.0) -> Figure:
    """Reward (or success rate) per phase over training steps, with an RLVR run dashed.

    Args:
        history: the ERL run.
        baseline: optional RLVR run; its first-attempt and eval curves are drawn dashed.
        ax: axes to draw on (a new figure otherwise).
        metric: ``"reward"`` or ``"success"``.
        smoothing: exponential-moving-average weight in [0, 1); 0 draws raw values.

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> fig = plot_rewards(synthetic_history(steps=10))
        >>> len(fig.axes[0].lines)
        3
    """
    if metric not in ("reward", "success"):
        raise ValueError(f"metric must be 'reward' or 'success', got {metric!r}")
    h = as_history(history)
    fig, ax, owned = S.new_axes(ax)
    specs = [(f"{metric}/first", "train", "first attempt", COLORS["first"]),
             (f"{metric}/second", "train", "second attempt (gated tasks)", COLORS["second"]),
             (f"eval/{metric}", "eval", "evaluation (first attempt)", COLORS["eval"])]
    drawn = _curves(ax, h, specs, smoothing)
    if baseline is not None:
        base = as_history(baseline)
        drawn += _curves(ax, base, [specs[0], specs[2]], smoothing, dashed=True,
                         prefix="RLVR · ")
    what = "mean reward (0–1)" if metric == "reward" else "success rate (0–1)"
    title = "Reward per phase" if metric == "reward" else "Success rate per phase"
    S.decorate(ax, title, STEP, what, drawn > 0)
    ax.set_ylim(-0.03, 1.03)
    return S.done(fig, owned)


@S.styled
def plot_gate_rate(history: HistoryLike, ax: Axes | None = None,
                   smoothing: float = 0.0) -> Figure:
    """Fraction of first attempts the gate sent on to reflection (``r1 < τ``) per step.

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> plot_gate_rate(synthetic_history(steps=5)).axes[0].get_ylabel()
        'fraction of first attempts'
    """
    h = as_history(history)
    fig, ax, owned = S.new_axes(ax)
    drawn = _curves(ax, h, [("gate/rate", "train", "sent to reflection", COLORS["gate"])],
                    smoothing)
    S.decorate(ax, "Gate: first attempts sent to reflection", STEP,
               "fraction of first attempts", drawn > 0)
    ax.set_ylim(-0.03, 1.03)
    return S.done(fig, owned)


def _memory_sizes(h) -> tuple[list[int], list[float]]:
    """``memory/size`` from the metrics, else counted from the sampled step records."""
    steps, sizes = series(h, "memory/size")
    if sizes:
        return steps, sizes
    rows = sorted((int(s.get("step", 0)), float(len(s.get("memory_after") or [])))
                  for s in h.samples)
    return [r[0] for r in rows], [r[1] for r in rows]


@S.styled
def plot_memory(history: HistoryLike, ax: Axes | None = None) -> Figure:
    """Memory timeline: rulebooks written per step (bars, left axis), rulebooks held (line, right).

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> fig = plot_memory(synthetic_history(steps=5))
        >>> fig.axes[0].get_ylabel()
        'rulebooks written per step'
    """
    h = as_history(history)
    fig, ax, owned = S.new_axes(ax)
    w_steps, writes = series(h, "memory/writes")
    s_steps, sizes = _memory_sizes(h)
    if writes:
        ax.bar(w_steps, writes, color=COLORS["memory"], alpha=0.55, label="written this step")
    handles, labels = ax.get_legend_handles_labels()
    right = None
    if sizes:
        right = ax.twinx()
        right.plot(s_steps, sizes, color="0.2", marker="o" if len(sizes) <= 30 else None,
                   markersize=3, linewidth=1.8, label="held after the step")
        right.set_ylabel("rulebooks held")
        right.set_ylim(0, max(sizes) * 1.35 + 0.5)  # headroom keeps the legend off the line
        right.yaxis.set_major_locator(MaxNLocator(integer=True))
        right.grid(False)
        right.spines["right"].set_visible(True)
        h2, l2 = right.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    S.decorate(ax, "Memory: rulebooks written and held", STEP, "rulebooks written per step",
               bool(writes or sizes), legend=False)
    ax.set_ylim(0, max(writes, default=0.0) * 1.35 + 0.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if handles:  # one legend for both axes, drawn on the twin so the line stays on top
        (right or ax).legend(handles, labels, loc="upper left", frameon=False)
    return S.done(fig, owned)


def memory_table(history: HistoryLike) -> list[tuple[int, str]]:
    """``(step, text)`` of what memory held after each sampled step (``""`` when empty).

    Several rulebooks (the FIFO option) are joined with a ``---`` line.

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> memory_table(synthetic_history(steps=5))[0][0]
        1
    """
    h = as_history(history)
    rows = [(int(s.get("step", i)), "\n---\n".join(s.get("memory_after") or []))
            for i, s in enumerate(h.samples, start=1)]
    return sorted(rows, key=lambda r: r[0])


@S.styled
def plot_losses(history: HistoryLike, ax: Axes | None = None, smoothing: float = 0.0) -> Figure:
    """Policy loss contributed by each role (``loss/first`` … ``loss/distill``) per step.

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> len(plot_losses(synthetic_history(steps=5)).axes[0].lines)
        4
    """
    h = as_history(history)
    fig, ax, owned = S.new_axes(ax)
    specs = [(f"loss/{r}", "train", ROLE_LABELS[r], COLORS[r]) for r in ROLE_LABELS]
    drawn = _curves(ax, h, specs, smoothing)
    S.decorate(ax, "Loss by role", STEP, "loss (token sum, mean over sequences)", drawn > 0)
    return S.done(fig, owned)


@S.styled
def plot_advantages(history: HistoryLike, ax: Axes | None = None,
                    smoothing: float = 0.0) -> Figure:
    """Mean |advantage| per role per step: how much learning signal each role carried.

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> len(plot_advantages(synthetic_history(steps=5)).axes[0].lines)
        3
    """
    h = as_history(history)
    fig, ax, owned = S.new_axes(ax)
    specs = [(f"advantage/{r}", "train", ROLE_LABELS[r], COLORS[r])
             for r in ("first", "reflection", "second")]
    drawn = _curves(ax, h, specs, smoothing)
    S.decorate(ax, "Advantage magnitude by role", STEP, "mean |advantage| (group-std units)",
               drawn > 0)
    return S.done(fig, owned)


@S.styled
def plot_eval(history: HistoryLike, baseline: HistoryLike = None,
              ax: Axes | None = None) -> Figure:
    """Evaluation (first attempt, initial prompt) reward and success, RLVR dashed if given.

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> len(plot_eval(synthetic_history(steps=10)).axes[0].lines)
        2
    """
    h = as_history(history)
    fig, ax, owned = S.new_axes(ax)
    specs = [("eval/reward", "eval", "mean reward", COLORS["eval"]),
             ("eval/success", "eval", "success rate", COLORS["first"])]
    drawn = _curves(ax, h, specs)
    if baseline is not None:
        drawn += _curves(ax, as_history(baseline), specs, dashed=True, prefix="RLVR · ")
    S.decorate(ax, "Evaluation on held-out tasks", STEP, "first-attempt score (0–1)",
               drawn > 0)
    ax.set_ylim(-0.03, 1.03)
    return S.done(fig, owned)


@S.styled
def plot_overview(history: HistoryLike, baseline: HistoryLike = None,
                  smoothing: float = 0.0) -> Figure:
    """A 2×3 dashboard: reward, success, gate / memory, loss, advantage (for READMEs).

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> len(plot_overview(synthetic_history(steps=5)).axes) >= 6
        True
    """
    h = as_history(history)
    base = as_history(baseline) if baseline is not None else None
    fig, axes = S.plt.subplots(2, 3, figsize=(15, 7.6), dpi=S.DPI)
    plot_rewards(h, base, ax=axes[0, 0], smoothing=smoothing)
    plot_rewards(h, base, ax=axes[0, 1], metric="success", smoothing=smoothing)
    plot_gate_rate(h, ax=axes[0, 2], smoothing=smoothing)
    plot_memory(h, ax=axes[1, 0])
    plot_losses(h, ax=axes[1, 1], smoothing=smoothing)
    plot_advantages(h, ax=axes[1, 2], smoothing=smoothing)
    fig.suptitle("ERL run overview" + (" (dashed: RLVR baseline)" if base else ""),
                 fontsize=13)
    return S.done(fig, True)


@S.styled
def save_figures(history: HistoryLike, out_dir: str | os.PathLike,
                 baseline: HistoryLike = None) -> list[str]:
    """Write rewards/gate_rate/memory/losses/eval/overview PNGs into ``out_dir``; return paths.

    Example:
        >>> import tempfile
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> paths = save_figures(synthetic_history(steps=5), tempfile.mkdtemp())
        >>> [os.path.basename(p) for p in paths][:2]
        ['rewards.png', 'gate_rate.png']
    """
    h = as_history(history)
    base = as_history(baseline) if baseline is not None else None
    os.makedirs(out_dir, exist_ok=True)
    figures = {
        "rewards.png": plot_rewards(h, base),
        "gate_rate.png": plot_gate_rate(h),
        "memory.png": plot_memory(h),
        "losses.png": plot_losses(h),
        "eval.png": plot_eval(h, base),
        "overview.png": plot_overview(h, base),
    }
    paths = []
    for name, fig in figures.items():
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=S.DPI, bbox_inches="tight")
        paths.append(path)
    return paths
