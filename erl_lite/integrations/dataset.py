"""Single-turn tasks from a dataset and TRL-style reward functions, as an environment.

Each row is a one-reply task, scored with its phase's batch as TRL 1.16 scores; ERL's feedback comes from ``(score,
feedback)`` outputs or ``feedback_func``, else states the reward. Departures from TRL: no reward *models*.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from erl_lite.core.env import BatchScoredEpisode, Environment, Episode, StepOutput
from erl_lite.envs.rows import Messages, split_prompt
from erl_lite.integrations.reward_calls import (
    RewardLog,
    call_arguments,
    feedback_texts,
    reward_sources,
    weighted_rewards,
)
from erl_lite.records import Task

RewardFunc = Callable[..., list[Any]]


class RewardFunctionEnv(Environment):
    """Single-turn environment scored by TRL-style reward functions, a batch at a time.

    Example:
        >>> from erl_lite.envs.rows import rows_to_tasks
        >>> def exact(completions, answer, **kw):
        ...     return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]
        >>> ep = RewardFunctionEnv(exact).new_episode()
        >>> ep.reset(rows_to_tasks([{"prompt": "2+2=?", "answer": "4"}])[0])
        '2+2=?'
        >>> _ = ep.step("4")  # scored lazily here; in rollouts, once per batch
        >>> ep.reward, ep.success, ep.feedback()
        (1.0, True, 'Reward: 1.')
    """

    name = "dataset"
    max_turns = 1

    def __init__(
        self,
        reward_funcs: RewardFunc | Sequence[RewardFunc],
        feedback_func: RewardFunc | None = None,
        reward_weights: Sequence[float] | None = None,
        system_prompt: str = "",
    ) -> None:
        self.reward_funcs, self.reward_weights = reward_sources(reward_funcs, reward_weights)
        if not self.reward_funcs:
            raise ValueError("reward_funcs is empty: pass a callable or a list of callables")
        if feedback_func is not None and not callable(feedback_func):
            raise TypeError(f"feedback_func must be callable; got {feedback_func!r:.60}")
        self.feedback_func = feedback_func
        self.system_prompt = system_prompt
        self.action_reminder = ""

    def initial_system_prompt(self, task: Task) -> str:
        system, _ = split_prompt(task.prompt)
        return system if system is not None else self.system_prompt

    def new_episode(self) -> "RewardFunctionEpisode":
        return RewardFunctionEpisode(self)

    def score_batch(self, episodes: Sequence[Episode], completion_ids: Sequence[list[int]] | None = None) -> None:
        """Score every answered, unscored episode with one call per function."""
        todo, ids = RewardFunctionEpisode.pending(episodes, completion_ids)
        if not todo:
            return
        tasks = [ep.task for ep in todo]
        log = self.reward_log if self.reward_log is not None else RewardLog()
        kwargs = call_arguments(tasks, [ep.completion for ep in todo], ids, self.trainer_state, log)
        scores = weighted_rewards(self.reward_funcs, self.reward_weights, kwargs, tasks)
        if self.feedback_func is not None:
            for row, text in zip(scores.notes, feedback_texts(self.feedback_func, kwargs, tasks)):
                if text is not None:
                    row.append(text)
        for ep, reward, notes, parts, extra in zip(
            todo, scores.rewards, scores.notes, scores.parts, log.take_extra(tasks)
        ):
            ep.set_score(reward, " ".join(notes) if notes else f"Reward: {reward:g}.", parts, extra)


class RewardFunctionEpisode(BatchScoredEpisode):
    """One reply to one dataset prompt, scored with the phase's batch (or alone when read first)."""

    def __init__(self, env: RewardFunctionEnv) -> None:
        self.env = env
        self.task: Task | None = None
        self.observation: str | Messages = ""
        self.completion: str | None = None
        self.scored, self._reward, self._verdict = False, 0.0, "No answer was given."

    def reset(self, task: Task) -> str | Messages:
        if task.prompt is None:
            raise ValueError(f"task {task.task_id} has no prompt")
        self.task, self.done, self.completion, self.scored = task, False, None, False
        self._reward, self._verdict = 0.0, "No answer was given."
        _, self.observation = split_prompt(task.prompt, where=f"task {task.task_id!r}")
        return self.observation

    def step(self, action: str) -> StepOutput:
        if self.task is None or self.done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        self.completion, self.done = action, True
        return None, 0.0, True, {"pending_score": True}

    def _ready_to_score(self) -> bool:
        return self.completion is not None

    def feedback(self) -> str:
        self._ensure_scored()
        return self._verdict

    def trace(self) -> str:
        answer = self.completion if self.completion is not None else "(no answer: out of tokens)"
        question = self.observation
        if not isinstance(question, str):  # a conversation: one "Role: text" line per message
            question = "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in question)
        return f"Question:\n{question}\n\nAnswer given:\n{answer}\n\nResult: {self.feedback()}"
