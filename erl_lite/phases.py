"""The ERL phases, one function each, named with the paper's verbs (Algorithm 2).

:func:`erl_step` composes them and reads like the algorithm box::

    first   = attempt(tasks, initial prompts)            # y1, r1, f1   (G per task)
    failed  = gate(first)                                # r1 < τ
    deltas  = reflect(failed, memory)                    # Δ from (base, trace, r1, f1)
    second  = attempt(failed tasks, Δ)                   # y2, r2, f2   (same task, from scratch)
    memory  ← Δ where r2 ≥ τ
    batch   = first ⊕ reflections ⊕ second ⊕ internalize(second)

Each phase generates with one batched call per model turn; every function takes what it
needs as arguments, so a notebook can run them one by one and inspect the records between.

Departures from the paper: ``erl_simple`` (Algorithm 1) and ``rlvr`` reuse the same phases;
the "w/o reflection" ablation replaces Δ with the raw first attempt (see :mod:`prompts`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from erl_lite.advantages import distill_weights, grouped_advantages
from erl_lite.config import ERLConfig
from erl_lite.envs.base import Environment
from erl_lite.generation import Generator, SamplingParams
from erl_lite.memory import ReflectionMemory
from erl_lite.prompts import (
    parse_rulebook,
    reflection_messages,
    retry_system_prompt,
    second_attempt_system_prompt,
)
from erl_lite.records import Attempt, Reflection, Task, TrainSample
from erl_lite.rollout import run_episodes


@dataclass
class PhaseContext:
    """What every phase needs: the sampler, the tokenizer, the environment and the config."""

    generator: Generator
    tokenizer: Any
    env: Environment
    config: ERLConfig

    def attempt_params(self, temperature: float | None = None) -> SamplingParams:
        c = self.config
        return SamplingParams(c.max_completion_length, temperature or c.temperature, c.top_p, c.top_k)


def first_task_message(attempt: Attempt) -> str:
    """The task as the agent first saw it (the first user message)."""
    return next(m["content"] for m in attempt.messages if m["role"] == "user")


# --- the phases ------------------------------------------------------------------------------


def attempt_first(ctx: PhaseContext, tasks: list[Task], num_generations: int,
                  temperature: float | None = None) -> list[Attempt]:
    """y1: G rollouts per task under the *initial* system prompt (memory never shown)."""
    rows = [(t, g) for t in tasks for g in range(num_generations)]
    return run_episodes(
        ctx.generator, ctx.tokenizer, ctx.env,
        tasks=[t for t, _ in rows],
        system_prompts=[ctx.env.initial_system_prompt(t) for t, _ in rows],
        params=ctx.attempt_params(temperature),
        max_episode_length=ctx.config.max_episode_length,
        role="first",
        indices=[g for _, g in rows],
    )


def gate(attempts: list[Attempt]) -> list[Attempt]:
    """The attempts that go on to reflection: those that did not succeed (r1 < τ)."""
    return [a for a in attempts if not a.success]


def reflect(ctx: PhaseContext, failed: list[Attempt], memory: ReflectionMemory | None) -> list[Reflection]:
    """Δ for every failed attempt, in one batched generation.

    The base instructions are the memory's content when memory is on and non-empty, else the
    attempt's own (initial) system prompt.
    """
    if not failed:
        return []
    c = ctx.config
    remembered = memory.context() if (memory is not None and c.use_memory) else None
    contexts = []
    for a in failed:
        base = remembered if remembered is not None else a.system_prompt
        _, ids = reflection_messages(
            task_text=first_task_message(a), base_prompt=base, trace=a.trace, reward=a.reward,
            feedback=a.feedback, tokenizer=ctx.tokenizer, max_tokens=c.max_reflection_prompt_length,
        )
        contexts.append((base, ids))
    params = SamplingParams(c.max_reflection_length, c.reflection_temperature, c.reflection_top_p, 0)
    outs = ctx.generator.generate([ids for _, ids in contexts], params)
    reflections = []
    for a, (base, ids), out in zip(failed, contexts, outs):
        text = ctx.tokenizer.decode(out, skip_special_tokens=True)
        rulebook, parsed = parse_rulebook(text, base)
        reflections.append(Reflection(a.task_id, a.index, base, text, rulebook, parsed, ids, list(out)))
    return reflections


def attempt_second(ctx: PhaseContext, failed: list[Attempt], tasks: dict[str, Task],
                   reflections: list[Reflection] | None) -> list[Attempt]:
    """y2: replay each failed task from scratch under Δ (or, without reflection, the raw retry).

    The second attempt never sees y1 or f1 when reflections are given — only Δ.
    """
    if reflections is not None:
        systems = [second_attempt_system_prompt(r.rulebook, ctx.env.action_reminder) for r in reflections]
    else:
        systems = [retry_system_prompt(a.system_prompt, a.trace, a.feedback) for a in failed]
    return run_episodes(
        ctx.generator, ctx.tokenizer, ctx.env,
        tasks=[tasks[a.task_id] for a in failed],
        system_prompts=systems,
        params=ctx.attempt_params(),
        max_episode_length=ctx.config.max_episode_length,
        role="second",
        indices=[a.index for a in failed],
    )


def update_memory(memory: ReflectionMemory, reflections: list[Reflection], second: list[Attempt],
                  threshold: float) -> int:
    """memory ← Δ for every second attempt with r2 ≥ τ (in order; the last one wins a single slot).

    Also credits each reflection with r̃ = r2. Returns the number of writes.
    """
    writes = 0
    for r, a in zip(reflections, second):
        r.reward = a.reward
        if r.parsed:
            writes += memory.maybe_store(r.rulebook, a.reward, threshold)
    return writes


def internalize(second: list[Attempt], first_headers: dict[str, list[int]], mode: str,
                coef: float) -> list[TrainSample]:
    """π(y2 | x): second attempts re-contextualised under the initial prompt (no Δ).

    The completion tokens are reused untouched (they end with the EOS the model produced);
    only the header changes. Weight: ``max(r2, 0)`` (raft) or ``1[r2 > 0]`` (nll), times the
    coefficient; attempts with weight 0 are left out since they carry no gradient.
    """
    weights = distill_weights([a.reward for a in second], mode)
    return [
        TrainSample("distill", first_headers[a.task_id], a.completion_ids, a.completion_mask, coef * w, a.task_id)
        for a, w in zip(second, weights) if w > 0
    ]


def assign_advantages(cfg: ERLConfig, first: list[Attempt], failed: list[Attempt],
                      reflections: list[Reflection], second: list[Attempt]) -> list[TrainSample]:
    """The RL batch: GRPO advantages grouped per (task, role), per the mode's rules."""
    samples: list[TrainSample] = []
    if cfg.mode == "erl_simple":
        # Algorithm 1: one reward per rollout (r2 replaces r1 where the gate fired), y1 only.
        r2 = {(a.task_id, a.index): a.reward for a in second}
        rewards = [r2.get((a.task_id, a.index), a.reward) for a in first]
        return _role_samples("first", first, rewards, [a.task_id for a in first])
    if cfg.train_first:
        samples += _role_samples("first", first, [a.reward for a in first], [a.task_id for a in first])
    r2 = [a.reward for a in second]
    keys = [a.task_id for a in second]
    if cfg.train_reflection and reflections:
        adv = grouped_advantages(r2, keys)
        samples += [TrainSample("reflection", r.prompt_ids, r.completion_ids, [1] * len(r.completion_ids), A, r.task_id)
                    for r, A in zip(reflections, adv)]
    if cfg.train_second:
        samples += _role_samples("second", second, r2, keys)
    return samples


def _role_samples(role: str, attempts: list[Attempt], rewards: list[float], keys: list[str]) -> list[TrainSample]:
    adv = grouped_advantages(rewards, keys)
    return [TrainSample(role, a.prompt_ids, a.completion_ids, a.completion_mask, A, a.task_id)
            for a, A in zip(attempts, adv)]


# --- the composed step -----------------------------------------------------------------------


@dataclass
class StepOutcome:
    """All records of one iteration, the RL batch built from them, and phase timings."""

    first: list[Attempt]
    reflections: list[Reflection] = field(default_factory=list)
    second: list[Attempt] = field(default_factory=list)
    samples: list[TrainSample] = field(default_factory=list)
    memory_writes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def erl_step(ctx: PhaseContext, tasks: list[Task], memory: ReflectionMemory) -> StepOutcome:
    """One iteration's rollouts and RL batch (the update itself is :func:`update.policy_update`)."""
    c, clock = ctx.config, time.perf_counter
    t0 = clock()
    first = attempt_first(ctx, tasks, c.num_generations)
    out = StepOutcome(first=first, seconds={"first": clock() - t0})
    if c.mode == "rlvr":
        out.samples = _role_samples("first", first, [a.reward for a in first], [a.task_id for a in first])
        return out
    failed = gate(first)
    t1 = clock()
    out.reflections = reflect(ctx, failed, memory) if c.use_reflection else []
    t2 = clock()
    by_id = {t.task_id: t for t in tasks}
    out.second = attempt_second(ctx, failed, by_id, out.reflections if c.use_reflection else None)
    t3 = clock()
    if c.use_reflection:
        if c.use_memory:
            out.memory_writes = update_memory(memory, out.reflections, out.second, c.reward_threshold)
        else:  # still credit r̃ = r2 to each reflection
            for r, a in zip(out.reflections, out.second):
                r.reward = a.reward
    out.samples = assign_advantages(c, first, failed, out.reflections, out.second)
    if c.mode == "erl" and c.use_internalization:
        headers = {a.task_id: a.prompt_ids for a in first}
        out.samples += internalize(out.second, headers, c.internalization_mode, c.internalization_coef)
    out.seconds.update(reflect=t2 - t1, second=t3 - t2)
    return out
