"""Data-parallel ERL: the same training script on several processes (one per GPU).

Start the script with ``accelerate launch`` (or ``torchrun``); :class:`DataParallel` reads the
process group that launcher set up, through accelerate's ``PartialState``, and the trainer
asks it to do five things, each a no-op in a single process:

* **shard the step's tasks**: ``ERLTrainer._batch(step)`` picks the *global* batch
  (``num_tasks_per_step`` tasks, a function of the seed and the step only); process ``r`` plays
  the ``r``-th contiguous block of it (:meth:`DataParallel.shard`). All G rollouts of a task
  stay on one process, so the per-task GRPO advantages are the single-process ones;
* **keep memory identical on every process**: during the step each process reads the shared
  memory (one per environment for a :class:`~erl_lite.core.memory.MemoryBank`) but only *records*
  its successful rulebooks (:class:`DeferredMemory`, :class:`DeferredBank`); after the step
  they are gathered and applied in rank order, then position order, memory by memory, which is
  the order one process would have written them in (its retries run task by task, and the
  blocks are contiguous). Reflections of a step never see that step's writes in one process either;
* **train one model** with torch DDP, through ``accelerate.Accelerator.prepare_model``
  (:meth:`DataParallel.wrap`): wrapping broadcasts rank 0's weights (a model object built
  before seeding has other LoRA weights on every rank), and DDP all-reduces the gradients.
  The update stays the single-process one at the same global batch: every process divides its
  loss by the *global* token or sequence count, mini-batches are cut by each row's *global*
  position, and the accumulated gradients are the global batch's before clipping (see
  :class:`erl_lite.core.update.PolicyUpdater` for how the gate's uneven row counts meet DDP);
* **reduce metrics to global values**: the step's records (attempts, retries, advantages)
  are gathered, so every mean is over all attempts of all processes, and the update's loss
  sums and token counts are summed;
* **write once**: history, trackers and checkpoints are written by rank 0 (the adapter,
  optimizer and memory are replicated, so its checkpoint is the whole state, and a run can
  resume on another number of processes).

Launch configurations: DDP on GPUs (one process each) and on CPUs (gloo; ``torchrun`` or
``mpirun``) are supported. FSDP, DeepSpeed, Megatron-LM, accelerate's mixed precision and
torch.compile are refused with a message (:func:`check_launch`), and so is
``accelerate launch --cpu --num_processes N``, which starts one process.

Departures from the paper: the reference scales out with Ray and vLLM workers; this keeps
``transformers.generate`` on every process. Sampling noise is not a function of the task, so
a run with N processes samples other completions than a run with one (the update for given
completions is the same, to float rounding); each process draws from its own stream.
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

    def held(self) -> dict[str | None, list[tuple[str, float, float]]]:
        """The pending writes by memory (None: the one shared memory), what :meth:`DataParallel.merge` gathers."""
        return {None: self.pending}

    def target(self, name: str | None) -> ReflectionMemory:
        """The shared memory a held write named ``name`` goes to."""
        return self.shared


class DeferredBank(MemoryBank):
    """A :class:`~erl_lite.core.memory.MemoryBank` seen through one :class:`DeferredMemory` per
    environment: ``for_task`` reads that environment's shared memory and holds its writes.

    Example:
        >>> bank = MemoryBank(["a", "b"], env_of=lambda task_id: task_id.split("/")[0])
        >>> view = DeferredBank(bank)
        >>> view.for_task("b/0").maybe_store("rules", reward=1.0, threshold=1.0)
        True
        >>> view.held(), bank.entries
        ({'a': [], 'b': [('rules', 1.0, 1.0)]}, [])
    """

    def __init__(self, shared: MemoryBank) -> None:
        # Not MemoryBank.__init__: the views wrap the bank's own memories instead of new ones.
        self.shared, self.kind, self.env_of = shared, shared.kind, shared.env_of
        self.memories = {name: DeferredMemory(m) for name, m in shared.memories.items()}

    def held(self) -> dict[str | None, list[tuple[str, float, float]]]:
        """The pending writes by environment, each list in write order."""
        return {name: view.pending for name, view in self.memories.items()}

    def target(self, name: str | None) -> ReflectionMemory:
        """The shared memory of environment ``name``."""
        return self.shared.memories[name]


#: The variables a launcher sets to the number of processes (torchrun, mpirun, MPICH, MVAPICH),
#: those accelerate's PartialState reads.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_world_size() -> int:
    """The number of processes the launcher started (1 when none says), as PartialState reads it."""
    from accelerate.utils import get_int_from_env

    return max(get_int_from_env(list(WORLD_SIZE_VARIABLES), 1), 1)


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "y", "on")


def check_launch() -> None:
    """Refuse an ``accelerate launch`` configuration erl_lite would run otherwise than asked.

    ``accelerate launch`` passes its configuration to the script in ``ACCELERATE_*`` variables.
    erl_lite trains with DDP only (see the module docstring), keeps the model's own dtype and
    compiles nothing, so a config that asks for more fails here instead of being ignored.
    """
    from erl_lite.trl_fields import DTYPE_HINT  # the one message on how erl_lite chooses the dtype

    engines = {"ACCELERATE_USE_FSDP": "FSDP", "ACCELERATE_USE_DEEPSPEED": "DeepSpeed",
               "ACCELERATE_USE_MEGATRON_LM": "Megatron-LM"}
    for variable, engine in engines.items():
        if _flag(variable):
            raise ValueError(f"the accelerate configuration asks for {engine} ({variable}=true); erl_lite trains "
                             "with DDP only (one full copy of the trainable adapter per process): set "
                             "distributed_type: MULTI_GPU in the accelerate config, or launch with --multi_gpu")
    precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no").strip().lower()
    if precision not in ("", "no"):
        raise ValueError(f"the accelerate configuration sets mixed_precision={precision!r} "
                         f"(ACCELERATE_MIXED_PRECISION); {DTYPE_HINT}. Launch with --mixed_precision no")
    backend = os.environ.get("ACCELERATE_DYNAMO_BACKEND", "no").strip()
    if backend.lower() not in ("", "no"):
        raise ValueError(f"the accelerate configuration sets dynamo_backend={backend!r} (ACCELERATE_DYNAMO_BACKEND); "
                         "erl_lite does not compile the policy: launch with --dynamo_backend no")
    # accelerate's simple launcher (what `accelerate launch --cpu` runs, see accelerate/commands/launch.py)
    # starts ONE process whatever --num_processes says, unless --mpirun_hostfile is given; it sets
    # ACCELERATE_USE_CPU to "True" and, for --num_processes > 1, MASTER_ADDR/MASTER_PORT. No launcher
    # then says how many processes there are, so this one would train alone.
    if (os.environ.get("ACCELERATE_USE_CPU") == "True" and "MASTER_ADDR" in os.environ
            and "MASTER_PORT" in os.environ and launched_world_size() == 1):
        raise RuntimeError(
            "`accelerate launch --cpu --num_processes N` (N > 1) started one process only: accelerate's --cpu "
            "launcher runs several CPU processes only with --mpirun_hostfile. Start N CPU processes with "
            "`torchrun --nproc_per_node N script.py` (add ACCELERATE_USE_CPU=yes on a machine with a GPU), or "
            "drop --num_processes to train in one process")


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
        self.accelerator: Any = None  # built by wrap(), the first time a module is wrapped

    @classmethod
    def from_environment(cls) -> "DataParallel":
        """Join the launcher's process group (``WORLD_SIZE`` > 1), else the one-process view.

        accelerate's ``PartialState`` initialises the group (NCCL on GPUs, gloo on CPUs, or
        ``ACCELERATE_USE_CPU=yes``) and makes ``cuda:<local rank>`` this process's device.
        """
        check_launch()
        if launched_world_size() <= 1 and not (
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
        what :func:`erl_lite.core.losses.normalizer_for` gives for the whole global mini-batch.
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

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module`` under torch DDP, through ``accelerate.Accelerator.prepare_model`` (itself in
        one process). Wrapping copies rank 0's parameters to every process.

        ``broadcast_buffers=False``: DDP would otherwise broadcast buffers at every forward, a
        collective, while processes run different numbers of forwards (the gate decides their
        rows); the buffers here (rotary frequencies) are the same everywhere.
        ``find_unused_parameters=False``: every trainable parameter (LoRA, or all) takes part in
        each forward, and frozen ones (a 4-bit base) are not DDP's; a parameter that does not
        makes DDP raise at the next step, naming the setting. Gradient checkpointing is
        non-reentrant (erl_lite.models), which DDP supports without ``static_graph``.
        """
        if self.world_size == 1:
            return module
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs

        if self.accelerator is None:
            ddp = DistributedDataParallelKwargs(broadcast_buffers=False, find_unused_parameters=False)
            self.accelerator = Accelerator(cpu=self.device.type == "cpu", mixed_precision="no", kwargs_handlers=[ddp])
        # The model is already on this process's device (check_device); a 4-bit one must not be moved.
        return self.accelerator.prepare_model(module, device_placement=False)

    def no_sync(self, wrapped: torch.nn.Module) -> contextlib.AbstractContextManager:
        """A context in which a backward through ``wrapped`` accumulates without all-reducing."""
        if self.accelerator is None:
            return contextlib.nullcontext()
        return self.accelerator.no_sync(wrapped)

    # --- the step's records -----------------------------------------------------------------
    def deferred(self, memory: ReflectionMemory | MemoryBank | None) -> ReflectionMemory | MemoryBank | None:
        """The memory to hand :func:`erl_lite.core.phases.erl_step`: ``memory`` itself in one
        process, a :class:`DeferredMemory` (:class:`DeferredBank` for a bank) over it otherwise
        (None stays None)."""
        if memory is None or self.world_size == 1:
            return memory
        return DeferredBank(memory) if isinstance(memory, MemoryBank) else DeferredMemory(memory)

    def merge(self, outcome: Any, view: ReflectionMemory | None) -> Any:
        """The global :class:`~erl_lite.records.StepRecord` of a step, and memory brought up
        to date on every process.

        Attempts and retries are concatenated in rank order (the single-process order); the
        RL rows come back without token ids (metrics read only role, task and advantage);
        phase timings are the slowest process's. The pending rulebooks of every process are
        applied to the shared memory (each environment's, for a bank) in rank order, then
        position order.
        """
        if self.world_size == 1:
            return outcome
        light = [dataclasses.replace(s, prompt_ids=[], completion_ids=[], completion_mask=[])
                 for s in outcome.samples]
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
