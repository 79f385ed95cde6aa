"""Step time: erl_lite's ERL step (G = 4) and RLVR step (G = 10) against TRL's GRPOTrainer.

In one process, on the same offline tiny model (erl_lite's embedded 2-layer Llama, saved to a
temporary folder and loaded from there by both libraries), this times one training iteration
of three trainers, interleaved so that machine noise falls on all three alike::

    warm-up:  TRL  RLVR  ERL          (discarded)
    timed:    TRL  RLVR  ERL  TRL  RLVR  ERL  ...   (--steps rounds)

and prints the median seconds per step, the per-phase split of erl_lite's steps, the tokens
each role generated, ERL's gate rate, and the ratios ``erl_lite_rlvr / trl_grpo`` (target
≤ 0.8) and ``erl / erl_lite_rlvr`` (target ≤ 1.6 at a gate rate near 50 %).

What is matched between erl_lite RLVR and TRL (both sides set explicitly, not left to defaults):
the model, its float32 weights and the LoRA adapter (r 16, alpha 32, no dropout, every linear
layer); the chat-formatted prompts; G = 10; ``--tasks`` prompts per step; sampling (T 0.7,
top-p 1, no top-k); ``--max-completion-length``; the KL term (``--beta``, default 0.001, the
paper's; the reference is the model with its adapter disabled on both sides); PPO clipping
0.2 / 0.28; the loss aggregation (token mean over the whole batch: erl_lite ``token_mean``,
TRL ``dapo``); AdamW (lr 1e-6, weight decay 0.01, constant schedule, gradient clip 1.0);
micro-batches of ``--micro-batch`` rows with gradient accumulation; one optimizer step per
generation batch; no gradient checkpointing, no logging, no checkpoints, CPU, one thread.
Left as each library does it: erl_lite's dual clip (a ``where`` on the loss, no extra pass)
and TRL's entropy metric. The ERL trainer gets the same settings with G = 4, reflections capped
at ``--max-completion-length`` new tokens too, and every other ERL field at its default
(single-slot memory, internalization on).

The reward is honest but controlled, since the random model cannot solve anything: a reply
succeeds when the sum of its character codes is even — a fixed function of the text that
holds for about half of any varied set of replies, so ERL's gate sends about half of the
first attempts on to reflection. Lengths are left to the model on both sides (the same
model, so the same stopping odds); the tokens generated are reported so this can be checked.

Departures from the paper: none in the algorithm — this measures cost, not learning. A random
tiny model on one CPU thread weighs fixed per-call overheads (one ``generate`` per phase, one
forward per micro-batch) far more than a GPU run of a real model would, and its character-level
tokenizer makes ERL's reflection context about four times longer in tokens than a BPE
tokenizer would; ``benchmarks/README.md`` discusses what that does to the ERL ratio.

Models (``--model``): ``tiny`` (a random 2-layer model with a character tokenizer), ``embedded`` (the packaged model,
a word-level tokenizer and realistic reply lengths) and ``qwen-shape`` (a random model of Qwen2.5-0.5B's width and
vocabulary, V = 151,936, cut to 2 layers, with the Qwen3 tokenizer and chat template, as
``benchmarks/rollout_waste.py`` builds it; skipped without the tokenizer).

Usage:
    OMP_NUM_THREADS=1 python benchmarks/step_time.py --profile rlvr|erl [--steps 3]   # per-phase split and cProfile
    OMP_NUM_THREADS=1 python benchmarks/step_time.py --merged-sampling --model embedded   # the adapter merged or not
    OMP_NUM_THREADS=1 python benchmarks/step_time.py [--steps 5] [--tasks 4] [--model tiny|embedded|qwen-shape]
        [--max-completion-length 32] [--micro-batch 10] [--out results.json]
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before torch is imported; 2-core machines swing otherwise

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # rollout_waste, beside this script
from erl_lite.cli import arg_types  # noqa: E402

torch.set_num_threads(1)

RLVR_G, ERL_G = 10, 4
NAMES = ("trl_grpo", "erl_lite_rlvr", "erl_lite_erl")
PHASES = ("first", "reflect", "second", "update")
ROLES = ("first", "reflection", "second")


@dataclass
class Settings:
    """What both libraries are given (see the module docstring)."""

    steps: int = 5
    tasks: int = 4
    max_completion_length: int = 32
    micro_batch: int = 10
    beta: float = 0.001
    temperature: float = 0.7
    learning_rate: float = 1e-6
    lora_r: int = 16
    lora_alpha: int = 32
    seed: int = 0
    model: str = "tiny"


def lora_config(s: Settings) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=s.lora_r,
        lora_alpha=s.lora_alpha,
        lora_dropout=0.0,
        target_modules="all-linear",
        bias="none",
        task_type="CAUSAL_LM",
    )


def make_rows(n: int) -> list[dict[str, Any]]:
    """``n`` chat prompts of identical length, so task order cannot change the cost of a step."""
    return [
        {"prompt": [{"role": "user", "content": f"Write one line of text, any text. Task {i:04d}."}]} for i in range(n)
    ]


def reply_text(completion: Any) -> str:
    """A completion as text (chat completions arrive as ``[{"role": "assistant", ...}]``)."""
    return completion[-1]["content"] if isinstance(completion, list) else str(completion)


def even_code_sum(prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
    """1.0 when the sum of the reply's character codes is even: ~half of varied replies."""
    return [float(sum(map(ord, reply_text(c))) % 2 == 0) for c in completions]


class TokenCountingReward:
    """``even_code_sum`` for TRL, also recording the tokens TRL generated per batch."""

    __name__ = "even_code_sum"

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def __call__(
        self, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], **kw: Any
    ) -> list[float]:
        self.tokens.append(sum(len(ids) for ids in completion_ids))
        return even_code_sum(prompts, completions)


# --- the three trainers --------------------------------------------------------------------------


def erl_lite_trainer(path: str, rows: list[dict], s: Settings, mode: str) -> Any:
    """An ERLTrainer in ``mode`` (``rlvr`` with G = 10, ``erl`` with G = 4) on its own model copy."""
    from erl_lite.config import ERLConfig
    from erl_lite.engine.generation import model_context_length
    from erl_lite.models import load_policy
    from erl_lite.run.trainer import ERLTrainer

    model, tok = load_policy(path, peft=lora_config(s), device="cpu", dtype=torch.float32)
    # A reflection request and its reply fit the model (the embedded model reads 2,048 positions).
    context = model_context_length(model, tok) or 4096
    cfg = ERLConfig(
        max_reflection_prompt_length=min(2048, context - s.max_completion_length),
        mode=mode,
        num_generations=RLVR_G if mode == "rlvr" else ERL_G,
        num_tasks_per_step=s.tasks,
        max_steps=s.steps + 1,
        seed=s.seed,
        temperature=s.temperature,
        top_p=1.0,
        top_k=0,
        max_completion_length=s.max_completion_length,
        max_reflection_length=s.max_completion_length,
        beta=s.beta,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="token_mean",
        learning_rate=s.learning_rate,
        weight_decay=0.01,
        max_grad_norm=1.0,
        steps_per_generation=1,
        per_device_train_batch_size=s.micro_batch,
        eval_steps=0,
        progress_bar=False,
        output_dir=None,  # timed in memory: no checkpoint or final-model write inside the timing
    )
    return ERLTrainer(model=model, processing_class=tok, args=cfg, reward_funcs=even_code_sum, train_dataset=rows)


def trl_trainer(
    path: str, rows: list[dict], s: Settings, out_dir: str, reward: TokenCountingReward, callback: Any
) -> Any:
    """TRL's GRPOTrainer at the RLVR settings: one generation batch = one optimizer step."""
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    batch = s.tasks * RLVR_G
    args = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        log_completions=False,
        dataloader_num_workers=0,
        seed=s.seed,
        max_steps=s.steps + 1,
        num_generations=RLVR_G,
        per_device_train_batch_size=s.micro_batch,
        gradient_accumulation_steps=batch // s.micro_batch,
        max_completion_length=s.max_completion_length,
        temperature=s.temperature,
        top_p=1.0,
        top_k=0,
        beta=s.beta,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="group",
        num_iterations=1,
        learning_rate=s.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.01,
        max_grad_norm=1.0,
        optim="adamw_torch",
        gradient_checkpointing=False,
        model_init_kwargs={"dtype": "float32"},
    )
    trainer = GRPOTrainer(
        model=path,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(path),
        peft_config=lora_config(s),
        callbacks=[callback],
    )
    trainer.remove_callback(PrinterCallback)  # it prints the end-of-training summary
    return trainer


def interleaver(others: list[tuple[str, Callable[[], None]]]) -> Any:
    """A TRL callback that, after each TRL optimizer step, runs one step of each other trainer.

    TRL's loop drives the interleaving; a TRL step is timed from the end of the previous round
    to its own ``on_step_end``, so it includes TRL's data loading and bookkeeping between steps.
    """
    from transformers import TrainerCallback

    class Interleave(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: dict[str, list[float]] = {name: [] for name in NAMES}
            self.mark = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.mark = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.seconds["trl_grpo"].append(time.perf_counter() - self.mark)
            for name, step in others:
                t0 = time.perf_counter()
                step()
                self.seconds[name].append(time.perf_counter() - t0)
            self.mark = time.perf_counter()

    return Interleave()


# --- running and reporting ------------------------------------------------------------------------


def run(s: Settings) -> dict[str, Any]:
    """Build the three trainers, run ``1 + s.steps`` interleaved rounds, return the results."""
    if (s.tasks * RLVR_G) % s.micro_batch:
        raise SystemExit(f"--micro-batch must divide tasks x {RLVR_G} = {s.tasks * RLVR_G}")
    rows = make_rows(s.tasks * (s.steps + 1))
    with tempfile.TemporaryDirectory() as tmp:
        path = model_path(s.model, tmp)
        rlvr, erl = erl_lite_trainer(path, rows, s, "rlvr"), erl_lite_trainer(path, rows, s, "erl")
        reward = TokenCountingReward()
        clock = interleaver([("erl_lite_rlvr", rlvr.training_step), ("erl_lite_erl", erl.training_step)])
        trl = trl_trainer(path, rows, s, os.path.join(tmp, "trl"), reward, clock)
        t0 = time.perf_counter()
        trl.train()
        wall = time.perf_counter() - t0
    timed = {name: clock.seconds[name][1:] for name in NAMES}  # drop the warm-up round
    out: dict[str, Any] = {
        "settings": asdict(s),
        "wall_seconds": wall,
        "seconds": timed,
        "median": {k: statistics.median(v) for k, v in timed.items()},
    }
    med = out["median"]
    out["ratios"] = {
        "erl_lite_rlvr/trl_grpo": med["erl_lite_rlvr"] / med["trl_grpo"],
        "erl/erl_lite_rlvr": med["erl_lite_erl"] / med["erl_lite_rlvr"],
    }
    out["trl_tokens_per_step"] = statistics.mean(reward.tokens[1:])
    for name, trainer in (("erl_lite_rlvr", rlvr), ("erl_lite_erl", erl)):
        out[name] = history_summary(trainer.history.of_kind("train")[1:])
    return out


def history_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Median phase times, mean tokens per role, mean gate rate and optimizer steps per step."""

    def values(key: str) -> list[float]:
        return [r[key] for r in records if r.get(key) is not None]

    phases = {p: statistics.median(values(f"time/{p}")) if values(f"time/{p}") else 0.0 for p in PHASES}
    tokens = {r: statistics.mean(values(f"tokens/{r}")) for r in ROLES}
    gate = values("gate/rate")
    return {
        "phase_seconds": phases,
        "tokens_per_step": tokens,
        "gate_rate": statistics.mean(gate) if gate else None,
        "optimizer_steps": statistics.mean(values("optim/steps")),
    }


def report(r: dict[str, Any]) -> str:
    """The results as a small text table."""
    med, s = r["median"], r["settings"]
    lines = [
        f"step time, median of {s['steps']} steps after 1 warm-up; {s['tasks']} tasks/step, "
        f"max_completion_length {s['max_completion_length']}, beta {s['beta']}, "
        f"micro-batch {s['micro_batch']}, 1 thread",
        f"{'trainer':<22}{'s/step':>8}{'first':>8}{'reflect':>8}{'second':>8}{'update':>8}"
        f"{'tok y1':>8}{'tok Δ':>8}{'tok y2':>8}",
    ]
    lines.append(
        f"{'trl GRPOTrainer G=10':<22}{med['trl_grpo']:>8.3f}"
        + " " * 32
        + f"{r['trl_tokens_per_step']:>8.0f}{'-':>8}{'-':>8}"
    )
    for name, label in (("erl_lite_rlvr", "erl_lite rlvr G=10"), ("erl_lite_erl", "erl_lite erl G=4")):
        h = r[name]
        ph, tk = h["phase_seconds"], h["tokens_per_step"]
        lines.append(
            f"{label:<22}{med[name]:>8.3f}"
            + "".join(f"{ph[p]:>8.3f}" for p in PHASES)
            + "".join(f"{tk[x]:>8.0f}" for x in ROLES)
        )
    gate = r["erl_lite_erl"]["gate_rate"] or 0.0
    a, b = r["ratios"]["erl_lite_rlvr/trl_grpo"], r["ratios"]["erl/erl_lite_rlvr"]
    lines += [
        f"erl_lite_rlvr / trl_grpo = {a:.2f}  (target <= 0.8: {'met' if a <= 0.8 else 'MISSED'})",
        f"erl / erl_lite_rlvr      = {b:.2f}  (target <= 1.6: {'met' if b <= 1.6 else 'MISSED'}; gate rate {gate:.2f})",
        f"whole run {r['wall_seconds']:.0f} s",
    ]
    return "\n".join(lines)


def model_path(model: str, tmp: str) -> str:
    """The folder both libraries load ``model`` from (see the module docstring)."""
    if model == "embedded":
        from erl_lite.embedded import EMBEDDED_DIR

        return str(EMBEDDED_DIR)
    if model == "qwen-shape":
        from rollout_waste import real_shape_model

        from erl_lite.testing import qwen3_tokenizer

        folder = real_shape_model(os.path.join(tmp, "qwen-shape"))
        qwen3_tokenizer().save_pretrained(folder)  # TRL loads the tokenizer from the folder
        return folder
    from erl_lite.testing import save_tiny_model

    return save_tiny_model(os.path.join(tmp, "tiny"))


def micro_batch_table(rows: list[Any], size: int) -> str:
    """The update's micro-batches of ``rows``: roles, temperature, longest context P and completion L, and the cells
    ``B × (P + L)`` the decoder runs (forward and backward), what the update's time follows."""
    from collections import Counter

    from erl_lite.engine.batching import micro_batches

    lines, total = ["rows  roles                                     T      P    L  cells"], 0
    for chunk in micro_batches(rows, size):
        context, completion = max(len(r.prompt_ids) for r in chunk), max(len(r.completion_ids) for r in chunk)
        cells = len(chunk) * (context + completion)
        total += cells
        roles = ", ".join(f"{role} {n}" for role, n in Counter(r.role for r in chunk).items())
        temperature = "run" if chunk[0].temperature is None else chunk[0].temperature
        lines.append(f"{len(chunk):>4}  {roles:<40}{temperature:>5}{context:>6}{completion:>5}{cells:>7}")
    return "\n".join(lines + [f"cells in all: {total}"])


def merged_sampling(s: Settings, rounds: int = 6) -> None:
    """First-attempt sampling (``s.tasks`` × G = 4 prompts) with the LoRA adapter as layers against merged into the
    weights (peft's ``merge_adapter``), interleaved; the adapter gets random non-zero B so merging changes the
    weights. Prints the median seconds of each and whether they drew the same tokens."""
    from erl_lite.engine.chat import encode, render
    from erl_lite.engine.generation import HFGenerator, SamplingParams

    with tempfile.TemporaryDirectory() as tmp:
        trainer = erl_lite_trainer(model_path(s.model, tmp), make_rows(s.tasks), s, "erl")
    model, tok = trainer.model, trainer.tokenizer
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.01)
    rows = [r["prompt"] for r in make_rows(s.tasks)] * ERL_G
    prompts = [encode(render(messages, tok), tok) for messages in rows]
    params = SamplingParams(max_new_tokens=s.max_completion_length, temperature=s.temperature, top_p=1.0, top_k=0)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    drawn: dict[bool, Any] = {}
    for _ in range(rounds):
        for merged in (False, True):
            if merged:
                model.merge_adapter()
            torch.manual_seed(s.seed)
            t0 = time.perf_counter()
            drawn[merged] = HFGenerator(model, tok).generate(prompts, params)
            seconds[merged].append(time.perf_counter() - t0)
            if merged:
                model.unmerge_adapter()
    layers, merged = (statistics.median(seconds[m][1:]) for m in (False, True))
    print(
        f"sampling {len(prompts)} prompts: adapter as layers {layers:.3f} s, merged {merged:.3f} s "
        f"({merged / layers:.2f}); the same tokens: {drawn[False] == drawn[True]}"
    )


def profile(s: Settings, mode: str, top: int = 30) -> None:
    """The per-phase split of ``s.steps`` erl_lite steps in ``mode`` (after one warm-up) and their cProfile."""
    import cProfile
    import pstats

    from erl_lite.core.update import PolicyUpdater

    with tempfile.TemporaryDirectory() as tmp:
        trainer = erl_lite_trainer(model_path(s.model, tmp), make_rows(s.tasks * (s.steps + 1)), s, mode)
        trainer.training_step()
        updates: list[list[Any]] = []  # each update's rows, to show the micro-batches the last one ran
        real_update = PolicyUpdater.update
        PolicyUpdater.update = lambda self, rows, **kw: (updates.append(list(rows)), real_update(self, rows, **kw))[1]
        profiler = cProfile.Profile()
        try:
            profiler.enable()
            for _ in range(s.steps):
                trainer.training_step()
        finally:
            profiler.disable()
            PolicyUpdater.update = real_update
    summary = history_summary(trainer.history.of_kind("train")[1:])
    print(f"{mode}, {s.model} model, {s.steps} steps:", json.dumps(summary))
    print(micro_batch_table(updates[-1], s.micro_batch))
    pstats.Stats(profiler).sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(top)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=arg_types.whole(1), default=5, help="timed steps per trainer (after 1 warm-up)")
    p.add_argument("--tasks", type=arg_types.whole(1), default=4, help="prompts per step")
    p.add_argument("--max-completion-length", type=arg_types.whole(1), default=32, help="max new tokens per reply")
    p.add_argument("--micro-batch", type=arg_types.whole(1), default=10, help="rows per forward/backward pass")
    p.add_argument("--beta", type=arg_types.number(0), default=0.001, help="KL coefficient on both sides (0 = off)")
    p.add_argument(
        "--model",
        choices=("tiny", "embedded", "qwen-shape"),
        default="tiny",
        help="tiny: random 2-layer model with a character tokenizer; embedded: the packaged model; qwen-shape: "
        "Qwen2.5-0.5B's width and vocabulary at 2 layers",
    )
    p.add_argument("--out", help="write the results to this JSON file")
    p.add_argument(
        "--merged-sampling",
        action="store_true",
        help="instead: time first-attempt sampling with the adapter merged into the weights against as layers",
    )
    p.add_argument(
        "--profile",
        choices=("rlvr", "erl"),
        help="instead: the phase split and cProfile of --steps erl_lite steps in this mode (no TRL)",
    )
    a = p.parse_args()
    s = Settings(
        steps=a.steps,
        tasks=a.tasks,
        max_completion_length=a.max_completion_length,
        micro_batch=a.micro_batch,
        beta=a.beta,
        model=a.model,
    )
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if a.model == "qwen-shape":
        from erl_lite.testing import find_qwen3_tokenizer

        if find_qwen3_tokenizer() is None:
            raise SystemExit("skipped: no Qwen3 tokenizer (shared/qwen3_tokenizer or $ERL_LITE_QWEN3_TOKENIZER)")
    if a.profile:
        profile(s, a.profile)
        return
    if a.merged_sampling:
        merged_sampling(s)
        return
    results = run(s)
    print(report(results))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
