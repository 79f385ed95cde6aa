"""Plots and notebook widgets that show each ERL phase of a run.

Everything reads a run's :class:`~erl_lite.history.History` (or a run folder, a
``history.jsonl`` path, or a list of record dicts):

* curves — :func:`plot_rewards` (reward and success are one panel when rewards are 0/1,
  :func:`rewards_are_binary`), :func:`plot_gate_rate`, :func:`plot_memory`,
  :func:`plot_losses`, :func:`plot_advantages`, :func:`plot_eval`, :func:`plot_overview`,
  and :func:`save_figures` for README PNGs;
* one task's story — :func:`show_attempt_pair` (HTML) / :func:`attempt_pair_text`;
* memory — :func:`memory_table`, :func:`memory_viewer`;
* browsing — :func:`reflection_browser` (ipywidgets; static output, chosen automatically,
  where no widget front-end is connected).

Figures are returned, never shown, and the Agg backend is chosen on display-less machines,
so all of it runs headless. Departures from the paper: see each module's docstring.

Example:
    >>> from erl_lite.viz import plot_overview, synthetic_history
    >>> fig = plot_overview(synthetic_history(steps=10))
"""

from erl_lite.viz.demo_data import synthetic_history
from erl_lite.viz.pairs import attempt_pair_text, show_attempt_pair, word_diff
from erl_lite.viz.plots import (memory_table, plot_advantages, plot_comparison, plot_eval, plot_gate_rate,
                                plot_losses, plot_memory, plot_overview, plot_rewards,
                                rewards_are_binary, save_figures)
from erl_lite.viz.widgets import StaticView, is_static, memory_viewer, reflection_browser

__all__ = [
    "StaticView", "attempt_pair_text", "is_static", "memory_table", "memory_viewer",
    "plot_advantages", "plot_comparison", "plot_eval", "plot_gate_rate", "plot_losses", "plot_memory",
    "plot_overview", "plot_rewards", "reflection_browser", "rewards_are_binary", "save_figures", "show_attempt_pair",
    "synthetic_history", "word_diff",
]
