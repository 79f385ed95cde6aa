"""One reflection drawn from a run's records: its rulebook, what it changed, and what it claims, checked against
the world."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from matplotlib.figure import Figure

from erl_lite.viz import _style as S
from erl_lite.viz.pairs import Record, rule_diff, select_pair, step_record

COLUMNS = 76  # characters per line of the rulebook drawn: the figure's width at 10 pt monospace
CHAR_PT, LINE_PT = 0.602 * 10, 15  # DejaVu Sans Mono advances 0.602 em per character


def _rulebook_lines(base: str, rulebook: str) -> list[list[tuple[str, bool]]]:
    """The rulebook's words wrapped at spaces to :data:`COLUMNS`, each flagged when its rule is new vs ``base``."""
    words = [(w, op == "+") for op, text in rule_diff(base, rulebook) if op != "-" for w in text.split()]
    lines: list[list[tuple[str, bool]]] = [[]]
    for word, new in words:
        if lines[-1] and sum(len(w) + 1 for w, _ in lines[-1]) + len(word) > COLUMNS:
            lines.append([])
        lines[-1].append((word, new))
    return lines


@S.styled
def plot_reflection(
    source: S.HistoryLike | Record,
    step: int | None = None,
    task_id: str | None = None,
    index: int | None = None,
    claims: Callable[[str], Sequence[str]] | None = None,
    truth: Sequence[str] = (),
) -> Figure:
    """One reflection's rulebook, words new against its base prompt in green; with ``claims`` (the items the
    rulebook asserts, e.g. ``named_holes``) each claim is checked against ``truth`` and true items missed are listed.
    Picks the rollout as :func:`~erl_lite.viz.show_attempt_pair` does (by default the first reflected one)."""
    record = step_record(source, step)
    refl = select_pair(record, task_id, index)["reflection"]
    if refl is None:
        raise ValueError(f"step {record.get('step')}: that rollout passed the gate, so it has no reflection")
    lines = _rulebook_lines(refl.get("base_prompt", ""), refl.get("rulebook", ""))
    named = list(claims(refl.get("rulebook", ""))) if claims else []
    checks = [(f"✓ names {c}: right" if c in truth else f"✗ names {c}: wrong", c in truth) for c in named]
    checks += [(f"○ misses {t}", False) for t in truth if t not in named]
    fig = S.plt.figure(figsize=(COLUMNS * CHAR_PT / 72 + 0.4, (len(lines) + len(checks) + 3) * LINE_PT / 72), dpi=S.DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.axis("off")

    def put(row: int, col: int, text: str, **look) -> None:  # rows and columns of text from the top left
        ax.annotate(
            text,
            (0, 1),
            xycoords="axes fraction",
            xytext=(8 + col * CHAR_PT, -(row + 0.6) * LINE_PT),
            textcoords="offset points",
            fontsize=10,
            va="top",
            **look,
        )

    changed = "green: new vs its base prompt" if any(new for line in lines for _, new in line) else "= its base prompt"
    title = f"Reflection, step {record.get('step')}, task {refl.get('task_id')} #{refl.get('index')}: its rulebook"
    put(0, 0, f"{title} ({changed})", weight="bold")
    for row, line in enumerate(lines, start=1):
        col = 0
        for word, new in line:
            put(
                row,
                col,
                word,
                family="monospace",
                color="#060" if new else "0.15",
                weight="bold" if new else "normal",
                bbox=dict(facecolor="#dfd", edgecolor="none", pad=0.6) if new else None,
            )
            col += len(word) + 1
    for row, (text, right) in enumerate(checks, start=len(lines) + 2):
        put(row, 0, text, color=S.COLORS["second"] if right else "#d62728")
    S.plt.close(fig)  # detached from pyplot: a notebook shows the returned figure once
    return fig
