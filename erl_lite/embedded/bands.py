"""What reflection and memory do for a policy on the embedded model's world, measured (:func:`measure_bands`).

On a world's test tasks: first attempts, the policy's own reflections on the failed ones, and
second attempts under them, against a plain fresh retry and two controls (a reflection written
for another task of the run, and the own reflection with the hole and ice letters exchanged).
Then the **memory effect**: on the failures where the part a single trace cannot reveal
matters (the agent fell into one kind of hole, and a player stepping closer to the goal can
step on the other kind: :func:`~erl_lite.embedded.world.holes_in_the_way`), second attempts under a reflection written from a *good memory* (a rulebook naming the
other hole, as an earlier failure would have taught) against one written from the initial
prompt, and a *wrong memory* control (a rulebook calling the ice a hole).
Every rulebook is checked for self-contradiction
(:func:`~erl_lite.embedded.rulebooks.contradictions`). ``benchmarks/embedded_bands.py`` runs it
over several worlds; ``tests/test_embedded.py`` holds the shipped model to its bands on a small
sample.

Departures from the paper: the paper reports training curves, not this pre-training
measurement; it exists to check that the embedded stand-in model has the properties ERL needs
(a reflection that helps the second attempt, and one that builds on memory) before any RL.

Example:
    >>> from erl_lite.embedded import demo_world, load_embedded
    >>> model, tok = load_embedded(peft="none")
    >>> b = measure_bands(model, tok, demo_world(0), num_tasks=4, samples=1, memory_cases=False)
    >>> 0.0 <= b.first_success <= 1.0
    True
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from erl_lite.embedded.rulebooks import contradiction_rate, hole_facts, named_holes, rulebook
from erl_lite.embedded.world import SECOND_HOLE, fatal_letter, hole_letters, holes_in_the_way

__all__ = ["Bands", "measure_bands"]


@dataclass
class Bands:
    """What the reflect-and-retry loop does for a policy on one world (see :func:`measure_bands`).

    Attributes:
        first_success: success rate of first attempts (the evaluation metric).
        parse_rate: share of reflections with a ``<prompt>…</prompt>`` rulebook.
        names_hole_rate: share of reflections whose rulebook calls one of the run's holes a
            hole and never calls the ice a hole.
        contradiction_rate: share of all rulebooks written here (own and memory-based) that
            give one letter two meanings.
        num_first, num_failed: first attempts played, and how many of them failed.
        second_success: on the failed tasks, success of a second attempt under the policy's
            own reflection (the ERL second attempt).
        retry_success: on the same tasks, success of a plain fresh first attempt.
        shuffled_success: second attempts under a reflection written for *another* failed
            task of the same run (a rulebook transfers within a run, so this should match).
        swapped_success: second attempts under the own reflection with the hole and frozen
            letters exchanged (same words, wrong content: the control for the reflection's
            information).
        num_memory_cases: failed attempts that fell into one kind of hole on a map where the
            other kind lies in the way (the memory-effect cases).
        initial_memory_success: on those, second attempts under a reflection written from the
            initial prompt (what a run without memory gets).
        good_memory_success: the same under a reflection written from a memory that names
            the other hole.
        wrong_memory_success: the same from a memory that calls the ice a hole (control:
            memory's content is what helps).
        merged_rate: share of the good-memory reflections that name both holes.
        kept_rate: share of the reflections written on those failures from a memory that already
            names both holes (in either order) that still name both, each once: what a run's
            memory holds once it has learned both, which a reflector must not lose.
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
    contradiction_rate: float = 0.0
    num_memory_cases: int = 0
    initial_memory_success: float = 0.0
    good_memory_success: float = 0.0
    wrong_memory_success: float = 0.0
    merged_rate: float = 0.0
    kept_rate: float = 0.0

    @property
    def reflection_gain(self) -> float:
        """second_success - retry_success."""
        return self.second_success - self.retry_success

    @property
    def memory_gain(self) -> float:
        """good_memory_success - initial_memory_success."""
        return self.good_memory_success - self.initial_memory_success

    def to_dict(self) -> dict[str, float]:
        """Every field, plus ``reflection_gain`` and ``memory_gain``."""
        return {**asdict(self), "reflection_gain": self.reflection_gain, "memory_gain": self.memory_gain}


def measure_bands(model: Any, tokenizer: Any, world: Any, num_tasks: int = 100, samples: int = 2,
                  seed: int = 0, config: Any = None, memory_cases: bool = True) -> Bands:
    """First attempts, reflections and second attempts of ``model`` on ``world``'s test tasks.

    Every phase is erl_lite's own (``attempt_first``, ``gate``, ``reflect``,
    ``attempt_second``) with the sampling settings of ``config`` (default: the demo's,
    :func:`~erl_lite.embedded.demo.demo_config`); sampling is seeded, so a call is
    reproducible on one machine. ``memory_cases=False`` skips the memory-effect measurement.
    """
    import torch

    from erl_lite.embedded.demo import demo_config
    from erl_lite.core.generation import HFGenerator
    from erl_lite.core.memory import ReflectionMemory
    from erl_lite.core.phases import PhaseContext, attempt_first, attempt_second, gate, reflect

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
    holes, frozen = hole_letters(world.symbols), world.symbols["frozen"]
    order = list(range(len(own)))
    random.Random(seed).shuffle(order)
    shuffled = [replace(r, rulebook=own[j].rulebook) for r, j in zip(own, order)]
    # The hole the trace revealed (else the first) trades places with the ice letter.
    swapped = [replace(r, rulebook=r.rulebook.translate(str.maketrans(h + frozen, frozen + h)))
               for a, r in zip(failed, own) for h in [fatal_letter(a.trace) or holes[0]]]

    def success(attempts: list) -> float:
        return sum(a.success for a in attempts) / len(attempts)

    rates = []
    for k, reflections in enumerate([own, shuffled, swapped]):
        torch.manual_seed(seed + 2 + k)
        rates.append(success([r.second for r in attempt_second(ctx, failed, by_id, reflections)]))
    torch.manual_seed(seed + 5)
    retry = attempt_first(ctx, [by_id[a.task_id] for a in failed], 1)
    # Memory effect: failures on one kind of hole where the other kind lies in the way.
    kind = {holes[0]: "H", holes[1]: SECOND_HOLE}
    cases = [(a, r) for a, r in zip(failed, own) if (f := fatal_letter(a.trace)) in kind
             and ({"H", SECOND_HOLE} - {kind[f]}) <= holes_in_the_way(by_id[a.task_id].data["kinds"])]
    memo = {"initial": [], "good": [], "wrong": []}
    written: list[str] = []
    kept: list[bool] = []
    if memory_cases and cases:
        for k, name in enumerate(["initial", "good", "wrong"]):
            pairs = cases if name == "initial" else []  # (failed attempt, reflection)
            for other in holes if name != "initial" else []:  # grouped by the hole not revealed
                group = [a for a, _ in cases if fatal_letter(a.trace) != other]
                if group:
                    memory = ReflectionMemory()
                    memory.maybe_store(rulebook([other]) if name == "good" else rulebook([frozen]), 1.0, 0.0)
                    torch.manual_seed(seed + 10 + k)
                    pairs += list(zip(group, reflect(ctx, group, memory)))
                    written += [r.rulebook for _, r in pairs[-len(group):]]
            torch.manual_seed(seed + 20 + k)
            retries = attempt_second(ctx, [a for a, _ in pairs], by_id, [r for _, r in pairs])
            memo[name] = [(r.second.success, r.reflection.rulebook) for r in retries]
        for k, order in enumerate([list(holes), list(holes)[::-1]]):  # memory that knows both holes
            memory = ReflectionMemory()
            memory.maybe_store(rulebook(order), 1.0, 0.0)
            torch.manual_seed(seed + 30 + k)
            full = reflect(ctx, [a for a, _ in cases], memory)
            kept += [sorted(hole_facts(r.rulebook)) == sorted(holes) for r in full]
            written += [r.rulebook for r in full]
    good = memo["good"]
    return Bands(
        first_success=success(first), parse_rate=sum(r.parsed for r in own) / len(own),
        names_hole_rate=sum(bool(set(named_holes(r.rulebook)) & set(holes)) and frozen not in named_holes(r.rulebook)
                            for r in own) / len(own),
        num_first=len(first), num_failed=len(failed), second_success=rates[0],
        retry_success=success(retry), shuffled_success=rates[1], swapped_success=rates[2],
        contradiction_rate=contradiction_rate([r.rulebook for r in own] + written),
        num_memory_cases=len(cases), initial_memory_success=_mean([s for s, _ in memo["initial"]]),
        good_memory_success=_mean([s for s, _ in good]), wrong_memory_success=_mean([s for s, _ in memo["wrong"]]),
        merged_rate=_mean([set(holes) <= set(named_holes(t)) for _, t in good]), kept_rate=_mean(kept))


def _mean(xs: list) -> float:
    return sum(xs) / len(xs) if xs else 0.0
