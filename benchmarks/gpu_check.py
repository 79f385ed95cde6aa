"""GPU check: peak memory, seconds per step and per phase, and tokens/s of 4-bit QLoRA ERL and
RLVR on real Qwen architectures, on one CUDA GPU, in under 8 minutes.

For each architecture shipped in ``erl_lite/data/model_configs`` (Qwen2.5-0.5B-Instruct,
Qwen2.5-1.5B-Instruct, Qwen3-4B-Instruct-2507) it builds a randomly initialised model of the
exact shape (speed and memory do not depend on the weights' values, and the GPU machines may
not reach a model hub), saves it to a temporary folder, loads it back through
``erl_lite.models.load_policy(..., quantization="4bit")`` with the default LoRA adapter, and
runs ``--steps`` ERL and RLVR iterations of ``ERLTrainer`` on FrozenLake under the ``gpu``
preset. Two compute settings:

* ``fp16``: T4-like. ``load_policy`` is made to see a GPU without native bf16 (what it sees on
  a T4), so it takes the T4 path: fp32 weights outside the 4-bit layers, fp16 4-bit compute.
  Run for the models a T4 can hold (0.5B, 1.5B; see ``erl-lite budget``).
* ``bf16``: the native path of an Ampere-or-newer GPU, for every model.

A random model never emits an action, so a *forced-length policy* plays: at every turn the
real model samples exactly ``--turn-tokens`` tokens (its stop tokens suppressed through
``min_new_tokens``), and a valid action block (a seeded random direction) and the stop token
are appended; a reflection is ``--reflection-tokens`` sampled tokens inside
``<prompt>…</prompt>``. Episodes therefore have the lengths of a real model's (a short
reasoning per turn, up to 8 turns), and the update runs on sequences of those lengths.
Prompts are tokenized with the real Qwen3 tokenizer and chat template when
``shared/qwen3_tokenizer`` is found (see ``erl_lite.testing.find_qwen3_tokenizer``); Qwen2.5
uses the same vocabulary and ChatML turns.

The table: model, compute dtype, mode, generation backend (``ERLConfig.generation_backend``: every
row runs with ``generate``, ``continuous`` batching and, when installed, ``vllm`` (its rows load the
policy unquantized), ``--backends`` to choose), measured peak
GPU memory of the step
(``memory/peak_gpu_gb``), ``erl_lite.integrations.budget``'s worst-case estimate for the same settings,
seconds per step and per phase (``time/*``), tokens per step (``tokens/*``: sampled plus the
appended actions), the model's own sampled tokens per second of the sampling phases (the
history's ``tokens/per_second`` also counts the appended actions, so it reads a little higher)
and the mean sequence length of a first attempt. Rows that
would start after ``--time-budget`` seconds are listed as skipped, so the whole run stays
under 8 minutes.

``--cpu-smoke`` runs the same code on the CPU at tiny scale (2-layer, 64-wide models of each
architecture family with the tiny character tokenizer, one task, one step, a few tokens per
turn); the test suite runs it so this script never rots.

Departures from the paper: none in the algorithm; this measures cost, not learning.

Usage:
    python benchmarks/gpu_check.py                      # on a CUDA machine
    python benchmarks/gpu_check.py --cpu-smoke          # anywhere, seconds
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import random
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, Iterator

import torch

# The checkout this script lives in, ahead of any installed erl_lite.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from erl_lite.cli import arg_types
from erl_lite.config import ERLConfig
from erl_lite.core.prompts import REFLECTION_REQUEST
from erl_lite.engine.continuous import ContinuousGenerator, cache_tokens_for
from erl_lite.engine.generation import HFGenerator, SamplingParams
from erl_lite.envs import FrozenLake
from erl_lite.envs.grid import ACTIONS
from erl_lite.integrations.budget import MODEL_CONFIGS, ModelShape, estimate_memory, model_config

T4_MODELS = MODEL_CONFIGS[:2]  # what a 15 GiB T4 can hold under the gpu preset (erl_lite.integrations.budget)
#: vLLM joins when it is installed; its rows load the policy unquantized (it refuses a 4-bit base).
BACKENDS = ("generate", "continuous") + (("vllm",) if importlib.util.find_spec("vllm") else ())
COLUMNS = (
    "model",
    "dtype",
    "mode",
    "backend",
    "peak GiB",
    "est. GiB",
    "s/step",
    "first",
    "reflect",
    "second",
    "update",
    "tok/step",
    "tok/s",
    "len y1",
)


@dataclass
class Plan:
    """What to run: the CUDA defaults, or ``--cpu-smoke``'s tiny version of the same."""

    runs: list[tuple[str, str]]  # (architecture, dtype label), in order
    modes: tuple[str, ...] = ("erl", "rlvr")
    backends: tuple[str, ...] = BACKENDS  # ERLConfig.generation_backend, each measured
    steps: int = 1
    tasks: int | None = None  # None: the gpu preset's num_tasks_per_step
    turn_tokens: int = 64
    reflection_tokens: int = 256
    tiny: bool = False
    device: str = "cuda"
    time_budget: float = 360.0


def gpu_plan(a: argparse.Namespace) -> Plan:
    runs = [(m, d) for m in MODEL_CONFIGS for d in ("bf16", "fp16") if d == "bf16" or m in T4_MODELS]
    return Plan(
        runs=runs,
        steps=a.steps,
        tasks=a.tasks,
        turn_tokens=a.turn_tokens,
        reflection_tokens=a.reflection_tokens,
        time_budget=a.time_budget,
    )


def smoke_plan(a: argparse.Namespace) -> Plan:
    # One model per family (the two Qwen2.5 are the same family at tiny width), through both
    # loading paths; the CPU computes 4-bit layers in fp32 whichever path loaded them.
    runs = [("qwen2.5-0.5b-instruct", "fp16"), ("qwen3-4b-instruct-2507", "bf16")]
    return Plan(
        runs=runs,
        steps=1,
        tasks=1,
        turn_tokens=4,
        reflection_tokens=8,
        tiny=True,
        device="cpu",
        time_budget=a.time_budget,
    )


# --- the forced-length policy --------------------------------------------------------------------


class ForcedLengthGenerator:
    """The real model samples exactly ``turn_tokens`` tokens per reply; a valid ending follows.

    ``backend``: ``generate`` (stop tokens suppressed through ``min_new_tokens``) or ``continuous``
    (no stop id at all, so each row samples exactly its ``max_new_tokens``; the manager cannot honour
    ``min_new_tokens``), with a paged cache of ``cache_tokens``.

    Attempt turns end with a random FrozenLake action block; reflections are wrapped in
    ``<prompt>…</prompt>`` (``reflection_tokens`` sampled tokens). Every reply ends with the
    first stop token, as a chat model's turn does. ``sampled`` counts the model's own tokens.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        turn_tokens: int,
        reflection_tokens: int,
        seed: int = 0,
        backend: str = "generate",
        cache_tokens: int = 65_536,
        args: Any = None,
    ):
        self.stop_ids = HFGenerator(model, tokenizer).stop_ids
        self.backend = backend
        self.inner = (
            ContinuousGenerator(model, tokenizer, cache_tokens=cache_tokens, seed=seed, stop_ids=[-1])
            if backend == "continuous"
            else HFGenerator(model, tokenizer)
        )
        if backend == "vllm":  # stops at the model's own stop ids too: its rows may sample fewer tokens
            from erl_lite.integrations.vllm import VLLMGenerator

            self.inner = VLLMGenerator(model, tokenizer, cache_tokens=cache_tokens, seed=seed, config=args)
        self.tokenizer, self.model = tokenizer, model
        self.turn_tokens, self.reflection_tokens = turn_tokens, reflection_tokens
        self.rng = random.Random(seed)
        self.calls = self.sampled = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        self.calls += 1
        reflecting, heads, tails = valid_endings(self.tokenizer, prompts, self.rng)
        target = self.reflection_tokens if reflecting else self.turn_tokens
        room = params.max_new_tokens - max(len(h) + len(t) for h, t in zip(heads, tails)) - 1
        n = max(1, min(target, room))
        with _min_new_tokens(self.model, n) if self.backend == "generate" else nullcontext():
            sampled = self.inner.generate(prompts, replace(params, max_new_tokens=n))
        self.sampled += sum(len(s) for s in sampled)
        return [h + s + t + [self.stop_ids[0]] for h, s, t in zip(heads, sampled, tails)]

    def flush(self) -> None:
        flush = getattr(self.inner, "flush", None)
        if flush is not None:
            flush()


def valid_endings(
    tokenizer: Any, prompts: list[list[int]], rng: random.Random
) -> tuple[bool, list[list[int]], list[list[int]]]:
    """``(reflecting, heads, tails)`` that make a random model's sampled tokens a valid reply to
    ``prompts``: ``<prompt>`` … ``</prompt>`` around a reflection, a random FrozenLake action after a turn."""

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    if REFLECTION_REQUEST[:48] in tokenizer.decode(prompts[0], skip_special_tokens=False):
        return True, [ids("<prompt>")] * len(prompts), [ids("</prompt>")] * len(prompts)
    return False, [[]] * len(prompts), [ids(f"\n```{rng.choice(list(ACTIONS))}```") for _ in prompts]


@contextmanager
def _min_new_tokens(model: Any, n: int) -> Iterator[None]:
    """Make ``generate`` suppress the stop tokens until ``n`` new tokens exist (so with
    ``max_new_tokens = n`` every row gets exactly ``n``)."""
    from erl_lite.engine.policy import base_model as _base_model

    config = _base_model(model).generation_config
    old = config.min_new_tokens
    config.min_new_tokens = n
    try:
        yield
    finally:
        config.min_new_tokens = old


# --- models --------------------------------------------------------------------------------------


def hf_config(name: str, tokenizer: Any, tiny: bool) -> Any:
    """The transformers config of a shipped architecture; ``tiny`` keeps its family, tying and
    rope but shrinks it to 2 layers of width 64 (every width a multiple of 64, for 4-bit on CPU)."""
    from transformers import AutoConfig

    fields = model_config(name)
    if tiny:
        fields.update(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
            vocab_size=len(tokenizer),
        )
        if "head_dim" in fields:
            fields["head_dim"] = 32
    fields.update(
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id
    )
    fields["vocab_size"] = max(fields["vocab_size"], len(tokenizer))
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def save_random_model(name: str, folder: str, tokenizer: Any, tiny: bool, device: str) -> str:
    """A randomly initialised model of architecture ``name``, saved (bf16) to ``folder``."""
    from transformers import AutoModelForCausalLM

    config = hf_config(name, tokenizer, tiny)
    with torch.device(device):  # initialise on the GPU: seconds, not minutes, at 4B
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32 if tiny else torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    del model
    _free()
    return folder


@contextmanager
def t4_like(dtype: str) -> Iterator[None]:
    """For ``fp16``: make ``load_policy`` see a GPU without native bf16, as on a T4."""
    if dtype != "fp16":
        yield
        return
    from unittest import mock

    with mock.patch("erl_lite.models._native_bf16", lambda device: False):
        yield


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- one row -------------------------------------------------------------------------------------


def run_config(plan: Plan, mode: str) -> ERLConfig:
    """The ``gpu`` preset, in ``mode``, for ``plan.steps`` iterations without evaluation."""
    overrides: dict[str, Any] = dict(mode=mode, max_steps=plan.steps, eval_steps=0, progress_bar=False)
    if plan.tasks is not None:
        overrides["num_tasks_per_step"] = plan.tasks
    if plan.tiny:  # CPU: short budgets keep the 4-bit CPU path at seconds
        overrides.update(
            max_completion_length=32,
            max_episode_length=1024,
            max_reflection_length=32,
            max_reflection_prompt_length=768,
            num_generations=2,
        )
    # output_dir=None: every mode runs in memory (no files, no run-folder clash between modes)
    return ERLConfig.preset("gpu", output_dir=None, **overrides)


def run_mode(
    model: Any, tokenizer: Any, plan: Plan, mode: str, name: str, dtype: str, backend: str = "generate"
) -> dict[str, Any]:
    """``plan.steps`` iterations of ``mode`` sampled by ``backend``; the last iteration's figures as one row."""
    from erl_lite.run.trainer import ERLTrainer

    cfg = run_config(plan, mode)
    # a few hundred generated maps are plenty for a few steps (the default 10,000 take seconds)
    env = FrozenLake.small(max_actions=3, n_train=64, n_test=4) if plan.tiny else FrozenLake(n_train=256, n_test=4)
    generator = ForcedLengthGenerator(
        model,
        tokenizer,
        plan.turn_tokens,
        plan.reflection_tokens,
        seed=cfg.seed,
        backend=backend,
        cache_tokens=cache_tokens_for(cfg),
        args=cfg,
    )
    sampled = []  # the model's own sampled tokens at the end of each step (not the appended actions)
    trainer = ERLTrainer(
        model=model,
        processing_class=tokenizer,
        args=cfg,
        env=env,
        generator=generator,
        callbacks=[lambda t, record: sampled.append(generator.sampled)],
    )
    trainer.train()
    r = trainer.history.of_kind("train")[-1]
    first = trainer.last_outcome.first_attempts
    tokens = sum(r.get(f"tokens/{k}") or 0.0 for k in ("first", "reflection", "second"))
    sampling = r["time/first"] + (r.get("time/reflect") or 0.0) + (r.get("time/second") or 0.0)
    own = sampled[-1] - (sampled[-2] if len(sampled) > 1 else 0)
    row = {
        "model": name,
        "dtype": dtype if plan.device == "cuda" else f"{dtype} path",
        "mode": mode,
        "backend": backend,
        "peak GiB": r.get("memory/peak_gpu_gb"),
        "est. GiB": estimate_memory(cfg, ModelShape.load(name)).peak_gib,
        "s/step": r["time/step"],
        "first": r["time/first"],
        "reflect": r.get("time/reflect"),
        "second": r.get("time/second"),
        "update": r["time/update"],
        "tok/step": tokens,
        "tok/s": own / sampling,
        "tok/s (history)": r["tokens/per_second"],
        "len y1": sum(len(a.prompt_ids) + len(a.completion_ids) for a in first) / len(first),
    }
    del trainer
    _free()
    return row


def run(plan: Plan) -> list[dict[str, Any]]:
    """Every (architecture, dtype) of the plan, each mode with each backend; skipped rows past the budget."""
    from erl_lite.models import load_policy
    from erl_lite.testing import find_qwen3_tokenizer, qwen3_tokenizer, tiny_tokenizer

    tokenizer = tiny_tokenizer() if plan.tiny or find_qwen3_tokenizer() is None else qwen3_tokenizer()
    start, rows = time.perf_counter(), []
    by_model: dict[str, list[str]] = {}
    for name, dtype in plan.runs:
        by_model.setdefault(name, []).append(dtype)
    for name, dtypes in by_model.items():
        with tempfile.TemporaryDirectory() as tmp:
            saved = None
            for dtype in dtypes:
                if time.perf_counter() - start > plan.time_budget:
                    rows += [
                        {"model": name, "dtype": dtype, "mode": m, "backend": b, "skipped": "time budget"}
                        for m in plan.modes
                        for b in plan.backends
                    ]
                    continue
                saved = saved or save_random_model(name, tmp, tokenizer, plan.tiny, plan.device)
                with t4_like(dtype):
                    model, tok = load_policy(
                        saved, tokenizer, quantization="4bit", device=plan.device, gradient_checkpointing=True
                    )
                for mode, backend in [(m, b) for m in plan.modes for b in plan.backends]:
                    if time.perf_counter() - start > plan.time_budget:
                        rows.append(
                            {"model": name, "dtype": dtype, "mode": mode, "backend": backend, "skipped": "time budget"}
                        )
                        continue
                    try:
                        policy = model
                        if backend == "vllm":  # unquantized, in the row's dtype (fp32 on the CPU)
                            torch_dtype = (
                                {"fp16": "float16", "bf16": "bfloat16"}[dtype] if plan.device == "cuda" else "float32"
                            )
                            policy, _ = load_policy(
                                saved, tokenizer, device=plan.device, dtype=torch_dtype, gradient_checkpointing=True
                            )
                        rows.append(run_mode(policy, tok, plan, mode, name, dtype, backend))
                        print(table(rows[-1:]).splitlines()[-1], flush=True)  # progress: each row as it ends
                    except Exception as err:  # keep the other rows of a GPU run; the smoke test must see it
                        if plan.tiny:
                            raise
                        rows.append(
                            {
                                "model": name,
                                "dtype": dtype,
                                "mode": mode,
                                "backend": backend,
                                "skipped": f"failed: {type(err).__name__}: {str(err)[:80]}",
                            }
                        )
                        _free()
                del model
                _free()
    return rows


# --- report --------------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (``-`` where a figure does not apply)."""

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        return f"{v:.2f}" if isinstance(v, float) and abs(v) < 100 else (f"{v:.0f}" if isinstance(v, float) else str(v))

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['model']} | {r['dtype']} | {r['mode']} | {r['backend']} | skipped ({r['skipped']}) |")
        else:
            lines.append("| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |")
    return "\n".join(lines)


def header(plan: Plan) -> str:
    """What ran: device, versions, tokenizer, settings."""
    import transformers

    from erl_lite.testing import find_qwen3_tokenizer

    device = torch.cuda.get_device_name() if plan.device == "cuda" else "CPU (smoke run, tiny models)"
    tok = "tiny character tokenizer" if plan.tiny or find_qwen3_tokenizer() is None else "Qwen3 tokenizer"
    cfg = run_config(plan, "erl")
    return (
        f"{time.strftime('%Y-%m-%d')} | {device} | torch {torch.__version__} | transformers "
        f"{transformers.__version__} | {tok} | gpu preset: {cfg.num_tasks_per_step} tasks/step, micro-batch "
        f"{cfg.per_device_train_batch_size}, optim {cfg.optim} | {plan.turn_tokens} tokens/turn, "
        f"{plan.reflection_tokens} tokens/reflection | {plan.steps} step(s), last one shown"
    )


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Parse the flags, run, print the table; returns the rows."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="tiny models on the CPU (seconds; what the tests run)")
    p.add_argument("--steps", type=arg_types.whole(1), default=1, help="iterations per row (the last is reported)")
    p.add_argument("--tasks", type=arg_types.whole(1), default=None, help="tasks per step (default: the gpu preset's)")
    p.add_argument("--turn-tokens", type=arg_types.whole(1), default=64, help="tokens the model samples per turn")
    p.add_argument(
        "--reflection-tokens", type=arg_types.whole(1), default=256, help="tokens the model samples per reflection"
    )
    p.add_argument(
        "--backends",
        nargs="+",
        default=list(Plan.backends),
        choices=["generate", "continuous", "vllm"],
        help="generation backends, each a row (default: all installed)",
    )
    p.add_argument("--models", nargs="+", default=list(MODEL_CONFIGS), choices=MODEL_CONFIGS, help="default: all")
    p.add_argument("--dtypes", nargs="+", default=["bf16", "fp16"], choices=["bf16", "fp16"], help="default: both")
    p.add_argument("--modes", nargs="+", default=list(Plan.modes), choices=list(Plan.modes), help="default: both")
    p.add_argument(
        "--time-budget",
        type=arg_types.number(0, above=True),
        default=360.0,
        help="start no new row after this many seconds (an ERL row took 214 s at 4B on an H200)",
    )
    a = p.parse_args(argv)
    if not a.cpu_smoke and not torch.cuda.is_available():
        raise SystemExit("gpu_check.py needs a CUDA device; run with --cpu-smoke to check the code path on CPU")
    plan = smoke_plan(a) if a.cpu_smoke else gpu_plan(a)
    runs = [(m, d) for m, d in plan.runs if m in a.models and d in a.dtypes]
    if not runs:
        raise SystemExit(f"--models and --dtypes select none of this plan's rows: {plan.runs}")
    plan = replace(plan, runs=runs, modes=tuple(a.modes), backends=tuple(a.backends))
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    t0 = time.perf_counter()
    with torch.random.fork_rng(devices=[]) if plan.tiny else nullcontext():
        rows = run(plan)
    print(header(plan))
    print(table(rows))
    print(f"whole run {time.perf_counter() - t0:.0f} s")
    return rows


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
