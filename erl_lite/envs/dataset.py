"""Single-turn tasks from a dataset and TRL-style reward functions, as an environment.

This is how ``ERLTrainer(train_dataset=..., reward_funcs=..., feedback_func=...)`` plugs into
the same rollout path as the multi-turn games: each dataset row becomes a
:class:`~erl_lite.records.Task`, and an episode is one reply scored by the reward functions.

Reward functions have TRL's signature, ``reward(prompts, completions, **columns) ->
list[float]``, where ``completions`` are strings for string prompts and
``[{"role": "assistant", "content": ...}]`` lists for conversational prompts, and every other
dataset column arrives as a keyword list. A reward function may instead return
``(score, feedback)`` pairs; otherwise ``feedback_func`` (same arguments, returns
``list[str]``) supplies ERL's textual feedback, and without either the feedback just states
the reward. Several reward functions are summed with ``reward_weights`` (default 1 each).

Departures from the paper: none; the paper's tasks are multi-turn, this adapter serves
single-turn datasets.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from erl_lite.chat import completion_text
from erl_lite.envs.base import Environment, Episode, StepOutput
from erl_lite.records import Task

RewardFunc = Callable[..., list[Any]]


def rows_to_tasks(rows: Iterable[dict[str, Any]], prefix: str = "row") -> list[Task]:
    """Dataset rows (each with a ``prompt``) to tasks; other columns go to ``Task.data``."""
    tasks = []
    for i, row in enumerate(rows):
        if "prompt" not in row:
            raise ValueError(f"dataset row {i} has no 'prompt' column (columns: {sorted(row)})")
        data = {k: v for k, v in row.items() if k != "prompt"}
        tasks.append(Task(task_id=str(row.get("id", f"{prefix}-{i}")), prompt=row["prompt"], data=data))
    return tasks


def split_prompt(prompt: str | list[dict[str, str]]) -> tuple[str | None, str]:
    """(system message or None, user message) of a dataset prompt."""
    if isinstance(prompt, str):
        return None, prompt
    system = [m["content"] for m in prompt if m["role"] == "system"]
    users = [m["content"] for m in prompt if m["role"] == "user"]
    others = [m for m in prompt if m["role"] not in ("system", "user")]
    if len(system) > 1 or len(users) != 1 or others:
        raise ValueError(
            "conversational prompts must hold one optional system message and exactly one user "
            f"message; got roles {[m['role'] for m in prompt]}"
        )
    return (system[0] if system else None), users[0]


class RewardFunctionEnv(Environment):
    """Single-turn environment scored by TRL-style reward functions.

    Example:
        >>> def exact(prompts, completions, answer, **kw):
        ...     return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]
        >>> env = RewardFunctionEnv(exact)
        >>> task = rows_to_tasks([{"prompt": "2+2=?", "answer": "4"}])[0]
        >>> ep = env.new_episode(); ep.reset(task)
        '2+2=?'
        >>> ep.step("4")[1:3], ep.success, ep.feedback()
        ((1.0, True), True, 'Reward: 1.')
    """

    name = "dataset"
    max_turns = 1

    def __init__(
        self,
        reward_funcs: RewardFunc | Sequence[RewardFunc],
        feedback_func: RewardFunc | None = None,
        reward_weights: Sequence[float] | None = None,
        system_prompt: str = "",
        success_threshold: float = 1.0,
    ) -> None:
        funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        if not funcs or not all(callable(f) for f in funcs):
            raise ValueError("reward_funcs must be a callable or a non-empty list of callables")
        if reward_weights is not None and len(reward_weights) != len(funcs):
            raise ValueError(f"reward_weights has {len(reward_weights)} values for {len(funcs)} reward_funcs")
        self.reward_funcs = funcs
        self.reward_weights = list(reward_weights) if reward_weights is not None else [1.0] * len(funcs)
        self.feedback_func = feedback_func
        self.system_prompt = system_prompt
        self.success_threshold = success_threshold
        self.action_reminder = ""

    def initial_system_prompt(self, task: Task) -> str:
        system, _ = split_prompt(task.prompt)
        return system if system is not None else self.system_prompt

    def new_episode(self) -> "RewardFunctionEpisode":
        return RewardFunctionEpisode(self)

    def score(self, task: Task, completion: str) -> tuple[float, str]:
        """Reward and feedback of one completion (reward functions called TRL-style)."""
        as_messages = not isinstance(task.prompt, str)
        kwargs = {k: [v] for k, v in task.data.items()}
        args = ([task.prompt], [completion_text(completion, as_messages)])
        total, feedbacks = 0.0, []
        for func, weight in zip(self.reward_funcs, self.reward_weights):
            out = func(*args, **kwargs)
            if len(out) != 1:
                raise ValueError(f"reward function {getattr(func, '__name__', func)} returned {len(out)} values for 1 completion")
            value = out[0]
            if isinstance(value, tuple):
                value, text = value
                feedbacks.append(str(text))
            total += weight * (0.0 if value is None else float(value))
        if self.feedback_func is not None:
            feedbacks.append(str(self.feedback_func(*args, **kwargs)[0]))
        return total, " ".join(feedbacks) if feedbacks else f"Reward: {total:g}."


class RewardFunctionEpisode(Episode):
    """One reply to one dataset prompt."""

    def __init__(self, env: RewardFunctionEnv) -> None:
        self.env = env
        self.task: Task | None = None
        self.observation = ""
        self.completion: str | None = None
        self._feedback = "No answer was given."

    def reset(self, task: Task) -> str:
        if task.prompt is None:
            raise ValueError(f"task {task.task_id} has no prompt")
        self.task = task
        self.reward, self.done, self.completion = 0.0, False, None
        _, self.observation = split_prompt(task.prompt)
        return self.observation

    def step(self, action: str) -> StepOutput:
        if self.task is None or self.done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        self.completion = action
        self.reward, self._feedback = self.env.score(self.task, action)
        self.done = True
        return None, self.reward, True, {}

    @property
    def success(self) -> bool:
        return self.reward >= self.env.success_threshold

    def feedback(self) -> str:
        return self._feedback

    def trace(self) -> str:
        answer = self.completion if self.completion is not None else "(no answer: out of tokens)"
        return f"Question:\n{self.observation}\n\nAnswer given:\n{answer}\n\nResult: {self._feedback}"
