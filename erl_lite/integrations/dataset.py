"""Single-turn tasks from a dataset and TRL-style reward functions, as an environment.

Each row is a one-reply task, scored with its phase's batch as TRL 1.16 scores; ERL's feedback comes from ``(score,
feedback)`` outputs or ``feedback_func``, else states the reward. Departures from TRL: no reward *models*.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from erl_lite.core.env import BatchScoredEpisode, Environment, Episode, StepOutput
from erl_lite.integrations.reward_calls import (RewardFunctionError, RewardLog, RunState, Scores, call_arguments,
                                                feedback_texts, reward_sources, weighted_rewards)
from erl_lite.records import Task, check_unique_task_ids

RewardFunc = Callable[..., list[Any]]
__all__ = ["RewardFunctionEnv", "RewardFunctionEpisode", "RewardFunctionError", "RunState",
           "rows_to_tasks", "split_prompt"]
Messages = list[dict[str, str]]

_ROLES = ("system", "user", "assistant")


def rows_to_tasks(rows: Iterable[dict[str, Any]], prefix: str = "row", where: str = "dataset") -> list[Task]:
    """Dataset rows (each with a ``prompt``) to tasks; other columns go to ``Task.data``.

    A row's ``id`` column names its task, else ``"<prefix>-<row>"``; duplicate ids are refused.

    Example:
        >>> rows_to_tasks([{"prompt": "2+2=?", "answer": "4"}])[0]
        Task(task_id='row-0', prompt='2+2=?', data={'answer': '4'})
    """
    tasks = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"dataset row {i} is not a mapping of columns: {row!r:.80}")
        if "prompt" not in row:
            raise ValueError(f"dataset row {i} has no 'prompt' column (columns: {sorted(row)})")
        split_prompt(row["prompt"], where=f"dataset row {i}")
        data = {k: v for k, v in row.items() if k != "prompt"}
        tasks.append(Task(task_id=str(row.get("id", f"{prefix}-{i}")), prompt=row["prompt"], data=data))
    return check_unique_task_ids(tasks, where)


def split_prompt(prompt: str | Messages, where: str = "prompt") -> tuple[str | None, str | Messages]:
    """(system message or None, what the model reads before replying) of a dataset prompt, whose turns end with a
    user message: one comes back as text, several as a list. Text parts are joined; others and lone surrogates raise."""
    if isinstance(prompt, str):
        return None, _checked_text(prompt, where)
    if not isinstance(prompt, list) or not prompt:
        raise ValueError(f"{where}: a prompt is a string or a non-empty list of messages; got {prompt!r:.80}")
    messages = []
    for j, m in enumerate(prompt):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"{where}: message {j} needs 'role' and 'content'; got {m!r:.80}")
        if m["role"] not in _ROLES:
            raise ValueError(f"{where}: message {j} has unknown role {m['role']!r}; expected one of {_ROLES}")
        if m["role"] == "system" and j > 0:
            raise ValueError(f"{where}: a system message may appear only as the first message (found at {j})")
        messages.append({**m, "content": _message_text(m["content"], f"{where}: message {j}")})
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    turns = messages[1:] if system is not None else messages
    if not turns or turns[-1]["role"] != "user":
        raise ValueError(f"{where}: a conversational prompt must end with a user message; "
                         f"got roles {[m['role'] for m in prompt]}")
    return system, turns[0]["content"] if len(turns) == 1 else turns


def _message_text(content: Any, where: str) -> str:
    """A message's content as one string: itself, or its text parts joined."""
    if isinstance(content, str):
        return _checked_text(content, where)
    if not isinstance(content, list):
        raise ValueError(f"{where}: content is a string or a list of content parts; got {content!r:.80}")
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in (None, "text"):
            raise ValueError(f"{where} has an {kind!r} content part (part {k}); erl_lite's policies read text "
                             "only: keep the text parts")
        if kind is None or not isinstance(part.get("text"), str):
            raise ValueError(f"{where}: content part {k} is not {{'type': 'text', 'text': <string>}}; "
                             f"got {part!r:.80}")
        texts.append(_checked_text(part["text"], f"{where}, content part {k}"))
    if not texts:
        raise ValueError(f"{where}: the content parts hold no text")
    return "".join(texts)


def _checked_text(text: str, where: str) -> str:
    """``text``, unless it holds a lone surrogate (the tokenizer would fail, naming nothing)."""
    bad = next((i for i, ch in enumerate(text) if "\ud800" <= ch <= "\udfff"), None)
    if bad is not None:
        raise ValueError(f"{where}: a lone surrogate {text[bad]!r} at character {bad} (text that is not valid "
                         "Unicode, e.g. a JSON '\\ud83d' escape without its pair); fix the data")
    return text


class RewardFunctionEnv(Environment):
    """Single-turn environment scored by TRL-style reward functions, a batch at a time.

    Example:
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

    def __init__(self, reward_funcs: RewardFunc | Sequence[RewardFunc], feedback_func: RewardFunc | None = None,
                 reward_weights: Sequence[float] | None = None, system_prompt: str = "") -> None:
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
        scores, feedbacks = self._score(tasks, [ep.completion for ep in todo], ids, log)
        for ep, reward, feedback, parts, extra in zip(todo, scores.rewards, feedbacks, scores.parts,
                                                      log.take_extra(tasks)):
            ep.set_score(reward, feedback, parts, extra)

    def score(self, tasks: Sequence[Task], completions: Sequence[str],
              completion_ids: Sequence[list[int]]) -> tuple[list[float], list[str]]:
        """Rewards and feedback texts of a batch of replies: one keyword call per function."""
        scores, feedbacks = self._score(tasks, completions, completion_ids, RewardLog())
        return scores.rewards, feedbacks

    def _score(self, tasks: Sequence[Task], completions: Sequence[str], completion_ids: Sequence[list[int]],
               log: RewardLog) -> tuple[Scores, list[str]]:
        kwargs = call_arguments(tasks, completions, completion_ids, self.trainer_state, log)
        scores = weighted_rewards(self.reward_funcs, self.reward_weights, kwargs, tasks)
        notes = scores.notes
        if self.feedback_func is not None:
            for row, text in zip(notes, feedback_texts(self.feedback_func, kwargs, tasks)):
                if text is not None:
                    row.append(text)
        return scores, [" ".join(t) if t else f"Reward: {r:g}." for t, r in zip(notes, scores.rewards)]


def _render(observation: str | Messages) -> str:
    if isinstance(observation, str):
        return observation
    return "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in observation)


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
        return f"Question:\n{_render(self.observation)}\n\nAnswer given:\n{answer}\n\nResult: {self.feedback()}"
