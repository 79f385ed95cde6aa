"""What reflection does for a policy on the embedded model's world, measured (:func:`measure_bands`).

On a world's test tasks: first attempts, the policy's own reflections on the failed ones, and
second attempts under them, against a plain fresh retry and two controls (a reflection written
for another task of the run, and the own reflection with the hole and frozen letters
exchanged). ``benchmarks/embedded_bands.py`` runs it over several worlds; ``tests/test_embedded.py``
holds the shipped model to its bands on a small sample.

Departures from the paper: the paper reports training curves, not this pre-training
measurement; it exists to check that the embedded stand-in model has the property ERL needs
(a reflection that helps the second attempt) before any RL.

Example:
    >>> from erl_lite.embedded import demo_world, load_embedded
    >>> model, tok = load_embedded(peft="none")
    >>> b = measure_bands(model, tok, demo_world(0), num_tasks=4, samples=1)
    >>> 0.0 <= b.first_success <= 1.0
    True
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from erl_lite.embedded.rulebooks import named_hole

__all__ = ["Bands", "measure_bands"]


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
        """Every field, plus ``reflection_gain``."""
        return {**asdict(self), "reflection_gain": self.reflection_gain}


def measure_bands(model: Any, tokenizer: Any, world: Any, num_tasks: int = 100, samples: int = 2,
                  seed: int = 0, config: Any = None) -> Bands:
    """First attempts, reflections and second attempts of ``model`` on ``world``'s test tasks.

    Every phase is erl_lite's own (``attempt_first``, ``gate``, ``reflect`` without memory,
    ``attempt_second``) with the sampling settings of ``config`` (default: the demo's,
    :func:`~erl_lite.embedded.demo.demo_config`); sampling is seeded, so a call is
    reproducible on one machine.
    """
    import torch

    from erl_lite.embedded.demo import demo_config
    from erl_lite.generation import HFGenerator
    from erl_lite.phases import PhaseContext, attempt_first, attempt_second, gate, reflect

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
