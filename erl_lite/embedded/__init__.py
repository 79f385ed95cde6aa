"""The embedded default policy: a 0.4 M-parameter chat model shipped in ``erl_lite/data/embedded``
(:mod:`~erl_lite.embedded.loading`, built by ``scripts/embedded/``), its world (:mod:`~erl_lite.embedded.world`), its
rulebooks (:mod:`~erl_lite.embedded.rulebooks`) and ``erl-lite demo`` (:mod:`~erl_lite.embedded.demo`).

Departures from the paper: the paper trains 4B/7B models on FrozenLake with fixed letters; here a stand-in small
enough to train in minutes on a laptop CPU plays a smaller variant with two kinds of hole whose letters vary per run.
"""

from __future__ import annotations

from erl_lite import lazy_exports

# The public API and the module that defines each name (one home each; imported on first use).
_EXPORTS = {
    "EMBEDDED_DIR": "loading",
    "load_embedded": "loading",
    "DemoLake": "world",
    "demo_world": "world",
    "make_world": "world",
    "run_letters": "world",
    "hole_letters": "world",
    "DEMO_SETTINGS": "demo",
    "DEMO_EVAL_TASKS": "demo",
    "demo_config": "demo",
    "demo_trainer": "demo",
    "run_demo": "demo",
    "step_line": "demo",
    "write_report": "demo",
    "contradictions": "rulebooks",
    "contradiction_rate": "rulebooks",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
