"""Build erl_lite's embedded tiny policy: corpus -> tokenizer -> training -> package data.

Seeded and CPU-only; the default build takes about a quarter of an hour on two cores (``--threads 2``)::

    OMP_NUM_THREADS=1 python scripts/build_embedded_model.py            # writes erl_lite/data/embedded
    OMP_NUM_THREADS=1 python scripts/build_embedded_model.py --steps 100 --out /tmp/emb  # a quick trial

Steps:
1. Vocabulary text: a small corpus rendered with erl_lite's character-level test tokenizer,
   plus every fixed prompt and feedback sentence of the game.
2. Tokenizer: BPE over a pre-tokenizer that keeps each capital letter, ```` ``` ````, and
   ``<prompt>`` tags as their own tokens and lets words carry their leading space; the
   decoder concatenates, so decoding is lossless. ChatML chat template, ``<|im_end|>`` = eos.
3. Corpus: :func:`embedded.corpus.generate_corpus` (``scripts/embedded/``) with the final tokenizer (the
   teacher playing ERL's three roles through erl_lite's own phases).
4. Training: a ``LlamaForCausalLM`` from scratch, AdamW with warm-up and cosine decay, loss on
   the generated tokens only.
5. Saving: ``save_pretrained`` of model and tokenizer, plus ``BUILD_INFO.json``.

Departures from the paper: the paper starts from instruction-tuned Qwen3/Olmo models; this
script makes a stand-in that runs without a network (see :mod:`embedded.teacher`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from erl_lite.cli import arg_types
from erl_lite.core.prompts import REFLECTION_REQUEST, REFLECTION_SYSTEM, RETRY_HEADER
from erl_lite.embedded.loading import EMBEDDED_DIR
from erl_lite.embedded.rulebooks import rulebook
from erl_lite.embedded.world import LETTER_POOL, WORLDS
from erl_lite.envs.frozenlake import COMMENTS, FEEDBACK
from erl_lite.envs.grid import action_reminder_text, grid_system_prompt
from erl_lite.testing import CHATML_TEMPLATE, tiny_tokenizer

# The build-time teacher and corpus sit beside this script (scripts/embedded/), outside the
# installed package; `python scripts/build_embedded_model.py` puts scripts/ on the path already,
# the insert keeps the import working when the file is loaded another way (e.g. by a test).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from embedded.corpus import CorpusExample, corpus_config, generate_corpus  # noqa: E402
from embedded.teacher import TeacherSkill  # noqa: E402

PAD, IM_START, IM_END, UNK = "<|pad|>", "<|im_start|>", "<|im_end|>", "<|unk|>"
#: Pre-tokens: fences and rulebook tags whole; words (a grid letter is a one-letter word)
#: with their leading space; numbers; punctuation; any other single whitespace character.
#: A grid row "D F B" is then three tokens, so a cell's right-hand neighbour is the very next
#: token, which is what lets a tiny model see what lies beside the agent.
PRETOKEN_PATTERN = r" ?```| ?</?prompt>| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]|\s"
ALPHABET = ["\n", "\t"] + [chr(c) for c in range(32, 127)]


#: The worlds the corpus is drawn from. The hard world is left out: the model meets it only in RL.
CORPUS_WORLDS = ("demo", "sparse")


def fixed_sentences() -> list[str]:
    """Every fixed sentence the game and the ERL prompts can show, with sample letters."""
    budgets = sorted({WORLDS[w].get("max_actions", 8) for w in CORPUS_WORLDS} | {8})  # every world's action budget
    texts = [REFLECTION_SYSTEM, REFLECTION_REQUEST, RETRY_HEADER, action_reminder_text()]
    texts += [grid_system_prompt(b, compact=c) for b in budgets for c in (True, False)]
    texts += [
        "[... middle of the attempt omitted ...]",
        "(grid unchanged)",
        "(No valid action found in your reply; nothing happened.)",
        rulebook(None),
    ]
    letters = "ABCDEFGHXZ"
    texts += [c.format(tile=x) for c in COMMENTS.values() for x in letters]
    texts += [f.format(n=n, budget=b) for f in FEEDBACK.values() for b in budgets for n in range(1, b + 1)]
    return texts


def vocabulary_texts(seed: int) -> list[str]:
    """Text that covers the corpus' vocabulary: a small rendered corpus plus fixed sentences."""
    tok = tiny_tokenizer()
    roomy = corpus_config(
        max_completion_length=200, max_episode_length=8192, max_reflection_length=400, max_reflection_prompt_length=8192
    )
    sample = [
        e
        for w in CORPUS_WORLDS
        for e in generate_corpus(tok, runs=6, tasks_per_run=24, seed=seed + 7, config=roomy, **WORLDS[w])
    ]
    texts = [tok.decode(e.prompt_ids + e.completion_ids) for e in sample] + fixed_sentences()
    return [re.sub(r"<\|\w+\|>", "\n", t) for t in texts]  # special tokens are added separately


def build_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """A lossless BPE tokenizer over ``texts`` with a ChatML template (deterministic)."""
    core = Tokenizer(models.BPE(unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(PRETOKEN_PATTERN), behavior="isolated")
    core.decoder = decoders.Fuse()  # plain concatenation: tokens carry their own spaces
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        min_frequency=1,
        special_tokens=[PAD, IM_START, IM_END, UNK],
        initial_alphabet=ALPHABET,
        limit_alphabet=len(ALPHABET),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=IM_END,
        unk_token=UNK,
        additional_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
    )
    tok.chat_template = CHATML_TEMPLATE
    return tok


def make_model(tok: PreTrainedTokenizerFast, args: argparse.Namespace) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=args.hidden,
        intermediate_size=args.ffn,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=2048,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=args.tied,
    )
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id])
    return model


def batches(examples: list[CorpusExample], size: int, rng: random.Random):
    """Endless batches of ``size`` examples of similar length (less padding), in random order."""
    while True:
        order = list(range(len(examples)))
        rng.shuffle(order)
        chunk = size * 32
        groups = []
        for i in range(0, len(order), chunk):
            part = sorted(order[i : i + chunk], key=lambda j: examples[j].length)
            groups += [part[k : k + size] for k in range(0, len(part), size)]
        rng.shuffle(groups)
        yield from ([examples[j] for j in g] for g in groups if len(g) == size)


def perception_ids(tok: PreTrainedTokenizerFast) -> tuple[set[int], set[int]]:
    """Ids of the direction words of a reply (" Up", ...) and of the letters that may follow them."""
    directions = {tok.convert_tokens_to_ids(f" {a}") for a in ("Up", "Down", "Left", "Right")}
    letters = {tok.convert_tokens_to_ids(f" {x}") for x in LETTER_POOL + "AB"}
    return directions - {tok.unk_token_id}, letters - {tok.unk_token_id}


def collate(
    batch: list[CorpusExample],
    pad_id: int,
    weighted: tuple[set[int], set[int]] | None = None,
    weight: float = 1.0,
    rule_weight: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, loss weights), each (B, T), right-padded.

    ``weights[b, t]`` weighs the prediction of token ``t``: 0 off the completion mask, 1 on it,
    ``weight`` for a letter that follows a direction word (what the agent sees one step ahead),
    and ``rule_weight`` for a letter a reflection writes (which holes its rulebook names: read
    from the trace and the remembered rulebook). These are the skills the corpus teaches
    slowest, so they get a larger share of the gradient.
    """
    width = max(e.length for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    weights = torch.zeros((len(batch), width))
    directions, letters = weighted or (set(), set())
    for b, e in enumerate(batch):
        seq, p = e.prompt_ids + e.completion_ids, len(e.prompt_ids)
        ids[b, : len(seq)] = torch.tensor(seq)
        attn[b, : len(seq)] = 1
        for t in range(p, len(seq)):
            if e.completion_mask[t - p]:
                ahead = seq[t] in letters and seq[t - 1] in directions
                ruled = e.role == "reflection" and seq[t] in letters
                weights[b, t] = weight if ahead else rule_weight if ruled else 1.0
    return ids, attn, weights


def weighted_loss(
    model: LlamaForCausalLM, ids: torch.Tensor, attn: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Weighted mean next-token cross-entropy: position t-1 predicts token t."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]  # (B, T-1, V)
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (B, T-1)
    w = weights[:, 1:]
    return (nll * w).sum() / w.sum()


def train(
    model: LlamaForCausalLM, examples: list[CorpusExample], args: argparse.Namespace, tok: PreTrainedTokenizerFast
) -> list[float]:
    """AdamW, linear warm-up then cosine decay to 10%; returns the loss of every step."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    warm = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        progress = (step - warm) / max(1, args.steps - warm)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    stream, losses, start = batches(examples, args.batch, random.Random(args.seed)), [], time.time()
    special = perception_ids(tok)
    model.train()
    for step in range(args.steps):
        ids, attn, weights = collate(next(stream), tok.pad_token_id, special, args.ahead_weight, args.rule_weight)
        loss = weighted_loss(model, ids, attn, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            recent = sum(losses[-args.log_every :]) / len(losses[-args.log_every :])
            print(
                f"  step {step + 1:4d}/{args.steps}  loss {recent:.4f}  lr {sched.get_last_lr()[0]:.2e}  "
                f"{time.time() - start:6.0f}s",
                flush=True,
            )
    return losses


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--out", type=arg_types.folder, default=str(EMBEDDED_DIR), help="output directory (default: the package data)"
    )
    p.add_argument("--seed", type=arg_types.seed, default=0)
    p.add_argument("--steps", type=arg_types.whole(1), default=2600, help="optimizer steps")
    p.add_argument("--batch", type=arg_types.whole(1), default=32, help="sequences per step")
    p.add_argument("--lr", type=arg_types.number(0, above=True), default=3e-3)
    p.add_argument(
        "--runs", type=arg_types.whole(0), default=90, help="corpus worlds (letter triples cycle through 60)"
    )
    p.add_argument(
        "--sparse-runs",
        type=arg_types.whole(0),
        default=45,
        help="further corpus worlds from the sparse world (5x5 maps; erl_lite.embedded.world.WORLDS)",
    )
    p.add_argument("--tasks-per-run", type=arg_types.whole(1), default=96)
    p.add_argument(
        "--reflection-share",
        type=arg_types.share,
        default=0.75,
        help="keep this share of the corpus' reflections (the role is learned early)",
    )
    p.add_argument(
        "--ahead-weight", type=arg_types.number(0), default=4.0, help="loss weight of the letters seen ahead"
    )
    p.add_argument(
        "--rule-weight", type=arg_types.number(0), default=4.0, help="loss weight of the letters a reflection writes"
    )
    p.add_argument("--hidden", type=arg_types.whole(1), default=128)
    p.add_argument("--layers", type=arg_types.whole(1), default=2)
    p.add_argument("--heads", type=arg_types.whole(1), default=8)
    p.add_argument("--ffn", type=arg_types.whole(1), default=256)
    p.add_argument("--tied", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--threads", type=arg_types.whole(1), default=1)
    p.add_argument("--log-every", type=arg_types.whole(1), default=100)
    args = p.parse_args(argv)
    # Settings that fail only together, refused before the minutes of corpus generation.
    if args.runs + args.sparse_runs == 0:
        p.error("argument --runs: --runs and --sparse-runs are both 0, so the corpus would be empty")
    if args.hidden % args.heads:
        p.error(f"argument --heads: --hidden {args.hidden} does not split into {args.heads} heads")
    return args


def round_trips(tok: PreTrainedTokenizerFast, examples: list[CorpusExample], n: int = 200) -> bool:
    """Whether decoding then re-encoding the first ``n`` corpus sequences gives the text back."""
    texts = [tok.decode(e.prompt_ids + e.completion_ids) for e in examples[:n]]
    return all(tok.decode(tok(t, add_special_tokens=False).input_ids) == t for t in texts)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    tok = build_tokenizer(vocabulary_texts(args.seed))
    print(f"tokenizer: {len(tok)} tokens ({time.time() - t0:.0f}s)", flush=True)
    t1 = time.time()
    # One model plays both worlds: the demo's runs, then the sparse world's (other letter orders and maps).
    examples = generate_corpus(tok, runs=args.runs, tasks_per_run=args.tasks_per_run, seed=args.seed)
    examples += generate_corpus(
        tok, runs=args.sparse_runs, tasks_per_run=args.tasks_per_run, seed=args.seed + 1, **WORLDS["sparse"]
    )
    keep = random.Random(args.seed)
    examples = [e for e in examples if e.role != "reflection" or keep.random() < args.reflection_share]
    counts = {r: sum(e.role == r for e in examples) for r in ("first", "reflection", "second")}
    n_tokens = sum(e.length for e in examples)
    print(
        f"corpus: {len(examples)} sequences {counts}, {n_tokens} tokens, lossless={round_trips(tok, examples)} "
        f"({time.time() - t1:.0f}s)",
        flush=True,
    )
    model = make_model(tok, args)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params:,} parameters; training {args.steps} steps of {args.batch}", flush=True)
    t2 = time.time()
    losses = train(model, examples, args, tok)
    train_s = time.time() - t2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out)
    tok.save_pretrained(out)
    info = {
        "command": " ".join(["python scripts/build_embedded_model.py", *argv]).strip(),
        "seed": args.seed,
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "model": {k: getattr(args, k) for k in ("hidden", "layers", "heads", "ffn", "tied")},
        "parameters": n_params,
        "vocab": len(tok),
        "ahead_weight": args.ahead_weight,
        "rule_weight": args.rule_weight,
        "corpus": {
            "runs": args.runs,
            "sparse_runs": args.sparse_runs,
            "tasks_per_run": args.tasks_per_run,
            "reflection_share": args.reflection_share,
            "sequences": len(examples),
            "roles": counts,
            "tokens": n_tokens,
            "teacher": asdict(TeacherSkill()),
        },
        "final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "train_seconds": round(train_s, 1),
        "total_seconds": round(time.time() - t0, 1),
        "threads": args.threads,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    (out / "BUILD_INFO.json").write_text(json.dumps(info, indent=2) + "\n")
    size = os.path.getsize(out / "model.safetensors") / 1e6
    print(f"saved to {out} ({size:.2f} MB of weights) in {time.time() - t0:.0f}s total", flush=True)


if __name__ == "__main__":
    main()
