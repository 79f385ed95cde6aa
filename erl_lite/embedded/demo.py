"""``erl-lite demo``: ERL on the embedded tiny model, on the CPU, with a report (``report.md``:
before/after numbers, example reflections, checks of every sampled rulebook, the final memory).

Departures from the paper: a toy world and a 0.4 M-parameter model, not Qwen3-4B on FrozenLake; the same code path.
"""

from __future__ import annotations

import os
import time
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from erl_lite import metric_names as keys
from erl_lite.config import DEFAULT_SEED, ERLConfig
from erl_lite.config.checks import check_whole
from erl_lite.config.presets import PRESETS
from erl_lite.embedded.loading import load_embedded
from erl_lite.embedded.rulebooks import contradictions, hole_facts, named_holes, planned_holes, repeated_holes
from erl_lite.embedded.world import demo_world, hole_letters
from erl_lite.history import History
from erl_lite.records import FIRST, REFLECTION, SECOND, retries_by_first

#: The demo's run settings: a read-only view of their one home, ``PRESETS["demo"]``.
DEMO_SETTINGS: Mapping[str, Any] = MappingProxyType(PRESETS["demo"])
#: Test maps the demo evaluates first attempts on (before training and every ``eval_steps``).
DEMO_EVAL_TASKS = 64


def demo_config(**overrides: Any) -> ERLConfig:
    """The demo's :class:`ERLConfig`: ``ERLConfig.preset("demo", **overrides)``.

    Example:
        >>> demo_config(max_steps=3).max_steps, demo_config().max_completion_length
        (3, 24)
    """
    return ERLConfig.preset("demo", **overrides)


def demo_trainer(
    seed: int = DEFAULT_SEED,
    eval_tasks: int | None = None,
    callbacks: Sequence[Any] = (),
    model_dir: str | None = None,
    world: str = "demo",
    **overrides: Any,
) -> Any:
    """The demo's :class:`~erl_lite.run.trainer.ERLTrainer`: the embedded model, a seeded LoRA,
    ``demo_world(seed, world)`` (``world``: a key of :data:`~erl_lite.embedded.world.WORLDS`)."""
    from transformers import set_seed

    from erl_lite.run.trainer import ERLTrainer

    env = demo_world(seed, world)  # first: an unknown world name fails before the model loads
    if eval_tasks is not None:  # test maps to evaluate on
        check_whole("demo_trainer", "eval_tasks", eval_tasks, minimum=1)
    config = demo_config(seed=seed, **overrides)
    set_seed(seed)  # the LoRA initialisation draws from the global RNG: seed it first
    model, tokenizer = load_embedded(model_dir=model_dir)
    return ERLTrainer(
        model=model,
        processing_class=tokenizer,
        args=config,
        env=env,
        eval_dataset=env.test_tasks(DEMO_EVAL_TASKS if eval_tasks is None else eval_tasks),
        callbacks=list(callbacks),
    )


def step_line(trainer: Any, record: Any) -> None:
    """Print one line per iteration: what each phase did (a trainer callback)."""
    m = record.metrics
    fmt = lambda key: "  -  " if m.get(key) is None else f"{m[key]:.2f}"
    print(
        f"step {m[keys.STEP]:>3} | r1 {fmt(keys.REWARD_FIRST)} | gate {fmt(keys.GATE_RATE)} | "
        f"parse {fmt(keys.REFLECTION_PARSE_RATE)} | r2 {fmt(keys.REWARD_SECOND)} | "
        f"memory {int(m[keys.MEMORY_SIZE])} (+{int(m[keys.MEMORY_WRITES])}) | {m[keys.TIME_STEP]:.1f}s",
        flush=True,
    )


def run_demo(
    out: str = "erl_lite_demo",
    steps: int | None = None,
    seed: int = DEFAULT_SEED,
    eval_tasks: int | None = None,
    verbose: bool = True,
    model_dir: str | None = None,
    world: str = "demo",
    overwrite: bool = False,
    **overrides: Any,
) -> History:
    """Train the embedded model on one of its worlds (``"demo"``; ``"sparse"`` and ``"hard"``, 5x5 maps where
    first attempts rarely succeed) and write the report (replacing an earlier demo in ``out``)."""
    trainer = build_demo(out, steps, seed, eval_tasks, verbose, model_dir, world, overwrite, **overrides)
    return train_demo(trainer, out, world, seed, verbose, model_dir)


def build_demo(
    out: str = "erl_lite_demo",
    steps: int | None = None,
    seed: int = DEFAULT_SEED,
    eval_tasks: int | None = None,
    verbose: bool = True,
    model_dir: str | None = None,
    world: str = "demo",
    overwrite: bool = False,
    **overrides: Any,
) -> Any:
    """:func:`run_demo`'s trainer, before any step: bad arguments raise here (``erl-lite demo`` prints them).
    ``out`` must be empty or an earlier demo's, unless ``overwrite`` (then erl_lite's files there are deleted, other
    files kept); files of the names it writes that erl_lite did not write are refused even then."""
    from erl_lite.run.lock import check_out
    from erl_lite.run.state import CheckpointError

    if os.path.exists(out) and not os.path.isdir(out):  # else found only once the model is loaded
        raise CheckpointError(f"output_dir {out!r} is not a writable folder: it is a file")
    check_out(out, "erl-lite demo", "demo", overwrite)
    if steps is not None:
        overrides["max_steps"] = steps
    overrides.setdefault("overwrite_output_dir", True)
    return demo_trainer(
        seed, eval_tasks, [step_line] if verbose else [], model_dir=model_dir, world=world, output_dir=out, **overrides
    )


def train_demo(
    trainer: Any,
    out: str,
    world: str = "demo",
    seed: int = DEFAULT_SEED,
    verbose: bool = True,
    model_dir: str | None = None,
) -> History:
    """Train :func:`build_demo`'s trainer (on ``world``, seeded ``seed``) and write the report in ``out``."""
    config, env = trainer.args, trainer.env
    if verbose:
        print(
            f"erl_lite demo: {world} world, mode={config.mode}, G={config.num_generations}, {config.max_steps} steps, "
            f"world seed {seed} (hole letters {' and '.join(hole_letters(env))}, unknown to the model); "
            f"output in {out}/" + (f"; model {model_dir}" if model_dir else ""),
            flush=True,
        )
    from erl_lite.viz.plots import save_figures

    with trainer.run_lock("demo"):  # its report too: no other writer between the run and its report
        start = time.perf_counter()
        history = trainer.train()
        seconds = time.perf_counter() - start
        # The memory panels name the hole letters memory holds, checked against the world's (not rulebook rows).
        figures = save_figures(history, out, memory_claims=named_holes, memory_truth=hole_letters(env))
        path = write_report(history, trainer.memory.entries, config, env, seconds, figures, out, model_dir)
    if verbose:
        before, after = _eval_ends(history)
        print(f"eval first-attempt success: {before:.2f} -> {after:.2f} in {seconds / 60:.1f} min; report: {path}")
    return history


def _eval_ends(history: History) -> tuple[float, float]:
    _, values = history.series(keys.EVAL_SUCCESS, kind="eval")
    return (values[0], values[-1]) if values else (float("nan"), float("nan"))


def _example(history: History) -> str:
    """A failed first attempt, its reflection and the second attempt, from the last samples."""
    for sample in reversed(history.samples):
        for retry in retries_by_first(sample).values():
            first, refl, second = retry[FIRST], retry[REFLECTION], retry[SECOND]
            if refl is not None and refl["parsed"] and second["success"]:
                return (
                    f"Step {sample['step']}, task `{refl['task_id']}`.\n\n"
                    f"**First attempt** (reward {first['reward']:g}): {first['feedback']}\n\n"
                    f"**Reflection** (the new system prompt):\n\n```\n{refl['rulebook']}\n```\n\n"
                    f"**Second attempt** (reward {second['reward']:g}): {second['feedback']}\n"
                )
    return "_No reflection led to a successful second attempt in the sampled steps._\n"


def built_on_memory(history: History, holes: Sequence[str]) -> dict[str, Any] | None:
    """The latest reflection that kept memory's holes and added one of ``holes`` (successful first), or None."""
    found = []
    for sample in history.samples:
        for retry in sample["retries"]:
            refl = retry["reflection"]
            if refl is None or not refl["parsed"]:
                continue
            before, after = named_holes(refl["base_prompt"]), named_holes(refl["rulebook"])
            if before and set(before) < set(after) <= set(holes):
                found.append(
                    {
                        "step": sample["step"],
                        "task_id": refl["task_id"],
                        "before": refl["base_prompt"],
                        "after": refl["rulebook"],
                        "success": bool(retry["second"]["success"]),
                    }
                )
    found.sort(key=lambda f: f["success"])  # stable: the latest successful one ends the list
    return found[-1] if found else None


def _rulebooks(history: History, memory: list[str]) -> list[tuple[str, str]]:
    """(where, text) of every sampled reflection's rulebook, then of every memory entry."""
    texts = [
        (f"step {s['step']}, task `{r['reflection']['task_id']}`", r["reflection"]["rulebook"])
        for s in history.samples
        for r in s["retries"]
        if r["reflection"] is not None
    ]
    return texts + [("final memory", m) for m in memory]


def knowledge_timeline(history: History, holes: Sequence[str]) -> list[dict[str, Any]]:
    """Where the world's ``holes`` were known, per sampled step: memory, reflections, first-attempt plans. Shares of
    reflections naming ``both`` holes or one twice (``repeated``); of first-attempt plans naming a letter
    (``first_named``), both holes (``first_both``) or missing (``first_unreadable``)."""
    rows = []
    for sample in history.samples:
        memory = sample.get("memory_before") or []
        facts = [h for m in memory for h in hole_facts(m)]
        books = [r["reflection"]["rulebook"] for r in sample["retries"] if r["reflection"] is not None]
        # The plan sentence opens an attempt's first reply (the player keeps it for the episode).
        replies = [
            next((m["content"] for m in a["messages"] if m["role"] == "assistant"), "")
            for a in sample["first_attempts"]
        ]
        plans = [planned_holes(r) for r in replies]
        rows.append(
            {
                "step": sample["step"],
                "memory": " ".join(facts) if facts else ("no hole" if memory else "empty"),
                "reflections": len(books),
                "both": _share([set(holes) <= set(named_holes(b)) for b in books]),
                "repeated": _share([bool(repeated_holes(b)) for b in books]),
                "first_named": _share([bool(p) for p in plans]),
                "first_both": _share([p is not None and set(holes) <= set(p) for p in plans]),
                "first_unreadable": _share([p is None for p in plans]),
            }
        )
    return rows


def holes_known(history: History, holes: Sequence[str]) -> dict[str, float | None]:
    """A run's :func:`knowledge_timeline` in one row: over every sampled reflection, how many were written and the
    shares naming both holes and stating a hole twice (None where none was written); over the last sampled step's
    first attempts, the shares whose plan names a letter, names both holes, and is unreadable."""
    rows = knowledge_timeline(history, holes)
    n = sum(row["reflections"] for row in rows)
    # a share over the whole run: each sampled step's, weighted by the reflections it was taken over
    over = lambda key: sum(row[key] * row["reflections"] for row in rows if row["reflections"]) / n if n else None
    last = {key: rows[-1][key] for key in ("first_named", "first_both", "first_unreadable")}
    return {"reflections": n, "both": over("both"), "repeated": over("repeated"), **last}


def _share(hits: list[bool]) -> float:
    return sum(hits) / len(hits) if hits else float("nan")


def timeline_table(rows: list[dict[str, Any]], max_rows: int = 8) -> str:
    """The rows of :func:`knowledge_timeline` as a markdown table of at most ``max_rows`` evenly spaced ones."""
    if len(rows) > max_rows:
        stride = -(-len(rows) // max_rows)
        rows = rows[::-1][::stride][::-1]
    fmt = lambda x: "-" if x != x else f"{x:.2f}"  # (NaN: nothing to share over)
    lines = [
        "| step | memory before (holes named) | reflections | naming both holes | stating a hole twice "
        "| first attempts naming a letter | naming both holes | with no readable plan |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['step']} | {r['memory']} | {r['reflections']} | {fmt(r['both'])} | {fmt(r['repeated'])} | "
        f"{fmt(r['first_named'])} | {fmt(r['first_both'])} | {fmt(r['first_unreadable'])} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def _check(books: list[tuple[str, str]], finds: Callable[[str], list[str]], title: str, why: str, clean: str) -> str:
    """One rulebook check of the report: the ``books`` ``finds`` letters in, five of them; else the ``clean`` line."""
    found = [(where, t) for where, t in books if finds(t)]
    if not found:
        return f"\n{clean}\n"
    listed = "\n".join(f"- {where}: `{t}` ({_letters(finds(t))})" for where, t in list(dict.fromkeys(found))[:5])
    return f"\n**{title}: {len(found)} of {len(books)}** {why}:\n\n{listed}\n"


def _memory_section(history: History, memory: list[str], holes: Sequence[str]) -> str:
    built = built_on_memory(history, holes)
    if built is None:
        text = "_No sampled reflection added one of the world's holes to a remembered rulebook._\n"
    else:
        text = (
            f"Step {built['step']}, task `{built['task_id']}` (second attempt "
            f"{'succeeded' if built['success'] else 'failed'}). The reflector was given the memory\n\n"
            f"```\n{built['before']}\n```\n\nkept what it named, added what the trace showed, and wrote\n\n"
            f"```\n{built['after']}\n```\n"
        )
    books = _rulebooks(history, memory)
    text += _check(
        books,
        contradictions,
        "Self-contradicting rulebooks",
        "checked (sampled reflections and final memory) give one letter two meanings",
        f"Self-contradiction check: none of the {len(books)} rulebooks checked gives a letter two meanings.",
    )
    text += _check(
        books,
        repeated_holes,
        "Rulebooks stating one hole twice",
        "(a repeat usually stands where memory's other hole was; memory, one slot, then holds one hole)",
        f"Repeat check: none of the {len(books)} rulebooks checked states a hole twice.",
    )
    text += _check(
        books,
        lambda t: [x for x in named_holes(t) if x not in holes],
        "Rulebooks calling another letter a hole",
        f"(the world's holes are {' and '.join(holes)}; second attempts under them avoid safe ice, "
        "and one that still succeeds can put it in memory)",
        f"Wrong-hole check: none of the {len(books)} rulebooks checked calls another letter a hole.",
    )
    return text


def _letters(found: Any) -> str:  # "letter F" or "letters B, C": what a report check found in one rulebook
    return f"letter{'s' if len(found := list(found)) > 1 else ''} {', '.join(found)}"


def write_report(
    history: History,
    memory: list[str],
    config: ERLConfig,
    env: Any,
    seconds: float,
    figures: list[str],
    out: str,
    model_dir: str | None = None,
) -> str:
    """Write ``report.md`` in ``out`` and return its path (``model_dir``: a build named under the title)."""
    before, after = _eval_ends(history)
    train = history.of_kind("train")
    rows = [("first-attempt success (eval, before / after training)", f"{before:.2f}", f"{after:.2f}")]
    window = max(1, min(5, len(train) // 3))  # single steps are noisy: mean over a few
    for key in (keys.REWARD_FIRST, keys.REWARD_SECOND, keys.GATE_RATE, keys.REFLECTION_PARSE_RATE, keys.MEMORY_WRITES):
        early, late = ([r[key] for r in part if r.get(key) is not None] for part in (train[:window], train[-window:]))
        if early and late:
            rows.append((key, f"{sum(early) / len(early):.2f}", f"{sum(late) / len(late):.2f}"))
    table = "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)
    pictures = "\n".join(
        f"![{os.path.basename(f)}]({os.path.basename(f)})" for f in figures if not f.endswith("overview.png")
    )
    held = "\n\n".join(f"```\n{m}\n```" for m in memory) or "_empty_"
    holes = hole_letters(env)
    text = (
        "# erl_lite demo report\n\n"
        + (f"Model: `{model_dir}` (not the shipped embedded model).\n\n" if model_dir else "")
        + f"Mode `{config.mode}`, {len(train)} steps, seed {config.seed}, "
        f"{seconds / 60:.1f} minutes. The world's hole letters are `{'` and `'.join(holes)}` and "
        f"its ice letter `{env.symbols['frozen']}`; the model is never told, and a failed attempt reveals only the "
        f"hole it fell into.\n\n"
        f"| metric | first {window} steps (mean) | last {window} steps (mean) |\n|---|---|---|\n{table}\n\n"
        f"Evaluation = first attempts only, initial prompt, no memory; "
        f"{config.eval_num_generations} samples per task.\n\n## An example\n\n{_example(history)}\n"
        f"## A reflection that built on memory\n\n{_memory_section(history, memory, holes)}\n"
        f"## How knowledge moved\n\nPer sampled step: the holes memory named, the share of reflections naming "
        f"both holes (or stating one twice), and the share of first attempts whose opening plan "
        f'("Avoid ...") names a letter, or both holes. Evaluation measures first attempts, so knowledge '
        f"counts once it reaches the last two columns.\n\n"
        f"{timeline_table(knowledge_timeline(history, holes))}\n"
        f"## Final memory\n\n{held}\n\n## Figures\n\n![overview](overview.png)\n\n{pictures}\n"
    )
    path = os.path.join(out, "report.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
