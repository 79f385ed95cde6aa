"""The ERL phases on a scripted policy: who sees what, gate, memory, advantages, targets."""

from __future__ import annotations

import re

import pytest

from erl_lite.config import ERLConfig
from erl_lite.generation import ScriptedGenerator
from erl_lite.memory import ReflectionMemory
from erl_lite.phases import (
    PhaseContext, assign_advantages, attempt_first, attempt_second, erl_step, gate, internalize, reflect,
    update_memory,
)
from erl_lite.prompts import REFLECTION_REQUEST, RETRY_HEADER

SECRETS = {"t0": "apple", "t1": "berry", "t2": "cherry", "t3": "date"}


def script(fail_first=("t0", "t1"), fail_second=(), tags=True):
    """First attempts fail on ``fail_first``; reflections name the secret; second attempts use it."""

    def reply(prompt: str) -> str:
        task = re.findall(r"task (t\d+)", prompt)[-1]
        if REFLECTION_REQUEST in prompt:
            body = f"RULEBOOK: the word is {SECRETS[task]}"
            return f"<prompt>{body}</prompt>" if tags else body
        if "RULEBOOK" in prompt:
            return "nope" if task in fail_second else SECRETS[task]
        return "FIRST-REPLY nope" if task in fail_first else SECRETS[task]

    return reply


def make_ctx(env, tok, reply, **cfg):
    config = ERLConfig.preset("cpu", **{"num_generations": 2, **cfg})
    return PhaseContext(ScriptedGenerator(tok, reply), tok, env, config)


def tasks_of(env, n=4):
    return env.train_tasks(n)


def test_first_attempts_are_batched_and_use_the_initial_prompt(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script())
    first = attempt_first(ctx, tasks_of(guess_env), 2)
    assert len(first) == 8 and [a.index for a in first[:2]] == [0, 1]
    assert all(a.system_prompt == guess_env.system_prompt for a in first)
    # two turns at most: one call for turn 1, one for the failed episodes' turn 2
    assert ctx.generator.calls == 2
    assert [a.success for a in first] == [False, False, False, False, True, True, True, True]
    assert all(a.num_turns == 2 for a in first[:4]) and all(a.num_turns == 1 for a in first[4:])


def test_gate_is_strictly_below_threshold(guess_env, tok):
    first = attempt_first(make_ctx(guess_env, tok, script()), tasks_of(guess_env), 2)
    failed = gate(first)
    assert {a.task_id for a in failed} == {"t0", "t1"} and len(failed) == 4


def test_memory_is_never_shown_to_first_attempts(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script())
    memory = ReflectionMemory()
    memory.maybe_store("MEMORY-MARKER rulebook", 1.0, 1.0)
    erl_step(ctx, tasks_of(guess_env), memory)
    first_prompts = [p for p in ctx.generator.prompts_seen if REFLECTION_REQUEST not in p and "RULEBOOK" not in p]
    refl_prompts = [p for p in ctx.generator.prompts_seen if REFLECTION_REQUEST in p]
    assert first_prompts and not any("MEMORY-MARKER" in p for p in first_prompts)
    assert refl_prompts and all("MEMORY-MARKER" in p for p in refl_prompts)


def test_reflection_sees_trace_reward_feedback_and_second_attempt_sees_only_delta(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script())
    erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    refl = [p for p in ctx.generator.prompts_seen if REFLECTION_REQUEST in p]
    assert all("FIRST-REPLY" in p and "FEEDBACK: not solved" in p and "reward 0" in p for p in refl)
    assert all(guess_env.system_prompt in p for p in refl)  # base = initial prompt (memory empty)
    second = [p for p in ctx.generator.prompts_seen if "RULEBOOK" in p and REFLECTION_REQUEST not in p]
    assert len(second) == 4
    for p in second:
        assert "FIRST-REPLY" not in p and "FEEDBACK" not in p
        assert guess_env.action_reminder in p and guess_env.system_prompt not in p


def test_one_generate_call_per_phase_for_single_turn(tok):
    from conftest import GuessEnv

    env = GuessEnv(max_turns=1)
    ctx = make_ctx(env, tok, script())
    out = erl_step(ctx, tasks_of(env), ReflectionMemory())
    assert ctx.generator.calls == 3  # first attempts, reflections, second attempts
    assert len(out.reflections) == len(out.second) == 4


def test_memory_fills_on_successful_second_attempt_with_binary_rewards(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(fail_second=("t1",)))
    memory = ReflectionMemory()
    out = erl_step(ctx, tasks_of(guess_env), memory)
    assert [a.reward for a in out.second] == [1.0, 1.0, 0.0, 0.0]
    assert out.memory_writes == 2 and memory.entries == ["RULEBOOK: the word is apple"]
    assert [r.reward for r in out.reflections] == [1.0, 1.0, 0.0, 0.0]  # r̃ = r2


def test_unparsed_reflection_falls_back_to_base_and_is_not_stored(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(tags=False))
    memory = ReflectionMemory()
    out = erl_step(ctx, tasks_of(guess_env), memory)
    assert all(not r.parsed and r.rulebook == guess_env.system_prompt for r in out.reflections)
    assert len(memory) == 0


def test_no_memory_ablation_keeps_memory_empty_and_shows_initial_prompt(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(), use_memory=False)
    memory = ReflectionMemory()
    memory.maybe_store("MEMORY-MARKER", 1.0, 1.0)
    erl_step(ctx, tasks_of(guess_env), memory)
    assert memory.entries == ["MEMORY-MARKER"]
    assert not any("MEMORY-MARKER" in p for p in ctx.generator.prompts_seen)


def test_no_reflection_ablation_retries_with_the_raw_attempt(guess_env, tok):
    seen = []

    def reply(prompt):
        seen.append(prompt)
        task = re.findall(r"task (t\d+)", prompt)[-1]
        return SECRETS[task] if RETRY_HEADER in prompt else ("FIRST-REPLY nope" if task in ("t0", "t1") else SECRETS[task])

    ctx = make_ctx(guess_env, tok, reply, use_reflection=False)
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    assert out.reflections == [] and not any(REFLECTION_REQUEST in p for p in seen)
    assert len(out.second) == 4 and all(a.success for a in out.second)
    assert all("FEEDBACK: not solved" in a.system_prompt and "FIRST-REPLY" in a.system_prompt for a in out.second)
    assert {s.role for s in out.samples} == {"first", "second", "distill"}


def test_advantages_grouped_per_task_and_role_with_singletons(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(fail_first=("t0",)), num_generations=3)
    out = erl_step(ctx, tasks_of(guess_env, 2), ReflectionMemory())
    first = [s for s in out.samples if s.role == "first"]
    # t0: all fail -> identical rewards -> 0; t1: all succeed -> 0
    assert all(s.advantage == 0 for s in first)
    refl = [s for s in out.samples if s.role == "reflection"]
    assert len(refl) == 3 and all(s.advantage == 0 for s in refl)  # group of 3 identical r2 = 1


def test_singleton_group_gets_its_reward():
    from erl_lite.records import Attempt, Reflection

    def att(task, idx, r, role):
        return Attempt(task, role, idx, "s", [], [1], [2], [1], r, r >= 1, "f", "t", 1)

    first = [att("a", 0, 0.0, "first"), att("a", 1, 1.0, "first"), att("b", 0, 0.0, "first"), att("b", 1, 0.0, "first")]
    second = [att("a", 0, 1.0, "second"), att("b", 0, 0.0, "second"), att("b", 1, 1.0, "second")]
    refl = [Reflection(a.task_id, a.index, "base", "x", "x", True, [1], [2]) for a in second]
    samples = assign_advantages(ERLConfig(), first, first, refl, second)
    by = {(s.role, s.task_id): [] for s in samples}
    for s in samples:
        by[(s.role, s.task_id)].append(round(s.advantage, 4))
    assert by[("reflection", "a")] == [1.0]  # singleton: A = r
    assert by[("second", "a")] == [1.0]
    assert by[("reflection", "b")] == [-0.7071, 0.7071]  # grouped within task b only
    assert by[("first", "a")] == [-0.7071, 0.7071] and by[("first", "b")] == [0.0, 0.0]


def test_internalization_targets_use_initial_context_and_end_with_eos(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script())
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    distill = [s for s in out.samples if s.role == "distill"]
    first_header = {a.task_id: a.prompt_ids for a in out.first}
    assert len(distill) == 4
    for s, a in zip(distill, out.second):
        assert s.prompt_ids == first_header[s.task_id]
        assert "RULEBOOK" not in tok.decode(s.prompt_ids) and guess_env.system_prompt in tok.decode(s.prompt_ids)
        assert s.completion_ids == a.completion_ids and s.completion_ids[-1] == tok.eos_token_id
        assert s.advantage == 1.0


def test_internalization_weights_follow_the_mode():
    from erl_lite.records import Attempt

    second = [Attempt("a", "second", i, "s", [], [1], [2, 3], [1, 1], r, r >= 1, "f", "t", 1) for i, r in enumerate([0.0, 0.5, 1.0])]
    raft = internalize(second, {"a": [9]}, "raft", 2.0)
    nll = internalize(second, {"a": [9]}, "nll", 1.0)
    assert [s.advantage for s in raft] == [1.0, 2.0] and [s.advantage for s in nll] == [1.0, 1.0]
    assert all(s.prompt_ids == [9] for s in raft + nll)


def test_erl_simple_trains_only_first_attempts_with_combined_reward(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(fail_second=("t1",)), mode="erl_simple")
    out = erl_step(ctx, tasks_of(guess_env, 2), ReflectionMemory())
    assert {s.role for s in out.samples} == {"first"}
    # t0's failed rollouts were rescued by r2 = 1 -> all combined rewards equal -> 0; t1 stays 0
    assert all(s.advantage == 0 for s in out.samples)


def test_rlvr_skips_every_erl_phase(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(), mode="rlvr")
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    assert out.reflections == [] and out.second == [] and {s.role for s in out.samples} == {"first"}


def test_role_switches_remove_roles(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(), train_reflection=False, train_second=False, use_internalization=False)
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    assert {s.role for s in out.samples} == {"first"}
