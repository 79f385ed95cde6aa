"""Draw the ERL loop diagram of the README and notebook 01 (erl_lite/assets/erl_loop.png) from the code: a box per phase
function erl_lite.core.phases.erl_step calls, in its order, then the policy update, so the picture cannot drift.

Usage: python scripts/draw_erl_loop.py [OUT.png]   (tests/test_viz.py checks the committed PNG is current)
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from erl_lite.viz import _style as S
from erl_lite.viz._style import COLORS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

OUT = Path(__file__).resolve().parent.parent / "erl_lite" / "assets" / "erl_loop.png"


def erl_phases() -> list[tuple[str, str]]:
    """(name, summary) of each phase function :func:`erl_step` calls, in the order of its source."""
    from erl_lite.core import phases

    tree = ast.parse(textwrap.dedent(inspect.getsource(phases.erl_step)))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    inner = {id(sub) for c in calls for arg in [*c.args, *c.keywords] for sub in ast.walk(arg)}
    names = [c.func.id for c in sorted(calls, key=lambda c: (c.lineno, c.col_offset)) if id(c) not in inner]
    found = [getattr(phases, n, None) for n in dict.fromkeys(names) if not n.startswith("_")]
    return [
        (f.__name__, _summary(f.__doc__ or ""))
        for f in found
        if inspect.isfunction(f) and f.__module__ == phases.__name__
    ]


def _summary(doc: str) -> str:
    """A docstring's opening clause: up to its first comma or semicolon outside parentheses."""
    text, depth = re.sub(r"[`*]", "", " ".join(doc.split())), 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch in ",;" and depth == 0:
            return text[:i]
    return text.rstrip(".")


@S.styled
def plot_erl_loop() -> Figure:
    """The ERL loop: a box per phase :func:`erl_phases` reads from the code, then the policy update, the arrow back
    to the next step, and memory (written by ``update_memory``, read by ``reflect``)."""
    from erl_lite.core.update import PolicyUpdater

    boxes = erl_phases() + [(PolicyUpdater.update.__qualname__, "one GRPO update on the whole batch")]
    fig = S.plt.figure(figsize=(2.05 * len(boxes), 3.6), dpi=S.DPI)
    ax = fig.add_axes((0, 0, 1, 1), xlim=(-1.1, 2 * len(boxes) - 0.9), ylim=(-2.7, 1.3))
    ax.axis("off")
    box = dict(boxstyle="round,pad=0.4", facecolor="#eef3fa", edgecolor=COLORS["first"])
    for i, (name, summary) in enumerate(boxes):
        ax.text(2 * i, 0, f"{name}\n" + textwrap.fill(summary, 22), ha="center", va="center", fontsize=8.5, bbox=box)
        if i:
            ax.annotate("", (2 * i - 0.85, 0), (2 * i - 1.15, 0), arrowprops=dict(arrowstyle="-|>", color="0.3"))
    last = 2 * len(boxes) - 2
    ax.plot([last, last, 0], [-0.75, -2.45, -2.45], color="0.3", lw=1)  # back to the start: the next step
    ax.annotate("", (0, -0.75), (0, -2.46), arrowprops=dict(arrowstyle="-|>", color="0.3"))
    ax.text(last - 0.15, -2.35, "next step: new tasks, the updated policy", ha="right", fontsize=9, color="0.3")
    names = [n for n, _ in boxes]
    if {"reflect", "update_memory"} <= set(names):
        at = names.index("reflect") + names.index("update_memory")
        ax.text(
            at,
            -1.6,
            "memory: rulebooks whose second attempt reached τ",
            ha="center",
            fontsize=8.5,
            bbox=dict(boxstyle="round,pad=0.4", facecolor="#e8f8fa", edgecolor=COLORS["memory"]),
        )
        for end, start in [
            ((2 * names.index("reflect"), -0.75), (at - 1.2, -1.4)),
            ((at + 1.2, -1.4), (2 * names.index("update_memory"), -0.75)),
        ]:
            ax.annotate("", end, start, arrowprops=dict(arrowstyle="-|>", color=COLORS["memory"], ls="--"))
    ax.set_title("The ERL loop, one step (boxes read from erl_lite.core.phases.erl_step)", fontsize=11, y=0.93)
    S.plt.close(fig)  # detached from pyplot: a notebook shows the returned figure once
    return fig


def draw(out: str | Path = OUT) -> Path:
    plot_erl_loop().savefig(out, bbox_inches="tight", metadata={"Software": None})  # no version stamp
    return Path(out)


if __name__ == "__main__":
    print(draw(sys.argv[1] if len(sys.argv) > 1 else OUT))
