"""The process-group Protocol of the update (many processes: ``integrations.distributed.DataParallel``) and one's."""

from __future__ import annotations

import contextlib
from typing import Protocol, runtime_checkable

import torch

from erl_lite.records import TrainSample


@runtime_checkable
class Reducer(Protocol):
    """The collectives of one update; every method is the identity in one process."""

    world_size: int

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Each value summed over processes."""

    def total_count(self, local: float) -> float:
        """A loss normalizer over every process, never below 1."""

    def global_positions(self, samples: list[TrainSample]) -> list[int]:
        """Each local row's index in the batch one process would have built."""

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module`` ready for a gradient pass that all processes share."""

    def no_sync(self, wrapped: torch.nn.Module) -> contextlib.AbstractContextManager:
        """A context in which a backward accumulates without all-reducing."""


class OneProcess:
    """The :class:`Reducer` of a run in one process."""

    world_size = 1

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        return dict(values)

    def total_count(self, local: float) -> float:
        return max(float(local), 1.0)

    def global_positions(self, samples: list[TrainSample]) -> list[int]:
        return list(range(len(samples)))  # any order: the batch is the global one

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def no_sync(self, wrapped: torch.nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


#: The one-process reducer, used where no trainer passed another.
SINGLE_PROCESS = OneProcess()
