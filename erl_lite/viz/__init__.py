"""Plots and notebook widgets that show each ERL phase of a run, read from its History (or a run folder,
``history.jsonl``, or a list of records): curves, one task's story, browsers. Figures are returned, never shown.

Example:
    >>> from erl_lite.viz import plot_overview, synthetic_history
    >>> fig = plot_overview(synthetic_history(steps=10))
"""

from erl_lite.viz.demo_data import synthetic_history
from erl_lite.viz.figures import plot_reflection
from erl_lite.viz.pairs import attempt_pair_text, show_attempt_pair, word_diff
from erl_lite.viz.plots import (
    plot_advantages,
    plot_comparison,
    plot_eval,
    plot_gate_rate,
    plot_losses,
    plot_memory,
    plot_overview,
    plot_rewards,
    rewards_are_binary,
    save_figures,
)
from erl_lite.viz.widgets import StaticView, is_static, memory_viewer, reflection_browser

__all__ = [
    "StaticView",
    "attempt_pair_text",
    "is_static",
    "memory_viewer",
    "plot_advantages",
    "plot_comparison",
    "plot_eval",
    "plot_gate_rate",
    "plot_losses",
    "plot_memory",
    "plot_overview",
    "plot_reflection",
    "plot_rewards",
    "reflection_browser",
    "rewards_are_binary",
    "save_figures",
    "show_attempt_pair",
    "synthetic_history",
    "word_diff",
]
