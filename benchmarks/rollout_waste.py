"""Rollout waste and generation time per phase, ``generate`` against ``continuous`` batching (and vLLM).

Two set-ups:

* ``demo``: the embedded model on its demo world, the ``demo`` preset (ERL, 8 tasks x G = 4);
* ``real``: a random model of Qwen2.5-0.5B-Instruct's shape cut to 2 layers, with the real
  vocabulary (V = 151,936) and the Qwen3 tokenizer and chat template, on FrozenLake under the
  ``gpu`` preset cut to 2 tasks x G = 4, turns of at most 64 tokens, reflections of at most 128 and
  episodes of at most 1,024, LoRA in fp32 on the CPU (skipped without the tokenizer).
  A random model never ends a turn, so a *stop-set policy* plays: a random 1/``--mean-reply`` of
  the vocabulary are stop ids for the sampler, so the model's own replies have geometric lengths
  (mean ``--mean-reply`` tokens, capped by the budget) as a chat model's vary; a valid FrozenLake
  action (or ``</prompt>`` for a reflection) and the real end-of-turn token are appended, so
  episodes go on for several turns.

For each set-up two trainers start from the same weights and seed, one per backend, and run
``--rounds`` rounds of one training iteration and one evaluation each, alternating backends
(interleaved: the machine's noise falls on both). Every generator call is recorded: its phase
(first attempts, reflections, second attempts, evaluation), its prompts and replies, its seconds,
and for the continuous backend the prompt tokens its cache already held (the manager's prefix
matches). Per phase the table gives:

* ``waste``: of the row-tokens ``model.generate`` computed (B rows x padded width, or the distinct
  prompts' where ``HFGenerator`` runs a repeated prompt once, plus B rows x
  decode steps), the share that was prefill padding and decode steps of rows that had already
  stopped; the continuous backend computes neither (a finished row leaves the batch, rows are
  packed without padding), so its waste is the count's 0 by construction;
* ``prefill / final``: prompt tokens prefilled (continuous: net of cache reuse; generate: a repeated
  prompt once, then the last token of each copy) over the tokens
  of the phase's final sequences (each episode's whole sequence once);
* ``share``: the phase's seconds over the iteration's (generate backend); on the iteration's row,
  all its generation over the whole (the rest is the update); none for evaluation, which is not
  part of an iteration;
* ``time ratio``: continuous seconds / generate seconds, summed over the rounds (a phase's
  generator calls; on the iteration's row, the whole iteration with its update and the
  continuous backend's flush);
* ``vllm s``, ``vllm/generate``, ``vllm tok/s``: the same for colocated vLLM (sampled tokens per second
  of its calls), a third backend in the same rounds when vLLM is installed (docs/VLLM.md).

Departures from the paper: none; this measures cost, not learning.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/rollout_waste.py                  # both set-ups, 3 rounds
    OMP_NUM_THREADS=1 python benchmarks/rollout_waste.py --setups demo --rounds 2
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # gpu_check, beside this script

from gpu_check import hf_config, valid_endings  # noqa: E402

from erl_lite.cli import arg_types  # noqa: E402
from erl_lite.engine.continuous import ContinuousGenerator, cache_tokens_for  # noqa: E402
from erl_lite.engine.generation import HFGenerator, SamplingParams  # noqa: E402

#: vLLM joins when it is installed (the CPU build: docs/VLLM.md), interleaved with the other two.
BACKENDS = ("generate", "continuous") + (("vllm",) if importlib.util.find_spec("vllm") else ())
PHASES = ("first attempts", "reflections", "second attempts", "evaluation")


@dataclass
class Call:
    """One generator call: its phase, row lengths and seconds."""

    phase: str
    prompts: list[list[int]]
    replies: list[list[int]]
    seconds: float
    reused: int = 0  # prompt tokens the continuous backend's cache already held
    shares_prompts: bool = False  # generate ran each distinct prompt once (HFGenerator.share_prompts)


@dataclass
class Log:
    calls: list[Call] = field(default_factory=list)
    phase: str = "?"


class _Reuse:
    """Counts the prompt tokens transformers' paged cache matched (its prefix sharing)."""

    total = 0

    @classmethod
    def install(cls) -> None:
        from transformers.generation.continuous_batching.cache import PagedAttentionCache

        original = PagedAttentionCache.search_prefix_match

        def counted(self: Any, request_id: str, prompt_ids: list[int]) -> int:
            matched = original(self, request_id, prompt_ids)
            cls.total += matched
            return matched

        PagedAttentionCache.search_prefix_match = counted


class Recorded:
    """Wraps the sampler that computes; records every call into ``log``."""

    def __init__(self, inner: Any, log: Log) -> None:
        self.inner, self.log = inner, log
        self.stop_ids, self.calls = inner.stop_ids, 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        before, start = _Reuse.total, time.perf_counter()
        replies = self.inner.generate(prompts, params)
        self.calls += 1
        self.log.calls.append(
            Call(
                self.log.phase,
                [list(p) for p in prompts],
                replies,
                time.perf_counter() - start,
                _Reuse.total - before,
                getattr(self.inner, "share_prompts", False),
            )
        )
        return replies

    def flush(self) -> None:
        flush = getattr(self.inner, "flush", None)
        if flush is not None:
            flush()


class StopSetPolicy:
    """A random model's turn: sampled until one of a random set of stop ids, then a valid ending
    (``gpu_check.valid_endings``)."""

    def __init__(self, inner: Recorded, tokenizer: Any, real_stops: list[int], seed: int = 0) -> None:
        self.inner, self.tokenizer, self.stop_ids = inner, tokenizer, real_stops
        self.rng, self.calls = random.Random(seed), 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        self.calls += 1
        _, heads, tails = valid_endings(self.tokenizer, prompts, self.rng)
        room = params.max_new_tokens - max(len(h) + len(t) for h, t in zip(heads, tails)) - 1
        sampled = self.inner.generate(
            prompts,
            SamplingParams(max(1, room), params.temperature, params.top_p, params.top_k, params.generation_kwargs),
        )
        return [h + s + t + [self.stop_ids[0]] for h, s, t in zip(heads, sampled, tails)]

    def flush(self) -> None:
        self.inner.flush()


# --- the two set-ups ----------------------------------------------------------------------------


def demo_setup(backend: str, log: Log) -> Any:
    from erl_lite.embedded import demo_trainer

    trainer = demo_trainer(seed=0)
    trainer.args.diagnostics = "off"
    _use(trainer, Recorded(_sampler(backend, trainer.model, trainer.tokenizer, trainer.args), log), log)
    return trainer


def real_setup(backend: str, log: Log, folder: str, mean_reply: int) -> Any:
    from erl_lite.config import ERLConfig
    from erl_lite.envs import FrozenLake
    from erl_lite.models import load_policy
    from erl_lite.run.trainer import ERLTrainer
    from erl_lite.testing import qwen3_tokenizer

    tokenizer = qwen3_tokenizer()
    torch.manual_seed(0)  # the adapter's initialisation: the same for both backends
    model, tok = load_policy(folder, tokenizer, device="cpu")
    # The gpu preset cut to CPU scale: 2 tasks x G = 4, and shorter budgets (its 256-token turns and
    # 512-token reflections make one iteration's update ~15 min on one CPU thread at V = 151,936).
    cfg = ERLConfig.preset(
        "gpu",
        num_tasks_per_step=2,
        num_generations=4,
        eval_num_generations=2,
        max_completion_length=64,
        max_reflection_length=128,
        max_episode_length=1024,
        max_reflection_prompt_length=896,
        max_steps=10_000,
        eval_steps=0,
        output_dir=None,
        progress_bar=False,
        optim="adamw_torch",
        gradient_checkpointing=False,
        diagnostics="off",
    )
    cfg.preset_name = None  # built for a GPU; run on the CPU on purpose, at a small scale
    real_stops = HFGenerator(model, tok).stop_ids
    vocab = model.get_output_embeddings().weight.shape[0]
    stop_set = random.Random(0).sample(range(vocab), vocab // mean_reply)
    stops = [*real_stops, *[t for t in stop_set if t not in real_stops]]
    policy = StopSetPolicy(Recorded(_sampler(backend, model, tok, cfg, stops), log), tok, real_stops)
    env = FrozenLake(n_train=256, n_test=4)
    trainer = ERLTrainer(model=model, processing_class=tok, args=cfg, env=env, generator=policy)
    _use(trainer, policy, log)
    return trainer


def _sampler(backend: str, model: Any, tok: Any, cfg: Any, stops: list[int] | None = None) -> Any:
    if backend == "continuous":
        return ContinuousGenerator(model, tok, cache_tokens=cache_tokens_for(cfg), seed=cfg.seed, stop_ids=stops)
    if backend == "vllm":
        from erl_lite.integrations.vllm import VLLMGenerator

        return VLLMGenerator(model, tok, cache_tokens=cache_tokens_for(cfg), seed=cfg.seed, config=cfg, stop_ids=stops)
    return HFGenerator(model, tok, stop_ids=stops)


def _use(trainer: Any, generator: Any, log: Log) -> None:
    """Route the trainer's sampling through ``generator`` and name each call's phase from its bar."""
    trainer.generator = trainer.ctx.generator = generator
    bar = trainer.progress.bar

    def named(desc: str, total: int, unit: str = "seq") -> Any:
        if desc != "update":
            log.phase = desc
        return bar(desc, total, unit)

    trainer.progress.bar = named


def real_shape_model(folder: str) -> str:
    """A random Qwen2.5-0.5B-shaped model with 2 layers and the real vocabulary, saved to ``folder``."""
    from transformers import AutoModelForCausalLM

    from erl_lite.testing import qwen3_tokenizer

    tok = qwen3_tokenizer()
    config = hf_config("qwen2.5-0.5b-instruct", tok, tiny=False)
    config.num_hidden_layers = 2  # the real width and vocabulary; 2 of its 24 layers keep it to CPU seconds
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:2]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    return folder


# --- accounting ---------------------------------------------------------------------------------


def waste(call: Call) -> tuple[int, int, int]:
    """``model.generate``'s row-tokens for ``call``: (computed, padding, finished rows' decode steps).
    Prefill covers B x width, or, where the sampler runs a repeated prompt once, U x (width - 1) for the
    U distinct prompts and then the last column of all B rows (always a token: prompts are left-padded);
    each decode step feeds one token per row, for (longest reply - 1) steps."""
    rows, width = len(call.prompts), max(len(p) for p in call.prompts)
    steps = max(len(r) for r in call.replies) - 1
    prefill = _distinct(call) if call.shares_prompts else call.prompts
    padding = len(prefill) * width - sum(len(p) for p in prefill)
    computed = (len(prefill) * (width - 1) + rows) if call.shares_prompts else rows * width
    finished = rows * steps - sum(len(r) - 1 for r in call.replies)
    return computed + rows * steps, padding, finished


def _distinct(call: Call) -> list[list[int]]:
    """The call's distinct prompts (each run once by a sampler that shares them)."""
    return [list(p) for p in dict.fromkeys(tuple(p) for p in call.prompts)]


def generate_prefill(call: Call) -> int:
    """Prompt tokens ``model.generate`` prefilled for ``call``: every row's, or, shared, each distinct
    prompt's but its last token and then the last token of every row."""
    if not call.shares_prompts:
        return sum(len(p) for p in call.prompts)
    return sum(len(p) - 1 for p in _distinct(call)) + len(call.prompts)


def final_tokens(calls: list[Call]) -> int:
    """Tokens of the final sequences: a row's prompt + reply that no later prompt of the phase extends."""
    seqs = [p + r for c in calls for p, r in zip(c.prompts, c.replies)]
    by_length: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    for s in seqs:
        by_length[len(s)].add(tuple(s))
    extended = set()
    for c in calls:
        for prompt in c.prompts:
            for n in by_length:
                if n <= len(prompt) and tuple(prompt[:n]) in by_length[n]:
                    extended.add(tuple(prompt[:n]))
    return sum(len(s) for s in seqs if tuple(s) not in extended)


def summarize(logs: dict[str, Log], step_seconds: dict[str, list[float]]) -> list[dict[str, Any]]:
    """One row per phase (and one for the whole iteration) from both backends' logs."""
    rows = []
    for phase in (*PHASES, "iteration"):
        row: dict[str, Any] = {"phase": phase}
        for backend, log in logs.items():
            calls = [c for c in log.calls if c.phase == phase or (phase == "iteration" and c.phase != "evaluation")]
            if not calls:
                continue
            seconds = sum(c.seconds for c in calls)
            prompt = sum(len(p) for c in calls for p in c.prompts)
            prefilled = prompt - sum(c.reused for c in calls)
            final = final_tokens(calls)
            if backend == "generate":
                computed, padding, finished = map(sum, zip(*(waste(c) for c in calls)))
                row.update(
                    waste=(padding + finished) / computed,
                    padding=padding / computed,
                    finished=finished / computed,
                    calls=len(calls),
                )
            if backend == "generate":
                prefilled = sum(generate_prefill(c) for c in calls)
            row[f"{backend} prefill/final"] = prefilled / final
            row[f"{backend} s"] = seconds
            if backend == "vllm":
                row["vllm tok/s"] = sum(len(o) for c in calls for o in c.replies) / seconds
        if phase == "iteration":  # the whole iteration: its generation share, then all of its seconds
            row["share"] = row.get("generate s", 0.0) / sum(step_seconds["generate"])
            for backend in logs:
                row[f"{backend} s"] = sum(step_seconds[backend])
        elif phase != "evaluation":
            row["share"] = row.get("generate s", 0.0) / sum(step_seconds["generate"])
        for backend, name in (("continuous", "time ratio"), ("vllm", "vllm/generate")):
            if row.get("generate s") and row.get(f"{backend} s") is not None:
                row[name] = row[f"{backend} s"] / row["generate s"]
        if len(row) > 1:
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "phase",
        "calls",
        "waste",
        "padding",
        "finished",
        "generate prefill/final",
        "continuous prefill/final",
        "share",
        "generate s",
        "continuous s",
        "time ratio",
        "vllm s",
        "vllm/generate",
        "vllm tok/s",
    )

    def cell(v: Any) -> str:
        return "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))

    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(cell(r.get(h)) for h in head) + " |" for r in rows])


def measure(
    make: Any, rounds: int, backends: tuple[str, ...] = BACKENDS
) -> tuple[dict[str, Log], dict[str, list[float]]]:
    """``rounds`` x (one iteration + one evaluation) per backend, alternating backends."""
    logs = {b: Log() for b in backends}
    trainers = {b: make(b, logs[b]) for b in backends}
    steps: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(rounds):
        for b in backends if r % 2 == 0 else backends[::-1]:
            t0 = time.perf_counter()
            trainers[b].training_step()
            steps[b].append(time.perf_counter() - t0)
            t1 = time.perf_counter()
            trainers[b].evaluate()
            print(
                f"round {r + 1}/{rounds} {b}: iteration {steps[b][-1]:.1f} s, evaluation "
                f"{time.perf_counter() - t1:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    for b, t in trainers.items():
        t.generator.flush()
    return logs, steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--setups", nargs="+", default=["demo", "real"], choices=["demo", "real"])
    p.add_argument("--rounds", type=arg_types.whole(1), default=3)
    p.add_argument("--mean-reply", type=arg_types.whole(1), default=24, help="real: mean sampled tokens of a reply")
    a = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    _Reuse.install()
    from erl_lite.testing import find_qwen3_tokenizer

    for setup in a.setups:
        if setup == "real" and find_qwen3_tokenizer() is None:
            print("real: skipped (no Qwen3 tokenizer: shared/qwen3_tokenizer or $ERL_LITE_QWEN3_TOKENIZER)")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            if setup == "demo":
                make = demo_setup
            else:
                folder = real_shape_model(tmp)

                def make(b: str, log: Log, folder: str = folder) -> Any:
                    return real_setup(b, log, folder, a.mean_reply)

            backends = BACKENDS
            if setup == "demo" and "vllm" in BACKENDS and not torch.cuda.is_available():
                # vLLM's CPU attention has no kernel for the embedded model's 16-dim heads
                print("demo: vllm left out on the CPU (head_dim=16 unsupported)", file=sys.stderr)
                backends = tuple(b for b in BACKENDS if b != "vllm")
            logs, steps = measure(make, a.rounds, backends)
        print(
            f"\n## {setup}: {a.rounds} rounds, {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} thread(s)\n"
        )
        print(table(summarize(logs, steps)))


if __name__ == "__main__":
    main()
