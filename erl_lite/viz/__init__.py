"""Plots and notebook widgets that show each ERL phase of a run, read from its History (or a run folder,
``history.jsonl``, or a list of records): curves, one task's story, browsers. Figures are returned, never shown.
Exported lazily: importing this loads no matplotlib.

Example:
    >>> from pathlib import Path
    >>> import erl_lite
    >>> from erl_lite.viz import plot_overview
    >>> fig = plot_overview(Path(erl_lite.__file__).parent / "assets" / "demo")  # erl-lite demo's committed run
"""

from __future__ import annotations

from erl_lite import lazy_exports

_EXPORTS = {
    "plot_reflection": "figures",
    "attempt_pair_text": "pairs",
    "show_attempt_pair": "pairs",
    "word_diff": "pairs",
    "rule_diff": "pairs",
    "plot_advantages": "plots",
    "plot_comparison": "plots",
    "plot_eval": "plots",
    "plot_gate_rate": "plots",
    "plot_losses": "plots",
    "plot_memory": "plots",
    "plot_overview": "plots",
    "plot_rewards": "plots",
    "rewards_are_binary": "plots",
    "save_figures": "plots",
    "StaticView": "widgets",
    "is_static": "widgets",
    "memory_viewer": "widgets",
    "reflection_browser": "widgets",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
