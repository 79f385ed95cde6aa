"""The embedded default policy: a tiny chat model shipped inside the package, its world and its demo.

No package index ships a usable pretrained causal LM, so erl_lite carries its own (about 0.4
million parameters, a small BPE tokenizer, a ChatML template) in ``erl_lite/data/embedded``.
The modules:

* :mod:`~erl_lite.embedded.world` — the demo world: a small FrozenLake with two hole letters
  and one ice letter drawn per run (:func:`demo_world`), so the model cannot know a hole until
  feedback shows it; a failure reveals only the hole it fell into, so a rulebook that names
  both is built across episodes (memory), and it transfers to every episode of the run;
* :mod:`~erl_lite.embedded.loading` — :func:`load_embedded` through
  :func:`erl_lite.models.load_policy`, exactly as a hub model (LoRA and 4-bit QLoRA included);
* :mod:`~erl_lite.embedded.demo` — the demo's config (:func:`demo_config`: the ``demo`` preset
  of :data:`erl_lite.config.PRESETS`, viewed as :data:`~erl_lite.embedded.demo.DEMO_SETTINGS`), its trainer
  (:func:`demo_trainer`) and ``erl-lite demo`` (:func:`run_demo`, with its report);
* :mod:`~erl_lite.embedded.bands` — :func:`measure_bands`: what reflection and memory do for
  a policy on a world, before any RL;
* :mod:`~erl_lite.embedded.rulebooks` — the rulebook sentences, their readers and the
  self-contradiction detector (:func:`~erl_lite.embedded.rulebooks.contradictions`).

The build-time code (the scripted teacher and the corpus ``scripts/build_embedded_model.py``
trains the model on) is not part of the package: it lives in ``scripts/embedded/``.

Names below are imported on first use, so ``import erl_lite.embedded`` stays light.

Departures from the paper: the paper trains 4B/7B instruction-tuned models on the paper's
FrozenLake with fixed letters; here a stand-in model plays a smaller variant with two kinds of
hole whose letters vary per run (see :class:`~erl_lite.embedded.world.DemoLake` for how its maps are drawn).

Example:
    >>> from erl_lite.embedded import load_embedded, demo_world
    >>> model, tok = load_embedded(peft="none")
    >>> world = demo_world(run_seed=0)
    >>> world.symbols["agent"], world.max_turns
    ('A', 8)
"""

from __future__ import annotations

import importlib
from typing import Any

# The public API and the module that defines each name (one home each; imported on first use).
_EXPORTS = {
    "EMBEDDED_DIR": "loading", "load_embedded": "loading",
    "DemoLake": "world", "demo_world": "world", "make_world": "world", "run_letters": "world",
    "hole_letters": "world", "contradictions": "rulebooks",
    "DEMO_SETTINGS": "demo", "DEMO_EVAL_TASKS": "demo", "demo_config": "demo", "demo_trainer": "demo",
    "run_demo": "demo", "step_line": "demo", "write_report": "demo",
    "Bands": "bands", "measure_bands": "bands",
    "contradictions": "rulebooks", "contradiction_rate": "rulebooks",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'erl_lite.embedded' has no attribute {name!r}")
    return getattr(importlib.import_module(f"erl_lite.embedded.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
