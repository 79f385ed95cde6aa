"""Multi-hop question answering with a search tool: each turn searches (``<search>query</search>``)
or answers (``\\boxed{answer}``, which ends the episode). Reward: 1.0 for an exact match, else the
token F1 when at least 0.3, capped below 1 so that only an exact match reaches 1 (a success at τ = 1); a hedge
(two different boxes, alternatives joined by "or", an inexact answer to a comparison question) earns 0.

Departures from the paper: the paper uses a dense retriever over Wikipedia, and pays F1 to hedges too. Here search
is BM25 over the task's own paragraphs (offline worlds, or HotpotQA's ten distractors), or a given ``retriever``.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Callable, Sequence
from typing import Any

from rank_bm25 import BM25Okapi

from erl_lite.config.checks import check_choice, check_flag, check_whole
from erl_lite.core.env import Environment, Episode, StepOutput
from erl_lite.envs.paper_tasks import hotpotqa_paper_questions
from erl_lite.envs.qa_world import generate_question
from erl_lite.envs.splits import SeededSplits
from erl_lite.records import Task, task_count

#: A retriever: (query, top_k) -> [(title, text), ...], best first.
Retriever = Callable[[str, int], list[tuple[str, str]]]
_STOP = frozenset(
    "a an the of in on at to is was were are be by for and or with which who what "
    "when where whose how did do does that this it its from as".split()
)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL | re.IGNORECASE)
#: The most a non-exact answer earns: below 1, so that only an exact match reaches reward 1.
MAX_PARTIAL_REWARD = 0.99


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 after normalisation; yes/no/noanswer score 0 unless equal (HotpotQA's rule)."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in ("yes", "no", "noanswer") or ref in ("yes", "no", "noanswer")) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = sum((collections.Counter(pred_tokens) & collections.Counter(ref_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def score_answer(
    prediction: str | None, gold: str, min_f1: float = 0.3, exact_only: bool = False
) -> tuple[float, bool, float]:
    """(reward, exact match, F1) of one answer; a missing answer scores (0, False, 0). No partial credit for a hedge:
    alternatives ("A or B", where the reference has no "or"), or under ``exact_only`` (a comparison question)."""
    if prediction is None:
        return 0.0, False, 0.0
    if normalize_answer(prediction) == normalize_answer(gold):
        return 1.0, True, 1.0
    f1 = f1_score(prediction, gold)
    hedged = exact_only or ("or" in normalize_answer(prediction).split() and "or" not in normalize_answer(gold).split())
    return (min(f1, MAX_PARTIAL_REWARD) if f1 >= min_f1 and not hedged else 0.0), False, f1


def boxed_answers(text: str) -> list[str]:
    """The contents of every complete ``\\boxed{...}`` in ``text``, in order (nested braces allowed)."""
    out, start = [], text.find("\\boxed{") if isinstance(text, str) else -1
    while start != -1:
        depth, i = 0, start + len("\\boxed")
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                out.append(text[i + 1 : j].strip())
                break
        start = text.find("\\boxed{", start + 1)
    return out


def extract_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (nested braces allowed), or None."""
    return (boxed_answers(text) or [None])[-1]


def several_answers(text: str, same: Callable[[str], str] = normalize_answer) -> bool:
    """Whether ``text`` boxes two answers that differ (under ``same``): a hedge, so no final answer is read."""
    return len({same(b) for b in boxed_answers(text)}) > 1


def extract_search(text: str) -> str | None:
    """The query of the last ``<search>...</search>`` block, or None if absent or empty."""
    found = _SEARCH.findall(text) if isinstance(text, str) else []
    return (found[-1].strip() or None) if found else None


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens without a few stop words (what BM25 indexes)."""
    return [t for t in re.findall(r"\w+", text.lower()) if t not in _STOP]


class BM25Search:
    def __init__(self, titles: list[str], texts: list[str]) -> None:
        self.titles, self.texts = list(titles), list(texts)
        docs = [tokenize(f"{t} {x}") or ["\u2205"] for t, x in zip(titles, texts)]
        self._vocab = [set(d) for d in docs]
        self._bm25 = BM25Okapi(docs)

    def search(self, query: str, top_k: int = 3) -> list[tuple[str, str]]:
        """The ``top_k`` best documents sharing at least one word with ``query``."""
        tokens = tokenize(query)
        scores = self._bm25.get_scores(tokens) if tokens else []
        # Okapi's idf is 0 for a word in half the documents, so in tiny corpora a real match can
        # score 0: rank by score, then by shared query words; never return one sharing none.
        shared = [len(self._vocab[i].intersection(tokens)) for i in range(len(scores))]
        order = sorted((i for i in range(len(scores)) if shared[i]), key=lambda i: (-scores[i], -shared[i], i))
        return [(self.titles[i], self.texts[i]) for i in order[:top_k]]

    @classmethod
    def from_context(cls, context: dict[str, list]) -> "BM25Search":
        """From HotpotQA's ``context = {"title": [...], "sentences": [[...], ...]}``."""
        texts = [" ".join(s.strip() for s in sents) for sents in context["sentences"]]
        return cls(context["title"], texts)


class QAEpisode(Episode):
    """One question: search turns, then a boxed answer (or the turns run out)."""

    def __init__(self, max_turns: int, top_k: int, retriever: Retriever | None, compact: bool) -> None:
        self.max_turns, self.top_k, self.retriever, self.compact = max_turns, top_k, retriever, compact

    def reset(self, task: Task) -> str:
        self.task, self.turns, self.done, self.reward = task, 0, False, 0.0
        self.answer: str | None = None
        self.exact, self.f1 = False, 0.0
        context = task.data.get("context")
        self._index = BM25Search.from_context(context) if context else None
        self._lines = [f"Question: {task.data['question']}"]
        if self.compact:
            return f"Q: {task.data['question']}\nturns: {self.max_turns}"
        return f"Question: {task.data['question']}\nTurns left: {self.max_turns}."

    def _search(self, query: str) -> list[tuple[str, str]]:
        if self._index is not None:
            return self._index.search(query, self.top_k)
        return self.retriever(query, self.top_k) if self.retriever else []

    def step(self, action: str) -> StepOutput:
        if self.done:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        self.turns += 1
        left = self.max_turns - self.turns
        info: dict[str, Any] = {"turns_left": left}
        answer, query = extract_boxed(action), extract_search(action)
        if answer is not None:
            self.answer = answer
            comparison = self.task.data.get("type") == "comparison"
            self.reward, self.exact, self.f1 = score_answer(
                answer, str(self.task.data["answer"]), exact_only=comparison
            )
            if several_answers(action):  # a hedge across boxes: no one final answer
                self.reward, self.exact, self.answer = 0.0, False, " | ".join(boxed_answers(action))
                self.f1 = 0.0
            self._lines.append(f"Turn {self.turns}: answered {answer!r} -> {self._verdict_word()}.")
            self.done, info["event"] = True, "answer"
            return None, self.reward, True, info
        if query is not None:
            hits = self._search(query)
            shown = "\n".join(f"[{i + 1}] {t}: {x}" for i, (t, x) in enumerate(hits)) or "No document matched."
            obs = f"Results for {query!r}:\n{shown}"
            self._lines.append(
                f"Turn {self.turns}: searched {query!r} ->\n"
                + "\n".join(f"  [{i + 1}] {t}: {_cut(x)}" for i, (t, x) in enumerate(hits))
            )
            info.update(event="search", query=query, titles=[t for t, _ in hits])
        else:
            obs = r"Your reply had neither a <search>query</search> call nor a \boxed{} answer."
            self._lines.append(f"Turn {self.turns}: neither a search nor a boxed answer.")
            info["event"] = "invalid"
        if left <= 0:
            self.done = True
            return None, 0.0, True, info
        tail = f"turns: {left}" if self.compact else f"Turns left: {left}."
        if left == 1:
            tail += r" Last turn: give your answer as \boxed{...}."
        return f"{obs}\n{tail}", 0.0, False, info

    def _verdict_word(self) -> str:
        if self.exact:
            return "correct"
        return f"partly correct (F1 {self.f1:.2f})" if self.reward > 0 else "incorrect"

    def feedback(self) -> str:
        if not self.done:
            return "The episode is still running."
        if self.answer is None:
            return (
                f"Incorrect: no \\boxed{{}} answer was given in {self.turns} turn(s), so nothing "
                f"was scored. Reward 0.0."
            )
        if self.exact:
            return f"Correct: the answer {self.answer!r} matches the reference. Reward 1.0."
        if " | " in self.answer:
            return f"Incorrect: several different answers were boxed ({self.answer}); give one. Reward 0.0."
        if self.reward > 0 and self.f1 >= 1.0:
            return (
                f"Incorrect: the answer {self.answer!r} has the reference's words in another "
                f"order (token F1 1.00). Reward {self.reward:.2f}."
            )
        if self.reward > 0:
            return (
                f"Incorrect: the answer {self.answer!r} only partly matches the reference "
                f"(token F1 {self.f1:.2f}). Reward {self.reward:.2f}."
            )
        return f"Incorrect: the answer {self.answer!r} does not match the reference. Reward 0.0."

    def trace(self) -> str:
        return "\n".join(self._lines + [f"Outcome: {self.feedback()}"])


def _cut(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class MultiHopQA(Environment):
    r"""Multi-hop QA with a search tool (the HotpotQA analogue). ``source``: ``"generated"`` (offline worlds),
    ``"hotpotqa"`` (:func:`load_hotpotqa`) or ``"paper"`` (test: the paper's questions, without paragraphs, so give a
    ``retriever``). ``hotpot_path``: a local HotpotQA-schema file; ``world``: sizes of each generated world."""

    name = "multihop_qa"

    def __init__(
        self,
        source: str = "generated",
        seed: int = 0,
        n_train: int = 10_000,
        n_test: int = 100,
        max_turns: int = 5,
        top_k: int = 3,
        retriever: Retriever | None = None,
        hotpot_path: str | None = None,
        world: dict[str, int] | None = None,
        compact: bool = False,
    ) -> None:
        check_choice("source", source, ("generated", "hotpotqa", "paper"))
        for name, count in (("max_turns", max_turns), ("top_k", top_k), *(world or {}).items()):
            check_whole("MultiHopQA", name, count, minimum=1)
        check_flag("MultiHopQA", "compact", compact)
        if retriever is not None and not callable(retriever):
            raise TypeError(
                f"MultiHopQA.retriever must be a function (query, top_k) -> [(title, text)], got {retriever!r}"
            )
        self.source, self.max_turns, self.top_k, self.compact = source, max_turns, top_k, compact
        self.retriever, self.hotpot_path, self.n_test = retriever, hotpot_path, n_test
        self.system_prompt = qa_system_prompt(max_turns, compact)
        self.action_reminder = r"Search with <search>query</search>, or answer with \boxed{answer}."
        sizes = dict(world or {})
        self._splits = SeededSplits(
            lambda s: generate_question(s, **sizes), lambda d: d["question"], self.name, seed, n_train, n_test
        )

    @classmethod
    def small(cls, **overrides: Any) -> "MultiHopQA":
        """A CPU-sized variant: 11-document worlds, 2 results per search, 3 turns, compact prompts."""
        world = {"n_countries": 2, "n_cities": 3, "n_people": 4, "n_companies": 2}
        return cls(**{"world": world, "top_k": 2, "max_turns": 3, "compact": True, **overrides})

    def new_episode(self) -> QAEpisode:
        return QAEpisode(self.max_turns, self.top_k, self.retriever, self.compact)

    def train_tasks(self, n: int | None = None) -> list[Task]:
        if self.source == "generated":
            return self._splits.tasks("train", n)
        return load_hotpotqa("train", n, self.hotpot_path)

    def train_pool(self) -> Sequence[Task]:
        return self._splits.pool("train") if self.source == "generated" else self.train_tasks()

    def test_tasks(self, n: int | None = None) -> list[Task]:
        if self.source == "generated":
            return self._splits.tasks("test", n)
        if self.source == "paper":
            return hotpotqa_paper_questions(n)
        return load_hotpotqa("validation", n if n is not None else self.n_test, self.hotpot_path)


def qa_system_prompt(max_turns: int, compact: bool = False) -> str:
    if compact:
        return (
            r"Answer the question. Search with <search>query</search>; answer with \boxed{answer}. "
            f"At most {max_turns} turns."
        )
    return (
        "Answer the question below. You cannot see the documents directly, but you can search them: write "
        "<search>your query</search> and the best matches come back in the next message. You have at most "
        f"{max_turns} turns; in each turn either search once or give your final answer. Write the final answer "
        "as \\boxed{answer}, keeping it short: a name, a place, a number, or yes/no. A reply containing "
        "\\boxed{} ends the episode."
    )


def load_hotpotqa(
    split: str = "validation", n: int | None = None, path: str | None = None, config: str = "distractor"
) -> list[Task]:
    """HotpotQA rows (hub ``hotpotqa/hotpot_qa``, or a JSON/JSONL ``path``) as tasks searched over their paragraphs."""
    import datasets  # imported here: loading a dataset is never a side effect of importing erl_lite

    task_count(n)  # before any download
    if path is not None:
        rows = datasets.Dataset.from_json(path)  # not load_dataset("json"): that one pings a counter on S3
    else:
        rows = datasets.load_dataset("hotpotqa/hotpot_qa", config, split=split)
    if n is not None:
        rows = rows.select(range(min(n, len(rows))))
    keep = ("question", "answer", "type", "level", "supporting_facts", "context")
    return [
        Task(task_id=f"hotpotqa/{split}/{row['id']}", data={**{k: row[k] for k in keep}, "split": split})
        for row in rows
    ]
