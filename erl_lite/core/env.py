"""The environment protocol: how a task is played, one episode at a time, in text.

An :class:`Environment` is a family of tasks (seeded train/test splits) and the rules of the
game; :meth:`Environment.new_episode` gives an :class:`Episode`, played in gymnasium's (and
TRL's) ``reset(task) -> observation`` / ``step(action) -> (observation, reward, done, info)``
shape. ERL also needs, once an episode is done, ``feedback()`` (the paper's f), ``trace()``
(shown to the reflector) and ``success``. Environments whose scorers work on a whole batch
(TRL-style reward functions) override :meth:`Environment.score_batch`, called once per phase.

Departures from the paper: none in the protocol; the paper's games are built on it in envs/.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

from erl_lite.records import Task

#: What ``Episode.step`` returns: (next observation or None when done, reward, done, info).
StepOutput = tuple[str | None, float, bool, dict[str, Any]]


class Episode(ABC):
    """One play of one task (from :meth:`Environment.new_episode`). Rewards are terminal:
    ``step`` returns 0.0 until the step that ends the episode; ``reward`` holds it afterwards."""

    reward: float = 0.0
    done: bool = False

    @abstractmethod
    def reset(self, task: Task) -> str | list[dict[str, str]]:
        """Start the episode on ``task`` and return the first observation: a user message, or
        the conversation before the first reply (messages ending with a user turn)."""

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
        """Whether the episode counts as solved for the gate (default: reward >= 1)."""
        return self.reward >= 1.0



class BatchScoredEpisode(Episode):
    """An episode whose reward comes from its environment's :meth:`Environment.score_batch`
    (stored with :meth:`set_score`); reading ``reward`` before that scores it alone.
    Subclasses define :meth:`_ready_to_score` and set ``env`` (with a ``success_threshold``).
    """

    env: Any
    scored: bool = False
    _reward: float = 0.0
    _verdict: str = ""

    #: Per reward function, its unweighted value (None: not applicable), for ``rewards/<name>/*``.
    reward_parts: dict[str, float | None] | None = None
    #: The row's values of the columns reward functions logged with ``log_extra``.
    logged_extra: dict[str, Any] | None = None

    def set_score(self, reward: float, verdict: str, parts: dict[str, float | None] | None = None,
                  extra: dict[str, Any] | None = None) -> None:
        """Store the batch scorer's reward and textual verdict on this episode (and, from
        reward functions, each one's value and the ``log_extra`` columns of this row)."""
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

    @property
    def success(self) -> bool:
        return self.reward >= self.env.success_threshold

    @classmethod
    def pending(cls, episodes: Sequence[Episode], completion_ids: Sequence[list[int]] | None
                ) -> tuple[list["BatchScoredEpisode"], list[list[int]]]:
        """The episodes of this class that await a score, with their completion ids (aligned)."""
        ids = list(completion_ids) if completion_ids is not None else [[] for _ in episodes]
        todo = [(ep, i) for ep, i in zip(episodes, ids)
                if isinstance(ep, cls) and ep._ready_to_score() and not ep.scored]
        return [ep for ep, _ in todo], [i for _, i in todo]

class Environment(ABC):
    """A family of tasks and the rules to play them.

    Attributes:
        name: short identifier used in logs (``"frozenlake"``).
        system_prompt: the *initial* system prompt of first attempts (the paper's games state
            the output format, not the rules).
        action_reminder: a one-line reminder of the action format, appended to a rulebook
            when it becomes the second attempt's system prompt.
        max_turns: model turns an episode may take.
        trainer_state, reward_log: set by the trainer for user reward functions (TRL's
            ``trainer_state`` and ``log_metric``/``log_extra``); None outside one.
    """

    name: str = "environment"
    system_prompt: str = ""
    action_reminder: str = ""
    max_turns: int = 1
    trainer_state: Any = None
    reward_log: Any = None

    @abstractmethod
    def new_episode(self) -> Episode:
        """A fresh, un-reset episode."""

    def score_batch(self, episodes: Sequence[Episode], completion_ids: Sequence[list[int]] | None = None) -> None:
        """Score a phase's episodes (all, finished or not, with the ids each sampled) together
        and set their rewards and feedback (default: nothing; episodes scored in ``step``)."""

    def initial_system_prompt(self, task: Task) -> str:
        """The system prompt a first attempt at ``task`` sees (default: ``system_prompt``)."""
        return self.system_prompt

    def action_reminder_for(self, task: Task) -> str:
        """The action reminder added to a rulebook for ``task`` (default: ``action_reminder``;
        an environment of several members answers per task)."""
        return self.action_reminder

    def use_tokenizer(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        """Called by the trainer with the tokenizer that renders this environment's episodes
        (default: nothing to adapt; an environment with tools may hand them to the template)."""

    def template_tools(self, task: Task) -> list[dict[str, Any]] | None:
        """JSON schemas the chat template renders as ``tools=`` for ``task`` (default: None, no tools)."""
        return None

    def train_tasks(self, n: int | None = None) -> list[Task]:
        """The first ``n`` tasks of the fixed training split (all when ``n`` is None)."""
        raise NotImplementedError(f"{type(self).__name__} has no training split")

    def test_tasks(self, n: int | None = None) -> list[Task]:
        """The first ``n`` tasks of the fixed test split, disjoint from the training split."""
        raise NotImplementedError(f"{type(self).__name__} has no test split")
