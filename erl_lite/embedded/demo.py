"""``erl-lite demo``: ERL on the embedded tiny model, on the CPU, with a report.

The demo world is the small FrozenLake whose hole and ice letters are fixed for the run (by
``seed``) but never told to the model; only the feedback of a failed attempt reveals them, so
reflection has something to find and memory has something to carry across episodes. The
demo evaluates the model's first attempts before and after training and writes to ``out``:

* ``history.jsonl`` / ``samples.jsonl`` — every step's metrics and sampled texts;
* ``rewards.png``, ``gate_rate.png``, ``memory.png``, ``losses.png``, ``eval.png``, ``overview.png``;
* ``report.md`` — the before/after numbers, example reflections and the final memory.

Departures from the paper: a toy world and a 0.4 M-parameter (1.6 MB) model instead of Qwen3-4B on the paper's
FrozenLake; the algorithm and the code path are the same as for the paper's tasks.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

from erl_lite.config import ERLConfig
from erl_lite.embedded.loading import load_embedded
from erl_lite.embedded.world import demo_world
from erl_lite.history import History

#: The demo's run settings, on top of the ``cpu`` preset (:func:`demo_config` builds the config;
#: ``erl-lite demo``, ``erl-lite train --env demo``, the notebooks, the corpus builder and
#: ``scripts/compare_modes.py`` all start from it).
DEMO_SETTINGS: dict[str, Any] = dict(
    # Budgets that fit the embedded model: its replies are at most 16 tokens per turn, its
    # rulebooks about 45 tokens, and its episodes and reflection requests well under 1024.
    max_completion_length=24, max_episode_length=1024, max_reflection_length=64,
    max_reflection_prompt_length=1024,
    # Sampling: a little below 1 keeps the tiny model's moves and rulebooks well formed.
    temperature=0.7, reflection_temperature=0.5, reflection_top_p=0.9, eval_temperature=0.7,
    # The training schedule of the demo run.
    max_steps=30, num_tasks_per_step=8, learning_rate=5e-4, beta=0.0,
    eval_steps=10, eval_num_generations=2, per_device_train_batch_size=32, progress_bar=False,
)
#: Test maps the demo evaluates first attempts on (before training and every ``eval_steps``).
DEMO_EVAL_TASKS = 64


def demo_config(preset: str = "cpu", **overrides: Any) -> ERLConfig:
    """The demo's :class:`ERLConfig`: ``preset`` (default ``cpu``), :data:`DEMO_SETTINGS`,
    then ``overrides``.

    Example:
        >>> demo_config(max_steps=3).max_steps, demo_config().max_completion_length
        (3, 24)
        >>> demo_config().learning_rate
        0.0005
    """
    return ERLConfig.preset(preset, **{**DEMO_SETTINGS, **overrides})


def demo_trainer(seed: int = 0, eval_tasks: int | None = None, callbacks: Sequence[Any] = (),
                 **overrides: Any) -> Any:
    """An :class:`~erl_lite.trainer.ERLTrainer` for the demo: the embedded model with a fresh,
    seeded LoRA adapter on :func:`~erl_lite.embedded.world.demo_world` ``(seed)``, evaluated on
    ``eval_tasks`` test maps (default :data:`DEMO_EVAL_TASKS`); ``overrides`` go to
    :func:`demo_config`.

    Example:
        >>> trainer = demo_trainer(seed=1, eval_tasks=4, max_steps=1)
        >>> trainer.env.symbols["hole"] != trainer.env.symbols["frozen"], trainer.args.max_steps
        (True, 1)
    """
    from transformers import set_seed

    from erl_lite.trainer import ERLTrainer

    config = demo_config(seed=seed, **overrides)
    env = demo_world(seed)
    set_seed(seed)  # the LoRA initialisation draws from the global RNG: seed it first
    model, tokenizer = load_embedded()
    return ERLTrainer(model=model, processing_class=tokenizer, args=config, env=env,
                      eval_dataset=env.test_tasks(eval_tasks or DEMO_EVAL_TASKS), callbacks=list(callbacks))


def step_line(trainer: Any, record: Any) -> None:
    """Print one line per iteration: what each phase did (a trainer callback)."""
    m = record.metrics
    fmt = lambda key: "  -  " if m.get(key) is None else f"{m[key]:.2f}"  # noqa: E731
    print(f"step {m['step']:>3} | r1 {fmt('reward/first')} | gate {fmt('gate/rate')} | "
          f"parse {fmt('reflection/parse_rate')} | r2 {fmt('reward/second')} | "
          f"memory {int(m['memory/size'])} (+{int(m['memory/writes'])}) | {m['time/step']:.1f}s", flush=True)


def run_demo(out: str = "erl_lite_demo", steps: int | None = None, seed: int = 0,
             eval_tasks: int | None = None, verbose: bool = True, **overrides: Any) -> History:
    """Train the embedded model on the demo world and write the report; returns the history.

    ``steps`` overrides :data:`DEMO_SETTINGS`' ``max_steps``; ``overrides`` go to :func:`demo_config`.
    """
    if steps is not None:
        overrides["max_steps"] = steps
    os.makedirs(out, exist_ok=True)
    trainer = demo_trainer(seed, eval_tasks, [step_line] if verbose else [], output_dir=out, **overrides)
    config, env = trainer.args, trainer.env
    if verbose:
        print(f"erl_lite demo: mode={config.mode}, G={config.num_generations}, {config.max_steps} steps, world seed {seed} "
              f"(hole letter {env.symbols['hole']}, unknown to the model); output in {out}/", flush=True)
    start = time.perf_counter()
    history = trainer.train()
    seconds = time.perf_counter() - start
    from erl_lite.viz import save_figures

    figures = save_figures(history, out)
    path = write_report(history, trainer.memory.entries, config, env, seconds, figures, out)
    if verbose:
        before, after = _eval_ends(history)
        print(f"eval first-attempt success: {before:.2f} -> {after:.2f} in {seconds / 60:.1f} min; report: {path}")
    return history


def _eval_ends(history: History) -> tuple[float, float]:
    _, values = history.series("eval/success", kind="eval")
    return (values[0], values[-1]) if values else (float("nan"), float("nan"))


def _example(history: History) -> str:
    """A failed first attempt, its reflection and the second attempt, from the last samples."""
    for sample in reversed(history.samples):
        for retry in sample["retries"]:
            refl, second = retry["reflection"], retry["second"]
            if refl is not None and refl["parsed"] and second["success"]:
                first = sample["first_attempts"][retry["first"]]
                return (f"Step {sample['step']}, task `{refl['task_id']}`.\n\n"
                        f"**First attempt** (reward {first['reward']:g}): {first['feedback']}\n\n"
                        f"**Reflection** (the new system prompt):\n\n```\n{refl['rulebook']}\n```\n\n"
                        f"**Second attempt** (reward {second['reward']:g}): {second['feedback']}\n")
    return "_No reflection led to a successful second attempt in the sampled steps._\n"


def _consistency(history: History, memory: list[str]) -> str:
    """The report's check for self-contradicting rulebooks (a letter called a hole and safe ice)."""
    from erl_lite.embedded.rulebooks import contradiction_rate, contradictions

    rulebooks = [r["reflection"]["rulebook"] for sample in history.samples for r in sample.get("retries", [])
                 if r.get("reflection") and r["reflection"].get("parsed")]
    lines = [f"**Self-contradicting rulebooks** (a letter called both a hole and safe ice): "
             f"{contradiction_rate(rulebooks):.0%} of the {len(rulebooks)} parsed reflections in the "
             f"sampled steps."]
    for m in memory:
        if contradictions(m):
            lines.append(f"⚠ The final memory contradicts itself about {', '.join(contradictions(m))}.")
    return "\n\n".join(lines)


def write_report(history: History, memory: list[str], config: ERLConfig, env: Any, seconds: float,
                 figures: list[str], out: str) -> str:
    """Write ``report.md`` in ``out`` and return its path."""
    before, after = _eval_ends(history)
    train = history.of_kind("train")
    rows = [("first-attempt success (eval, before / after training)", f"{before:.2f}", f"{after:.2f}")]
    window = max(1, min(5, len(train) // 3))  # single steps are noisy: mean over a few
    for key in ("reward/first", "reward/second", "gate/rate", "reflection/parse_rate", "memory/writes"):
        vals = [r[key] for r in train[:window] if r.get(key) is not None]
        late = [r[key] for r in train[-window:] if r.get(key) is not None]
        if vals and late:
            rows.append((key, f"{sum(vals) / len(vals):.2f}", f"{sum(late) / len(late):.2f}"))
    table = "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)
    pictures = "\n".join(f"![{os.path.basename(f)}]({os.path.basename(f)})" for f in figures
                         if not f.endswith("overview.png"))
    held = "\n\n".join(f"```\n{m}\n```" for m in memory) or "_empty_"
    checks = _consistency(history, memory)
    text = (
        f"# erl_lite demo report\n\nMode `{config.mode}`, {len(train)} steps, seed {config.seed}, "
        f"{seconds / 60:.1f} minutes. The world's hole letter is `{env.symbols['hole']}` and its ice "
        f"letter `{env.symbols['frozen']}`; the model is never told.\n\n"
        f"| metric | first {window} steps (mean) | last {window} steps (mean) |\n|---|---|---|\n{table}\n\n"
        f"Evaluation = first attempts only, initial prompt, no memory; "
        f"{config.eval_num_generations} samples per task.\n\n## An example\n\n{_example(history)}\n"
        f"## Final memory\n\n{held}\n\n{checks}\n\n## Figures\n\n![overview](overview.png)\n\n{pictures}\n"
    )
    path = os.path.join(out, "report.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
