"""A prompt shared by G rollouts, run once: sampling and the update, with and without, interleaved.

GRPO samples G completions of each prompt and trains on all of them, so every pass over a group
repeats its prompt G times. erl_lite runs a repeated prompt once: ``HFGenerator`` computes each
distinct prompt's keys and values and hands them to ``generate`` for all its copies, and the update's
passes (:func:`erl_lite.engine.logprobs.completion_hidden`) run each distinct context of a micro-batch
once before the completions. This script times both, each against the whole-row path, in one
process and interleaved round by round so machine noise falls on both alike:

* sampling: ``--tasks`` prompts x ``--group`` copies, ``--max-new`` tokens each, through
  ``HFGenerator.generate`` (``share_prompts`` on / off), and the prompt tokens the decoder embeds;
* update: one :meth:`~erl_lite.core.update.PolicyUpdater.update` (learning rate 0, so every round sees
  the same weights) over those rows with their sampled completions and random advantages, KL on
  (beta 0.001, the paper's: a reference pass too), ``--micro-batch`` rows per pass; the whole-row
  path is the same update with :func:`erl_lite.engine.policy.shared_rows` answering "all differ".

``--model tiny`` (default): the random tiny model with its character tokenizer and step_time.py's
prompts (about 60 tokens); ``--model embedded``: the packaged model with the demo world's first
observations under its system prompt. Both with a LoRA adapter (r 16) on every linear layer, one thread.

    OMP_NUM_THREADS=1 python benchmarks/shared_prefix.py [--model embedded] [--rounds 9]

Departures from the paper: none; this measures cost.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before torch is imported

import argparse
import random
import statistics
import tempfile
import time
import warnings
from typing import Any

import torch

from erl_lite.cli import arg_types

torch.set_num_threads(1)


def policy(kind: str, tmp: str) -> tuple[Any, Any]:
    """The model (LoRA r 16, every linear layer, float32) and tokenizer."""
    from peft import LoraConfig

    from erl_lite.models import load_policy
    from erl_lite.testing import save_tiny_model

    if kind == "embedded":
        from erl_lite.embedded import EMBEDDED_DIR

        path = str(EMBEDDED_DIR)
    else:
        path = save_tiny_model(os.path.join(tmp, "tiny"))
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    return load_policy(path, peft=lora, device="cpu", dtype=torch.float32)


def prompts(kind: str, tok: Any, tasks: int) -> list[list[int]]:
    """``tasks`` distinct chat prompts as token ids."""
    from erl_lite.core.rollout import opening_messages
    from erl_lite.engine.chat import encode_messages

    if kind == "embedded":
        from erl_lite.embedded import demo_world

        world = demo_world(0)
        return [
            encode_messages(opening_messages(world.system_prompt, world.new_episode().reset(t)), tok)
            for t in world.test_tasks(tasks)
        ]
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": f"Write one line of text, any text. Task {i:04d}."}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for i in range(tasks)
    ]


def count_prefill(model: Any) -> list[int]:
    """Token positions the decoder embeds per call (the first calls of a generate are its prefill)."""
    seen: list[int] = []
    model.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    return seen


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("tiny", "embedded"), default="tiny")
    p.add_argument("--tasks", type=arg_types.whole(1), default=4, help="distinct prompts")
    p.add_argument("--group", type=arg_types.whole(1), default=10, help="copies of each prompt (GRPO's G)")
    p.add_argument("--max-new", type=arg_types.whole(1), default=32, help="new tokens per completion")
    p.add_argument("--micro-batch", type=arg_types.whole(1), default=10, help="rows per update pass")
    p.add_argument("--rounds", type=arg_types.whole(1), default=9, help="timed rounds per path (after one warm-up)")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    import erl_lite.engine.logprobs as logprobs
    from erl_lite.config import ERLConfig
    from erl_lite.core.update import PolicyUpdater
    from erl_lite.engine.generation import HFGenerator, SamplingParams
    from erl_lite.records import TrainSample

    with tempfile.TemporaryDirectory() as tmp:
        model, tok = policy(args.model, tmp)
    rows = [ids for ids in prompts(args.model, tok, args.tasks) for _ in range(args.group)]
    gen = HFGenerator(model, tok)
    params = SamplingParams(args.max_new, temperature=0.7)
    seen = count_prefill(model)
    config = ERLConfig(
        mode="rlvr",
        num_generations=args.group,
        beta=0.001,
        learning_rate=0.0,
        per_device_train_batch_size=args.micro_batch,
        loss_type="token_mean",
        output_dir=None,
    )
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=0.0)
    updater = PolicyUpdater(model, optimizer, None, config, tok.pad_token_id)
    real_shared_rows = logprobs.shared_rows
    seconds: dict[str, list[float]] = {
        k: [] for k in ("sample shared", "sample whole", "update shared", "update whole")
    }
    prefill: dict[str, int] = {}
    samples: list[TrainSample] = []
    rng = random.Random(0)
    for round_ in range(args.rounds + 1):
        for shared in (True, False):
            label = "shared" if shared else "whole"
            gen.share_prompts = shared
            seen.clear()
            torch.manual_seed(round_)
            start = time.perf_counter()
            outs = gen.generate(rows, params)
            if round_:
                seconds[f"sample {label}"].append(time.perf_counter() - start)
            prefill[label] = seen[0] + (seen[1] if shared else 0)  # shared: the prompts' pass, then the last column
            if not samples:  # one fixed batch for every update round
                samples = [
                    TrainSample("first", ids, out, [1] * len(out), rng.gauss(0, 1)) for ids, out in zip(rows, outs)
                ]
            logprobs.shared_rows = real_shared_rows if shared else (lambda ids, mask: None)
            start = time.perf_counter()
            updater.update(samples)
            if round_:
                seconds[f"update {label}"].append(time.perf_counter() - start)
            logprobs.shared_rows = real_shared_rows
    median = {k: statistics.median(v) for k, v in seconds.items()}
    print(
        f"{args.model} model, {args.tasks} prompts x G = {args.group} ({sum(map(len, rows)) // len(rows)} prompt "
        f"tokens each), {args.max_new} new tokens, micro-batch {args.micro_batch}, {args.rounds} rounds"
    )
    print(f"prompt tokens prefilled: shared {prefill['shared']}, whole {prefill['whole']}")
    for what in ("sample", "update"):
        a, b = median[f"{what} shared"], median[f"{what} whole"]
        print(f"{what:<7} shared {a:.3f} s  whole {b:.3f} s  ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
