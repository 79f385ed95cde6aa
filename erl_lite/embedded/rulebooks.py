"""The rulebook sentences of the embedded model's world (:func:`rulebook`) and, beside them so that
the two cannot drift apart, their readers and a self-contradiction detector.

Departures from the paper: there, reflections are a large model's free text; here, fixed sentences a tiny model learned.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, Sequence

from erl_lite.embedded.world import AGENT, GOAL, DemoLake, hole_letters

_HOLE_RULE = re.compile(r"\b([A-Z]) is a hole\b")
_SAFE_RULE = re.compile(r"\b([A-Z]) is (?:safe|ice|frozen)\b")
#: The plan of a player who suspects no letter: ``"Avoid nothing."``.
NO_PLAN = "nothing"
#: The plan sentence a reply opens with: ``"Avoid E or H."``, or ``"Avoid nothing."``.
_PLAN = re.compile(rf"Avoid ([A-Z](?: or [A-Z])*|{NO_PLAN})\.")


def rulebook(holes: Sequence[str] | str | None, safe: Sequence[str] | str | None = None) -> str:
    """A good reflection's rulebook: fixed sentences, a fact per letter of ``holes`` then ``safe``; none in both.

    Example:
        >>> rulebook(["E", "H"])
        'A is you. B is the goal. Reach B and never step on a hole. E is a hole. H is a hole.'
    """
    holes, safe = _letters(holes), _letters(safe)
    if both := sorted(set(holes) & set(safe)):
        raise ValueError(f"letters {both} given as both hole and safe: the rulebook would contradict itself")
    parts = [f"{AGENT} is you.", f"{GOAL} is the goal.", f"Reach {GOAL} and never step on a hole."]
    parts += [f"{h} is a hole." for h in holes]
    parts += [f"{s} is safe ice." for s in safe]
    return " ".join(parts)


def _letters(x: Sequence[str] | str | None) -> list[str]:
    return [] if x is None else [x] if isinstance(x, str) else list(x)


def named_holes(text: str) -> list[str]:
    """The letters a rulebook calls holes, in order of first mention, without repeats.

    Example:
        >>> named_holes("E is a hole. G is a hole. E is a hole."), named_holes(rulebook(None))
        (['E', 'G'], [])
    """
    return list(dict.fromkeys(_HOLE_RULE.findall(text)))


def memory_check(env: dict[str, Any]) -> dict[str, Any]:
    """The memory panels' check (``save_figures``' ``memory_claims``, ``memory_truth``) of a run whose checkpoint
    recorded ``env`` (:func:`~erl_lite.run.identity.environment_identity`): the holes each rulebook names against
    the world's, for the embedded world; none (plain rulebook rows) for any other environment."""
    if env.get("class") != f"{DemoLake.__module__}.{DemoLake.__qualname__}":
        return {}
    world = SimpleNamespace(symbols=env["symbols"], hole_kinds=env.get("hole_kinds", 2))
    return {"memory_claims": named_holes, "memory_truth": hole_letters(world)}


def hole_facts(text: str) -> list[str]:
    """Every letter a rulebook calls a hole, in order, repeats included."""
    return _HOLE_RULE.findall(text)


def repeated_holes(text: str) -> list[str]:
    facts = hole_facts(text)
    return sorted({h for h in facts if facts.count(h) > 1})


def planned_holes(reply: str) -> list[str] | None:
    """The letters a reply's plan sentence (``"Avoid E or H."``) names, repeats included; None without one."""
    found = _PLAN.search(reply)
    if found is None:
        return None
    return [] if found.group(1) == NO_PLAN else found.group(1).split(" or ")


def plan_sentence(holes: Sequence[str]) -> str:
    """The plan sentence that opens a player's reply, the inverse of :func:`planned_holes`."""
    return f"Avoid {' or '.join(holes) or NO_PLAN}."


def named_safe(text: str) -> list[str]:
    """The letters a rulebook calls safe (``"G is safe ice"``), in order, without repeats."""
    return list(dict.fromkeys(_SAFE_RULE.findall(text)))


def contradictions(text: str) -> list[str]:
    """The letters ``text`` calls both a hole and safe, sorted (empty: no self-contradiction).

    Example:
        >>> contradictions(rulebook(["E"], ["G"])), contradictions("F is a hole: it ends the game. F is safe ice.")
        ([], ['F'])
    """
    return sorted(set(named_holes(text)) & set(named_safe(text)))


def contradiction_rate(texts: Sequence[str]) -> float:
    return sum(bool(contradictions(t)) for t in texts) / len(texts) if texts else 0.0
