"""Rollouts: a batch of episodes played in lock-step, one batched ``generate`` call per turn. An episode is one token
sequence, sampled ids alternating with glue that carries no loss; it stops, ``truncated``, when no full reply fits.

Departures from the paper: the reference re-tokenizes conversations; here training sees the sampled ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from erl_lite.config import ERLConfig
from erl_lite.core.env import Environment, Episode
from erl_lite.engine.chat import encode, encode_messages, glue_text
from erl_lite.engine.generation import Generator, SamplingParams, generate_named, reply_was_cut, sampler_stop_ids
from erl_lite.records import Attempt, Task, succeeded


@dataclass
class _Live:
    """One episode while it is being played."""

    episode: Episode
    task_id: str
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    sampled_logp: list[float] | None = field(default_factory=list)  # None once a turn's sampler reports none
    turns: int = 0
    done: bool = False
    truncated: bool = False  # the episode ran out of its token budget
    cut_replies: int = 0  # replies the per-turn limit stopped (no stop token)
    template_kwargs: dict[str, Any] | None = None  # the run's, plus tools= for an environment with tools

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


def opening_messages(system_prompt: str, observation: str | list[dict[str, str]]) -> list[dict[str, str]]:
    """The conversation an episode starts from: the system prompt (if any), then ``observation``."""
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    if isinstance(observation, str):
        return msgs + [{"role": "user", "content": observation}]
    return msgs + [dict(m) for m in observation]


def template_kwargs_for(env: Environment, task: Task, template_kwargs: dict[str, Any] | None) -> dict[str, Any] | None:
    """The chat-template keywords of ``task``'s episode: the run's, plus its environment's ``tools=``."""
    tools = env.template_tools(task)
    return {**(template_kwargs or {}), "tools": tools} if tools else template_kwargs


def run_episodes(
    generator: Generator,
    tokenizer: Any,
    env: Environment,
    tasks: list[Task],
    system_prompts: list[str],
    params: SamplingParams,
    *,
    max_episode_length: int,
    role: str,
    indices: list[int],
    threshold: float = ERLConfig.reward_threshold,
    template_kwargs: dict[str, Any] | None = None,
    on_finished: Callable[[int], Any] | None = None,
) -> list[Attempt]:
    """Play ``tasks[i]`` under ``system_prompts[i]`` (parallel to ``indices``); one :class:`Attempt` each,
    a success at ``threshold`` (τ); ``on_finished`` (a bar's ``update``) gets the episodes finished at each turn."""
    if not (len(tasks) == len(system_prompts) == len(indices)):
        raise ValueError("tasks, system_prompts and indices must have the same length")
    stop_texts = {t: tokenizer.decode([t]) for t in sampler_stop_ids(generator, tokenizer)}
    lives = [
        _start(env, t, s, tokenizer, template_kwargs_for(env, t, template_kwargs))
        for t, s in zip(tasks, system_prompts)
    ]
    for lv in lives:
        lv.episode.reward_threshold = threshold
    reported = 0  # episodes already handed to on_finished
    for _ in range(env.max_turns):
        live = [lv for lv in lives if not lv.done]
        for lv in live:  # no room left for a full reply: the episode stops here
            lv.done = lv.truncated = lv.length + params.max_new_tokens > max_episode_length
        ready = [lv for lv in live if not lv.done]
        if not ready:
            break
        _play_turn(generator, tokenizer, env, ready, params, role, stop_texts, max_episode_length)
        if on_finished is not None:
            done = sum(lv.done for lv in lives)
            on_finished(done - reported)
            reported = done
    if on_finished is not None and len(lives) > reported:  # out of turns or budget: finished too
        on_finished(len(lives) - reported)
    # One scoring call for the whole phase (TRL-style batch reward functions).
    env.score_batch(
        [lv.episode for lv in lives], [[t for t, m in zip(lv.completion_ids, lv.completion_mask) if m] for lv in lives]
    )
    return [
        _finish(lv, task, sp, role, idx, threshold) for lv, task, sp, idx in zip(lives, tasks, system_prompts, indices)
    ]


def _play_turn(
    generator: Generator,
    tokenizer: Any,
    env: Environment,
    ready: list[_Live],
    params: SamplingParams,
    role: str,
    stop_texts: dict[int, str],
    max_episode_length: int,
) -> None:
    """One batched generate call for the ``ready`` episodes, and one environment step each."""
    prompts = [lv.prompt_ids + lv.completion_ids for lv in ready]
    names = [f"{role} attempt of task {lv.task_id!r}" for lv in ready]
    outs = generate_named(generator, prompts, params, names)
    reported = getattr(generator, "last_logprobs", None) or [None] * len(outs)
    limit = params.max_new_tokens
    for lv, out, logp in zip(ready, outs, reported):
        if lv.sampled_logp is not None:
            lv.sampled_logp = None if logp is None else lv.sampled_logp + list(logp[:limit])
        # A sampler may return more than it was asked for; the budget still holds.
        lv.cut_replies += len(out) > limit or reply_was_cut(out, limit, stop_texts)
        _advance(lv, out[:limit], tokenizer, stop_texts, env.max_turns, max_episode_length - limit)


def _start(
    env: Environment, task: Task, system_prompt: str, tokenizer: Any, template_kwargs: dict[str, Any] | None
) -> _Live:
    episode = env.new_episode()
    observation = episode.reset(task)
    if not isinstance(observation, (str, list)):
        raise TypeError(
            f"{type(episode).__name__}.reset() returned {observation!r} for task {task.task_id}; "
            "it must be the first user message (a string) or chat messages"
        )
    messages = opening_messages(system_prompt, observation)
    return _Live(
        episode=episode,
        task_id=task.task_id,
        messages=messages,
        prompt_ids=encode_messages(messages, tokenizer, template_kwargs),
        template_kwargs=template_kwargs,
    )


def _advance(
    lv: _Live, out: list[int], tokenizer: Any, stop_texts: dict[int, str], max_turns: int, budget: int
) -> None:
    """Record one reply, step the environment, append the glue if it goes on; ``budget``: most tokens before a reply."""
    text = tokenizer.decode(out, skip_special_tokens=True)
    lv.completion_ids += out
    lv.completion_mask += [1] * len(out)
    lv.messages.append({"role": "assistant", "content": text})
    lv.turns += 1
    observation, done = _checked_step(lv.episode, text)
    if done or observation is None or lv.turns >= max_turns:
        lv.done = True
        return
    ended_with = stop_texts.get(out[-1]) if out else None
    glue = encode(glue_text(lv.messages, observation, tokenizer, ended_with, lv.template_kwargs), tokenizer)
    lv.messages.append({"role": "user", "content": observation})
    if lv.length + len(glue) > budget:  # no room left for another full reply
        lv.done = lv.truncated = True
        return
    lv.completion_ids += glue
    lv.completion_mask += [0] * len(glue)
    if lv.sampled_logp is not None:
        lv.sampled_logp += [math.nan] * len(glue)


def _checked_step(episode: Episode, text: str) -> tuple[Any, bool]:
    """``(observation, done)`` of ``episode.step(text)``, its shape checked."""
    out = episode.step(text)
    name = type(episode).__name__
    if not isinstance(out, tuple) or len(out) != 4:
        raise TypeError(f"{name}.step() must return (observation, reward, done, info), got {out!r}")
    observation, reward, done, _info = out
    if not isinstance(done, bool):
        raise TypeError(f"{name}.step() returned done={done!r}; it must be a bool")
    _check_reward(name + ".step()", reward)
    if not done and not isinstance(observation, (str, list)):
        raise TypeError(
            f"{name}.step() returned observation={observation!r} for an ongoing episode; "
            "it must be the next user message (a string)"
        )
    return observation, done


def _check_reward(where: str, reward: Any) -> None:
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise TypeError(f"{where} gave reward={reward!r}; rewards must be finite numbers")


def _finish(lv: _Live, task: Task, system_prompt: str, role: str, index: int, threshold: float) -> Attempt:
    ep, name = lv.episode, type(lv.episode).__name__
    _check_reward(f"{name} (task {task.task_id})", ep.reward)
    won = succeeded(ep.reward, threshold)
    if type(ep).success is not Episode.success and bool(ep.success) != won:  # its own verdict, against τ's
        raise ValueError(
            f"{name}.success is {ep.success} for task {task.task_id!r}'s reward {ep.reward:g}, but "
            f"reward_threshold={threshold:g} says {won}: the gate, memory and success/* read τ alone; "
            "set ERLConfig.reward_threshold to a success's reward, or drop the success property"
        )
    feedback, trace = ep.feedback(), ep.trace()
    for what, value in (("feedback", feedback), ("trace", trace)):
        if not isinstance(value, str):
            raise TypeError(f"{name}.{what}() returned {value!r} for task {task.task_id}; it must be a string")
    if lv.truncated and not ep.done:  # stopped from outside: say so, not "still running"
        note = (
            f"Stopped: the attempt ran out of its token budget after {lv.turns} turn(s) "
            f"without finishing. Reward {ep.reward:g}."
        )
        trace = trace.replace(feedback, note) if feedback in trace else f"{trace}\n{note}"
        feedback = note
    return Attempt(
        task_id=task.task_id,
        role=role,
        index=index,
        system_prompt=system_prompt,
        messages=lv.messages,
        prompt_ids=lv.prompt_ids,
        completion_ids=lv.completion_ids,
        completion_mask=lv.completion_mask,
        reward=float(ep.reward),
        success=won,
        feedback=feedback,
        trace=trace,
        num_turns=lv.turns,
        truncated=lv.truncated or lv.cut_replies > 0,
        rewards=dict(getattr(ep, "reward_parts", None) or {}),
        extra=dict(getattr(ep, "logged_extra", None) or {}),
        sampled_logp=lv.sampled_logp,
    )
