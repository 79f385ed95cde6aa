"""Peak memory of one RL update with a real-size vocabulary: chunked vs full-logits log-probs.

The model is randomly initialised and tiny everywhere except its vocabulary, which is
Qwen's (V = 151,936): Qwen2-shaped (q/k/v bias, tied embeddings), hidden 64, 2 layers, LoRA
r 16 on all linear layers. With such a model the update's memory is dominated by the
``(rows, L, V)`` logits, exactly the part that decides whether a real model fits a GPU.

One measurement = one :meth:`erl_lite.core.update.PolicyUpdater.update` on ``--rows`` rows (4) of a
64-token context and ``L`` completion tokens, in one micro-batch, with β = 0.001 (so the
reference pass runs) and ``--steps`` optimizer steps (1; with ``--steps 2`` the old-log-prob
pass runs too and each step's micro-batch holds ``rows / 2`` rows — use ``--rows 8 --steps 2``
to keep 4 rows per micro-batch). Each measurement runs in a fresh Python process so that freed
memory of one run cannot hide the next one's growth.

Peak growth is the peak minus the memory in use just before the update:
  * CPU: the process's peak resident set (``VmHWM`` of ``/proc/self/status``, reset by writing
    5 to ``/proc/self/clear_refs`` just before the update; the kernel tracks the true peak, no
    polling) minus ``VmRSS`` at that moment;
  * CUDA: ``torch.cuda.max_memory_allocated()`` minus ``torch.cuda.memory_allocated()``.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/update_memory.py                  # L = 1024, 4096
    OMP_NUM_THREADS=1 python benchmarks/update_memory.py --full-at 1024   # also the old path there
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # measure this checkout's erl_lite

from erl_lite.cli import arg_types  # noqa: E402

VOCAB = 151_936  # Qwen2 / Qwen2.5 / Qwen3


def build(device: str, rows: int, length: int, steps: int, chunk: int | None):
    """The LoRA policy, its updater and the rows of one update."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from erl_lite.config import ERLConfig
    from erl_lite.core.update import PolicyUpdater
    from erl_lite.records import TrainSample

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
        max_position_embeddings=length + 128,
        pad_token_id=0,
    )
    model = get_peft_model(
        Qwen2ForCausalLM(cfg).to(device), LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear")
    )
    gen = torch.Generator().manual_seed(1)
    samples = [
        TrainSample(
            role,
            torch.randint(1, VOCAB, (64,), generator=gen).tolist(),
            torch.randint(1, VOCAB, (length,), generator=gen).tolist(),
            [1] * length,
            1.0 if b % 2 == 0 else -1.0,
        )
        for b, role in zip(range(rows), ["first", "first", "second", "internalization"] * rows)
    ]
    config = ERLConfig(
        beta=0.001,
        steps_per_generation=steps,
        per_device_train_batch_size=rows,
        temperature=1.0,
        learning_rate=1e-5,
        max_completion_length=length,
        max_episode_length=length + 128,
    )
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    return PolicyUpdater(model, opt, None, config.replace(logprob_chunk_size=chunk), pad_id=0), samples


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_one(device: str, rows: int, length: int, steps: int, chunk: int | None) -> dict:
    """Peak memory growth (bytes) and seconds of one update, in this process."""
    import gc

    import torch
    import trl.kernels  # noqa: F401  (imported before the baseline: not part of the update's growth)

    updater, samples = build(device, rows, length, steps, chunk)
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident set (VmHWM) to the current one
        base = _status_kib("VmRSS") * 1024
    t0 = time.perf_counter()
    stats = updater.update(samples)
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = _status_kib("VmHWM") * 1024
    return {"growth": peak - base, "seconds": time.perf_counter() - t0, "loss": stats.loss_total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--lengths", type=arg_types.whole(1), nargs="+", default=[1024, 4096], help="completion tokens L"
    )
    parser.add_argument(
        "--full-at",
        type=arg_types.whole(1),
        nargs="*",
        default=[1024],
        help="lengths at which the full-logits path is measured too (it needs ~7 GB at 1024)",
    )
    parser.add_argument("--rows", type=arg_types.whole(1), default=4, help="rows in the update")
    parser.add_argument(
        "--steps",
        type=arg_types.whole(1),
        default=1,
        help="optimizer steps (mini-batches); > 1 adds the old-log-prob pass",
    )
    parser.add_argument(
        "--chunk", type=arg_types.whole(1), default=None, help="log-prob chunk size (default: the library's)"
    )
    parser.add_argument("--device", default="cuda" if _cuda() else "cpu")
    parser.add_argument("--single", nargs=2, metavar=("L", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    from erl_lite.engine.logprobs import DEFAULT_CHUNK_SIZE

    chunk = args.chunk or DEFAULT_CHUNK_SIZE
    if args.single:  # a child process: one measurement, printed as JSON
        length, path = int(args.single[0]), args.single[1]
        print(json.dumps(measure_one(args.device, args.rows, length, args.steps, None if path == "full" else chunk)))
        return
    print(
        f"device {args.device}, V = {VOCAB:,}, {args.rows} rows, {args.steps} optimizer steps, beta 0.001, "
        f"LoRA r 16, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    print(f"{'L':>6} {'log-probs':<22} {'peak growth':>12} {'seconds':>8}")
    for length in args.lengths:
        for path in ["chunked"] + (["full"] if length in args.full_at else []):
            cmd = [
                sys.executable,
                __file__,
                "--single",
                str(length),
                path,
                "--rows",
                str(args.rows),
                "--steps",
                str(args.steps),
                "--chunk",
                str(chunk),
                "--device",
                args.device,
            ]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{length:>6} {path:<22} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            label = f"chunked ({chunk} pos.)" if path == "chunked" else "full logits"
            print(f"{length:>6} {label:<22} {r['growth'] / 2**30:>9.2f} GiB {r['seconds']:>8.1f}")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
