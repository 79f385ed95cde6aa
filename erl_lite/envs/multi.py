"""Several environments in one run, each task routed to its own by name.

A task's id starts with ``"<name>/"`` (what routing reads), its data holds the name under ``environment``
(TRL 1.16's column); a row without a ``prompt`` names a member's task by ``index``. The member decides
prompts, turn limit and scoring. Departures from the paper: one environment per run there; here one
memory per environment, the weights shared (TRL's pattern)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from erl_lite.core.env import Environment, Episode, StepOutput
from erl_lite.records import Task, TaskPool, check_unique_task_ids, task_count

ENV_COLUMN = "environment"  # TRL 1.16's
_DEFAULT_SPLIT = {"train": "train", "eval": "test"}


class MultiEnvironment(Environment):
    """Routes each task to its named environment (``envs``: a dict, or a list named by ``name``; no ``/`` in names).

    Example:
        >>> from erl_lite.envs import FrozenLake, Sokoban
        >>> multi = MultiEnvironment([FrozenLake.small(), Sokoban.small()])
        >>> [t.task_id for t in multi.train_tasks(3)]
        ['frozenlake/train/0', 'sokoban/train/0', 'frozenlake/train/1']
        >>> multi.tasks_from_rows([{"environment": "sokoban", "index": 5}])[0].task_id
        'sokoban/train/5'
    """

    name = "multi"

    def __init__(self, envs: Mapping[str, Environment] | Sequence[Environment]) -> None:
        named = dict(envs) if isinstance(envs, Mapping) else {e.name: e for e in envs}
        if not isinstance(envs, Mapping) and len(named) != len(envs):
            raise ValueError(f"two environments share a name ({[e.name for e in envs]}); pass a dict of names")
        if not named:
            raise ValueError("MultiEnvironment needs at least one environment")
        for key, env in named.items():
            if not isinstance(key, str) or not key or "/" in key:
                raise ValueError(f"environment name {key!r} must be a non-empty string without '/'")
            if not isinstance(env, Environment):
                raise TypeError(f"environment {key!r} is a {type(env).__name__}, not an erl_lite Environment")
            if isinstance(env, MultiEnvironment):
                raise TypeError(f"environment {key!r} is itself a MultiEnvironment; list its members instead")
        self.envs: dict[str, Environment] = named
        self.max_turns = max(e.max_turns for e in named.values())

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        # Set once by the trainer; every member's reward functions must see them.
        if name in ("trainer_state", "reward_log"):
            for env in self.envs.values():
                setattr(env, name, value)

    @property
    def names(self) -> list[str]:
        return list(self.envs)

    def env_name(self, task_id: str) -> str:
        """The member a task belongs to, from its id's ``"<name>/"`` prefix."""
        name = task_id.split("/", 1)[0]
        if name not in self.envs or "/" not in task_id:
            raise ValueError(
                f"task {task_id!r} is not routed to any of the environments {self.names}: "
                "build tasks with MultiEnvironment.tag(), tasks_from_rows() or train_tasks()"
            )
        return name

    def member(self, task: Task) -> Environment:
        return self.envs[self.env_name(task.task_id)]

    def tag(self, name: str, task: Task) -> Task:
        """``task`` as a task of member ``name``: id prefixed with ``"<name>/"``, ``environment`` set."""
        if name not in self.envs:
            raise ValueError(f"unknown environment {name!r}; expected one of {self.names}")
        task_id = task.task_id if task.task_id.startswith(f"{name}/") else f"{name}/{task.task_id}"
        return Task(task_id, task.prompt, {**task.data, ENV_COLUMN: name})

    def tasks_from_rows(self, rows: Iterable[Any], split: str = "train") -> list[Task]:
        """Tasks of dataset rows (or Tasks) routed by their ``environment`` column; one id twice is refused."""
        from erl_lite.envs.rows import rows_to_tasks

        tasks = []
        for i, row in enumerate(rows):
            data = row.data if isinstance(row, Task) else row
            if not isinstance(data, dict):
                raise ValueError(f"dataset row {i} is not a mapping of columns: {row!r:.80}")
            name = data.get(ENV_COLUMN)
            if name not in self.envs:
                raise ValueError(
                    f"dataset row {i} has {ENV_COLUMN}={name!r}; every row needs an "
                    f"{ENV_COLUMN!r} column naming one of {self.names}"
                )
            if isinstance(row, Task):
                tasks.append(self.tag(name, row))
            elif "prompt" in row:  # counted from its own position, so an error names this row
                tasks.append(self.tag(name, rows_to_tasks([row], prefix=split, start=i)[0]))
            else:
                tasks.append(self.tag(name, self._split_task(name, row, i, split)))
        return check_unique_task_ids(tasks, f"{split}_dataset")

    def _split_task(self, name: str, row: dict[str, Any], i: int, split: str) -> Task:
        """Task ``row["index"]`` of member ``name``'s ``row["split"]`` split, extra columns added."""
        which = row.get("split", _DEFAULT_SPLIT.get(split, split))
        index = row.get("index")
        if which not in ("train", "test") or not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError(
                f"dataset row {i} ({name}) has no 'prompt', so it must name a task of the "
                f"environment's split: an integer 'index' >= 0 and optionally 'split' "
                f"('train' or 'test'); got index={index!r}, split={which!r}"
            )
        env = self.envs[name]
        # the train pool draws only pool[index]
        pool = env.train_pool() if which == "train" else env.test_tasks(index + 1)
        if index >= len(pool):
            raise ValueError(f"dataset row {i}: {name}'s {which} split has {len(pool)} tasks, no index {index}")
        task = pool[index]
        extra = {k: v for k, v in row.items() if k not in (ENV_COLUMN, "index", "split")}
        return Task(task.task_id, task.prompt, {**task.data, **extra})

    def new_episode(self) -> "RoutedEpisode":
        return RoutedEpisode(self)

    def initial_system_prompt(self, task: Task) -> str:
        return self.member(task).initial_system_prompt(task)

    def action_reminder_for(self, task: Task) -> str:
        return self.member(task).action_reminder_for(task)

    def use_tokenizer(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        for env in self.envs.values():
            env.use_tokenizer(tokenizer, template_kwargs)

    def template_tools(self, task: Task) -> list[dict[str, Any]] | None:
        return self.member(task).template_tools(task)  # each task sees its own environment's tools only

    def score_batch(self, episodes: Sequence[Episode], completion_ids: Sequence[list[int]] | None = None) -> None:
        """Each member scores its own episodes, in order."""
        ids = list(completion_ids) if completion_ids is not None else [[] for _ in episodes]
        groups: dict[str, tuple[list[Episode], list[list[int]]]] = {}
        for ep, i in zip(episodes, ids):
            if isinstance(ep, RoutedEpisode) and ep.inner is not None:
                group = groups.setdefault(ep.env_name, ([], []))
                group[0].append(ep.inner)
                group[1].append(i)
        for name, (inner, inner_ids) in groups.items():
            self.envs[name].score_batch(inner, inner_ids)

    def train_tasks(self, n: int | None = None) -> list[Task]:
        """The members' training splits, interleaved, ``n`` in all."""
        return self._interleaved("train", n)

    def test_tasks(self, n: int | None = None) -> list[Task]:
        """The members' test splits, interleaved, ``n`` in all."""
        return self._interleaved("test", n)

    def train_pool(self) -> Sequence[Task]:
        """The members' training splits, interleaved as :meth:`train_tasks` orders them, each task drawn when read."""
        pools = [(name, self._member_split(name, "train", lambda env: env.train_pool())) for name in self.envs]
        order = _interleave([len(pool) for _, pool in pools])  # (member, index) of each position

        def draw(i: int) -> Task:
            name, pool = pools[order[i][0]]
            return self.tag(name, pool[order[i][1]])

        return TaskPool(draw, len(order))

    def _interleaved(self, split: str, n: int | None) -> list[Task]:
        n = task_count(n)
        per_env = None if n is None else -(-n // len(self.envs))  # ceil: enough of each for n in all
        fetch = (lambda env: env.train_tasks(per_env)) if split == "train" else (lambda env: env.test_tasks(per_env))
        pools = [(name, self._member_split(name, split, fetch)) for name in self.envs]
        out = [self.tag(pools[k][0], pools[k][1][j]) for k, j in _interleave([len(pool) for _, pool in pools])]
        return out if n is None else out[:n]

    def _member_split(self, name: str, split: str, fetch: Any) -> Sequence[Task]:
        """``fetch(member)``, naming the member when it has no such split."""
        env = self.envs[name]
        try:
            return fetch(env)
        except NotImplementedError:
            raise NotImplementedError(
                f"environment {name!r} ({type(env).__name__}) has no {split} split: give "
                f"dataset rows with an {ENV_COLUMN!r} column instead"
            ) from None


def _interleave(sizes: list[int]) -> list[tuple[int, int]]:
    """``(member, index)`` at each position of splits of ``sizes`` taken in turn, the longer ones running on."""
    return [(k, j) for j in range(max(sizes, default=0)) for k, n in enumerate(sizes) if j < n]


class RoutedEpisode(Episode):
    """An episode of a :class:`MultiEnvironment`: plays the member episode its task names."""

    def __init__(self, multi: MultiEnvironment) -> None:
        self.multi = multi
        self.inner: Episode | None = None
        self.env_name = ""
        self.turns, self.limit, self._ended = 0, 0, False

    def reset(self, task: Task) -> str | list[dict[str, str]]:
        self.env_name = self.multi.env_name(task.task_id)
        env = self.multi.envs[self.env_name]
        self.inner, self.turns, self.limit, self._ended = env.new_episode(), 0, env.max_turns, False
        return self.inner.reset(task)

    def step(self, action: str) -> StepOutput:
        if self.inner is None:
            raise RuntimeError("step() called before reset()")
        observation, reward, done, info = self.inner.step(action)
        self.turns += 1
        if not done and self.turns >= self.limit:  # the member's own turn limit: it would stop here alone
            self._ended = True
            return None, reward, True, {**info, "turn_limit": True}
        return observation, reward, done, info

    @property
    def done(self) -> bool:  # type: ignore[override]
        return self._ended or (self.inner is not None and self.inner.done)

    @property
    def reward(self) -> float:  # type: ignore[override]
        return self.inner.reward if self.inner is not None else 0.0

    def feedback(self) -> str:
        return self.inner.feedback() if self.inner is not None else ""

    def trace(self) -> str:
        return self.inner.trace() if self.inner is not None else ""
