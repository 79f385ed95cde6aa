"""Matplotlib figures for each ERL phase of a run; each draws on ``ax`` when given and returns the
``Figure``; missing data gives a panel noting "no data yet". Departures from the paper: the paper shows
reward before/after reflection and eval reward; the gate, memory, loss and advantage panels are added.
"""

from __future__ import annotations

import math
import os

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from erl_lite.history import History
from erl_lite.metric_names import (ADVANTAGE_KEYS, EVAL_PREFIX, EVAL_REWARD, EVAL_SUCCESS, GATE_RATE, LOSS_KEYS, MEMORY_SIZE,
                                   MEMORY_WRITES, REWARD_FIRST, REWARD_SECOND, SUCCESS_FIRST, SUCCESS_SECOND)
from erl_lite.records import DISTILL, FIRST, REFLECTION, SECOND
from erl_lite.viz import _style as S
from erl_lite.viz._style import COLORS, MARKERS, HistoryLike, as_history, joined_rulebooks, series

STEP = "training step"
ROLE_LABELS = {FIRST: "first attempt", REFLECTION: "reflection", SECOND: "second attempt", DISTILL: "internalization"}

# (key, kind, label, role) of one curve; the role picks its colour and marker.
Spec = tuple[str, str, str, str]
NO_EVAL = "no evaluation logged"


def _curves(ax: Axes, history: HistoryLike, specs: list[Spec], weight: float = 0.0,
            dashed: bool = False, prefix: str = "") -> int:
    """Draw every spec that has data; returns how many curves were drawn."""
    drawn = 0
    for key, kind, label, role in specs:
        steps, values = series(history, key, kind)
        if values:
            S.plot_series(ax, steps, values, label=prefix + label, color=COLORS[role],
                          weight=weight, dashed=dashed, marker=MARKERS[role])
            drawn += 1
    return drawn


def _runs(history: HistoryLike, baseline: HistoryLike) -> tuple[History, History | None]:
    return as_history(history), (as_history(baseline) if baseline is not None else None)


def _both_binary(h: History, base: History | None) -> bool:
    return rewards_are_binary(h) and (base is None or rewards_are_binary(base))


def _same_series(h, a: tuple[str, str], b: tuple[str, str]) -> bool | None:
    """Whether two logged series are equal point for point; None when neither has data."""
    (sa, va), (sb, vb) = series(h, *a), series(h, *b)
    if not va and not vb:
        return None
    return sa == sb and all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(va, vb))


def rewards_are_binary(history: HistoryLike) -> bool:
    """Whether reward and success are the same numbers everywhere (0/1 rewards, τ = 1: the games)."""
    h = as_history(history)
    pairs = [((REWARD_FIRST, "train"), (SUCCESS_FIRST, "train")), ((REWARD_SECOND, "train"), (SUCCESS_SECOND, "train"))]
    pairs.append(((EVAL_REWARD, "eval"), (EVAL_SUCCESS, "eval")))
    verdicts = [v for v in (_same_series(h, a, b) for a, b in pairs) if v is not None]
    return bool(verdicts) and all(verdicts)


def _panel(history: HistoryLike, ax: Axes | None, specs: list[Spec], smoothing: float, title: str,
           ylabel: str, unit: bool = False) -> Figure:
    """A panel of training curves over steps; ``unit``: the values are fractions in [0, 1]."""
    fig, ax, owned = S.new_axes(ax)
    drawn = _curves(ax, as_history(history), specs, smoothing)
    S.decorate(ax, title, STEP, ylabel, drawn > 0)
    if unit:
        ax.set_ylim(-0.03, 1.03)
    return S.done(fig, owned)


def _by_role(keys: dict[str, str]) -> list[Spec]:
    return [(key, "train", ROLE_LABELS[r], r) for r, key in keys.items()]


def _note(ax: Axes, text: str) -> None:
    ax.text(0.99, 0.02, text, transform=ax.transAxes, ha="right", va="bottom", color="0.45", fontsize=8, style="italic")


@S.styled
def plot_rewards(history: HistoryLike, baseline: HistoryLike = None, ax: Axes | None = None,
                 metric: str = "reward", smoothing: float = 0.0) -> Figure:
    """Reward (or ``metric="success"``) per phase over training steps and evaluation, RLVR dashed.
    ``smoothing``: exponential-moving-average weight in [0, 1); 0 draws raw values.

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> fig = plot_rewards(synthetic_history(steps=10), smoothing=0.6)
    """
    if metric not in ("reward", "success"):
        raise ValueError(f"metric must be 'reward' or 'success', got {metric!r}")
    h, base = _runs(history, baseline)
    fig, ax, owned = S.new_axes(ax)
    specs = [(f"{metric}/{FIRST}", "train", "first attempt", FIRST),
             (f"{metric}/{SECOND}", "train", "second attempt (gated tasks)", SECOND),
             (EVAL_PREFIX + metric, "eval", "evaluation (first attempt)", "eval")]
    drawn = _curves(ax, h, specs, smoothing)
    if base is not None:
        drawn += _curves(ax, base, [specs[0], specs[2]], smoothing, dashed=True, prefix="RLVR · ")
    if _both_binary(h, base):
        title, what = "Reward = success rate per phase (rewards are 0/1)", "reward = success rate (0–1)"
    elif metric == "reward":
        title, what = "Reward per phase", "mean reward (0–1)"
    else:
        title, what = "Success rate per phase", "success rate (0–1)"
    S.decorate(ax, title, STEP, what, drawn > 0)
    if drawn and not h.of_kind("eval"):
        _note(ax, f"{NO_EVAL}: set eval_steps, or log trainer.evaluate() with kind='eval'")
    ax.set_ylim(-0.03, 1.03)
    return S.done(fig, owned)


@S.styled
def plot_gate_rate(history: HistoryLike, ax: Axes | None = None, smoothing: float = 0.0) -> Figure:
    """Fraction of first attempts the gate sent on to reflection (``r1 < τ``) per step."""
    return _panel(history, ax, [(GATE_RATE, "train", "sent to reflection", "gate")], smoothing,
                  "Gate: first attempts sent to reflection", "fraction of first attempts", unit=True)


def _memory_sizes(h) -> tuple[list[int], list[float]]:
    """``memory/size`` from the metrics, else counted from the sampled step records."""
    steps, sizes = series(h, MEMORY_SIZE)
    if sizes:
        return steps, sizes
    rows = sorted((int(s.get("step", 0)), float(len(s.get("memory_after") or []))) for s in h.samples)
    return [r[0] for r in rows], [r[1] for r in rows]


@S.styled
def plot_memory(history: HistoryLike, ax: Axes | None = None) -> Figure:
    """Memory timeline: rulebooks written per step (bars) and held after it (line), on one y axis."""
    h = as_history(history)
    fig, ax, owned = S.new_axes(ax)
    w_steps, writes = series(h, MEMORY_WRITES)
    s_steps, sizes = _memory_sizes(h)
    if writes:
        ax.bar(w_steps, writes, color=COLORS["memory"], alpha=0.55, label="written this step")
    if sizes:
        S.plot_series(ax, s_steps, sizes, label="held after the step", color="0.2", marker=MARKERS["memory"])
    S.decorate(ax, "Memory: rulebooks written and held", STEP, "rulebooks", bool(writes or sizes), legend=False)
    ax.set_ylim(0, max(writes + sizes, default=0.0) * 1.35 + 0.5)  # headroom keeps the legend off the data
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", frameon=False)
    return S.done(fig, owned)


def memory_table(history: HistoryLike) -> list[tuple[int, str]]:
    """``(step, text)`` of what memory held after each sampled step (rulebooks joined by a ``---`` line)."""
    h = as_history(history)
    rows = [(int(s.get("step", i)), joined_rulebooks(s.get("memory_after"))) for i, s in enumerate(h.samples, start=1)]
    return sorted(rows, key=lambda r: r[0])


@S.styled
def plot_losses(history: HistoryLike, ax: Axes | None = None, smoothing: float = 0.0) -> Figure:
    """Policy loss contributed by each role (``loss/first`` … ``loss/distill``) per step."""
    return _panel(history, ax, _by_role({r: LOSS_KEYS[r] for r in ROLE_LABELS}), smoothing, "Loss by role",
                  "loss (token sum, mean over sequences)")


@S.styled
def plot_advantages(history: HistoryLike, ax: Axes | None = None, smoothing: float = 0.0) -> Figure:
    """Mean |advantage| per role per step: how much learning signal each role carried."""
    return _panel(history, ax, _by_role(ADVANTAGE_KEYS), smoothing,
                  "Advantage magnitude by role", "mean |advantage| (group-std units)")


@S.styled
def plot_eval(history: HistoryLike, baseline: HistoryLike = None, ax: Axes | None = None) -> Figure:
    """Evaluation reward and success (one curve when they coincide), RLVR dashed if given."""
    h, base = _runs(history, baseline)
    fig, ax, owned = S.new_axes(ax)
    same = all(_same_series(x, (EVAL_REWARD, "eval"), (EVAL_SUCCESS, "eval")) is not False
               for x in ([h] if base is None else [h, base]))
    specs = ([(EVAL_REWARD, "eval", "reward = success rate", "eval")] if same else
             [(EVAL_REWARD, "eval", "mean reward", "eval"), (EVAL_SUCCESS, "eval", "success rate", "success")])
    drawn = _curves(ax, h, specs)
    if base is not None:
        drawn += _curves(ax, base, specs, dashed=True, prefix="RLVR · ")
    S.decorate(ax, "Evaluation on held-out tasks", STEP, "first-attempt score (0–1)", drawn > 0)
    ax.set_ylim(-0.03, 1.03)
    return S.done(fig, owned)


@S.styled
def plot_comparison(results: list[dict], variants: list[str] | None = None, ax: Axes | None = None,
                    title: str = "Equal CPU time, one line per seed") -> Figure:
    """Evaluation over training CPU time, one line per run, a style per variant (``compare_modes.py``'s
    results: dicts with ``variant`` and ``eval_curve``, rows ``[step, CPU seconds, success]``)."""
    variants = variants or list(dict.fromkeys(r["variant"] for r in results))
    fig, ax, owned = S.new_axes(ax, figsize=(6.6, 4.0))
    styles, markers = ["-", "--", "-.", ":"], ["o", "s", "^", "v", "D", "P", "X"]
    drawn = 0
    for i, v in enumerate(variants):
        for j, r in enumerate(r for r in results if r["variant"] == v):
            seconds, values = [c[1] for c in r["eval_curve"]], [c[2] for c in r["eval_curve"]]
            ax.plot(seconds, values, color=f"C{i}", alpha=0.8, label=v if j == 0 else None, ls=styles[i % len(styles)],
                    marker=markers[i % len(markers)], ms=4, mfc="none" if i % 2 else None)
            drawn += 1
    S.decorate(ax, title, "training CPU time (s, one thread; evaluation excluded)",
               "eval first-attempt success (0–1)", drawn > 0)
    ax.set_ylim(-0.03, 1.03)
    return S.done(fig, owned)


@S.styled
def plot_overview(history: HistoryLike, baseline: HistoryLike = None, smoothing: float = 0.0) -> Figure:
    """A dashboard: reward (with evaluation), success, gate, memory, loss, advantage (for READMEs).

    Example:
        >>> from erl_lite.viz.demo_data import synthetic_history
        >>> [ax.get_title() for ax in plot_overview(synthetic_history(steps=5)).axes][:2]
        ['Reward = success rate per phase (rewards are 0/1)', 'Gate: first attempts sent to reflection']
    """
    h, base = _runs(history, baseline)
    fig = S.plt.figure(figsize=(15, 7.6), dpi=S.DPI)
    grid = fig.add_gridspec(2, 3)
    if _both_binary(h, base):
        plot_rewards(h, base, ax=fig.add_subplot(grid[0, :2]), smoothing=smoothing)
    else:
        plot_rewards(h, base, ax=fig.add_subplot(grid[0, 0]), smoothing=smoothing)
        plot_rewards(h, base, ax=fig.add_subplot(grid[0, 1]), metric="success", smoothing=smoothing)
    plot_gate_rate(h, ax=fig.add_subplot(grid[0, 2]), smoothing=smoothing)
    plot_memory(h, ax=fig.add_subplot(grid[1, 0]))
    plot_losses(h, ax=fig.add_subplot(grid[1, 1]), smoothing=smoothing)
    plot_advantages(h, ax=fig.add_subplot(grid[1, 2]), smoothing=smoothing)
    fig.suptitle("ERL run overview" + (" (dashed: RLVR baseline)" if base else ""), fontsize=13)
    return S.done(fig, True)


@S.styled
def save_figures(history: HistoryLike, out_dir: str | os.PathLike, baseline: HistoryLike = None) -> list[str]:
    """Write the rewards, gate_rate, memory, losses, eval and overview PNGs into ``out_dir``; return paths."""
    h, base = _runs(history, baseline)
    os.makedirs(out_dir, exist_ok=True)
    figures = {"rewards.png": plot_rewards(h, base), "gate_rate.png": plot_gate_rate(h), "memory.png": plot_memory(h),
               "losses.png": plot_losses(h), "eval.png": plot_eval(h, base), "overview.png": plot_overview(h, base)}
    for name, fig in figures.items():
        fig.savefig(os.path.join(out_dir, name), dpi=S.DPI, bbox_inches="tight")
    return [os.path.join(out_dir, name) for name in figures]
