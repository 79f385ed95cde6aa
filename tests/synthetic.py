"""A synthetic run history for the tests of figures and widgets: made-up data with the shapes the paper
reports (first-attempt success climbs, second attempts above it, the gate rate falls, memory fills).
"""

from __future__ import annotations

import math
import random
from typing import Any

from erl_lite import metric_names as keys
from erl_lite.history import History
from erl_lite.records import FIRST, INTERNALIZATION, REFLECTION, SECOND, Attempt, Reflection, Retry, StepRecord, Task

INITIAL_PROMPT = "You are playing a grid game. Reply with one move in a ``` block: Up, Down, Left or Right."
#: Successive rulebooks: each reflection refines the instructions it was given.
RULEBOOKS = [
    "You are playing a grid game. A is you and B is the goal. Reply with one move in a ``` block.",
    "You are playing a grid game. A is you, B is the goal, C is a hole that ends the game. "
    "Avoid C. Reply with one move in a ``` block.",
    "You are playing a grid game. A is you, B is the goal, C is a hole that ends the game, "
    "D is safe ice. Moves are deterministic; walking into the edge does nothing. Plan a path "
    "to B that never steps on C, then reply with one move in a ``` block.",
]
#: Strategy notes later reflections append once the rules are settled.
TIPS = [
    "Tip: on small maps, try Right before Down.",
    "Tip: count the tiles to B before moving; the budget is 8 moves.",
    "Tip: if a move did not change the grid, you hit the edge: pick another direction.",
]
GRIDS = ["DAD\nDCB\nDDD", "ADD\nCDD\nDDB"]


def _attempt(task_id: str, role: str, index: int, system: str, moves: list[str], won: bool) -> Attempt:
    """A multi-turn attempt: one user observation and one assistant move per turn."""
    grid = GRIDS[int(task_id[-1]) % len(GRIDS)]
    messages = [{"role": "system", "content": system}]
    for move in moves:
        messages.append({"role": "user", "content": f"Grid:\n{grid}\nYour move?"})
        messages.append({"role": "assistant", "content": f"```{move}```"})
    outcome = "reached the goal" if won else ("fell into a hole" if moves[-1] == "Down" else "ran out of moves")
    trace = "\n".join(f"turn {t}: {m} -> moved to a safe tile" for t, m in enumerate(moves, 1))
    return Attempt(
        task_id=task_id,
        role=role,
        index=index,
        system_prompt=system,
        messages=messages,
        prompt_ids=[1, 2, 3],
        completion_ids=[4] * len(moves),
        completion_mask=[1] * len(moves),
        reward=float(won),
        success=won,
        feedback=f"You {outcome}.",
        trace=trace + f"\nend: {outcome}",
        num_turns=len(moves),
    )


def _rulebook(version: int) -> str:
    """The ``version``-th rulebook (0-based): first the rules, then rules plus a tip."""
    if version < len(RULEBOOKS):
        return RULEBOOKS[version]
    return f"{RULEBOOKS[-1]} {TIPS[(version - len(RULEBOOKS)) % len(TIPS)]}"


def _step_record(step: int, p_first: float, rng: random.Random, memory: dict[str, Any]) -> StepRecord:
    """Two tasks × two rollouts; failed first attempts are reflected on (from ``memory``) and retried."""
    tasks = [Task(task_id=f"lake-{i}", data={"seed": i}) for i in range(2)]
    firsts, retries = [], []
    before, version = list(memory["slot"]), memory["version"]
    base = before[-1] if before else INITIAL_PROMPT
    rulebook = _rulebook(version)
    text = f"Stepping on C ended the episode.\n<prompt>{rulebook}</prompt>"
    for task in tasks:
        for index in range(2):
            won = rng.random() < p_first
            moves = ["Right", "Down"] if won else ["Down", "Down"]
            firsts.append(_attempt(task.task_id, FIRST, index, INITIAL_PROMPT, moves, won))
            if won:
                continue
            won2 = rng.random() < min(1.0, p_first + 0.3)
            moves2 = ["Right", "Down"] if won2 else ["Right", "Up"]
            reflection = Reflection(task.task_id, index, base, text, rulebook, True, [1], [2], reward=float(won2))
            retries.append(Retry(firsts[-1], reflection, _attempt(task.task_id, SECOND, index, rulebook, moves2, won2)))
            if won2:  # one overwritten slot, as in the paper
                memory["slot"], memory["version"] = [rulebook], version + 1
    return StepRecord(step, tasks, firsts, retries, before, list(memory["slot"]), {})


def _metrics(step: int, steps: int, rng: random.Random, baseline: bool) -> dict[str, float]:
    """Noisy curves with the paper's shapes; RLVR learns more slowly and has no second phase."""
    progress = step / max(steps, 1)
    rate = 2.0 if baseline else 3.5
    p1 = 0.15 + 0.7 * (1 - math.exp(-rate * progress))
    jitter = lambda s: rng.gauss(0.0, s)
    r1 = min(1.0, max(0.0, p1 + jitter(0.04)))
    out = {
        keys.STEP: step,
        keys.REWARD_FIRST: r1,
        keys.SUCCESS_FIRST: r1,
        keys.LOSS_KEYS[FIRST]: jitter(0.05),
        keys.ADVANTAGE_KEYS[FIRST]: 0.8 + jitter(0.05),
        keys.LR: 1e-6,
    }
    if baseline:
        return out
    r2 = min(1.0, r1 + 0.2 + jitter(0.04))
    return out | {
        keys.REWARD_SECOND: r2,
        keys.SUCCESS_SECOND: r2,
        keys.GATE_RATE: 1.0 - r1,
        keys.REFLECTION_PARSE_RATE: min(1.0, 0.7 + 0.3 * progress),
        keys.REFLECTION_REWARD: r2,
        keys.LOSS_KEYS[REFLECTION]: jitter(0.05),
        keys.LOSS_KEYS[SECOND]: jitter(0.05),
        keys.LOSS_KEYS[INTERNALIZATION]: 0.6 * (1 - progress) + 0.1 + abs(jitter(0.03)),
        keys.ADVANTAGE_KEYS[REFLECTION]: 0.6 + jitter(0.05),
        keys.ADVANTAGE_KEYS[SECOND]: 0.7 + jitter(0.05),
    }


def synthetic_history(steps: int = 20, seed: int = 0, with_samples: bool = True, baseline: bool = False) -> History:
    """A made-up History of ``steps`` training steps, eval every 5 steps; step records (``with_samples``)
    at step 1 and every 5th; ``baseline``: an RLVR-like run (first attempts only, no gate, no memory)."""
    rng = random.Random(seed)
    history = History()
    memory: dict[str, Any] = {"slot": [], "version": 0}
    for step in range(1, steps + 1):
        metrics = _metrics(step, steps, rng, baseline)
        sampled = with_samples and not baseline and (step == 1 or step % 5 == 0)
        if not baseline:
            record = _step_record(step, metrics[keys.SUCCESS_FIRST], rng, memory)
            metrics[keys.MEMORY_WRITES] = float(sum(a.success for a in record.second_attempts))
            metrics[keys.MEMORY_SIZE] = float(len(memory["slot"]))
            if sampled:
                record.metrics = dict(metrics)
                history.log_sample(record.to_dict())
        history.log(metrics)
        if step % 5 == 0:
            r = min(1.0, max(0.0, metrics[keys.REWARD_FIRST] + rng.gauss(0.0, 0.03)))
            history.log(
                {keys.STEP: step, keys.EVAL_REWARD: r, keys.EVAL_SUCCESS: r, keys.EVAL_NUM_EPISODES: 64.0}, kind="eval"
            )
    return history
