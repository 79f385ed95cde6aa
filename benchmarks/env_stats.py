"""Environment statistics: generation speed, prompt sizes per turn, optimal-solution lengths.

For every environment this prints
  * the time to generate 1,000 training tasks (after the 100 test tasks exist);
  * the system prompt and the mean observation per turn, in characters, words and tokens,
    measured on scripted episodes over the test split (random moves for the grid games; for
    QA: search the question, search the bridge entity, answer), plus the mean trace length —
    what the reflector reads;
  * the distribution of optimal solution lengths over the test split next to the paper's.

Tokens are counted with ``--tokenizer`` (a local Hugging Face tokenizer directory, loaded
offline) or else erl_lite's tiny test tokenizer (character-level, so close to characters).

Usage:
    OMP_NUM_THREADS=1 python benchmarks/env_stats.py [--tokenizer PATH] [--episodes 100]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from erl_lite.cli import arg_types
from erl_lite.core.env import Environment
from erl_lite.envs import FrozenLake, MultiHopQA, Sokoban
from erl_lite.envs.qa import BM25Search

#: Test-split shortest-path distributions of the paper's task files (ERL_SPEC §2).
PAPER_DISTRIBUTIONS = {
    "frozenlake": ({1: 25, 2: 15, 3: 22, 4: 22, 5: 6, 6: 10}, 2.99),
    "sokoban": ({1: 2, 2: 4, 3: 9, 4: 12, 5: 12, 6: 19, 7: 18, 8: 24}, 5.77),
}


def make_counter(tokenizer_path: str | None) -> tuple[str, Callable[[str], int]]:
    """(tokenizer label, text -> token count)."""
    if tokenizer_path:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
        label = tokenizer_path
    else:
        from erl_lite.testing import tiny_tokenizer

        tok, label = tiny_tokenizer(), "tiny character-level test tokenizer"
    return label, lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def sizes(texts: list[str], count: Callable[[str], int]) -> str:
    """Mean characters / words / tokens of some texts, as one line."""
    if not texts:
        return "n/a"
    chars = statistics.mean(len(t) for t in texts)
    words = statistics.mean(len(t.split()) for t in texts)
    tokens = statistics.mean(count(t) for t in texts)
    return f"{chars:7.1f} chars {words:6.1f} words {tokens:7.1f} tokens"


def grid_policy(rng: random.Random) -> Callable[[Any, int], str]:
    return lambda task, turn: f"```\n{rng.choice(['Up', 'Down', 'Left', 'Right'])}\n```"


def qa_policy(task: Any, turn: int) -> str:
    data = task.data
    if turn == 0:
        return f"<search>{data['question']}</search>"
    if turn == 1 and data.get("type") == "bridge":
        return f"<search>{data['supporting_facts']['title'][1]}</search>"
    return "\\boxed{" + data["answer"] + "}"


def run_episodes(env: Environment, tasks: list, policy: Callable[[Any, int], str]) -> dict[str, Any]:
    """Play ``policy`` on every task; collect first/later observations, traces, outcomes."""
    first, later, traces, turns, rewards = [], [], [], [], []
    for task in tasks:
        episode = env.new_episode()
        first.append(episode.reset(task))
        for turn in range(env.max_turns):
            obs, _, done, _ = episode.step(policy(task, turn))
            if done:
                break
            later.append(obs)
        traces.append(episode.trace())
        turns.append(turn + 1)
        rewards.append(episode.reward)
    return {"first": first, "later": later, "traces": traces, "turns": turns, "rewards": rewards}


def time_generation(factory: Callable[[], Environment], n: int) -> float:
    env = factory()
    env.test_tasks()  # built first: training tasks are checked against it
    start = time.perf_counter()
    env.train_tasks(n)
    return time.perf_counter() - start


def report_distribution(name: str, tasks: list, key: str) -> None:
    counts = Counter(t.data["shortest"] for t in tasks)
    mean = statistics.mean(t.data["shortest"] for t in tasks)
    print(f"  {name:<28} mean {mean:4.2f}  " + " ".join(f"{k}:{counts[k]}" for k in sorted(counts)))
    if key in PAPER_DISTRIBUTIONS and name.startswith("paper"):
        dist, paper_mean = PAPER_DISTRIBUTIONS[key]
        agrees = dict(counts) == dist and abs(mean - paper_mean) < 0.005
        print(
            f"  {'spec figure':<28} mean {paper_mean:4.2f}  "
            + " ".join(f"{k}:{v}" for k, v in dist.items())
            + f"   ({'matches' if agrees else 'DIFFERS'})"
        )


def qa_retrieval_rate(tasks: list) -> float:
    """Share of questions whose first hop (both documents for comparisons) the question finds."""
    hits = 0
    for task in tasks:
        data = task.data
        top = {t for t, _ in BM25Search.from_context(data["context"]).search(data["question"], 3)}
        need = (
            set(data["supporting_facts"]["title"])
            if data["type"] == "comparison"
            else {data["supporting_facts"]["title"][0]}
        )
        hits += need <= top
    return hits / len(tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default=None, help="local Hugging Face tokenizer directory")
    parser.add_argument("--n", type=arg_types.whole(1), default=1000, help="training tasks to generate per environment")
    parser.add_argument("--episodes", type=arg_types.whole(1), default=100, help="scripted episodes per environment")
    args = parser.parse_args()
    label, count = make_counter(args.tokenizer)
    print(f"token counts: {label}\n")
    envs: dict[str, Callable[[], Environment]] = {
        "FrozenLake": FrozenLake,
        "FrozenLake.small": FrozenLake.small,
        "Sokoban": Sokoban,
        "Sokoban.small": Sokoban.small,
        "MultiHopQA": MultiHopQA,
        "MultiHopQA.small": MultiHopQA.small,
    }
    for name, factory in envs.items():
        env = factory()
        seconds = time_generation(factory, args.n)
        policy = qa_policy if isinstance(env, MultiHopQA) else grid_policy(random.Random(0))
        stats = run_episodes(env, env.test_tasks(args.episodes), policy)
        print(f"{name}: {args.n} training tasks in {seconds:.2f} s ({1000 * seconds / args.n:.2f} ms/task)")
        print(f"  system prompt           {sizes([env.system_prompt], count)}")
        print(f"  first observation       {sizes(stats['first'], count)}")
        print(f"  later observation/turn  {sizes(stats['later'], count)}")
        print(f"  trace (reflector input) {sizes(stats['traces'], count)}")
        print(
            f"  scripted policy: {statistics.mean(stats['turns']):.2f} turns/episode, "
            f"mean reward {statistics.mean(stats['rewards']):.2f}"
        )
        if isinstance(env, MultiHopQA):
            tasks = env.test_tasks()
            mix = Counter((t.data["type"], t.data["answer"] in ("yes", "no")) for t in tasks)
            print(f"  test mix: {dict(mix)}; question finds first hop: {qa_retrieval_rate(tasks):.1%}")
        print()
    print("Optimal solution lengths on the test split (moves):")
    for key, cls in (("frozenlake", FrozenLake), ("sokoban", Sokoban)):
        report_distribution(f"{key} generated (seed 0)", cls().test_tasks(), key)
        report_distribution(f"{key} small (seed 0)", cls.small().test_tasks(), key)
        report_distribution(f"paper {key}", cls(source="paper").test_tasks(), key)
        report_distribution(f"{key} generated train[:1000]", cls().train_tasks(1000), key)


if __name__ == "__main__":
    main()
