"""The rulebook sentences of the embedded model's world: how a rulebook names the hole.

A good reflection on the demo world writes a rulebook such as ``"E is a hole: ..."``;
:func:`rulebook` writes one (the build-time teacher does) and :func:`named_hole` reads which
letter one calls a hole (the teacher and :func:`~erl_lite.embedded.bands.measure_bands` do).
Both live here so that the sentence and its reader cannot drift apart.

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
