"""The environment protocol: tasks played in text, in gymnasium's (and TRL's) ``reset`` / ``step`` shape, plus what
ERL needs once an episode is done: ``feedback()`` (the paper's f) and ``trace()`` (shown to the reflector).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

from erl_lite.config import ERLConfig
from erl_lite.records import Task, succeeded

#: What ``Episode.step`` returns: (next observation or None when done, reward, done, info).
StepOutput = tuple[str | None, float, bool, dict[str, Any]]


class Episode(ABC):
    """One play of one task; rewards are terminal (``step`` returns 0.0 until the last step)."""

    reward: float = 0.0
    done: bool = False
    reward_threshold: float = ERLConfig.reward_threshold  # τ: a run sets its own on each episode it plays

    @abstractmethod
    def reset(self, task: Task) -> str | list[dict[str, str]]:
        """Start on ``task``; the first observation: a user message, or messages ending with a user turn."""

    @abstractmethod
    def step(self, action: str) -> StepOutput:
        """Apply the model's raw reply ``action`` (the parser lives in the episode)."""

    @abstractmethod
    def feedback(self) -> str:
        """Textual feedback on the finished episode (what happened, and the reward)."""

    @abstractmethod
    def trace(self) -> str:
        """Every observation and action of the episode, each step with a comment."""

    @property
    def success(self) -> bool:
        """``reward ≥ τ`` (:func:`~erl_lite.records.succeeded`); an override must agree with it in a run."""
        return succeeded(self.reward, self.reward_threshold)


class BatchScoredEpisode(Episode):
    """An episode scored by its environment's :meth:`Environment.score_batch` (reading ``reward`` before that scores
    it alone). Subclasses define :meth:`_ready_to_score` and set ``env``."""

    env: Any  # the environment that scores it
    scored: bool = False
    _reward: float = 0.0
    _verdict: str = ""
    reward_parts: dict[str, float | None] | None = None  # each reward function's unweighted value
    logged_extra: dict[str, Any] | None = None  # the row's ``log_extra`` columns

    def set_score(
        self,
        reward: float,
        verdict: str,
        parts: dict[str, float | None] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Store the batch scorer's reward, verdict, and (from reward functions) parts and extra columns."""
        self._reward, self._verdict, self.scored = reward, verdict, True
        self.reward_parts, self.logged_extra = parts, extra

    def _ready_to_score(self) -> bool:
        raise NotImplementedError

    def _ensure_scored(self) -> None:
        if self._ready_to_score() and not self.scored:
            self.env.score_batch([self])

    @property
    def reward(self) -> float:  # type: ignore[override]
        self._ensure_scored()
        return self._reward

    @classmethod
    def pending(
        cls, episodes: Sequence[Episode], completion_ids: Sequence[list[int]] | None
    ) -> tuple[list["BatchScoredEpisode"], list[list[int]]]:
        """The episodes of this class that await a score, with their completion ids (aligned)."""
        ids = list(completion_ids) if completion_ids is not None else [[] for _ in episodes]
        todo = [
            (ep, i) for ep, i in zip(episodes, ids) if isinstance(ep, cls) and ep._ready_to_score() and not ep.scored
        ]
        return [ep for ep, _ in todo], [i for _, i in todo]


class Environment(ABC):
    """A family of tasks (seeded train/test splits) and the rules to play them."""

    name: str = "environment"  # short identifier used in logs
    system_prompt: str = ""  # the *initial* system prompt of first attempts (output format, not rules)
    action_reminder: str = ""  # one line on the action format, appended to a second attempt's rulebook
    max_turns: int = 1  # model turns an episode may take
    trainer_state: Any = None  # TRL's trainer_state for reward functions (set by the trainer)
    reward_log: Any = None  # TRL's log_metric/log_extra for reward functions (set by the trainer)

    @abstractmethod
    def new_episode(self) -> Episode:
        """A fresh, un-reset episode."""

    def score_batch(self, episodes: Sequence[Episode], completion_ids: Sequence[list[int]] | None = None) -> None:
        """Score a phase's episodes together, once per phase (default: nothing; scored in ``step``)."""

    def initial_system_prompt(self, task: Task) -> str:
        """The system prompt a first attempt at ``task`` sees (default: ``system_prompt``)."""
        return self.system_prompt

    def action_reminder_for(self, task: Task) -> str:
        """The action reminder added to a rulebook for ``task`` (default: ``action_reminder``)."""
        return self.action_reminder

    def use_tokenizer(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        """Called by the trainer with the tokenizer that renders this environment's episodes (default: no-op)."""

    def template_tools(self, task: Task) -> list[dict[str, Any]] | None:
        """JSON schemas the chat template renders as ``tools=`` for ``task`` (default: None, no tools)."""
        return None

    def train_tasks(self, n: int | None = None) -> list[Task]:
        """The first ``n`` tasks of the fixed training split (all when ``n`` is None)."""
        raise NotImplementedError(f"{type(self).__name__} has no training split")

    def test_tasks(self, n: int | None = None) -> list[Task]:
        """The first ``n`` tasks of the fixed test split, disjoint from the training split."""
        raise NotImplementedError(f"{type(self).__name__} has no test split")

    def train_pool(self) -> Sequence[Task]:
        """The whole training split, read by index, that a run samples its batches from (default: ``train_tasks()``;
        seeded environments return a :class:`~erl_lite.records.TaskPool`, which draws only the tasks a run reads)."""
        return self.train_tasks()
