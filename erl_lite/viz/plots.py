"""Matplotlib figures for each ERL phase of a run; each draws on ``ax`` when given and returns the
``Figure``; missing data gives a panel noting "no data yet". Departures from the paper: the paper shows
reward before/after reflection and eval reward; the gate, memory, loss and advantage panels are added.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from erl_lite import metric_names as keys
from erl_lite.history import History
from erl_lite.records import FIRST, REFLECTION, ROLES, SECOND
from erl_lite.viz import _style as S
from erl_lite.viz._style import COLORS, LINESTYLES, MARKERS, HistoryLike, as_history, joined_rulebooks

STEP = "training step"
ROLE_LABELS = {**{r: r for r in ROLES}, FIRST: "first attempt", SECOND: "second attempt"}  # role -> legend label

# (key, kind, label, role) of one curve; the role picks its colour and marker.
Spec = tuple[str, str, str, str]
NO_EVAL = "no evaluation logged"


def _gapped(history: History, key: str, role: str) -> tuple[list[int], list[float]]:
    """A training series at every logged step, NaN (a gap in its line) where it has no value or its role had no
    rows (the update logs 0 for those): a line joined across such steps, or dropping to 0, would show data."""
    steps, values = history.series(key)
    empty = {s for s, n in zip(*history.series(keys.SAMPLES_KEYS.get(role, ""))) if n == 0}
    known = {s: v for s, v in zip(steps, values) if s not in empty}
    every = sorted({*history.series(keys.STEP)[0], *steps})
    return (every, [known.get(s, math.nan) for s in every]) if known else ([], [])


def _curves(ax: Axes, history: History, specs: list[Spec], baseline: bool = False, roles: bool = False) -> int:
    """Draw every spec that has data (evaluation as points with intervals, ``roles``: a line style per role, equal
    roles one curve labelled with both; a ``baseline``'s labels say RLVR); returns how many were drawn."""
    drawn, curves = 0, {}
    for key, kind, label, role in specs:
        steps, values = history.series(key, kind) if kind == "eval" else _gapped(history, key, role)
        label = "RLVR · " + label if baseline else label
        if values and kind == "eval":
            _eval_points(ax, history, steps, values, label, COLORS[role], MARKERS[role], baseline)
        elif values and (same := curves.get(repr((steps, values)))) is not None:
            same.set_label(f"{same.get_label()} = {label}")
        elif values:
            curves[repr((steps, values))] = S.plot_series(
                ax,
                steps,
                values,
                label=label,
                color=COLORS[role],
                marker=MARKERS[role],
                ls="--" if baseline else LINESTYLES.get(role, "-") if roles else "-",
                hollow=baseline or roles and role == REFLECTION,
            )
        drawn += bool(values)
    return drawn


def wilson(p: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a success rate ``p`` over ``n`` episodes; for mean rewards in [0, 1] it is
    conservative (their variance is at most p(1 - p)); ``(p, p)`` when ``n`` is unknown."""
    if n <= 0:
        return p, p
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


def _eval_points(
    ax: Axes, h: History, steps: list[int], values: list[float], label: str, color: str, marker: str, baseline: bool
) -> None:
    """Evaluation at the steps measured, never joined by a line (two points are not a learning curve)."""
    counts = dict(zip(*h.series(keys.EVAL_NUM_EPISODES, "eval")))
    bounds = [wilson(v, counts.get(s, 0)) for s, v in zip(steps, values)]
    err = [
        [max(0.0, v - lo) for v, (lo, _) in zip(values, bounds)],  # >= 0: rounding at a rate of 0 or 1, and a
        [max(0.0, hi - v) for v, (_, hi) in zip(values, bounds)],
    ]  # mean reward outside [0, 1], have none
    ax.errorbar(
        [s + 0.2 * baseline for s in steps],
        values,
        yerr=err,
        fmt=marker,
        ls="none",
        color=color,
        capsize=3,
        ms=6,
        mfc="none" if baseline else color,
        zorder=4,
        label=label + " (95% interval)",
    )


def _runs(history: HistoryLike, baseline: HistoryLike) -> tuple[History, History | None]:
    return as_history(history), (as_history(baseline) if baseline is not None else None)


def _both_binary(h: History, base: History | None) -> bool:
    return rewards_are_binary(h) and (base is None or rewards_are_binary(base))


def _same_series(h: History, a: tuple[str, str], b: tuple[str, str]) -> bool | None:
    """Whether two logged series are equal point for point; None when neither has data."""
    (sa, va), (sb, vb) = h.series(*a), h.series(*b)
    if not va and not vb:
        return None
    return sa == sb and all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(va, vb))


def rewards_are_binary(history: HistoryLike) -> bool:
    """Whether reward and success are the same numbers everywhere (0/1 rewards, τ = 1: the games)."""
    h = as_history(history)
    pairs = [
        ((keys.REWARD_FIRST, "train"), (keys.SUCCESS_FIRST, "train")),
        ((keys.REWARD_SECOND, "train"), (keys.SUCCESS_SECOND, "train")),
        ((keys.EVAL_REWARD, "eval"), (keys.EVAL_SUCCESS, "eval")),
    ]
    verdicts = [v for v in (_same_series(h, a, b) for a, b in pairs) if v is not None]
    return bool(verdicts) and all(verdicts)


def _panel(
    history: HistoryLike, ax: Axes | None, specs: list[Spec], title: str, ylabel: str, unit: bool = False
) -> Figure:
    """A panel of training curves over steps; ``unit``: the values are fractions in [0, 1]."""
    fig, ax, owned = S.new_axes(ax)
    drawn = _curves(ax, as_history(history), specs, roles=True)
    S.decorate(ax, title, STEP, ylabel, drawn > 0, unit)
    return S.done(fig, owned)


def _by_role(by_role: dict[str, str]) -> list[Spec]:
    return [(key, "train", ROLE_LABELS[r], r) for r, key in by_role.items()]


@S.styled
def plot_rewards(
    history: HistoryLike, baseline: HistoryLike = None, ax: Axes | None = None, metric: str = "reward"
) -> Figure:
    """Reward (or ``metric="success"``) per phase over training steps, evaluation as points; RLVR dashed.

    Example:
        >>> from pathlib import Path
        >>> import erl_lite
        >>> fig = plot_rewards(Path(erl_lite.__file__).parent / "assets" / "demo")  # erl-lite demo's committed run
    """
    if metric not in ("reward", "success"):
        raise ValueError(f"metric must be 'reward' or 'success', got {metric!r}")
    h, base = _runs(history, baseline)
    fig, ax, owned = S.new_axes(ax)
    specs = [
        (f"{metric}/{FIRST}", "train", "first attempt", FIRST),
        (f"{metric}/{SECOND}", "train", "second attempt (gated tasks)", SECOND),
        (keys.EVAL_PREFIX + metric, "eval", "evaluation (first attempt)", "eval"),
    ]
    drawn = _curves(ax, h, specs)
    if base is not None:
        drawn += _curves(ax, base, [specs[0], specs[2]], baseline=True)
    if _both_binary(h, base):
        title, what = "Reward = success rate per phase (rewards are 0/1)", "reward = success rate (0–1)"
    elif metric == "reward":
        title, what = "Reward per phase", "mean reward (0–1)"
    else:
        title, what = "Success rate per phase", "success rate (0–1)"
    S.decorate(ax, title, STEP, what, drawn > 0, unit=True)
    if drawn and not h.of_kind("eval"):
        hint = f"{NO_EVAL}: set eval_steps, or log trainer.evaluate() with kind='eval'"
        S.note(ax, 0.99, 0.02, hint, ha="right", va="bottom", fontsize=8)
    return S.done(fig, owned)


@S.styled
def plot_gate_rate(history: HistoryLike, ax: Axes | None = None) -> Figure:
    """Fraction of first attempts the gate sent on to reflection (``r1 < τ``) per step."""
    return _panel(
        history,
        ax,
        [(keys.GATE_RATE, "train", "sent to reflection", "gate")],
        "Gate: first attempts sent to reflection",
        "fraction of first attempts",
        unit=True,
    )


def _held(h: History, claims: Callable[[str], Sequence[str]] | None) -> list[tuple[int, list[str]]]:
    """(step, what memory named after it) per sampled step; by default each rulebook is one item."""
    rows = sorted(
        (int(s.get("step", i)), joined_rulebooks(s.get("memory_after"))) for i, s in enumerate(h.samples, start=1)
    )
    return [(step, list(claims(text)) if claims else [text] * bool(text)) for step, text in rows]


@S.styled
def plot_memory(
    history: HistoryLike,
    claims: Callable[[str], Sequence[str]] | None = None,
    truth: Sequence[str] = (),
    ax: Axes | None = None,
) -> Figure:
    """What memory held after each sampled step: a row per item ``claims(text)`` names (default: each distinct
    rulebook), a mark where it was named; with ``truth``, right items green, wrong ones red crosses, true items
    memory did not name grey rings (e.g. ``claims=named_holes, truth=hole letters`` in the embedded world)."""
    h = as_history(history)
    fig, ax, owned = S.new_axes(ax)
    held = _held(h, claims)
    rows = list(dict.fromkeys([*truth, *(item for _, items in held for item in items)]))
    looks = {
        "named": dict(marker="o", color=COLORS["memory"]),
        "named, right": dict(marker="o", color=COLORS[SECOND]),
        "named, wrong": dict(marker="X", color="#d62728"),
        "true, not named": dict(marker="o", facecolors="none", edgecolors="0.55"),
    }
    points: dict[str, list[tuple[int, int]]] = {kind: [] for kind in looks}
    for step, items in held:
        for item in items:
            kind = "named" if not truth else "named, right" if item in truth else "named, wrong"
            points[kind].append((step, rows.index(item)))
        points["true, not named"] += [(step, rows.index(t)) for t in truth if t not in items]
    for kind, xy in points.items():
        if xy:
            ax.scatter(*zip(*xy), s=70, label=kind, **looks[kind])
    labels = rows if claims else [f"rulebook {i + 1}" for i in range(len(rows))]
    ax.set_yticks(range(len(rows)), labels)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    what = "what it names" if claims else "which rulebook it held"
    S.decorate(ax, f"Memory after each step: {what}", "step", "in memory", bool(rows))
    ax.grid(False, axis="y")
    return S.done(fig, owned)


@S.styled
def plot_losses(history: HistoryLike, ax: Axes | None = None) -> Figure:
    """Policy loss contributed by each role (``loss/first`` … ``loss/internalization``) per step."""
    return _panel(history, ax, _by_role(keys.LOSS_KEYS), "Loss by role", "loss (token sum, mean over sequences)")


@S.styled
def plot_advantages(history: HistoryLike, ax: Axes | None = None) -> Figure:
    """Mean |advantage| per role per step: how much learning signal each role carried."""
    return _panel(
        history, ax, _by_role(keys.ADVANTAGE_KEYS), "Advantage magnitude by role", "mean |advantage| (group-std units)"
    )


@S.styled
def plot_eval(history: HistoryLike, baseline: HistoryLike = None, ax: Axes | None = None) -> Figure:
    """Evaluation reward and success (one series when they coincide) at the steps measured, with 95% intervals,
    RLVR hollow beside it if given."""
    h, base = _runs(history, baseline)
    fig, ax, owned = S.new_axes(ax)
    same = all(
        _same_series(x, (keys.EVAL_REWARD, "eval"), (keys.EVAL_SUCCESS, "eval")) is not False
        for x in ([h] if base is None else [h, base])
    )
    specs = [(keys.EVAL_REWARD, "eval", "reward = success rate" if same else "mean reward", "eval")]
    if not same:
        specs.append((keys.EVAL_SUCCESS, "eval", "success rate", "success"))
    drawn = _curves(ax, h, specs)
    if base is not None:
        drawn += _curves(ax, base, specs, baseline=True)
    S.decorate(ax, "Evaluation on held-out tasks", STEP, "first-attempt score (0–1)", drawn > 0, unit=True)
    return S.done(fig, owned)


@S.styled
def plot_comparison(
    results: list[dict],
    variants: list[str] | None = None,
    title: str = "Evaluation over training CPU time",
) -> Figure:
    """Evaluation over training CPU time, a panel per variant (``compare_modes.py``'s results: dicts with
    ``variant`` and ``eval_curve``, rows ``[step, CPU seconds, success]``): its seeds as thin lines, their median
    at each evaluation step in bold (at the seeds' median seconds), and ERL's median in the other panels."""
    variants = [v for v in variants or dict.fromkeys(r["variant"] for r in results) if _runs_of(results, v)]
    columns = 2 if len(variants) in (2, 4) else min(3, max(len(variants), 1))
    colour = {v: f"C{i}" for i, v in enumerate(dict.fromkeys(r["variant"] for r in results))}  # same in any subset
    rows = max(1, math.ceil(len(variants) / columns))
    fig, axes = S.plt.subplots(rows, columns, figsize=(4.4 * columns, 3.3 * rows + 0.6), dpi=S.DPI, squeeze=False)
    reference = _median_curve(_runs_of(results, "ERL"))
    for ax, v in zip(axes.flat, variants):
        runs = _runs_of(results, v)
        for r in runs:
            ax.plot([c[1] for c in r["eval_curve"]], [c[2] for c in r["eval_curve"]], color=colour[v], alpha=0.35, lw=1)
        if v != "ERL" and reference[0]:
            ax.plot(*reference, color="0.2", ls="--", lw=1.2, label="ERL's median")
        ax.plot(*_median_curve(runs), color=colour[v], lw=2.6, marker="o", ms=3.5, label="median over seeds")
        S.decorate(
            ax,
            f"{v} ({len(runs)} seed{'s' * (len(runs) != 1)})",
            "training CPU time (s)",
            "eval success",
            True,
            unit=True,
        )
    longest = max((c[1] for r in results for c in r["eval_curve"]), default=1.0) or 1.0
    for ax in list(axes.flat)[: len(variants)]:  # one time axis for every panel: the variants compare by eye
        ax.set_xlim(-0.03 * longest, 1.03 * longest)
    for ax in list(axes.flat)[len(variants) :]:
        ax.set_axis_off()
    if not variants:
        axes[0, 0].set_axis_on()
        S.decorate(axes[0, 0], title, "training CPU time (s)", "eval success", False, unit=True)
    fig.suptitle(f"{title} (one thread; evaluation excluded)", fontsize=12)
    return S.done(fig, True)


def _runs_of(results: list[dict], variant: str) -> list[dict]:
    return [r for r in results if r["variant"] == variant and r["eval_curve"]]


def _median_curve(runs: list[dict]) -> tuple[list[float], list[float]]:
    """(seconds, success) at each evaluation step every run has: the medians over the runs (equal-iteration
    runs evaluate at the same steps; seconds differ by seed)."""
    steps = sorted(set.intersection(*[{c[0] for c in r["eval_curve"]} for r in runs])) if runs else []
    at = [{c[0]: c for c in r["eval_curve"]} for r in runs]
    return [statistics.median(a[s][1] for a in at) for s in steps], [
        statistics.median(a[s][2] for a in at) for s in steps
    ]


@S.styled
def plot_overview(
    history: HistoryLike,
    baseline: HistoryLike = None,
    memory_claims: Callable[[str], Sequence[str]] | None = None,
    memory_truth: Sequence[str] = (),
) -> Figure:
    """A dashboard: reward (with evaluation), success, gate, memory, loss, advantage (for READMEs); the memory
    panel is :func:`plot_memory` with ``claims=memory_claims, truth=memory_truth``.

    Example:
        >>> from pathlib import Path
        >>> import erl_lite
        >>> [ax.get_title() for ax in plot_overview(Path(erl_lite.__file__).parent / "assets" / "demo").axes][:2]
        ['Reward = success rate per phase (rewards are 0/1)', 'Gate: first attempts sent to reflection']
    """
    h, base = _runs(history, baseline)
    fig = S.plt.figure(figsize=(15, 7.6), dpi=S.DPI)
    grid = fig.add_gridspec(2, 3)
    if _both_binary(h, base):
        plot_rewards(h, base, ax=fig.add_subplot(grid[0, :2]))
    else:
        plot_rewards(h, base, ax=fig.add_subplot(grid[0, 0]))
        plot_rewards(h, base, ax=fig.add_subplot(grid[0, 1]), metric="success")
    plot_gate_rate(h, ax=fig.add_subplot(grid[0, 2]))
    plot_memory(h, memory_claims, memory_truth, ax=fig.add_subplot(grid[1, 0]))
    plot_losses(h, ax=fig.add_subplot(grid[1, 1]))
    plot_advantages(h, ax=fig.add_subplot(grid[1, 2]))
    fig.suptitle("ERL run overview" + (" (dashed: RLVR baseline)" if base else ""), fontsize=13)
    return S.done(fig, True)


@S.styled
def save_figures(
    history: HistoryLike,
    out_dir: str | os.PathLike,
    baseline: HistoryLike = None,
    memory_claims: Callable[[str], Sequence[str]] | None = None,
    memory_truth: Sequence[str] = (),
) -> list[str]:
    """Write the rewards, gate_rate, memory, losses, eval and overview PNGs into ``out_dir``; return paths.
    ``memory_claims``, ``memory_truth``: both memory panels' (:func:`plot_memory`)."""
    h, base = _runs(history, baseline)
    os.makedirs(out_dir, exist_ok=True)
    figures = {
        "rewards.png": plot_rewards(h, base),
        "gate_rate.png": plot_gate_rate(h),
        "memory.png": plot_memory(h, memory_claims, memory_truth),
        "losses.png": plot_losses(h),
        "eval.png": plot_eval(h, base),
        "overview.png": plot_overview(h, base, memory_claims, memory_truth),
    }
    for name, fig in figures.items():
        fig.savefig(os.path.join(out_dir, name), dpi=S.DPI, bbox_inches="tight")
    return [os.path.join(out_dir, name) for name in figures]
