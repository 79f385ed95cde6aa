"""``erl-lite budget``: the estimated GPU memory of a 4-bit QLoRA step under a preset, before a run
(:func:`erl_lite.integrations.budget.memory_table`); every ERLConfig field is an option, as for ``train``.
"""

from __future__ import annotations

import argparse
from typing import Any

from erl_lite.cli.config_args import add_config_arguments, given_fields
from erl_lite.cli.errors import usage_error, user_errors
from erl_lite.config import ERLConfig
from erl_lite.config.presets import PRESETS


def add_budget_parser(sub: Any) -> None:
    p = sub.add_parser("budget", help="estimated GPU memory (GiB) of a 4-bit QLoRA ERL step, per architecture")
    p.add_argument("--preset", choices=sorted(PRESETS), default="gpu", help="ERLConfig preset (default: gpu)")
    add_config_arguments(p, title="ERLConfig fields over the preset (e.g. --num-tasks-per-step 2)")


def run_budget(args: argparse.Namespace) -> int:
    from erl_lite.integrations.budget import memory_table

    try:
        cfg = ERLConfig.preset(args.preset, **given_fields(args))
    except user_errors() as e:
        return usage_error("budget", e)
    print(
        f"preset {args.preset!r}, mode {cfg.mode!r}: micro-batch {cfg.per_device_train_batch_size}, "
        f"{cfg.num_tasks_per_step} tasks x G {cfg.num_generations}, episode budget "
        f"{cfg.max_episode_length}, gradient checkpointing {cfg.gradient_checkpointing}, optim {cfg.optim}"
    )
    print(memory_table(cfg))
    return 0
