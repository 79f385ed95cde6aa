"""Decode probe: where a GPU's sampling time goes, per decode step of ``HFGenerator.generate``.

``gpu_check.py`` measured 118 to 339 sampled tokens per second for a 0.5B model on an H200, and
docs/GPU.md guessed that per-token overheads, not the GPU's arithmetic, set that pace. This
script tests the guess. For the Qwen2.5-0.5B-Instruct shape (random weights, as in
``gpu_check.py``) it times ``HFGenerator.generate`` (the library's sampler) on prompts of
``--prompt`` random tokens, forced to sample exactly ``--new`` tokens, at batch sizes 1, 16 and
64, under four loadings of the same weights:

* ``4bit+lora``: what ``load_policy(..., quantization="4bit")`` gives (the QLoRA policy);
* ``4bit``: the same without the adapter (``peft="none"``);
* ``bf16+lora`` and ``bf16``: unquantized.

and, on the QLoRA policy, ``model.generate`` called plainly (no log-prob recorder, no shared
prompt), to price what ``HFGenerator`` adds. Each cell is milliseconds per decode step: (time of
a call with ``--new`` tokens minus a call with 1 token) / (``--new`` - 1), so prefill is left
out; the median of ``--repeats`` calls, each after a warm-up call. If a step costs about the same
at batch 1 and 64, the step is bound by per-step overheads (kernel launches, Python), not by the
GPU's throughput. ``--profile`` adds torch.profiler's top operators (by CPU time) for one QLoRA
call at batch 16.

Departures from the paper: none; this measures cost, not learning.

Usage:
    python benchmarks/decode_probe.py                  # on a CUDA machine, about a minute
    python benchmarks/decode_probe.py --cpu-smoke      # tiny model on the CPU, seconds
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_check import _min_new_tokens, save_random_model  # noqa: E402  (the same random models)

from erl_lite.cli import arg_types  # noqa: E402
from erl_lite.engine.generation import HFGenerator, SamplingParams  # noqa: E402

LOADINGS = {
    "4bit+lora": ("4bit", "lora"),
    "4bit": ("4bit", "none"),
    "bf16+lora": ("none", "lora"),
    "bf16": ("none", "none"),
}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def seconds(call: Any, device: str) -> float:
    _sync(device)
    start = time.perf_counter()
    call()
    _sync(device)
    return time.perf_counter() - start


def random_prompts(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """``batch`` distinct prompts of random ordinary token ids (speed does not depend on which)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab // 8, vocab // 2, (batch, length), generator=g).tolist()


def ms_per_step(model: Any, tok: Any, batch: int, a: argparse.Namespace, device: str, plain: bool = False) -> float:
    """Median milliseconds per decode step at ``batch`` rows (prefill subtracted)."""
    gen = HFGenerator(model, tok)
    prompts = random_prompts(batch, a.prompt, len(tok), seed=batch)
    ids = torch.tensor(prompts, device=device)

    def call(n: int) -> Any:
        def run() -> None:
            with _min_new_tokens(model, n):
                if plain:  # model.generate alone: sampling settings only
                    with torch.no_grad():
                        model.generate(
                            input_ids=ids,
                            attention_mask=torch.ones_like(ids),
                            do_sample=True,
                            max_new_tokens=n,
                            pad_token_id=gen.pad_id,
                        )
                else:
                    gen.generate(prompts, SamplingParams(max_new_tokens=n))

        return run

    model.eval()
    seconds(call(a.new), device)  # warm-up: kernels, allocator
    longs = [seconds(call(a.new), device) for _ in range(a.repeats)]
    shorts = [seconds(call(1), device) for _ in range(a.repeats)]
    return 1000 * (statistics.median(longs) - statistics.median(shorts)) / (a.new - 1)


def main(argv: list[str] | None = None) -> dict[str, dict[int, float]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="tiny model on the CPU (what the tests run)")
    p.add_argument(
        "--prompt", type=arg_types.whole(1), default=600, help="prompt tokens per row (a FrozenLake first turn is ~600)"
    )
    p.add_argument(
        "--new", type=arg_types.whole(2), default=64, help="tokens sampled per row (gpu_check's per-turn length)"
    )
    p.add_argument("--batches", type=arg_types.whole(1), nargs="+", default=[1, 16, 64])
    p.add_argument("--repeats", type=arg_types.whole(1), default=3)
    p.add_argument("--profile", action="store_true", help="torch.profiler's top operators, QLoRA at batch 16")
    a = p.parse_args(argv)
    from erl_lite.models import load_policy
    from erl_lite.testing import find_qwen3_tokenizer, qwen3_tokenizer, tiny_tokenizer

    if a.cpu_smoke:
        device, a.prompt, a.new, a.batches, a.repeats = "cpu", 8, 3, [1, 2], 1
    elif not torch.cuda.is_available():
        raise SystemExit("decode_probe.py needs a CUDA device; --cpu-smoke checks the code path on the CPU")
    else:
        device = "cuda"
    warnings.filterwarnings("ignore")
    tokenizer = tiny_tokenizer() if a.cpu_smoke or find_qwen3_tokenizer() is None else qwen3_tokenizer()
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (smoke run, tiny model)"
    print(
        f"{time.strftime('%Y-%m-%d')} | {name} | torch {torch.__version__} | prompt {a.prompt} tokens, "
        f"{a.new} sampled | ms per decode step (median of {a.repeats}) and sampled tokens/s"
    )
    print("| loading | batch | ms/step | tok/s |\n|---|---|---|---|", flush=True)
    rows: dict[str, dict[int, float]] = {}

    def measure(label: str, model: Any, tok: Any, plain: bool = False) -> None:
        rows[label] = {}
        for b in a.batches:  # each row printed as it is measured: a cut-short run keeps what it has
            rows[label][b] = ms = ms_per_step(model, tok, b, a, device, plain)
            print(f"| {label} | {b} | {ms:.1f} | {1000 * b / ms:.0f} |", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        saved = save_random_model("qwen2.5-0.5b-instruct", tmp, tokenizer, a.cpu_smoke, device)
        for label, (quant, peft) in LOADINGS.items():
            model, tok = load_policy(saved, tokenizer, quantization=quant, peft=peft, device=device)
            measure(label, model, tok)
            if label == "4bit+lora":
                measure("4bit+lora, model.generate", model, tok, plain=True)
                if a.profile:
                    profile(model, tok, a, device)
            del model
            torch.cuda.empty_cache() if device == "cuda" else None
    return rows


def profile(model: Any, tok: Any, a: argparse.Namespace, device: str) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    gen, prompts = HFGenerator(model, tok), random_prompts(16, a.prompt, len(tok), seed=0)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with _min_new_tokens(model, a.new), torch_profile(activities=activities) as prof:
        gen.generate(prompts, SamplingParams(max_new_tokens=a.new))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
