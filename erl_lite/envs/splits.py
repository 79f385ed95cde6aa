"""Seeded, lazy train/test splits: task ``i``'s seed comes from ``(base seed, split, i)``, not from how many
are asked."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from erl_lite.config.checks import check_whole
from erl_lite.records import Task, TaskPool, task_count


def derive_seed(base: int, split: str, index: int, attempt: int = 0) -> int:
    """A 32-bit task seed from (base seed, split, index, attempt); stable across versions."""
    code = {"train": 1, "test": 2}[split]
    return int(np.random.SeedSequence([base, code, index, attempt]).generate_state(1)[0])


class SeededSplits:
    """Train/test tasks generated lazily from seeds; no training task repeats a test task.
    ``make``: seed -> task data (deterministic); ``key``: task data -> a string naming the layout."""

    def __init__(
        self,
        make: Callable[[int], dict],
        key: Callable[[dict], str],
        prefix: str,
        seed: int = 0,
        n_train: int = 10_000,
        n_test: int = 100,
    ) -> None:
        for name, value in (("seed", seed), ("n_train", n_train), ("n_test", n_test)):
            check_whole(prefix, name, value)
        self.make, self.key, self.prefix = make, key, prefix
        self.seed, self.sizes = seed, {"train": n_train, "test": n_test}
        self._pools = {
            split: TaskPool(lambda i, s=split: self._generate(s, i), size) for split, size in self.sizes.items()
        }
        self._test_keys: set[str] | None = None

    def tasks(self, split: str, n: int | None = None) -> list[Task]:
        return self._pools[split][: task_count(n)]

    def pool(self, split: str) -> TaskPool:
        """The whole of ``split``, each task drawn when first read (what a training run indexes into)."""
        return self._pools[split]

    def _generate(self, split: str, index: int) -> Task:
        if split == "train" and self._test_keys is None:
            self._test_keys = {self.key(t.data) for t in self.tasks("test")}
        for attempt in range(1000):
            seed = derive_seed(self.seed, split, index, attempt)
            data = self.make(seed)
            # Small maps repeat by chance: re-draw a training task equal to a test task.
            if split == "test" or self.key(data) not in self._test_keys:
                data.update(seed=seed, split=split, index=index)
                return Task(task_id=f"{self.prefix}/{split}/{index}", data=data)
        raise RuntimeError("could not draw a training task distinct from the test split")
