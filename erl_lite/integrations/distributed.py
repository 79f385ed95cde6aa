"""Data-parallel ERL under ``accelerate launch`` or ``torchrun``: one process per GPU, torch DDP.

Whole tasks are sharded (GRPO groups stay together), memory writes applied in rank order, the update is the
one-process one of the global batch (to rounding); FSDP, DeepSpeed, mixed precision, compile: :func:`check_launch`.
Departures from the paper: Ray and vLLM workers there; here each process runs ``generate`` on its own stream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from erl_lite.core.memory import MemoryBank, ReflectionMemory
from erl_lite.records import ROLES, TrainSample

T = TypeVar("T")


class DeferredMemory(ReflectionMemory):
    """Reads ``shared`` but keeps its own writes (:attr:`pending`, in order) until the step is merged."""

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

    def held(self) -> dict[str | None, list[tuple[str, float, float]]]:
        """The pending writes by memory (None: the one shared memory)."""
        return {None: self.pending}

    def target(self, name: str | None) -> ReflectionMemory:
        """The shared memory a held write named ``name`` goes to."""
        return self.shared


class DeferredBank(MemoryBank):
    """A :class:`~erl_lite.core.memory.MemoryBank` seen through one :class:`DeferredMemory` per environment."""

    def __init__(self, shared: MemoryBank) -> None:
        # Not MemoryBank.__init__: the views wrap the bank's own memories instead of new ones.
        self.shared, self.kind, self.env_of = shared, shared.kind, shared.env_of
        self.memories = {name: DeferredMemory(m) for name, m in shared.memories.items()}

    def held(self) -> dict[str | None, list[tuple[str, float, float]]]:
        return {name: view.pending for name, view in self.memories.items()}

    def target(self, name: str | None) -> ReflectionMemory:
        return self.shared.memories[name]


#: The variables launchers set to the number of processes (torchrun, mpirun, MPICH, MVAPICH).
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_world_size() -> int:
    """The number of processes the launcher started (1 when none says), as PartialState reads it."""
    from accelerate.utils import get_int_from_env

    return max(get_int_from_env(list(WORLD_SIZE_VARIABLES), 1), 1)


def check_launch() -> None:
    """Refuse an ``accelerate launch`` configuration that asks for more than uncompiled DDP in the model's dtype."""
    from accelerate.utils import parse_flag_from_env  # as accelerate reads its own flags

    from erl_lite.config.trl_fields import DTYPE_HINT

    engines = {
        "ACCELERATE_USE_FSDP": "FSDP",
        "ACCELERATE_USE_DEEPSPEED": "DeepSpeed",
        "ACCELERATE_USE_MEGATRON_LM": "Megatron-LM",
    }
    for variable, engine in engines.items():
        if parse_flag_from_env(variable):
            raise ValueError(
                f"the accelerate configuration asks for {engine} ({variable}=true); erl_lite trains "
                "with DDP only (one full copy of the trainable adapter per process): set "
                "distributed_type: MULTI_GPU in the accelerate config, or launch with --multi_gpu"
            )
    precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no").strip().lower()
    if precision not in ("", "no"):
        raise ValueError(
            f"the accelerate configuration sets mixed_precision={precision!r} "
            f"(ACCELERATE_MIXED_PRECISION); {DTYPE_HINT}. Launch with --mixed_precision no"
        )
    backend = os.environ.get("ACCELERATE_DYNAMO_BACKEND", "no").strip()
    if backend.lower() not in ("", "no"):
        raise ValueError(
            f"the accelerate configuration sets dynamo_backend={backend!r} (ACCELERATE_DYNAMO_BACKEND); "
            "erl_lite does not compile the policy: launch with --dynamo_backend no"
        )
    # `accelerate launch --cpu` starts ONE process whatever --num_processes says (unless
    # --mpirun_hostfile), yet sets MASTER_ADDR/MASTER_PORT: this one would train alone.
    if (
        os.environ.get("ACCELERATE_USE_CPU") == "True"
        and "MASTER_ADDR" in os.environ
        and "MASTER_PORT" in os.environ
        and launched_world_size() == 1
    ):
        raise RuntimeError(
            "`accelerate launch --cpu --num_processes N` (N > 1) started one process only: accelerate's --cpu "
            "launcher runs several CPU processes only with --mpirun_hostfile. Start N CPU processes with "
            "`torchrun --nproc_per_node N script.py` (add ACCELERATE_USE_CPU=yes on a machine with a GPU), or "
            "drop --num_processes to train in one process"
        )


class DataParallel:
    """This process's place in the process group (``DataParallel()``: one process) and the trainer's collectives."""

    def __init__(self, state: Any = None) -> None:
        self.state = state
        self.world_size = int(state.num_processes) if state is not None else 1
        self.rank = int(state.process_index) if state is not None else 0
        self.device = state.device if state is not None and self.world_size > 1 else None
        self.accelerator: Any = None  # built by the first wrap()

    @classmethod
    def from_environment(cls) -> "DataParallel":
        """Join the launcher's process group (NCCL on GPUs, else gloo), else the one-process view."""
        check_launch()
        if launched_world_size() <= 1 and not (torch.distributed.is_available() and torch.distributed.is_initialized()):
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
        """Raise when the model is not on this process's GPU (NCCL would fail later, less clearly)."""
        if self.world_size == 1 or self.device is None or self.device.type == "cpu":
            return
        where = next(model.parameters()).device
        if where != self.device:
            raise ValueError(
                f"process {self.rank} should hold the model on {self.device}, but it is on "
                f"{where}: pass the model by name, or load it with "
                "device=accelerate.PartialState().device"
            )

    def shard(self, items: Sequence[T], allow_empty: bool = False) -> list[T]:
        """This process's contiguous block of ``items`` (sizes differ by at most one)."""
        n = len(items)
        if n < self.world_size and not allow_empty:
            raise ValueError(
                f"num_tasks_per_step={n} is smaller than the number of processes "
                f"({self.world_size}): every process needs at least one task per step"
            )
        base, extra = divmod(n, self.world_size)
        start = self.rank * base + min(self.rank, extra)
        return list(items[start : start + base + (self.rank < extra)])

    def gather(self, items: list[T]) -> list[T]:
        if self.world_size == 1:
            return list(items)
        return [x for part in self._gather_parts(items) for x in part]

    def _gather_parts(self, obj: T) -> list[T]:
        """``[obj of rank 0, obj of rank 1, ...]`` on every process."""
        from accelerate.utils import gather_object

        return gather_object([obj])  # accelerate flattens one level: one entry per rank

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        return self._reduce(values, "sum")

    def max(self, values: dict[str, float]) -> dict[str, float]:
        return self._reduce(values, "max")

    def _reduce(self, values: dict[str, float], how: str) -> dict[str, float]:
        if self.world_size == 1:
            return dict(values)
        from accelerate.utils import reduce

        keys = sorted(values)  # the same order on every process
        vec = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=self.state.device)
        return dict(zip(keys, reduce(vec, reduction=how).tolist()))

    def total_count(self, local: float) -> float:
        return max(self.sum({"n": local})["n"], 1.0)

    def barrier(self) -> None:
        if self.world_size > 1:
            self.state.wait_for_everyone()

    def global_positions(self, samples: list[TrainSample]) -> list[int]:
        """Each local row's index in the one-process batch (by role, then rank): mini-batches ignore the world size."""
        if self.world_size == 1:
            return list(range(len(samples)))  # any order: the batch is the global one
        order = [ROLES.index(s.role) for s in samples]
        if order != sorted(order):
            raise RuntimeError(
                "the RL batch is not grouped by role in ROLES order; data-parallel "
                "mini-batches rely on that order (erl_step builds it so)"
            )
        local = [order.count(i) for i in range(len(ROLES))]
        counts = self._gather_parts(local)  # (world, roles)
        positions = []
        for i, n in enumerate(local):  # role i's rows follow every rank's earlier roles and earlier ranks' role i
            start = sum(sum(c[:i]) for c in counts) + sum(c[i] for c in counts[: self.rank])
            positions += range(start, start + n)
        return positions

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module`` under torch DDP (``Accelerator.prepare_model``), rank 0's parameters copied to all."""
        if self.world_size == 1:
            return module
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs

        if self.accelerator is None:
            # Processes run different numbers of forwards (the gate); buffers (rotary) are equal everywhere.
            ddp = DistributedDataParallelKwargs(broadcast_buffers=False, find_unused_parameters=False)
            self.accelerator = Accelerator(cpu=self.device.type == "cpu", mixed_precision="no", kwargs_handlers=[ddp])
        # The model is already on this process's device (check_device); a 4-bit one must not be moved.
        return self.accelerator.prepare_model(module, device_placement=False)

    def no_sync(self, wrapped: torch.nn.Module) -> contextlib.AbstractContextManager:
        if self.accelerator is None:
            return contextlib.nullcontext()
        return self.accelerator.no_sync(wrapped)

    def deferred(self, memory: ReflectionMemory | MemoryBank | None) -> ReflectionMemory | MemoryBank | None:
        """``memory`` in one process, else a :class:`DeferredMemory` (:class:`DeferredBank`) over it."""
        if memory is None or self.world_size == 1:
            return memory
        return DeferredBank(memory) if isinstance(memory, MemoryBank) else DeferredMemory(memory)

    def merge(self, outcome: Any, view: ReflectionMemory | None) -> Any:
        """The step's global StepRecord, memory updated everywhere: rank order, no token ids, the slowest timings."""
        if self.world_size == 1:
            return outcome
        light = [dataclasses.replace(s, prompt_ids=[], completion_ids=[], completion_mask=[]) for s in outcome.samples]
        held = view.held() if isinstance(view, DeferredMemory | DeferredBank) else {}
        parts = self._gather_parts((outcome.first_attempts, outcome.retries, light, held))
        writes = 0
        for _, _, _, rank_held in parts:  # rank order, then each memory's write order
            for name, pending in rank_held.items():
                for rulebook, reward, threshold in pending:
                    writes += view.target(name).maybe_store(rulebook, reward, threshold)
        return dataclasses.replace(
            outcome,
            first_attempts=[a for p in parts for a in p[0]],
            retries=[r for p in parts for r in p[1]],
            samples=[s for p in parts for s in p[2]],
            memory_writes=writes,
            seconds=self.max(outcome.seconds),
        )

    def on_main(self, fn: Callable[[], T], default: T) -> T:
        """Run ``fn`` on rank 0 only; all return once it has finished (a failure: RuntimeError on the others)."""
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
        """Give each process its own sampling stream: a shared draw plus the rank (a resumed run continues alike)."""
        if self.world_size == 1:
            return
        from transformers import set_seed

        base = int(torch.randint(0, 2**31 - 1 - self.world_size, (1,)).item())
        set_seed(base + self.rank)
