"""The update's passes on a real-shape model: where the larger half of an ERL iteration goes.

``benchmarks/rollout_waste.py`` finds the update to be the larger half of an iteration on its
real-shape set-up (Qwen2.5-0.5B's width and vocabulary, V = 151,936, cut to 2 layers; the ``gpu``
preset cut to 2 tasks x G = 4; on the CPU, fp32 LoRA, no gradient checkpointing). This plays one
iteration of that set-up (``generate`` backend) and, on the rows it produced, times:

* ``update()``, as the trainer runs it (every pass, clipping and the optimizer steps);
* each pass alone, over the same mini-batches and micro-batches the update plans:

  - ``policy``: decoder, chunked lm-head and their backward, with gradient, over every row;
  - ``reference``: decoder and head with the adapter disabled, no gradient, over every row; it runs
    only when ``beta > 0`` (the preset's 0.001);
  - ``old log-probs``: decoder and head, no gradient, over the mini-batches after the first (the
    first one's ratio is 1 by construction, so none is computed for it);
  - ``decoder only``: the decoder's forward, no gradient, over every row, so the head's share of a
    no-gradient pass is its difference from the ``reference`` row's work;
  - ``policy, full logits``: the policy pass with ``logprob_chunk_size=None`` (``(B, L, V)`` logits
    through ``logits_to_keep``, as TRL computes them), for the cost of the chunked head's memory saving.

Each pass is timed ``--repeats`` times (median). ``share`` is a pass's seconds over the median
``update()``; the remainder is packing, clipping and the optimizer. Gradients of the timed passes
are zeroed, never stepped.

Departures from the paper: none; this measures cost, not learning.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/update_passes.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # rollout_waste, beside this script

from rollout_waste import Log, real_setup, real_shape_model  # noqa: E402

from erl_lite.cli import arg_types  # noqa: E402
from erl_lite.core.update_stats import GapTally  # noqa: E402
from erl_lite.engine.batching import completion_logprobs  # noqa: E402
from erl_lite.engine.logprobs import causal_lm  # noqa: E402
from erl_lite.engine.policy import reference_context  # noqa: E402


def _timed(fn: Callable[[], None], repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def passes(trainer: Any, samples: list[Any], repeats: int) -> list[tuple[str, bool, float]]:
    """``(pass, runs in this update, median seconds)`` per pass, over ``samples`` as the update plans them."""
    up, c, model = trainer.updater, trainer.args, trainer.model
    k = c.optimizer_steps(len(samples))
    plans = up.plans(samples, k)  # the mini-batches update() steps on
    every = [b for _, bs in plans for b in bs]
    later = [b for _, bs in plans[1:] for b in bs]
    lm = causal_lm(model)

    def policy(chunk: int | None) -> Callable[[], None]:
        def run() -> None:
            trained = getattr(up.trained, "module", up.trained)  # the CompletionLogProbs (DDP wraps it)
            trained.chunk_size = chunk
            try:
                for norm, batches in plans:
                    for b in batches:
                        loss, _ = up._objective(b, norm, GapTally(up.model, up.config))  # as update() runs it
                        loss.backward()
            finally:
                trained.chunk_size = c.logprob_chunk_size
                up.optimizer.zero_grad(set_to_none=True)

        return run

    @torch.no_grad()
    def no_grad(batches: list[Any]) -> None:
        for b in batches:
            completion_logprobs(model, b, c.temperature, c.logprob_chunk_size)

    @torch.no_grad()
    def reference() -> None:
        with reference_context(model):
            no_grad(every)

    @torch.no_grad()
    def decoder() -> None:
        for b in every:
            lm.base_model(
                input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids, use_cache=False
            )

    model.train()
    return [
        ("policy (forward + backward)", True, _timed(policy(c.logprob_chunk_size), repeats)),
        ("reference (no grad)", c.beta > 0, _timed(reference, repeats)),
        (
            f"old log-probs (no grad, {len(later)} of {len(every)} micro-batches)",
            bool(later),
            _timed(lambda: no_grad(later), repeats) if later else 0.0,
        ),
        ("decoder only (no grad, every row)", False, _timed(decoder, repeats)),
        ("policy, full logits (forward + backward)", False, _timed(policy(None), repeats)),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=arg_types.whole(1), default=3)
    p.add_argument(
        "--mean-reply", type=arg_types.whole(1), default=24, help="mean sampled tokens of a reply (rollout_waste)"
    )
    a = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from erl_lite.testing import find_qwen3_tokenizer

    if find_qwen3_tokenizer() is None:
        print("skipped: no Qwen3 tokenizer (shared/qwen3_tokenizer or $ERL_LITE_QWEN3_TOKENIZER)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        trainer = real_setup("generate", Log(), real_shape_model(tmp), a.mean_reply)
        captured: dict[str, Any] = {}
        update = trainer.updater.update

        def capture(samples: list[Any], **kw: Any) -> Any:
            captured["samples"] = list(samples)
            return update(samples, **kw)

        trainer.updater.update = capture
        start = time.perf_counter()
        trainer.training_step()
        print(f"one iteration played in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        samples = captured["samples"]
        timed = passes(trainer, samples, a.repeats)
        # update() steps the optimizer: each repeat starts again from the same adapter weights.
        state = {n: t.detach().clone() for n, t in trainer.model.named_parameters() if t.requires_grad}
        whole = []
        for _ in range(a.repeats):
            start = time.perf_counter()
            update(samples)
            whole.append(time.perf_counter() - start)
            with torch.no_grad():
                for n, t in trainer.model.named_parameters():
                    if n in state:
                        t.copy_(state[n])
        upd = statistics.median(whole)
    c = trainer.args
    roles = {r: sum(s.role == r for s in samples) for r in dict.fromkeys(s.role for s in samples)}
    tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    print(
        f"\n## update passes, {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), median of {a.repeats}\n"
    )
    print(
        f"rows {len(samples)} ({', '.join(f'{r} {n}' for r, n in roles.items())}), {tokens} tokens; "
        f"beta {c.beta}, optimizer steps {c.optimizer_steps(len(samples))}, micro-batch "
        f"{c.per_device_train_batch_size}, logprob chunk {c.logprob_chunk_size}\n"
    )
    print("| pass | runs in the update | seconds | share of update() |\n|---|---|---|---|")
    print(f"| update() as the trainer runs it | - | {upd:.2f} | 1.00 |")
    for name, runs, seconds in timed:
        print(f"| {name} | {'yes' if runs else 'no'} | {seconds:.2f} | {seconds / upd:.2f} |")


if __name__ == "__main__":
    main()
