"""What ``ERLTrainer`` does with the arguments it shares with TRL's ``GRPOTrainer``.

``ERLTrainer`` takes ``GRPOTrainer``'s positional order (TRL 1.16) so that a GRPOTrainer call
runs with the class name changed. Some of those arguments have no erl_lite counterpart; they
are refused here with an error that says what to use instead, rather than ignored:

* ``reward_processing_classes``, ``tools``, ``rollout_func`` (``environment_factory`` is
  accepted: see :mod:`erl_lite.envs.trl_adapter`);
* ``callbacks`` holding ``transformers.TrainerCallback`` objects: their hooks and ``control``
  flags belong to ``transformers.Trainer``'s loop, which erl_lite does not run (a partial
  imitation would silently skip hooks). erl_lite callbacks are functions ``f(trainer, record)``;
* a ``quantization_config`` that is not 4-bit (a 4-bit one means erl_lite's NF4 loading).

``TrainerStateView`` is the ``trainer_state`` reward functions receive; ``build_optimizer``
turns ``ERLConfig.optim`` into the optimizer the trainer uses by default, ``build_scheduler``
``ERLConfig.lr_scheduler_type`` into its learning-rate schedule.

Departures from the paper: none (this is API plumbing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from erl_lite.config import ERLConfig
from erl_lite.records import StepRecord

if TYPE_CHECKING:
    from erl_lite.trainer import ERLTrainer


class TrainerStateView:
    """``trainer_state`` for reward functions: a live, read-only view of a trainer's progress.

    Attributes (read at call time): ``global_step`` (the trainer's ``step``), ``max_steps``
    (``args.max_steps``) and ``epoch`` (tasks drawn so far / training tasks).
    """

    def __init__(self, trainer: "ERLTrainer") -> None:
        self._trainer = trainer

    @property
    def global_step(self) -> int:
        return self._trainer.step

    @property
    def max_steps(self) -> int:
        return self._trainer.args.max_steps

    @property
    def epoch(self) -> float:
        t = self._trainer
        return t.step * t.args.num_tasks_per_step / max(len(getattr(t, "train_tasks", ())), 1)

    def __repr__(self) -> str:
        return f"TrainerStateView(global_step={self.global_step}, max_steps={self.max_steps})"


def refuse_trl_only(**given: Any) -> None:
    """Clear errors for GRPOTrainer arguments that erl_lite has no counterpart for."""
    hints = {"reward_processing_classes": "reward models are not supported; wrap one in a reward function",
             "tools": "tool use belongs to an environment: pass env= (see erl_lite.envs.qa for a search tool)",
             "rollout_func": "rollouts are erl_lite's own; a custom sampler goes in generator="}
    for name, value in given.items():
        if value is not None:
            raise ValueError(f"{name} is a GRPOTrainer argument erl_lite does not take: {hints[name]}")


def check_callbacks(callbacks: Sequence[Any] | None) -> list[Callable[["ERLTrainer", StepRecord], None]]:
    """Plain functions ``f(trainer, record)``; TRL/transformers callback objects are refused."""
    out = []
    for i, cb in enumerate(callbacks or ()):
        if isinstance(cb, type) or hasattr(cb, "on_step_end") or not callable(cb):
            raise TypeError(
                f"callbacks[{i}] ({cb!r:.60}) is a transformers TrainerCallback or not callable; erl_lite "
                "callbacks are functions f(trainer, record) called after each iteration (record: a "
                "StepRecord with .step and .metrics); stop early by raising")
        out.append(cb)
    return out


def wants_4bit(quantization_config: Any, args: ERLConfig) -> bool:
    """Whether to load a named model in 4-bit: ``args.load_in_4bit`` or a 4-bit BitsAndBytesConfig."""
    if quantization_config is None:
        return args.load_in_4bit
    if getattr(quantization_config, "load_in_4bit", False):
        return True
    raise ValueError(f"quantization_config {type(quantization_config).__name__} is not a 4-bit config; "
                     "erl_lite loads named models in 4-bit NF4 (load_in_4bit=True) or unquantized")


def build_optimizer(params: list[Any], args: ERLConfig) -> Any:
    """The optimizer ``args.optim`` names, over ``params``, with ``args.learning_rate`` and
    ``args.weight_decay`` (Adam's default betas and eps).

    ``adamw_torch`` is ``torch.optim.AdamW``; ``adamw_8bit`` and ``paged_adamw_8bit`` are
    bitsandbytes' ``AdamW8bit`` and ``PagedAdamW8bit`` (see ``ERLConfig.optim``).

    Example:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> type(build_optimizer([w], ERLConfig(optim="adamw_torch"))).__name__
        'AdamW'
    """
    if not params:
        raise ValueError("the model has no trainable parameters (pass peft_config or an unfrozen model)")
    kwargs = dict(lr=args.learning_rate, weight_decay=args.weight_decay)
    if args.optim == "adamw_torch":
        import torch

        return torch.optim.AdamW(params, **kwargs)
    try:
        import bitsandbytes as bnb
    except ImportError as err:  # pragma: no cover - bitsandbytes is a dependency
        raise ImportError(f"ERLConfig.optim={args.optim!r} needs bitsandbytes: pip install bitsandbytes") from err
    cls = {"adamw_8bit": bnb.optim.AdamW8bit, "paged_adamw_8bit": bnb.optim.PagedAdamW8bit}[args.optim]
    return cls(params, **kwargs)


def build_scheduler(optimizer: Any, args: ERLConfig) -> Any:
    """The learning-rate schedule ``args.lr_scheduler_type`` names, from transformers'
    ``get_scheduler``, over ``args.max_steps × args.max_optimizer_steps()`` optimizer steps with
    ``args.num_warmup_steps(...)`` of warm-up. It is stepped once per optimizer step.

    Example:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> args = ERLConfig(max_steps=2, steps_per_generation=2, lr_scheduler_type="linear",
        ...                  learning_rate=1.0, warmup_steps=1)
        >>> opt = torch.optim.SGD([w], lr=1.0)
        >>> sched = build_scheduler(opt, args)
        >>> lrs = []
        >>> for _ in range(4):
        ...     lrs.append(sched.get_last_lr()[0]); opt.step(); sched.step()
        >>> [round(x, 3) for x in lrs]
        [0.0, 1.0, 0.667, 0.333]
    """
    from transformers import get_scheduler

    if args.max_steps is None:
        raise ValueError("build_scheduler needs args.max_steps (the trainer derives it from num_train_epochs)")
    total = args.max_steps * args.max_optimizer_steps()
    warmup = args.num_warmup_steps(total)
    if args.lr_scheduler_type == "constant":  # (the config refuses a warm-up with it)
        return get_scheduler("constant", optimizer)
    return get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=warmup, num_training_steps=total)
