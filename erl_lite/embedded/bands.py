"""What reflection and memory do for a policy on the embedded model's world, before any RL.

On a world's test tasks (:func:`measure_bands`): first attempts, the policy's reflections on the
failed ones and second attempts under them, against a fresh retry and two controls (another
task's reflection; the own one with hole and ice letters exchanged). Then the memory effect: on
failures where the other kind of hole lies in the way (:func:`~erl_lite.embedded.world.holes_in_the_way`),
reflections from a good memory (naming the other hole) against the initial prompt and a wrong
memory (calling the ice a hole). ``benchmarks/embedded_bands.py`` runs it over several worlds.

Departures from the paper: the paper reports training curves; this pre-training measurement
checks that the stand-in model has what ERL needs (a reflection that helps, one that builds on memory).

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
        names_hole_rate: share of reflections calling a hole of the run a hole, and never the ice.
        contradiction_rate: share of all rulebooks written here giving one letter two meanings.
        num_first, num_failed: first attempts played, and how many failed.
        second_success: on the failed tasks, second attempts under the own reflection.
        retry_success: on the same tasks, a plain fresh first attempt.
        shuffled_success: under a reflection written for another failed task of the run.
        swapped_success: under the own reflection with hole and ice letters exchanged (control).
        num_memory_cases: failures on one kind of hole where the other kind lies in the way.
        initial_memory_success, good_memory_success, wrong_memory_success: on those, second
            attempts under a reflection written from the initial prompt, from a memory naming the
            other hole, and from one calling the ice a hole (control).
        merged_rate: share of the good-memory reflections that name both holes.
        kept_rate: share of reflections from a memory naming both holes that still name each once.
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

    Every phase is erl_lite's own, with the sampling settings of ``config`` (default: the demo's,
    :func:`~erl_lite.embedded.demo.demo_config`); sampling is seeded, so a call is reproducible
    on one machine. ``memory_cases=False`` skips the memory-effect measurement.
    """
    import torch

    from erl_lite.core.generation import HFGenerator
    from erl_lite.core.phases import PhaseContext, attempt_first, attempt_second, gate, reflect
    from erl_lite.embedded.demo import demo_config

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
    rates = []
    for k, reflections in enumerate([own, shuffled, swapped]):
        torch.manual_seed(seed + 2 + k)
        rates.append(_success([r.second for r in attempt_second(ctx, failed, by_id, reflections)]))
    torch.manual_seed(seed + 5)
    retry = attempt_first(ctx, [by_id[a.task_id] for a in failed], 1)
    cases = _memory_cases(failed, own, by_id, holes)
    memo, written, kept = (_memory_effect(ctx, cases, by_id, holes, frozen, seed) if memory_cases and cases
                           else ({"initial": [], "good": [], "wrong": []}, [], []))
    good = memo["good"]
    return Bands(
        first_success=_success(first), parse_rate=sum(r.parsed for r in own) / len(own),
        names_hole_rate=sum(bool(set(named_holes(r.rulebook)) & set(holes)) and frozen not in named_holes(r.rulebook)
                            for r in own) / len(own),
        num_first=len(first), num_failed=len(failed), second_success=rates[0],
        retry_success=_success(retry), shuffled_success=rates[1], swapped_success=rates[2],
        contradiction_rate=contradiction_rate([r.rulebook for r in own] + written),
        num_memory_cases=len(cases), initial_memory_success=_mean([s for s, _ in memo["initial"]]),
        good_memory_success=_mean([s for s, _ in good]), wrong_memory_success=_mean([s for s, _ in memo["wrong"]]),
        merged_rate=_mean([set(holes) <= set(named_holes(t)) for _, t in good]), kept_rate=_mean(kept))


def _memory_cases(failed: list, own: list, by_id: dict, holes: tuple[str, str]) -> list[tuple[Any, Any]]:
    """(failed attempt, own reflection) of the failures on one kind of hole where the other kind
    lies in the way: the cases where memory can know what the trace cannot show."""
    kind = {holes[0]: "H", holes[1]: SECOND_HOLE}
    return [(a, r) for a, r in zip(failed, own) if (f := fatal_letter(a.trace)) in kind
            and ({"H", SECOND_HOLE} - {kind[f]}) <= holes_in_the_way(by_id[a.task_id].data["kinds"])]


def _memory_effect(ctx: Any, cases: list, by_id: dict, holes: tuple[str, str], frozen: str,
                   seed: int) -> tuple[dict[str, list[tuple[bool, str]]], list[str], list[bool]]:
    """Second attempts on the memory ``cases`` under reflections written from the initial prompt,
    a good memory and a wrong one (``{name: [(success, rulebook)]}``); the rulebooks written; and
    whether reflections from a memory naming both holes kept both."""
    import torch

    from erl_lite.core.memory import ReflectionMemory
    from erl_lite.core.phases import attempt_second, reflect

    memo: dict[str, list[tuple[bool, str]]] = {}
    written: list[str] = []
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
    kept: list[bool] = []
    for k, order in enumerate([list(holes), list(holes)[::-1]]):  # memory that knows both holes
        memory = ReflectionMemory()
        memory.maybe_store(rulebook(order), 1.0, 0.0)
        torch.manual_seed(seed + 30 + k)
        full = reflect(ctx, [a for a, _ in cases], memory)
        kept += [sorted(hole_facts(r.rulebook)) == sorted(holes) for r in full]
        written += [r.rulebook for r in full]
    return memo, written, kept


def _success(attempts: list) -> float:
    return sum(a.success for a in attempts) / len(attempts)


def _mean(xs: list) -> float:
    return sum(xs) / len(xs) if xs else 0.0
