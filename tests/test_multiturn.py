"""ERL on the paper's multi-turn environments (FrozenLake, Sokoban, multi-hop QA).

A scripted agent plays each task with an optimal solver (an expert) or a failing policy,
chosen per task and per phase, so the gate, the reflection, the second attempt, memory,
advantages, internalization targets, loss masks and budgets can be checked exactly on
episodes of several turns; the integration tests then train the tiny LoRA model on
those rollouts (and once on its own samples) through :class:`ERLTrainer`.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.core.memory import ReflectionMemory
from erl_lite.core.phases import PhaseContext, attempt_first, erl_step
from erl_lite.core.prompts import REFLECTION_REQUEST
from erl_lite.core.rollout import run_episodes
from erl_lite.engine.generation import SamplingParams, ScriptedGenerator
from erl_lite.envs import FrozenLake, MultiHopQA, Sokoban
from erl_lite.envs.frozenlake import solve_frozenlake
from erl_lite.envs.grid import ACTIONS
from erl_lite.envs.sokoban import solve_sokoban
from erl_lite.models import load_policy, trainable_parameters
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model

ENVS = {"frozenlake": FrozenLake.small, "sokoban": Sokoban.small, "qa": MultiHopQA.small}
RULEBOOK = "RULEBOOK"
MEMORY_MARKER = "MEMORY-MARKER: an older rulebook"


# --- the scripted agent ------------------------------------------------------------------


def first_observation(env, task) -> str:
    return env.new_episode().reset(task)


def play(env, task, replies):
    """Play ``replies`` (one per turn) on a fresh episode until it ends; return the episode."""
    episode = env.new_episode()
    episode.reset(task)
    for reply in replies:
        if episode.step(reply)[2]:
            break
    return episode


def expert_plan(env, task) -> list[str]:
    """An optimal reply per turn: the shortest solution, or the gold answer at once."""
    if isinstance(env, MultiHopQA):
        return [f"\\boxed{{{task.data['answer']}}}"]
    if isinstance(env, Sokoban):
        return [f"```{action}```" for action in solve_sokoban(task.data["layout"])]
    return [f"```{action}```" for action in solve_frozenlake(task.data["map"])]


def failing_plan(env, task) -> list[str]:
    """A reply per turn that never succeeds: one search and a wrong answer (QA), or one
    direction repeated whose straight line misses the solution (walls, edges or a hole)."""
    if isinstance(env, MultiHopQA):
        query = " ".join(task.data["question"].split()[:4])
        return [f"<search>{query}</search>"] + ["\\boxed{nope}"] * (env.max_turns - 1)
    for direction in ACTIONS:
        plan = [f"```{direction}```"] * env.max_turns
        if not play(env, task, plan).success:
            return plan
    raise AssertionError(f"every direction solves {task.task_id}")


def _first(pattern: str, text: str) -> str:
    return re.search(pattern, text, re.DOTALL).group(1)


class Player:
    """``script(prompt) -> reply`` for :class:`ScriptedGenerator`: an agent that knows its tasks.

    ``first[task_id]`` / ``second[task_id]`` are modes (``"solve"`` or ``"fail"``) cycled over
    the task's first / second attempts in the order they start (default: solve). Every reply
    opens with ``<phase>-<mode>``, which later turns read back, then the plan's next action.
    Reflections answer with a tagged rulebook naming the task.
    """

    def __init__(self, env, tasks, first=None, second=None) -> None:
        self.env = env
        self.tasks = {first_observation(env, t): t for t in tasks}
        self.modes = {"first": first or {}, "second": second or {}}
        self.started: Counter = Counter()

    def __call__(self, prompt: str) -> str:
        if REFLECTION_REQUEST in prompt:
            task = self.tasks[_first(r"## Task\n(.*?)\n\n## What the agent did", prompt)]
            return f"<prompt>{RULEBOOK} {task.task_id}</prompt>"
        task = self.tasks[_first(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", prompt)]
        system = _first(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", prompt)
        phase = "second" if RULEBOOK in system else "first"
        replies = re.findall(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", prompt, re.DOTALL)
        if replies:
            mode = replies[0].split()[0].split("-")[1]
        else:
            cycle = self.modes[phase].get(task.task_id, ("solve",))
            mode = cycle[self.started[phase, task.task_id] % len(cycle)]
            self.started[phase, task.task_id] += 1
        plan = expert_plan(self.env, task) if mode == "solve" else failing_plan(self.env, task)
        return f"{phase}-{mode} {plan[len(replies)]}"


def distinct_tasks(env, n: int):
    """The first ``n`` training tasks with pairwise different first observations."""
    seen, out = set(), []
    for task in env.train_tasks(8 * n):
        obs = first_observation(env, task)
        if obs not in seen:
            seen.add(obs)
            out.append(task)
        if len(out) == n:
            return out
    raise AssertionError("not enough distinct tasks")


def config(**overrides) -> ERLConfig:
    base = dict(
        num_generations=2,
        max_completion_length=64,
        max_episode_length=2048,
        max_reflection_length=64,
        max_reflection_prompt_length=4000,
        progress_bar=False,
    )  # + 64 fits 4096
    return ERLConfig.preset("cpu", **{**base, **overrides})


class CountingGenerator(ScriptedGenerator):
    """A scripted generator that also records the batch size of every call."""

    def __init__(self, tokenizer, script) -> None:
        super().__init__(tokenizer, script)
        self.batch_sizes: list[int] = []

    def generate(self, prompts, params):
        self.batch_sizes.append(len(prompts))
        return super().generate(prompts, params)


def masked_texts(tok, attempt) -> tuple[str, str]:
    """(tokens that carry loss, tokens that do not) of an attempt's completion, decoded."""
    pairs = list(zip(attempt.completion_ids, attempt.completion_mask))
    keep = tok.decode([t for t, m in pairs if m], skip_special_tokens=False)
    drop = tok.decode([t for t, m in pairs if not m], skip_special_tokens=False)
    return keep, drop


def assert_loss_mask_covers_replies_only(tok, attempt) -> None:
    keep, drop = masked_texts(tok, attempt)
    replies = [m["content"] for m in attempt.messages if m["role"] == "assistant"]
    observations = [m["content"] for m in attempt.messages if m["role"] == "user"][1:]
    assert len(replies) == attempt.num_turns and len(observations) == attempt.num_turns - 1
    assert keep == "".join(r + tok.eos_token for r in replies)
    assert all(obs in drop for obs in observations) and not any(r in drop for r in replies)


# --- the solvers ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
def test_solver_plays_optimally_and_failing_plan_fails(name):
    env = ENVS[name]()
    for task in env.train_tasks(6) + env.test_tasks(3):
        plan = expert_plan(env, task)
        assert len(plan) == task.data["shortest"] and play(env, task, plan).success
        assert not play(env, task, failing_plan(env, task)).success


# --- the ERL step on multi-turn episodes -----------------------------------------------------


@pytest.mark.parametrize("name", list(ENVS))
def test_gate_reflection_second_attempt_memory_and_targets(name, tok):
    """T0 solved twice; T1 solved once; T2 failed twice then rescued; T3 failed twice, rescued once."""
    env = ENVS[name]()
    tasks = distinct_tasks(env, 4)
    ids = [t.task_id for t in tasks]
    player = Player(
        env,
        tasks,
        first={ids[0]: ("solve",), ids[1]: ("solve", "fail"), ids[2]: ("fail",), ids[3]: ("fail",)},
        second={ids[3]: ("solve", "fail")},
    )
    ctx = PhaseContext(ScriptedGenerator(tok, player), tok, env, config())
    memory = ReflectionMemory()
    memory.maybe_store(MEMORY_MARKER, 1.0, 1.0)
    out = erl_step(ctx, tasks, memory)

    # gate: exactly the failed first attempts go on, and they span several turns
    assert [a.success for a in out.first_attempts] == [True, True, True, False, False, False, False, False]
    failed = [a for a in out.first_attempts if not a.success]
    assert [(r.task_id, r.index) for r in out.reflections] == [(a.task_id, a.index) for a in failed]
    assert [(a.task_id, a.index) for a in out.second_attempts] == [(a.task_id, a.index) for a in failed]
    assert max(a.num_turns for a in failed) > 1

    # who saw what: first attempts never see memory; reflections see it as their base
    seen = ctx.generator.prompts_seen
    start = next(i for i, p in enumerate(seen) if REFLECTION_REQUEST in p)
    first_prompts, second_prompts = seen[:start], seen[start + len(failed) :]
    assert len(first_prompts) == sum(a.num_turns for a in out.first_attempts)
    assert len(second_prompts) == sum(a.num_turns for a in out.second_attempts)
    assert not any(MEMORY_MARKER in p or RULEBOOK in p for p in first_prompts)
    assert all(a.system_prompt == env.system_prompt for a in out.first_attempts)
    for r, a in zip(out.reflections, failed):
        shown = tok.decode(r.prompt_ids, skip_special_tokens=False)
        assert shown in seen and r.base_prompt == MEMORY_MARKER and MEMORY_MARKER in shown
        # the whole multi-turn trace (one line per action), the feedback and the reward
        assert a.trace in shown and a.feedback in shown and f"reward {a.reward:g}." in shown
        step_word = "Turn" if name == "qa" else "Action"
        assert re.findall(rf"^{step_word} (\d+):", a.trace, re.M) == [str(k + 1) for k in range(a.num_turns)]

    # the second attempt: Δ only, the same task replayed from scratch
    for r, a in zip(out.reflections, out.second_attempts):
        assert r.parsed and r.rulebook == f"{RULEBOOK} {r.task_id}"
        assert a.system_prompt.startswith(r.rulebook) and env.action_reminder in a.system_prompt
    for p in second_prompts:
        assert RULEBOOK in p and "first-" not in p and MEMORY_MARKER not in p
        assert not any(f.feedback in p or f.trace in p for f in failed)
    first_obs = {a.task_id: a.messages[1]["content"] for a in out.first_attempts}
    assert all(a.messages[1]["content"] == first_obs[a.task_id] for a in out.second_attempts)
    assert [a.success for a in out.second_attempts] == [True, True, True, True, False]

    # memory: overwritten by the last rulebook whose second attempt succeeded
    assert out.memory_writes == 4 and memory.entries == [f"{RULEBOOK} {ids[3]}"]
    assert [r.reward for r in out.reflections] == [a.reward for a in out.second_attempts]

    # advantages grouped per (task, role)
    adv = {}
    for s in out.samples:
        adv.setdefault((s.role, s.task_id), []).append(round(s.advantage, 4))
    assert adv[("first", ids[0])] == [0.0, 0.0] and adv[("first", ids[1])] == [0.7071, -0.7071]
    assert adv[("first", ids[2])] == [0.0, 0.0] == adv[("first", ids[3])]
    for role in ("reflection", "second"):
        assert adv[(role, ids[1])] == [1.0]  # a lone gated rollout: A = r2
        assert adv[(role, ids[2])] == [0.0, 0.0] and adv[(role, ids[3])] == [0.7071, -0.7071]

    # internalization: every y2 under the first attempt's header, ending with EOS; failed ones weigh 0
    internalized = [s for s in out.samples if s.role == "internalization"]
    header = {a.task_id: a.prompt_ids for a in out.first_attempts}
    assert len(internalized) == len(out.second_attempts) == 5
    for s, a in zip(internalized, out.second_attempts):
        context = tok.decode(s.prompt_ids, skip_special_tokens=False)
        assert s.prompt_ids == header[a.task_id] and env.system_prompt in context and RULEBOOK not in context
        assert s.completion_ids == a.completion_ids and s.completion_mask == a.completion_mask
        assert s.completion_ids[-1] == tok.eos_token_id and s.advantage == (1.0 if a.success else 0.0)

    for a in out.first_attempts + out.second_attempts:
        assert_loss_mask_covers_replies_only(tok, a)


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
def test_memory_unchanged_when_every_second_attempt_fails(name, tok):
    env = ENVS[name]()
    tasks = distinct_tasks(env, 2)
    fail = {t.task_id: ("fail",) for t in tasks}
    ctx = PhaseContext(ScriptedGenerator(tok, Player(env, tasks, first=fail, second=fail)), tok, env, config())
    memory = ReflectionMemory()
    memory.maybe_store(MEMORY_MARKER, 1.0, 1.0)
    before = memory.state_dict()
    out = erl_step(ctx, tasks, memory)
    assert len(out.second_attempts) == 4 and not any(a.success for a in out.second_attempts)
    assert out.memory_writes == 0 and memory.state_dict() == before
    assert [s.advantage for s in out.samples if s.role == "internalization"] == [0.0] * 4


# --- budgets and batching ---------------------------------------------------------------------


def test_episode_budget_truncates_and_is_never_exceeded(tok):
    env = FrozenLake.small()
    task = distinct_tasks(env, 1)[0]
    bump = failing_plan(env, task)  # never ends before the 8th action
    gen = ScriptedGenerator(tok, lambda prompt: "x" * 30 + bump[0])
    header = None
    for budget in range(200, 1100, 45):
        [a] = run_episodes(
            gen,
            tok,
            env,
            [task],
            [env.system_prompt],
            SamplingParams(12),
            max_episode_length=budget,
            role="first",
            indices=[0],
        )
        header = header or len(a.prompt_ids)
        assert len(a.prompt_ids) + len(a.completion_ids) <= budget
        # every 12-token reply is cut (the plan is longer); the budget stopped the short episodes
        assert a.truncated and a.reward == 0.0
        assert ("token budget" in a.feedback) == (a.num_turns < env.max_turns)
        runs = [len(r) for r in "".join(map(str, a.completion_mask)).split("0") if r]
        assert len(runs) == a.num_turns and all(n <= 12 for n in runs)
    assert header < 200  # the smallest budget still allowed a turn


def test_truncated_episode_stops_early(tok):
    env = FrozenLake.small()
    task = distinct_tasks(env, 1)[0]
    gen = ScriptedGenerator(tok, lambda prompt: failing_plan(env, task)[0])
    [a] = run_episodes(
        gen,
        tok,
        env,
        [task],
        [env.system_prompt],
        SamplingParams(12),
        max_episode_length=400,
        role="first",
        indices=[0],
    )
    assert a.truncated and 0 < a.num_turns < env.max_turns and gen.calls == a.num_turns


@pytest.mark.parametrize("template", [True, False], ids=["chatml", "plain"])
def test_loss_mask_with_and_without_chat_template(template, tok, tok_plain):
    tokenizer = tok if template else tok_plain
    env = FrozenLake.small()
    task = distinct_tasks(env, 1)[0]
    gen = ScriptedGenerator(tokenizer, lambda prompt: "no idea " + failing_plan(env, task)[0])
    [a] = run_episodes(
        gen,
        tokenizer,
        env,
        [task],
        [env.system_prompt],
        SamplingParams(24),
        max_episode_length=2048,
        role="first",
        indices=[0],
    )
    assert a.num_turns > 1 and not a.truncated
    assert_loss_mask_covers_replies_only(tokenizer, a)
    assert a.completion_ids[-1] == tokenizer.eos_token_id


def test_truncated_episode_feedback_says_why_it_stopped(tok):
    env = FrozenLake.small()
    task = distinct_tasks(env, 1)[0]
    gen = ScriptedGenerator(tok, lambda prompt: failing_plan(env, task)[0])
    [a] = run_episodes(
        gen,
        tok,
        env,
        [task],
        [env.system_prompt],
        SamplingParams(12),
        max_episode_length=400,
        role="first",
        indices=[0],
    )
    assert a.truncated
    # the reflector is shown both; it must not be told that a finished attempt is still running
    assert "still running" not in a.feedback and "still running" not in a.trace
    assert "token budget" in a.feedback and a.trace.endswith(a.feedback)


@pytest.mark.parametrize("name", list(ENVS))
def test_first_attempts_cost_one_batched_call_per_turn(name, tok):
    env = ENVS[name]()
    tasks = distinct_tasks(env, 4)
    modes = dict(zip([t.task_id for t in tasks], [("solve",), ("fail", "solve", "solve"), ("fail",), ("solve",)]))
    gen = CountingGenerator(tok, Player(env, tasks, first=modes))
    first = attempt_first(PhaseContext(gen, tok, env, config(num_generations=3)), tasks, 3)
    turns = [a.num_turns for a in first]
    assert gen.calls == max(turns) <= env.max_turns and max(turns) > 1
    # lock-step: call t carries every episode still running at turn t
    assert gen.batch_sizes == [sum(n > t for n in turns) for t in range(max(turns))]
    assert gen.batch_sizes[0] == len(tasks) * 3


# --- integration: real training steps with the tiny model ------------------------------------------


def trainer_for(env, tok, generator=None, **overrides):
    """An ERLTrainer on ``env`` with a fresh tiny LoRA model: one step of two tasks."""
    model, tok = load_policy(tiny_model(tok), tok, peft="lora")
    args = config(max_steps=1, num_tasks_per_step=2, eval_steps=0, **overrides)
    trainer = ERLTrainer(
        model=model,
        processing_class=tok,
        args=args,
        env=env,
        generator=generator,
        train_dataset=env.train_tasks(8),
        eval_dataset=env.test_tasks(2),
    )
    return trainer, model


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENVS))
def test_scripted_erl_step_trains_every_role(name, tok):
    env = ENVS[name]()
    tasks = env.train_tasks(8) + env.test_tasks(2)
    # per task: the first rollout solves, the second fails; the rulebook then rescues it
    player = Player(env, tasks, first={t.task_id: ("solve", "fail") for t in tasks})
    trainer, model = trainer_for(env, tok, ScriptedGenerator(tok, player))
    before = trainable_parameters(model)
    rec = trainer.train().of_kind("train")[-1]
    assert rec["samples/first"] == 4 and rec["gate/rate"] == 0.5
    assert rec["samples/reflection"] == rec["samples/second"] == rec["samples/internalization"] == 2
    assert rec["success/second"] == 1.0 and rec["memory/size"] == 1.0
    assert max(a.num_turns for a in trainer.last_outcome.first_attempts) > 1
    after = trainable_parameters(model)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert trainer.evaluate()["eval/num_episodes"] == 2 * trainer.args.eval_num_generations


@pytest.mark.slow
def test_model_sampling_runs_end_to_end_on_frozenlake(tok):
    env = FrozenLake.small()
    trainer, model = trainer_for(env, tok, max_completion_length=12, max_reflection_length=40, max_episode_length=1024)
    rec = trainer.train().of_kind("train")[-1]
    for key in ("reward/first", "gate/rate", "turns/first", "tokens/first", "loss/total", "optim/steps"):
        assert rec[key] is not None, key
    assert rec["samples/first"] == 4 and rec["tokens/first"] > 0 and rec["optim/steps"] == 1
    first = trainer.last_outcome.first_attempts
    assert all(1 <= a.num_turns <= env.max_turns for a in first)
    assert all(len(a.prompt_ids) + len(a.completion_ids) <= 1024 for a in first)
    assert torch.isfinite(torch.tensor(rec["loss/total"]))
