"""The rulebook sentences of the embedded model's world: how a rulebook names the hole.

A good reflection on the demo world writes a rulebook such as ``"E is a hole: ..."``;
:func:`rulebook` writes one (the build-time teacher does) and :func:`named_hole` reads which
letter one calls a hole (the teacher and :func:`~erl_lite.embedded.bands.measure_bands` do);
:func:`contradictions` finds a letter called both a hole and safe ice (the demo report flags
such rulebooks). They live here so that the sentences and their readers cannot drift apart.

Departures from the paper: the paper's reflections are free text from a large model; these
are the fixed sentences the tiny model was taught.

Example:
    >>> named_hole(rulebook("E", "G"))
    'E'
"""

from __future__ import annotations

import re

from erl_lite.embedded.world import AGENT, GOAL

_HOLE_RULE = re.compile(r"\b([A-Z]) is a hole\b")
_SAFE_RULE = re.compile(r"\b([A-Z]) is safe\b")


def rulebook(hole: str | None, safe: str | None) -> str:
    """The rulebook a good reflection writes (``hole=None``: nothing learned about holes yet).

    Example:
        >>> rulebook("E", "G")
        'A is you. B is the goal. E is a hole: stepping on E ends the game. G is safe ice. Reach B and never step on E.'
    """
    parts = [f"{AGENT} is you.", f"{GOAL} is the goal."]
    if hole is not None:
        parts.append(f"{hole} is a hole: stepping on {hole} ends the game.")
    if safe is not None:
        parts.append(f"{safe} is safe ice.")
    parts.append(f"Reach {GOAL} and never step on {hole}." if hole else f"Reach {GOAL} in few moves.")
    return " ".join(parts)


def named_hole(text: str) -> str | None:
    """The letter a rulebook calls a hole, if any (the last one named).

    Example:
        >>> named_hole("E is a hole. G is a hole."), named_hole(rulebook(None, None)) is None
        ('G', True)
    """
    found = _HOLE_RULE.findall(text)
    return found[-1] if found else None


def contradictions(text: str) -> list[str]:
    """The letters ``text`` calls both a hole and safe ice, sorted (empty: consistent).

    A rulebook that says ``F is a hole`` and ``F is safe ice`` teaches nothing about F, and a
    second attempt under it cannot know which to believe; the demo report flags such rulebooks.

    Example:
        >>> contradictions(rulebook("E", "G")), contradictions("F is a hole: it ends the game. F is safe ice.")
        ([], ['F'])
    """
    return sorted(set(_HOLE_RULE.findall(text)) & set(_SAFE_RULE.findall(text)))


def contradiction_rate(texts: list[str]) -> float:
    """Share of ``texts`` with at least one self-contradicting letter (0.0 for no texts).

    Example:
        >>> contradiction_rate(["E is a hole. E is safe ice.", rulebook("E", "G")])
        0.5
    """
    return sum(bool(contradictions(t)) for t in texts) / len(texts) if texts else 0.0
