"""The embedded default policy: a tiny chat model shipped inside the package, and its world.

No package index ships a usable pretrained causal LM, so erl_lite carries its own: a
``LlamaForCausalLM`` of about 0.4 million parameters with a small BPE tokenizer and a ChatML
chat template, trained on CPU by ``scripts/build_embedded_model.py`` from a synthetic corpus
(:mod:`erl_lite.embedded_corpus`). It is a normal Hugging Face checkpoint directory, so
:func:`load_embedded` goes through :func:`erl_lite.models.load_policy` exactly as a hub
model does (LoRA and 4-bit QLoRA included), offline and without remote code.

Its world, :func:`demo_world`, is a small FrozenLake (3x3 maps, compact prompts, 8 actions,
an `ahead:` line naming the tiles one step closer to the goal)
whose hole and frozen letters are drawn per run: the model cannot know which letter is the
hole until feedback shows it, a reflection that names the hole raises the second attempt's
success, and because the letters stay fixed within a run a good rulebook transfers to every
other episode of the run (so memory, and internalization, have something to carry).
:data:`DEMO_CONFIG` holds the budgets and temperatures that fit the model
(:func:`erl_lite.demo.demo_config` builds the full config), and :func:`measure_bands`
measures what reflection does for a policy on such a world.

Departures from the paper: the paper trains 4B/7B instruction-tuned models on the paper's
FrozenLake with fixed letters; here a stand-in model plays a smaller variant whose letters vary
per run (see :class:`erl_lite.embedded_corpus.DemoLake` for how its maps are drawn).

Example:
    >>> from erl_lite.embedded import load_embedded, demo_world
    >>> model, tok = load_embedded(peft="none")
    >>> world = demo_world(run_seed=0)
    >>> world.symbols["agent"], world.max_turns
    ('A', 8)
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from erl_lite.embedded_corpus import DEMO_CONFIG, DemoLake, letter_pair, make_world, named_hole

#: Where the embedded checkpoint lives (package data).
EMBEDDED_DIR: Path = Path(__file__).resolve().parent / "data" / "embedded"

__all__ = ["DEMO_CONFIG", "EMBEDDED_DIR", "Bands", "demo_world", "load_embedded", "measure_bands"]


def load_embedded(peft: str = "lora", quantization: str = "none", **kwargs: Any) -> tuple[Any, Any]:
    """Load the embedded model and tokenizer through :func:`erl_lite.models.load_policy`.

    Args:
        peft: ``"lora"`` (default), ``"none"``, or a ``peft.LoraConfig``.
        quantization: ``"none"`` or ``"4bit"`` (NF4; runs on CPU with bitsandbytes >= 0.48).
        kwargs: any other :func:`~erl_lite.models.load_policy` argument (``lora_r``,
            ``device``, ``gradient_checkpointing``, ...).

    Example:
        >>> model, tok = load_embedded(quantization="4bit", lora_r=4)
        >>> tok.eos_token
        '<|im_end|>'
    """
    from erl_lite.models import load_policy

    if not (EMBEDDED_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(f"no embedded model in {EMBEDDED_DIR}; build it with "
                                "`python scripts/build_embedded_model.py`")
    return load_policy(EMBEDDED_DIR, quantization=quantization, peft=peft, **kwargs)


def demo_world(run_seed: int = 0, **overrides: Any) -> DemoLake:
    """The embedded model's environment for one run: letters drawn by ``run_seed``.

    The hole and frozen letters come from :func:`~erl_lite.embedded_corpus.letter_pair`; the
    task splits are seeded by ``run_seed`` too. ``overrides`` go to
    :class:`~erl_lite.embedded_corpus.DemoLake` (``n_train``, ``n_test``, ``sizes``, ...).

    Example:
        >>> w = demo_world(3, n_test=10)
        >>> len(w.test_tasks()), w.symbols["hole"] != w.symbols["frozen"]
        (10, True)
    """
    hole, frozen = letter_pair(run_seed)
    values = {"seed": run_seed, "n_train": 2_000, **overrides}
    return make_world(hole, frozen, **values)


@dataclass
class Bands:
    """What the reflect-and-retry loop does for a policy on one world (see :func:`measure_bands`).

    Attributes:
        first_success: success rate of first attempts (the evaluation metric).
        parse_rate: share of reflections with a ``<prompt>…</prompt>`` rulebook.
        names_hole_rate: share of reflections whose rulebook calls the run's hole letter a hole.
        num_first, num_failed: first attempts played, and how many of them failed.
        second_success: on the failed tasks, success of a second attempt under the policy's
            own reflection (the ERL second attempt).
        retry_success: on the same tasks, success of a plain fresh first attempt.
        shuffled_success: second attempts under a reflection written for *another* failed
            task of the same run (a rulebook transfers within a run, so this should match).
        swapped_success: second attempts under the own reflection with the hole and frozen
            letters exchanged (same words, wrong content: the control for the reflection's
            information).
    """

    first_success: float
    parse_rate: float
    names_hole_rate: float
    num_first: int
    num_failed: int
    second_success: float
    retry_success: float
    shuffled_success: float
    swapped_success: float

    @property
    def reflection_gain(self) -> float:
        """second_success - retry_success."""
        return self.second_success - self.retry_success

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "reflection_gain": self.reflection_gain}


def measure_bands(model: Any, tokenizer: Any, world: Any, num_tasks: int = 100, samples: int = 2,
                  seed: int = 0, config: Any = None) -> Bands:
    """First attempts, reflections and second attempts of ``model`` on ``world``'s test tasks.

    Every phase is erl_lite's own (``attempt_first``, ``gate``, ``reflect`` without memory,
    ``attempt_second``) with the sampling settings of :data:`DEMO_CONFIG`; sampling is
    seeded, so a call is reproducible on one machine.

    Example:
        >>> model, tok = load_embedded(peft="none")
        >>> b = measure_bands(model, tok, demo_world(0), num_tasks=4, samples=1)
        >>> 0.0 <= b.first_success <= 1.0
        True
    """
    import torch

    from erl_lite.generation import HFGenerator
    from erl_lite.phases import PhaseContext, attempt_first, attempt_second, gate, reflect

    from erl_lite.demo import demo_config

    cfg = config or demo_config()
    ctx = PhaseContext(HFGenerator(model, tokenizer), tokenizer, world, cfg)
    tasks = world.test_tasks(num_tasks)
    by_id = {t.task_id: t for t in tasks}
    torch.manual_seed(seed)
    first = attempt_first(ctx, tasks, samples, temperature=cfg.eval_temperature)
    failed = gate(first, cfg.reward_threshold)
    if not failed:
        return Bands(1.0, 1.0, 1.0, len(first), 0, 0.0, 0.0, 0.0, 0.0)
    torch.manual_seed(seed + 1)
    own = reflect(ctx, failed, None)
    hole, frozen = world.symbols["hole"], world.symbols["frozen"]
    order = list(range(len(own)))
    random.Random(seed).shuffle(order)
    shuffled = [replace(r, rulebook=own[j].rulebook) for r, j in zip(own, order)]
    swapped = [replace(r, rulebook=r.rulebook.translate(str.maketrans(hole + frozen, frozen + hole))) for r in own]

    def success(attempts: list) -> float:
        return sum(a.success for a in attempts) / len(attempts)

    rates = []
    for k, reflections in enumerate([own, shuffled, swapped]):
        torch.manual_seed(seed + 2 + k)
        rates.append(success([r.second for r in attempt_second(ctx, failed, by_id, reflections)]))
    torch.manual_seed(seed + 5)
    retry = attempt_first(ctx, [by_id[a.task_id] for a in failed], 1)
    return Bands(
        first_success=success(first), parse_rate=sum(r.parsed for r in own) / len(own),
        names_hole_rate=sum(named_hole(r.rulebook) == hole for r in own) / len(own),
        num_first=len(first), num_failed=len(failed), second_success=rates[0],
        retry_success=success(retry), shuffled_success=rates[1], swapped_success=rates[2])
