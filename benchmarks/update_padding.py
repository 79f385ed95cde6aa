"""Micro-batch packing: padding share and update seconds of ERL's real batches, two grouping rules.

:func:`erl_lite.core.update.pack` pads every context to the micro-batch's longest context and every
completion to its longest completion, so a micro-batch is ``max(context) + max(completion)``
columns wide. ERL's batch mixes rows whose lengths run opposite ways (reflection requests: long
context, short reply; attempts: short context, replies up to a full episode), so grouping by
total length alone still pads short attempts to the width of a reflection request. This
benchmark records the update batches of a few demo ERL iterations (the embedded model, demo
settings) and then, on the same batches, times one :class:`~erl_lite.core.update.PolicyUpdater`
update under

* ``width``: :func:`erl_lite.core.update.micro_batches`, which closes a micro-batch before a row that
  would make it more than twice as wide as its shortest row (the library's rule);
* ``total``: the rule it replaced, which compared total lengths only (kept here as the baseline),

interleaved round by round so machine noise falls on both alike, after one untimed round per
rule that also counts the padding. The optimizer's learning rate is 0, so every update sees
the same weights. It prints, per rule, the padding share
(padded cells that hold no token) and the median seconds per update, and the ratio.

    OMP_NUM_THREADS=1 python benchmarks/update_padding.py            # 3 iterations, 5 rounds
    OMP_NUM_THREADS=1 python benchmarks/update_padding.py --steps 5 --rounds 9
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator

import torch

import erl_lite.core.update as update_module
from erl_lite.cli import arg_types
from erl_lite.records import TrainSample

_WIDTH_RULE = update_module.micro_batches


def total_length_rule(rows: list[TrainSample], size: int) -> Iterator[list[TrainSample]]:
    """The replaced rule: sorted by total length, a micro-batch closes before a row more than
    twice as long (context + completion) as its shortest row."""
    length = lambda s: len(s.prompt_ids) + len(s.completion_ids)
    chunk: list[TrainSample] = []
    for row in sorted(rows, key=length):
        if chunk and (len(chunk) == size or length(row) > 2 * length(chunk[0])):
            yield chunk
            chunk = []
        chunk.append(row)
    if chunk:
        yield chunk


RULES = {"width": _WIDTH_RULE, "total": total_length_rule}


def record_batches(steps: int, seed: int) -> tuple[object, list[list[TrainSample]]]:
    """Train ``steps`` demo ERL iterations and keep the rows each update received."""
    from erl_lite.embedded import demo_trainer

    batches: list[list[TrainSample]] = []
    real_update = update_module.PolicyUpdater.update

    def keep(self, samples, **kw):
        batches.append(list(samples))
        return real_update(self, samples, **kw)

    update_module.PolicyUpdater.update = keep
    try:
        trainer = demo_trainer(seed, max_steps=steps, eval_steps=0, output_dir=None)
        trainer.train()
    finally:
        update_module.PolicyUpdater.update = real_update
    return trainer, batches


def padding_share(updater, batches: list[list[TrainSample]]) -> float:
    """Share of the packed cells that hold no token, over every micro-batch one update of each
    of ``batches`` packs (read from :func:`erl_lite.core.update.pack`'s output)."""
    real_pack, cells, tokens = update_module.pack, [0], [0]

    def counted(*a, **k):
        packed = real_pack(*a, **k)
        cells[0] += packed.attention_mask.numel()
        tokens[0] += int(packed.attention_mask.sum())
        return packed

    update_module.pack = counted
    try:
        for rows in batches:
            updater.update(rows)
    finally:
        update_module.pack = real_pack
    return 1 - tokens[0] / cells[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=arg_types.whole(1), default=3, help="demo ERL iterations whose batches are timed")
    p.add_argument(
        "--rounds", type=arg_types.whole(1), default=5, help="timed updates per rule and batch (interleaved)"
    )
    p.add_argument("--seed", type=arg_types.seed, default=1)
    args = p.parse_args()
    torch.set_num_threads(1)
    trainer, batches = record_batches(args.steps, args.seed)
    config = trainer.args
    optimizer = torch.optim.SGD([q for q in trainer.model.parameters() if q.requires_grad], lr=0.0)
    updater = update_module.PolicyUpdater(trainer.model, optimizer, None, config, trainer.tokenizer.pad_token_id)
    seconds, padding = {name: [] for name in RULES}, {}
    for name, rule in RULES.items():  # also the warm-up
        update_module.micro_batches = rule
        padding[name] = padding_share(updater, batches)
    for _ in range(args.rounds):
        for name, rule in RULES.items():
            update_module.micro_batches = rule
            start = time.perf_counter()
            for rows in batches:
                updater.update(rows)
            seconds[name].append(time.perf_counter() - start)
    update_module.micro_batches = _WIDTH_RULE
    rows = [len(b) for b in batches]
    print(
        f"{len(batches)} ERL update batches of {min(rows)}-{max(rows)} rows (demo world, seed {args.seed}), "
        f"micro-batch {config.per_device_train_batch_size} rows, {args.rounds} timed rounds"
    )
    print(f"{'rule':<7} {'padding':>8} {'s per round (median)':>21}")
    median = {}
    for name in RULES:
        median[name] = statistics.median(seconds[name])
        print(f"{name:<7} {padding[name]:>8.0%} {median[name]:>21.2f}")
    print(f"width / total: {median['width'] / median['total']:.2f}")


if __name__ == "__main__":
    main()
