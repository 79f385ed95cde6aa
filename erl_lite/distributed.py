"""Data-parallel ERL: the same training script on several processes (one per GPU).

Start the script with ``accelerate launch`` (or ``torchrun``); :class:`DataParallel` reads the
process group that launcher set up, through accelerate's ``PartialState``, and the trainer
asks it to do five things, each a no-op in a single process:

* **shard the step's tasks**: ``ERLTrainer._batch(step)`` picks the *global* batch
  (``num_tasks_per_step`` tasks, a function of the seed and the step only); process ``r`` plays
  the ``r``-th contiguous block of it (:meth:`DataParallel.shard`). All G rollouts of a task
  stay on one process, so the per-task GRPO advantages are the single-process ones;
* **keep memory identical on every process**: during the step each process reads the shared
  memory but only *records* its successful rulebooks (:class:`DeferredMemory`); after the
  step they are gathered and applied in rank order, then position order, which is the order
  one process would have written them in (its retries run task by task, and the blocks are
  contiguous). Reflections of a step never see that step's writes in one process either;
* **all-reduce the gradients** so the update is the single-process one at the same global
  batch: every process divides its loss by the *global* token or sequence count (summed
  over processes before the backward), mini-batches are cut by each row's *global* position,
  and the accumulated gradients are summed over processes before clipping;
* **reduce metrics to global values**: the step's records (attempts, retries, advantages)
  are gathered, so every mean is over all attempts of all processes, and the update's loss
  sums and token counts are summed;
* **write once**: history, trackers and checkpoints are written by rank 0 (the adapter,
  optimizer and memory are replicated, so its checkpoint is the whole state, and a run can
  resume on another number of processes).

Why not ``torch.nn.parallel.DistributedDataParallel`` (``accelerator.prepare(model)``): DDP
all-reduces inside every backward pass, so each process must run the same number of them;
here the gate decides how many rows each process trains, so the numbers differ. One explicit
all-reduce of the (small, LoRA) gradients after accumulation has no such constraint, and the
collectives are accelerate's (``gather_object``, ``reduce``) and torch.distributed's.

Departures from the paper: the reference scales out with Ray and vLLM workers; this keeps
``transformers.generate`` on every process. Sampling noise is not a function of the task, so
a run with N processes samples other completions than a run with one (the update for given
completions is the same, to float rounding); each process draws from its own stream.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from erl_lite.memory import ReflectionMemory
from erl_lite.records import ROLES, TrainSample

T = TypeVar("T")


class DeferredMemory(ReflectionMemory):
    """Reads ``shared``'s content but keeps its own writes aside until the step is merged.

    Which rulebooks qualify is decided by :meth:`ReflectionMemory.maybe_store` itself (this
    object is a scratch memory of the same kind); :attr:`pending` lists them in order.

    Example:
        >>> shared = ReflectionMemory()
        >>> view = DeferredMemory(shared)
        >>> view.maybe_store("rules", reward=1.0, threshold=1.0), view.maybe_store("bad", 0.0, 1.0)
        (True, False)
        >>> view.pending, shared.context() is None
        ([('rules', 1.0, 1.0)], True)
    """

    def __init__(self, shared: ReflectionMemory) -> None:
        super().__init__(shared.kind, shared.size, shared.top_k)
        self.shared = shared
        self.pending: list[tuple[str, float, float]] = []  # (rulebook, r2, τ) in write order

    def context(self) -> str | None:
        return self.shared.context()

    def maybe_store(self, rulebook: str, reward: float, threshold: float) -> bool:
        stored = super().maybe_store(rulebook, reward, threshold)
        if stored:
            self.pending.append((rulebook, reward, threshold))
        return stored


class DataParallel:
    """This process's place in the process group, and the collectives the trainer needs.

    ``DataParallel()`` is the single-process view (every method returns its input);
    :meth:`from_environment` joins the group ``accelerate launch``/``torchrun`` started.

    Example:
        >>> dp = DataParallel()
        >>> dp.world_size, dp.is_main, dp.shard(["a", "b", "c"])
        (1, True, ['a', 'b', 'c'])
        >>> dp.sum({"tokens": 3.0})
        {'tokens': 3.0}
    """

    def __init__(self, state: Any = None) -> None:
        self.state = state
        self.world_size = int(state.num_processes) if state is not None else 1
        self.rank = int(state.process_index) if state is not None else 0
        # The device this process should load the model on; None leaves the default.
        self.device = state.device if state is not None and self.world_size > 1 else None

    @classmethod
    def from_environment(cls) -> "DataParallel":
        """Join the launcher's process group (``WORLD_SIZE`` > 1), else the one-process view.

        accelerate's ``PartialState`` initialises the group (NCCL on GPUs, gloo on CPUs, or
        ``ACCELERATE_USE_CPU=yes``) and makes ``cuda:<local rank>`` this process's device.
        """
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not (
                torch.distributed.is_available() and torch.distributed.is_initialized()):
            return cls()
        from accelerate import PartialState
        from accelerate.utils import parse_flag_from_env

        cpu = parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available()
        state = PartialState(cpu=cpu)
        return cls(state) if state.num_processes > 1 else cls()

    @property
    def is_main(self) -> bool:
        """True on rank 0, the process that writes files."""
        return self.rank == 0

    def check_device(self, model: Any) -> None:
        """Raise when a process's model is not on that process's GPU (two processes on one
        GPU would fail later, inside NCCL, with a less helpful message)."""
        if self.world_size == 1 or self.device is None or self.device.type == "cpu":
            return
        where = next(model.parameters()).device
        if where != self.device:
            raise ValueError(f"process {self.rank} should hold the model on {self.device}, but it is on "
                             f"{where}: pass the model by name, or load it with "
                             "device=accelerate.PartialState().device")

    # --- tasks ------------------------------------------------------------------------------
    def shard(self, items: Sequence[T], allow_empty: bool = False) -> list[T]:
        """This process's contiguous block of ``items`` (block sizes differ by at most one).

        Raises ValueError when a process would get nothing and ``allow_empty`` is False (a
        training step needs at least one task per process).
        """
        n = len(items)
        if n < self.world_size and not allow_empty:
            raise ValueError(f"num_tasks_per_step={n} is smaller than the number of processes "
                             f"({self.world_size}): every process needs at least one task per step")
        base, extra = divmod(n, self.world_size)
        start = self.rank * base + min(self.rank, extra)
        return list(items[start:start + base + (self.rank < extra)])

    # --- collectives ------------------------------------------------------------------------
    def gather(self, items: list[T]) -> list[T]:
        """Every process's ``items``, concatenated in rank order (on every process)."""
        if self.world_size == 1:
            return list(items)
        return [x for part in self._gather_parts(items) for x in part]

    def _gather_parts(self, obj: T) -> list[T]:
        """``[obj of rank 0, obj of rank 1, ...]`` on every process."""
        from accelerate.utils import gather_object

        return gather_object([obj])  # accelerate flattens one level: one entry per rank

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Each value summed over processes (one all-reduce for the whole dict)."""
        return self._reduce(values, "sum")

    def max(self, values: dict[str, float]) -> dict[str, float]:
        """Each value's maximum over processes."""
        return self._reduce(values, "max")

    def _reduce(self, values: dict[str, float], how: str) -> dict[str, float]:
        if self.world_size == 1:
            return dict(values)
        from accelerate.utils import reduce

        keys = sorted(values)  # the same order on every process
        vec = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=self.state.device)
        out = reduce(vec, reduction=how).tolist()
        return dict(zip(keys, out))

    def total_count(self, local: float) -> float:
        """A loss normalizer (token or sequence count) over every process, never below 1.

        ``local`` is this process's raw count (0 when it has no loss token), so the sum is
        what :func:`erl_lite.losses.normalizer_for` gives for the whole global mini-batch.
        """
        return max(self.sum({"n": local})["n"], 1.0)

    def barrier(self) -> None:
        if self.world_size > 1:
            self.state.wait_for_everyone()

    # --- the update -------------------------------------------------------------------------
    def global_positions(self, samples: list[TrainSample]) -> list[int]:
        """Each local row's index in the batch one process would have built.

        One process lists rows role by role (first attempts of every task, then reflections,
        ...), tasks in order; the global batch is therefore, role by role, rank 0's rows of
        that role, then rank 1's, and so on. The update cuts mini-batches by these positions,
        so a process count never changes which rows share an optimizer step.
        """
        if self.world_size == 1:
            return list(range(len(samples)))  # any order: the batch is the global one
        order = [ROLES.index(s.role) for s in samples]
        if order != sorted(order):
            raise RuntimeError("the RL batch is not grouped by role in ROLES order; data-parallel "
                               "mini-batches rely on that order (erl_step builds it so)")
        local = [order.count(i) for i in range(len(ROLES))]
        counts = self._gather_parts(local)  # (world, roles)
        role_start = [sum(sum(c[j] for c in counts) for j in range(i)) for i in range(len(ROLES))]
        positions, seen = [], [0] * len(ROLES)
        for i in order:
            before = sum(c[i] for c in counts[:self.rank])  # rows of this role on earlier ranks
            positions.append(role_start[i] + before + seen[i])
            seen[i] += 1
        return positions

    def all_reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum ``p.grad`` over processes (one flat all-reduce per dtype).

        Every process divided its loss by the global normalizer, so the sum is the gradient
        of the global loss. A parameter without a gradient on every process keeps ``None``
        (an optimizer skips it, exactly as in one process).
        """
        if self.world_size == 1 or not params:
            return
        from accelerate.utils import reduce

        device = params[0].device
        has = reduce(torch.tensor([float(p.grad is not None) for p in params], device=device), "sum")
        by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
        for p, h in zip(params, has.tolist()):
            if h > 0:
                by_dtype.setdefault(p.dtype, []).append(p)
        for dtype, group in sorted(by_dtype.items(), key=lambda kv: str(kv[0])):
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                              for p in group])
            flat = reduce(flat, "sum")
            offset = 0
            for p in group:
                n = p.numel()
                p.grad = flat[offset:offset + n].view_as(p).clone()
                offset += n

    # --- the step's records -----------------------------------------------------------------
    def deferred(self, memory: ReflectionMemory | None) -> ReflectionMemory | None:
        """The memory to hand :func:`erl_lite.phases.erl_step`: ``memory`` itself in one
        process, a :class:`DeferredMemory` over it otherwise (None stays None)."""
        if memory is None or self.world_size == 1:
            return memory
        return DeferredMemory(memory)

    def merge(self, outcome: Any, view: ReflectionMemory | None) -> Any:
        """The global :class:`~erl_lite.phases.StepOutcome` of a step, and memory brought up
        to date on every process.

        Attempts and retries are concatenated in rank order (the single-process order); the
        RL rows come back without token ids (metrics read only role, task and advantage);
        phase timings are the slowest process's. The pending rulebooks of every process are
        applied to the shared memory in rank order, then position order.
        """
        if self.world_size == 1:
            return outcome
        light = [dataclasses.replace(s, prompt_ids=[], completion_ids=[], completion_mask=[])
                 for s in outcome.samples]
        pending = view.pending if isinstance(view, DeferredMemory) else []
        parts = self._gather_parts((outcome.first, outcome.retries, light, pending))
        writes = 0
        if isinstance(view, DeferredMemory):
            for _, _, _, rank_pending in parts:
                for rulebook, reward, threshold in rank_pending:
                    writes += view.shared.maybe_store(rulebook, reward, threshold)
        return dataclasses.replace(
            outcome,
            first=[a for p in parts for a in p[0]],
            retries=[r for p in parts for r in p[1]],
            samples=[s for p in parts for s in p[2]],
            memory_writes=writes,
            seconds=self.max(outcome.seconds),
        )

    # --- files and randomness ---------------------------------------------------------------
    def on_main(self, fn: Callable[[], T], default: T) -> T:
        """Run ``fn`` on rank 0 only; every process returns once it has finished.

        An exception on rank 0 is re-raised there and reported as a RuntimeError on the
        others, so no process waits forever for a rank that failed.
        """
        if self.world_size == 1:
            return fn()
        result, error = default, None
        if self.is_main:
            try:
                result = fn()
            except Exception as e:  # noqa: BLE001 - re-raised below, after the others know
                error = e
        messages = self._gather_parts(None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        if messages[0] is not None:
            raise RuntimeError(f"rank 0 failed: {messages[0]}")
        return result

    def decorrelate_rng(self) -> None:
        """Give each process its own sampling stream, derived from the shared seed state.

        Every process draws the same number, then seeds with it plus its rank: without this,
        the processes would sample with identical noise. Deterministic given the state, so a
        resumed run (rank 0's saved state) continues the same way on any process count.
        """
        if self.world_size == 1:
            return
        from transformers import set_seed

        base = int(torch.randint(0, 2**31 - 1 - self.world_size, (1,)).item())
        set_seed(base + self.rank)


#: The one-process view, used where no trainer set another.
SINGLE_PROCESS = DataParallel()
