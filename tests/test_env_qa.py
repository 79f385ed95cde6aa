"""Multi-hop QA: scoring, answer/search parsing, episodes, search reachability, loaders."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from erl_lite.envs.paper_tasks import hotpotqa_paper_questions
from erl_lite.envs.qa import (
    BM25Search,
    MultiHopQA,
    extract_boxed,
    extract_search,
    f1_score,
    load_hotpotqa,
    normalize_answer,
    score_answer,
)
from erl_lite.records import Task

FIXTURE = Path(__file__).parent / "fixtures" / "hotpot_distractor_sample.jsonl"


@pytest.fixture(scope="module")
def env() -> MultiHopQA:
    return MultiHopQA()


def boxed(text: str) -> str:
    return "The answer is \\boxed{" + text + "}"


# --- scoring --------------------------------------------------------------------------------
def test_normalisation_and_exact_match():
    assert normalize_answer("  The Ousel-River!  ") == "ouselriver"
    assert score_answer("the Ousel River.", "Ousel River") == (1.0, True, 1.0)
    assert score_answer("Yes", "yes")[:2] == (1.0, True)


@pytest.mark.parametrize(
    "prediction, gold, reward, exact",
    [
        ("no", "yes", 0.0, False),
        ("yes it is", "yes", 0.0, False),  # yes/no gets no partial credit
        ("Quorvex Labs Incorporated", "Quorvex Labs", 0.8, False),  # F1 = 0.8 >= 0.3
        ("river", "Ousel River", 2 / 3, False),  # F1 = 0.67
        ("one two three four five six seven river", "river", 0.0, False),  # F1 = 0.22 < 0.3
        ("Vell", "Orno", 0.0, False),
    ],
)
def test_partial_credit_rules(prediction, gold, reward, exact):
    got_reward, got_exact, _ = score_answer(prediction, gold)
    assert got_reward == pytest.approx(reward) and got_exact is exact


#: Hedges: an answer offering alternatives (A or B), never partly right whatever the reference.
@pytest.mark.parametrize(
    "prediction, gold",
    [("Paris or London", "Paris"), ("London or Paris", "Paris"), ("Vell or Orno Ridge", "Orno Ridge")],
)
def test_an_answer_offering_alternatives_earns_no_partial_credit(prediction, gold):
    assert score_answer(prediction, gold)[0] == 0.0
    assert score_answer("Paris or Rome", "Paris or Rome") == (1.0, True, 1.0)  # an "or" the reference has is fine


def comparison_hedges(a: str, b: str) -> list[str]:
    """Every way a reply can name both things a comparison question compares."""
    return [boxed(f"{a} or {b}"), boxed(f"{a} {b}"), boxed(f"{a}, {b}"), boxed(f"{b} and {a}"), boxed(f"{a}/{b}")] + [
        f"\\boxed{{{a}}} \\boxed{{{b}}}",
        f"either \\boxed{{{b}}} or \\boxed{{{a}}}",
    ]


def test_hedging_on_comparison_questions_never_pays_more_than_a_committed_guess():
    """On the generated comparison questions ("Which city has more inhabitants, A or B?"), naming both earned F1 0.67
    every time against 0.5 on average for a committed guess. Every hedge now earns 0, below that guess's 0.5."""
    tasks = [t for t in MultiHopQA().train_tasks(300) if t.data["type"] == "comparison"]
    ordered = [(t, m) for t in tasks if (m := re.search(r", (.+) or (.+)\?$", t.data["question"]))]
    assert len(ordered) >= 40, len(ordered)
    for task, m in ordered:
        a, b = m.groups()
        assert task.data["answer"] in (a, b)
        guesses = [play(task, boxed(x)) for x in (a, b)]
        assert sorted(guesses) == [0.0, 1.0]  # a committed guess: 0.5 on average
        for hedge in comparison_hedges(a, b):
            assert play(task, hedge) == 0.0, (task.data["question"], hedge)
        assert play(task, boxed(task.data["answer"].split()[0])) in (0.0, 1.0)  # no partial credit either


def play(task: Task, reply: str) -> float:
    episode = MultiHopQA().new_episode()
    episode.reset(task)
    return episode.step(reply)[1]


def test_several_different_boxes_are_no_answer():
    task = Task("q", data={"question": "Who?", "answer": "Quorvex Labs", "context": None})
    assert play(task, r"\boxed{Quorvex Labs} \boxed{Vell}") == 0.0
    assert play(task, r"\boxed{Quorvex Labs} so: \boxed{quorvex labs}") == 1.0  # the same answer twice
    episode = MultiHopQA().new_episode()
    episode.reset(task)
    episode.step(r"\boxed{Quorvex Labs} \boxed{Vell}")
    assert "several different answers" in episode.feedback()


def test_f1_threshold_boundary():
    assert f1_score("b c d e f g", "g") == pytest.approx(2 / 7)  # just under 0.3 ...
    assert score_answer("b c d e f g", "g")[0] == 0.0  # ... so no reward
    assert score_answer("c d e f g", "g")[0] == pytest.approx(1 / 3)
    assert f1_score("a b", "b") == 1.0  # articles do not count
    assert score_answer(None, "x") == (0.0, False, 0.0)


def test_extract_boxed_and_search():
    assert extract_boxed(r"first \boxed{a} then \boxed{b}") == "b"
    assert extract_boxed(r"\boxed{ \text{x}{y} }") == r"\text{x}{y}"
    assert extract_boxed(r"\boxed{a} and \boxed{unclosed") == "a"
    assert extract_boxed("no box") is None and extract_boxed(r"\boxed{}") == ""
    assert extract_search("<search>one</search> <SEARCH> two </SEARCH>") == "two"
    assert extract_search("<search>  </search>") is None and extract_search("search: x") is None


def test_bm25_search_ranks_and_ignores_empty_queries():
    index = BM25Search(["Vell", "Orno", "Kest"], ["Vell is a city.", "Orno is a painter from Vell.", "Kest mines tin."])
    assert [t for t, _ in index.search("painter", 3)] == ["Orno"]
    assert index.search("the of a", 3) == [] and len(index.search("Vell", 1)) == 1
    # Two documents: Okapi's idf of "painter" is exactly 0 there, yet the match must come back.
    tiny = BM25Search(["Vell", "Orno"], ["Vell is a city.", "Orno is a painter."])
    assert tiny.search("painter", 2) == [("Orno", "Orno is a painter.")]


# --- episodes -------------------------------------------------------------------------------
def test_correct_answer_after_search(env):
    task = env.test_tasks(1)[0]
    episode = env.new_episode()
    assert task.data["question"] in episode.reset(task)
    obs, reward, done, info = episode.step(f"<search>{task.data['question']}</search>")
    assert not done and info["event"] == "search" and obs.startswith("Results for") and "Turns left: 4" in obs
    assert episode.step(boxed(task.data["answer"]))[1:3] == (1.0, True)
    assert episode.success and episode.feedback().startswith("Correct") and "Reward 1.0" in episode.feedback()
    assert "searched" in episode.trace() and "answered" in episode.trace()
    with pytest.raises(RuntimeError):
        episode.step("again")


def test_partial_answer_is_rewarded_but_not_a_success():
    task = Task("q", data={"question": "Who?", "answer": "Quorvex Labs", "context": None})
    episode = MultiHopQA().new_episode()
    episode.reset(task)
    assert episode.step(boxed("Quorvex Labs Incorporated"))[1] == pytest.approx(0.8)
    assert not episode.success
    assert "'Quorvex Labs Incorporated'" in episode.feedback() and "F1 0.80" in episode.feedback()


def test_yes_no_answers_and_wrong_answer_feedback():
    episode = MultiHopQA().new_episode()
    episode.reset(Task("q", data={"question": "Same city?", "answer": "no"}))
    episode.step(boxed("yes"))
    assert episode.reward == 0.0 and not episode.success
    assert episode.feedback() == "Incorrect: the answer 'yes' does not match the reference. Reward 0.0."


def test_missing_boxed_answer_uses_up_the_turns(env):
    episode = env.new_episode()
    episode.reset(env.test_tasks(1)[0])
    outs = [episode.step("I am not sure.") for _ in range(5)]
    assert [o[2] for o in outs] == [False] * 4 + [True]
    assert outs[0][3]["event"] == "invalid" and "neither" in outs[0][0]
    assert "Last turn" in outs[3][0] and outs[-1][:2] == (None, 0.0)
    assert "no \\boxed{} answer was given in 5 turn(s)" in episode.feedback() and not episode.success


def test_system_prompt_documents_the_call_format(env):
    assert "<search>" in env.system_prompt and "\\boxed{" in env.system_prompt and "5 turns" in env.system_prompt


# --- generated questions ----------------------------------------------------------------------
def test_both_supporting_documents_are_reachable_by_search(env):
    tasks = env.test_tasks() + env.train_tasks(300)
    direct_hits = 0
    for task in tasks:
        data, context = task.data, task.data["context"]
        index = BM25Search.from_context(context)
        first, second = data["supporting_facts"]["title"]
        assert {first, second} <= set(context["title"]) and first != second
        texts = {t: " ".join(s) for t, s in zip(context["title"], context["sentences"])}
        # Every supporting document comes up (top 3) when its entity is searched by name ...
        for title in (first, second):
            assert title in [t for t, _ in index.search(title, 3)], (task.task_id, title)
        if data["type"] == "bridge":
            # ... the first is named in the question and names the second, which holds the answer.
            assert first in data["question"] and second in texts[first] and data["answer"] in texts[second]
        else:
            assert first in data["question"] and second in data["question"]
            assert data["answer"] in ("yes", "no", first, second)
        # Searching the question itself finds the first hop (both documents for comparisons).
        top = {t for t, _ in index.search(data["question"], 3)}
        direct_hits += {first, second} <= top if data["type"] == "comparison" else first in top
    assert direct_hits / len(tasks) >= 0.97
    kinds = {(t.data["type"], t.data["answer"] in ("yes", "no")) for t in tasks}
    assert kinds == {("bridge", False), ("comparison", False), ("comparison", True)}


def test_generated_splits_are_deterministic_and_disjoint(env):
    again = MultiHopQA()
    assert [t.data for t in again.test_tasks(10)] == [t.data for t in env.test_tasks(10)]
    other = MultiHopQA(seed=1).test_tasks(10)
    assert [t.data["question"] for t in other] != [t.data["question"] for t in env.test_tasks(10)]
    test_questions = {t.data["question"] for t in env.test_tasks()}
    assert not test_questions & {t.data["question"] for t in env.train_tasks(500)}


def test_small_variant_is_smaller():
    small = MultiHopQA.small()
    task = small.test_tasks(1)[0]
    assert len(task.data["context"]["title"]) == 11 and small.max_turns == 3
    episode = small.new_episode()
    episode.reset(task)
    obs, *_ = episode.step(f"<search>{task.data['question']}</search>")
    assert "[2]" in obs and "[3]" not in obs and "turns: 2" in obs  # top_k = 2 results


# --- real-dataset loaders ---------------------------------------------------------------------
def test_load_hotpotqa_from_a_local_file_searches_each_rows_own_paragraphs():
    tasks = load_hotpotqa(split="validation", path=str(FIXTURE))
    assert [t.task_id for t in tasks] == [
        "hotpotqa/validation/fx0001",
        "hotpotqa/validation/fx0002",
        "hotpotqa/validation/fx0003",
    ]
    assert len(load_hotpotqa(path=str(FIXTURE), n=2)) == 2
    env = MultiHopQA()
    episode = env.new_episode()
    episode.reset(tasks[0])
    obs, *_ = episode.step("<search>inventor of the Pelmark lamp</search>")
    assert "[1] Pelmark lamp:" in obs and "Orla Venz" in obs
    obs, *_ = episode.step("<search>Tarnwick river</search>")
    assert "[1] Tarnwick:" in obs and "Brisholm" not in obs.split("\n")[1]
    episode.step(boxed("the Ousel River"))
    assert episode.success
    episode.reset(tasks[1])
    episode.step(boxed("No"))
    assert episode.success and tasks[1].data["type"] == "comparison"


def test_paper_questions_load_and_use_a_supplied_retriever():
    questions = hotpotqa_paper_questions()
    assert len(questions) == 1024 and questions[0].data["answer"] == "yes"
    assert all(q.data["question"] and "answer" in q.data for q in questions)
    plain = MultiHopQA(source="paper")
    episode = plain.new_episode()
    episode.reset(plain.test_tasks(1)[0])
    assert "No document matched" in episode.step("<search>Ed Wood</search>")[0]
    calls = []

    def retriever(query, top_k):
        calls.append((query, top_k))
        return [("Ed Wood", "Ed Wood was an American filmmaker.")]

    with_retriever = MultiHopQA(source="paper", retriever=retriever)
    episode = with_retriever.new_episode()
    episode.reset(with_retriever.test_tasks(1)[0])
    assert "[1] Ed Wood: Ed Wood was an American filmmaker." in episode.step("<search>Ed Wood</search>")[0]
    assert calls == [("Ed Wood", 3)]
