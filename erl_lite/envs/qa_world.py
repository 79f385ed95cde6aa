"""Invented worlds for offline multi-hop QA: each task draws its own world of fictional entities (one
document each) and asks a bridge or comparison question needing two documents, in HotpotQA's schema.

Departures from the paper: an offline two-hop stand-in for HotpotQA over Wikipedia; new names per task force a search.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

_ONSETS = [
    "b",
    "br",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kl",
    "l",
    "m",
    "n",
    "p",
    "pr",
    "r",
    "s",
    "st",
    "t",
    "tr",
    "v",
    "z",
    "sh",
    "th",
    "qu",
]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "ia"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "m", "nd", "rk", "x"]
OCCUPATIONS = [
    "architect",
    "painter",
    "chemist",
    "novelist",
    "sculptor",
    "astronomer",
    "composer",
    "surgeon",
    "engineer",
    "historian",
    "photographer",
    "botanist",
]
INDUSTRIES = ["shipping", "textile", "software", "brewing", "mining", "publishing", "aviation", "glassware"]
_COMPANY_SUFFIX = ["Works", "Labs", "Group", "Industries", "& Sons", "Holdings", "Company"]
_CITY_SUFFIX = ["holt", "mere", "burg", "ford", "stad", "wick", "port", "dale"]


@dataclass
class Entity:
    """One thing of the world; ``facts`` holds its attributes by name."""

    kind: str
    name: str
    facts: dict[str, Any]


World = dict[str, list[Entity]]


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(
        rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
    ).capitalize()


def _unique(rng: random.Random, used: set[str], make: Callable[[], str]) -> str:
    while True:
        name = make()
        if name not in used and name.lower() not in OCCUPATIONS + INDUSTRIES:
            used.add(name)
            return name


def build_world(
    rng: random.Random, n_countries: int = 3, n_cities: int = 5, n_people: int = 6, n_companies: int = 4
) -> World:
    """A random world: entities by kind, every name distinct."""
    used: set[str] = set()
    countries = [
        Entity(
            "country",
            _unique(rng, used, lambda: _word(rng, 2) + rng.choice(["ia", "land", "a"])),
            {"currency": _unique(rng, used, lambda: _word(rng, 1).lower() + rng.choice(["o", "ar", "et"]))},
        )
        for _ in range(n_countries)
    ]
    cities = [
        Entity(
            "city",
            _unique(rng, used, lambda: _word(rng, 1) + rng.choice(_CITY_SUFFIX)),
            {
                "country": rng.choice(countries).name,
                "founded": rng.randint(900, 1850),
                "population": rng.randint(12, 950) * 1000,
            },
        )
        for _ in range(n_cities)
    ]
    people = [
        Entity(
            "person",
            _unique(rng, used, lambda: f"{_word(rng, 2)} {_word(rng, 2)}"),
            {"born": rng.randint(1890, 1995), "city": rng.choice(cities).name, "occupation": rng.choice(OCCUPATIONS)},
        )
        for _ in range(n_people)
    ]
    companies = [
        Entity(
            "company",
            _unique(rng, used, lambda: f"{_word(rng, 2)} {rng.choice(_COMPANY_SUFFIX)}"),
            {
                "founder": rng.choice(people).name,
                "city": rng.choice(cities).name,
                "founded": rng.randint(1900, 2015),
                "industry": rng.choice(INDUSTRIES),
            },
        )
        for _ in range(n_companies)
    ]
    return {"country": countries, "city": cities, "person": people, "company": companies}


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def document(e: Entity) -> list[str]:
    """The entity's document as a list of sentences (HotpotQA keeps paragraphs that way)."""
    f = e.facts
    if e.kind == "country":
        return [f"{e.name} is a country.", f"The currency of {e.name} is the {f['currency']}."]
    if e.kind == "city":
        return [
            f"{e.name} is a city in {f['country']}.",
            f"{e.name} was founded in {f['founded']}.",
            f"About {f['population']:,} people live in {e.name}.",
        ]
    if e.kind == "person":
        return [
            f"{e.name} is {_article(f['occupation'])} {f['occupation']}.",
            f"{e.name} was born in {f['born']} in the city of {f['city']}.",
        ]
    kind = f"{_article(f['industry'])} {f['industry']} company"
    return [
        f"{e.name} is {kind} founded in {f['founded']} by {f['founder']}.",
        f"The headquarters of {e.name} are in {f['city']}.",
    ]


#: What a question template returns: (question, answer, supporting (title, sentence id) pairs).
Built = tuple[str, str, list[tuple[str, int]]]


def _bridge(
    w: World, rng: random.Random, kind: str, link: str, target: str, fact: str, question: str, sents: tuple[int, int]
) -> Built:
    """Bridge: a random ``kind``'s ``link`` fact names a ``target`` entity whose ``fact`` is the answer."""
    first = rng.choice(w[kind])
    second = _get(w, target, first.facts[link])
    return question.format(first.name), str(second.facts[fact]), [(first.name, sents[0]), (second.name, sents[1])]


def _pair(
    w: World, rng: random.Random, kind: str, key: str, same: bool, question: str, sent: int, answer: Callable[..., str]
) -> Built | None:
    """Comparison of two ``kind`` entities whose ``key`` is equal (``same``) or differs: ``answer(a, b)``."""
    pairs = [(a, b) for a in w[kind] for b in w[kind] if a.name < b.name and (a.facts[key] == b.facts[key]) == same]
    if not pairs:
        return None
    a, b = rng.choice(pairs)
    a, b = (a, b) if rng.random() < 0.5 else (b, a)
    return question.format(a=a.name, b=b.name), answer(a, b), [(a.name, sent), (b.name, sent)]


def _ordered(
    w: World, rng: random.Random, kind: str, key: str, question: str, sent: int, pick: Callable[..., Entity]
) -> Built | None:
    """Comparison: which of two ``kind`` entities has the ``pick`` (min or max) ``key``."""
    which = lambda a, b: pick(a, b, key=lambda e: e.facts[key]).name  # keys differ, so no tie
    return _pair(w, rng, kind, key, False, question, sent, which)


def _same(w: World, rng: random.Random, key: str, question: str, sent: int) -> Built | None:
    """Yes/no comparison: do two people share ``key``? (half the questions are drawn "yes")."""
    same = rng.random() < 0.5
    return _pair(w, rng, "person", key, same, question, sent, lambda a, b: "yes" if same else "no")


#: The bridge questions, one row each: a random ``kind``'s ``link`` names a ``target`` whose ``fact`` is the answer;
#: ``sents``: the sentence ids of the two supporting facts.
_BRIDGES = [  # (kind, link, target, fact, sents, question)
    ("company", "founder", "person", "city", (0, 1), "In which city was the founder of {} born?"),
    ("company", "city", "city", "country", (1, 0), "In which country are the headquarters of {}?"),
    ("company", "founder", "person", "occupation", (0, 0), "What is the occupation of the person who founded {}?"),
    ("person", "city", "city", "founded", (1, 1), "In what year was the city where {} was born founded?"),
    ("person", "city", "city", "country", (1, 0), "In which country was {} born?"),
]
#: The comparisons that order two entities: which ``kind`` has the ``pick`` (min or max) ``key``.
_ORDERINGS = [  # (kind, key, sent, pick, question)
    ("person", "born", 1, min, "Who was born first, {a} or {b}?"),
    ("company", "founded", 0, min, "Which company was founded earlier, {a} or {b}?"),
    ("city", "population", 2, max, "Which city has more inhabitants, {a} or {b}?"),
]
TEMPLATES: dict[str, list[Callable[[World, random.Random], Built | None]]] = {
    "bridge": [
        partial(_bridge, kind=kind, link=link, target=target, fact=fact, sents=sents, question=question)
        for kind, link, target, fact, sents, question in _BRIDGES
    ],
    "comparison": [
        *(partial(_ordered, kind=k, key=key, sent=sent, pick=pick, question=q) for k, key, sent, pick, q in _ORDERINGS),
        partial(_same, key="city", sent=1, question="Were {a} and {b} born in the same city?"),
        partial(_same, key="occupation", sent=0, question="Do {a} and {b} have the same occupation?"),
    ],
}


def _get(w: World, kind: str, name: str) -> Entity:
    return next(e for e in w[kind] if e.name == name)


def generate_question(seed: int, **world_sizes: int) -> dict[str, Any]:
    """One question with its own world, in HotpotQA's distractor schema."""
    rng = random.Random(seed)
    while True:
        world = build_world(rng, **world_sizes)
        qtype = rng.choice(sorted(TEMPLATES))
        built = rng.choice(TEMPLATES[qtype])(world, rng)
        if built is not None:
            break
    question, answer, support = built
    entities = [e for kind in ("country", "city", "person", "company") for e in world[kind]]
    rng.shuffle(entities)  # the supporting documents sit anywhere among the distractors
    return {
        "id": f"gen-{seed}",
        "question": question,
        "answer": answer,
        "type": qtype,
        "level": "medium",
        "supporting_facts": {"title": [t for t, _ in support], "sent_id": [s for _, s in support]},
        "context": {"title": [e.name for e in entities], "sentences": [document(e) for e in entities]},
    }
