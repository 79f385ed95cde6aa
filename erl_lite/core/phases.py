"""The ERL phases, one function each, named with the paper's verbs (Algorithm 2); :func:`erl_step`
composes them and reads like the algorithm box::

    first   = attempt(tasks, initial prompts)            # y1, r1, f1   (G per task)
    failed  = gate(first, τ)                             # r1 < τ
    deltas  = reflect(failed, memory)                    # Δ from (base, trace, r1, f1)
    retries = attempt_second(failed tasks, Δ)            # (y1, Δ, y2): same task, from scratch
    memory  ← Δ where r2 ≥ τ
    batch   = first ⊕ reflections ⊕ second ⊕ internalize(retries)

Departures from the paper: ``erl_simple`` (Algorithm 1) and ``rlvr`` reuse the same phases;
"w/o reflection" replaces Δ with the raw first attempt; an internalization row longer than
``max_episode_length`` is dropped with a warning (:func:`internalize`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

from erl_lite.config import ERLConfig
from erl_lite.config.checks import reflects
from erl_lite.core.advantages import grouped_advantages, internalization_weights
from erl_lite.core.env import Environment
from erl_lite.core.memory import MemoryBank, ReflectionMemory, SlotMemory
from erl_lite.core.prompts import (
    end_at_close_tag,
    parse_rulebook,
    reflection_messages,
    retry_system_prompt,
    second_attempt_system_prompt,
)
from erl_lite.core.rollout import run_episodes
from erl_lite.engine.chat import end_of_turn_id
from erl_lite.engine.generation import Generator, SamplingParams, generate_named, reply_was_cut, sampler_stop_ids
from erl_lite.engine.progress import NO_PROGRESS, Progress
from erl_lite.records import (
    FIRST,
    INTERNALIZATION,
    REFLECTION,
    SECOND,
    Attempt,
    Reflection,
    Retry,
    StepRecord,
    Task,
    TrainSample,
    retry_of_first,
    succeeded,
    tasks_by_id,
)


@dataclass
class PhaseContext:
    """What every phase needs: the sampler, the tokenizer, the environment, the config and the bars."""

    generator: Generator
    tokenizer: Any
    env: Environment
    config: ERLConfig
    progress: Progress = field(default=NO_PROGRESS, repr=False, compare=False)

    def attempt_params(self, temperature: float | None = None) -> SamplingParams:
        """Sampling of training attempts (first and second)."""
        c = self.config
        return SamplingParams(
            max_new_tokens=c.max_completion_length,
            temperature=temperature or c.temperature,
            top_p=c.top_p,
            top_k=c.top_k,
            generation_kwargs=c.generation_kwargs,
        )

    def eval_params(self) -> SamplingParams:
        """Sampling of evaluation first attempts (the paper: T 0.7, top-p 0.8, top-k 20)."""
        c = self.config
        return replace(self.attempt_params(), temperature=c.eval_temperature, top_p=c.eval_top_p, top_k=c.eval_top_k)


def attempt_first(
    ctx: PhaseContext,
    tasks: list[Task],
    num_generations: int,
    temperature: float | None = None,
    params: SamplingParams | None = None,
    desc: str = "first attempts",
) -> list[Attempt]:
    """y1: G rollouts per task under the *initial* system prompt (memory never shown); ``params``
    default to the training attempts' sampling at ``temperature``."""
    rows = [(t, g) for t in tasks for g in range(num_generations)]
    return _play(
        ctx,
        desc,
        FIRST,
        [t for t, _ in rows],
        [ctx.env.initial_system_prompt(t) for t, _ in rows],
        [g for _, g in rows],
        params or ctx.attempt_params(temperature),
    )


def _play(
    ctx: PhaseContext,
    desc: str,
    role: str,
    tasks: list[Task],
    system_prompts: list[str],
    indices: list[int],
    params: SamplingParams,
) -> list[Attempt]:
    """:func:`run_episodes` with the context's sampler, environment and limits, under a bar."""
    c = ctx.config
    with ctx.progress.bar(desc, len(tasks)) as bar:
        return run_episodes(
            ctx.generator,
            ctx.tokenizer,
            ctx.env,
            tasks,
            system_prompts,
            params,
            max_episode_length=c.max_episode_length,
            role=role,
            indices=indices,
            threshold=c.reward_threshold,
            template_kwargs=c.chat_template_kwargs,
            on_finished=bar.update,
        )


def gate(attempts: list[Attempt], threshold: float) -> list[Attempt]:
    """The attempts that go on to reflection: ``r1 < τ``, those not :func:`~erl_lite.records.succeeded`."""
    return [a for a in attempts if not succeeded(a.reward, threshold)]


def reflect(ctx: PhaseContext, failed: list[Attempt], memory: ReflectionMemory | MemoryBank | None) -> list[Reflection]:
    """Δ for every failed attempt, in one batched generation, improving on the memory's content for
    the task, else the attempt's own system prompt (``memory=None``: the "w/o memory" ablation)."""
    if not failed:
        return []
    c = ctx.config
    contexts = []
    for a in failed:
        remembered = memory.for_task(a.task_id, a.index).context() if memory is not None else None
        base = remembered if remembered is not None else a.system_prompt
        task_text = next(m["content"] for m in a.messages if m["role"] == "user")  # as the agent first saw it
        _, ids = reflection_messages(
            task_text=task_text,
            base_prompt=base,
            trace=a.trace,
            reward=a.reward,
            feedback=a.feedback,
            tokenizer=ctx.tokenizer,
            max_tokens=c.max_reflection_prompt_length,
            template_kwargs=c.chat_template_kwargs,
            request=c.reflection_request,
            prefill=c.reflection_prefill,
        )
        contexts.append((base, ids))
    params = SamplingParams(
        max_new_tokens=c.max_reflection_length,
        temperature=c.reflection_temperature,
        top_p=c.reflection_top_p,
        top_k=0,
        generation_kwargs=c.generation_kwargs,
        stop=("</prompt>",),
    )
    names = [f"reflection on task {a.task_id!r} (rollout {a.index})" for a in failed]
    with ctx.progress.bar("reflections", len(failed)) as bar:  # one batched call: all finish at once
        outs = generate_named(ctx.generator, [ids for _, ids in contexts], params, names)
        bar.update(len(outs))
    reported = getattr(ctx.generator, "last_logprobs", None) or [None] * len(outs)
    stops = sampler_stop_ids(ctx.generator, ctx.tokenizer)
    reflections = []
    for a, (base, ids), out, logp in zip(failed, contexts, outs, reported):
        out = list(out)[: end_at_close_tag(list(out), ctx.tokenizer)]
        text = c.reflection_prefill + ctx.tokenizer.decode(out, skip_special_tokens=True)
        rulebook, parsed = parse_rulebook(text, base, unclosed="<prompt>" in c.reflection_prefill.lower())
        reflections.append(
            Reflection(
                task_id=a.task_id,
                index=a.index,
                base_prompt=base,
                text=text,
                rulebook=rulebook,
                parsed=parsed,
                prompt_ids=ids,
                completion_ids=out,
                truncated=reply_was_cut(out, c.max_reflection_length, stops),
                sampled_logp=None if logp is None else list(logp)[: len(out)],
            )
        )
    return reflections


def attempt_second(
    ctx: PhaseContext, failed: list[Attempt], tasks: dict[str, Task], reflections: list[Reflection] | None
) -> list[Retry]:
    """y2: replay each failed task from scratch under Δ only (never y1 or f1), or, without
    reflection, the raw retry; one :class:`Retry` per failed attempt, each reflection credited its
    :func:`reflection_credits`."""
    if reflections is not None:
        if len(reflections) != len(failed):
            raise ValueError(f"{len(reflections)} reflections for {len(failed)} failed attempts")
        systems = [
            second_attempt_system_prompt(r.rulebook, ctx.env.action_reminder_for(tasks[a.task_id]))
            for a, r in zip(failed, reflections)
        ]
    else:
        systems = [
            retry_system_prompt(a.system_prompt, a.trace, a.feedback, ctx.config.retry_instruction) for a in failed
        ]
    second = _play(
        ctx,
        "second attempts",
        SECOND,
        [tasks[a.task_id] for a in failed],
        systems,
        [a.index for a in failed],
        ctx.attempt_params(),
    )
    retries = [Retry(y1, delta, y2) for y1, delta, y2 in zip(failed, reflections or [None] * len(failed), second)]
    for r, credit in zip(retries, reflection_credits(retries) if reflections is not None else []):
        r.reflection.reward = credit
    return retries


def reflection_credits(retries: list[Retry]) -> list[float]:
    """r̃ of each retry's reflection, the reward its GRPO group compares: r2 when its rulebook guided the retry;
    without one (the retry ran under the base prompt, so says nothing of it) min(0, r2 of the task's rulebooks), so
    that writing nothing never scores above a rulebook whose retry failed (docs/DEPARTURES.md)."""
    floor: dict[str, float] = {}
    for r in retries:
        floor[r.task_id] = min(floor.get(r.task_id, 0.0), r.second.reward if r.reflection.parsed else 0.0)
    return [r.second.reward if r.reflection.parsed else floor[r.task_id] for r in retries]


def update_memory(memory: ReflectionMemory | MemoryBank, retries: list[Retry], threshold: float) -> int:
    """memory ← Δ for every retry with r2 ≥ τ and a parsed rulebook, in order; returns the writes."""
    writes = 0
    for r in retries:
        if r.reflection is not None and r.reflection.parsed:
            writes += memory.for_task(r.task_id, r.index).maybe_store(r.reflection.rulebook, r.second.reward, threshold)
    return writes


def internalize(
    retries: list[Retry], mode: str, coef: float, stop_ids: list[int], max_length: int | None = None
) -> list[TrainSample]:
    """π(y2 | x): second attempts under the first attempt's initial context, weighted ``coef`` times
    ``internalization_weights`` (weight-0 rows stay, as in the reference); a cut last reply ends with
    ``stop_ids[0]``; a row over ``max_length`` is dropped with a warning, not cut."""
    weights = internalization_weights([r.second.reward for r in retries], mode)
    rows = []
    for r, w in zip(retries, weights):
        ids, mask = _ending_with_stop(r.second, stop_ids)
        rows.append(
            TrainSample(
                role=INTERNALIZATION,
                prompt_ids=r.first.prompt_ids,
                completion_ids=ids,
                completion_mask=mask,
                advantage=coef * w,
                task_id=r.task_id,
            )
        )
    if max_length is None:
        return rows
    long = [i for i, s in enumerate(rows) if len(s.prompt_ids) + len(s.completion_ids) > max_length]
    if long:
        r, s = retries[long[0]], rows[long[0]]
        warnings.warn(
            f"{len(long)} internalization row(s) dropped, e.g. the internalization row of "
            f"task {r.task_id!r} (rollout {r.first.index}): {len(s.prompt_ids)} tokens of initial "
            f"context + {len(s.completion_ids)} of second attempt run past max_episode_length="
            f"{max_length}; raise it, or shorten the initial prompt",
            RuntimeWarning,
            stacklevel=3,
        )
    return [s for i, s in enumerate(rows) if i not in long]


def _ending_with_stop(attempt: Attempt, stop_ids: list[int]) -> tuple[list[int], list[int]]:
    """(completion ids, mask) of ``attempt`` with a trained stop token after a cut last reply."""
    ids, mask = list(attempt.completion_ids), list(attempt.completion_mask)
    if ids and mask[-1] == 1 and ids[-1] not in stop_ids:
        ids.append(stop_ids[0])
        mask.append(1)
    return ids, mask


def assign_advantages(config: ERLConfig, first: list[Attempt], retries: list[Retry]) -> list[TrainSample]:
    """The RL batch: GRPO advantages grouped per (task, role), per the mode's rules."""
    if config.mode == "erl_simple":
        # Algorithm 1: one reward per rollout (r2 replaces r1 where the gate fired), y1 only.
        rewards = [a.reward if r is None else r.second.reward for a, r in zip(first, retry_of_first(first, retries))]
        return _role_samples(FIRST, first, rewards, config.scale_rewards)
    samples: list[TrainSample] = []
    if config.train_first:
        samples += _role_samples(FIRST, first, [a.reward for a in first], config.scale_rewards)
    r2 = [r.second.reward for r in retries]
    reflected = [r for r in retries if r.reflection is not None] * config.reflection_copies  # the reference: 2
    if config.train_reflection and reflected:
        adv = grouped_advantages(
            reflection_credits(reflected), [r.task_id for r in reflected], scale=config.scale_rewards
        )
        samples += [
            TrainSample(
                role=REFLECTION,
                prompt_ids=r.reflection.prompt_ids,
                completion_ids=r.reflection.completion_ids,
                completion_mask=[1] * len(r.reflection.completion_ids),
                advantage=A,
                task_id=r.task_id,
                temperature=config.reflection_temperature,
                sampled_logp=r.reflection.sampled_logp,
            )
            for r, A in zip(reflected, adv)
        ]
    if config.train_second:
        samples += _role_samples(SECOND, [r.second for r in retries], r2, config.scale_rewards)
    return samples


def _role_samples(role: str, attempts: list[Attempt], rewards: list[float], scale: str) -> list[TrainSample]:
    """One role's samples, advantages grouped per task (``batch`` scale: this role's reward std)."""
    adv = grouped_advantages(rewards, [a.task_id for a in attempts], scale=scale)
    return [
        TrainSample(
            role=role,
            prompt_ids=a.prompt_ids,
            completion_ids=a.completion_ids,
            completion_mask=a.completion_mask,
            advantage=A,
            task_id=a.task_id,
            sampled_logp=a.sampled_logp,  # scored at the run's temperature, as it was sampled
        )
        for a, A in zip(attempts, adv)
    ]


def erl_step(ctx: PhaseContext, tasks: list[Task], memory: ReflectionMemory | MemoryBank | None) -> StepRecord:
    """One iteration's rollouts and RL batch, as a :class:`StepRecord` (the trainer fills in step,
    memory and metrics); ``memory`` None when the run has none ("w/o memory", "w/o reflection", RLVR)."""
    c, clock = ctx.config, time.perf_counter
    by_id = tasks_by_id(tasks)  # refuses two different tasks sharing an id (one GRPO group)
    t0 = clock()
    first = attempt_first(ctx, tasks, c.num_generations)
    out = StepRecord(tasks=list(tasks), first_attempts=first, seconds={"first": clock() - t0})
    if not reflects(c.mode):
        out.samples = _role_samples(FIRST, first, [a.reward for a in first], c.scale_rewards)
        return out
    failed = gate(first, c.reward_threshold)
    if isinstance(memory, SlotMemory):
        memory.deal(first)  # every rollout takes the next slot, as the reference's workflow instances
    t1 = clock()
    reflections = reflect(ctx, failed, memory) if c.use_reflection else None
    t2 = clock()
    out.retries = attempt_second(ctx, failed, by_id, reflections)
    t3 = clock()
    if memory is not None:
        out.memory_writes = update_memory(memory, out.retries, c.reward_threshold)
    out.samples = assign_advantages(c, first, out.retries)
    if c.mode == "erl" and c.use_internalization:
        out.samples += internalize(
            out.retries, c.internalization_mode, c.internalization_coef, stop_ids(ctx), max_length=c.max_episode_length
        )
    out.seconds.update(reflect=t2 - t1, second=t3 - t2)
    return out


def stop_ids(ctx: PhaseContext) -> list[int]:
    """The ids that end a reply: the template's end-of-turn token first (it closes a cut target), then the sampler's."""
    eot = end_of_turn_id(ctx.tokenizer, ctx.config.chat_template_kwargs)
    ids = [i for i in [eot, *sampler_stop_ids(ctx.generator, ctx.tokenizer)] if i is not None]
    if not ids:
        raise ValueError(
            "the tokenizer has no eos token and its chat template no end-of-turn token: "
            "internalization targets need one to end with"
        )
    return list(dict.fromkeys(ids))
