"""The environment protocol: how a task is played, one episode at a time, in text.

An :class:`Environment` is a family of tasks (seeded train/test splits) plus the rules of
the game; :meth:`Environment.new_episode` returns an :class:`Episode`, which plays one task
in the ``reset(task) -> observation`` / ``step(action_text) -> (observation, reward, done,
info)`` shape that gymnasium and TRL's environment classes use. The rollout engine drives a
batch of episodes in lock-step: it renders every live episode's conversation, generates all
actions with one ``generate`` call, then calls ``step`` on each.

What ERL needs beyond gymnasium's shape, and which each episode provides once it is done:

* ``feedback()`` — a short textual verdict ``f`` on the finished episode (the paper's f1/f2);
* ``trace()`` — every observation and action with a per-step comment, shown to the reflector;
* ``success`` — whether the episode solved its task (``reward >= 1`` by default; offline QA:
  exact match, which its rewards keep equivalent to ``reward >= 1``, so the gate and the
  memory rule, both written in rewards, agree with it).

Scoring: the paper's games score an episode inside its own ``step``. Environments whose
scorers work on a whole batch (TRL-style reward functions that normalise over the batch or
call a reward model) override :meth:`Environment.score_batch`, which the rollout engine calls
once per phase, after play and before any reward or feedback is read. An environment that
calls user code passes on :attr:`Environment.trainer_state`, which the trainer sets.

``reset`` may return a list of chat messages (user and assistant turns, ending with a user
turn) instead of one user message: a conversational dataset prompt with several turns.

Departures from the paper: none in the protocol itself; the paper's environments are
implemented on top of it in sibling modules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

from erl_lite.records import Task

#: What ``Episode.step`` returns: (next observation or None when done, reward, done, info).
StepOutput = tuple[str | None, float, bool, dict[str, Any]]


class Episode(ABC):
    """One play of one task. Create through :meth:`Environment.new_episode`.

    Rewards are *terminal*: ``step`` returns the episode's reward on the step that ends it
    and 0.0 before; ``reward`` holds the final value afterwards. Episodes of an environment
    that scores in batches (:meth:`Environment.score_batch`) return 0.0 from ``step`` with
    ``info["pending_score"] = True``; their ``reward`` is final once the batch is scored.
    """

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
    """An episode whose reward comes from its environment's :meth:`Environment.score_batch`.

    ``step`` only records what the model did; the environment scores every finished episode
    of a phase in one call and stores each verdict with :meth:`set_score`. Reading ``reward``
    or ``success`` before that scores this episode on its own, so an episode used by hand
    still works. Subclasses say when there is something to score (:meth:`_ready_to_score`)
    and set ``env`` to an environment with a ``success_threshold``.
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
        """The episodes of this class that await a score, with their completion ids (aligned).

        What every ``score_batch`` of a batch-scored environment starts from.
        """
        ids = list(completion_ids) if completion_ids is not None else [[] for _ in episodes]
        todo = [(ep, i) for ep, i in zip(episodes, ids)
                if isinstance(ep, cls) and ep._ready_to_score() and not ep.scored]
        return [ep for ep, _ in todo], [i for _, i in todo]

class Environment(ABC):
    """A family of tasks and the rules to play them.

    Attributes:
        name: short identifier used in logs (``"frozenlake"``).
        system_prompt: the *initial* system prompt shown to first attempts. For the paper's
            games it states the output format but not the rules.
        action_reminder: a one-line reminder of the action format, appended to a reflection
            rulebook when it becomes the second attempt's system prompt.
        max_turns: the number of model turns an episode may take (8 actions for the games,
            5 for multi-hop QA, 1 for single-turn tasks).
        trainer_state: set by the trainer to a live view of the run (``global_step``,
            ``max_steps``, ``epoch``), handed to user reward functions as TRL does; None
            outside a trainer.
        reward_log: set by the trainer to the :class:`~erl_lite.integrations.reward_calls.RewardLog`
            that TRL's ``log_metric``/``log_extra`` keywords write to; None outside a trainer.
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
        """Score a phase's episodes together (default: nothing; episodes scored in ``step``).

        Called by the rollout engine once per phase, with every episode of the phase in
        order (finished or not) and, for each, the token ids the model sampled (model tokens
        only, stop tokens included). Implementations set each episode's reward and feedback.
        """

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
