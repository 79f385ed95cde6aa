"""Does a real model's own reflection help its second attempt? Measured on failed first attempts, per task.

For each task (``frozenlake``: 2x2 and 3x3 maps, at most 3 moves, the reference's prompts, as the realmodel tier
plays them; ``arithmetic``: ``erl-lite train --env arithmetic --small``'s rows, one operation on numbers up to 9)
this plays, round by round over the declared :data:`SEEDS`, one first attempt on each of ``--tasks`` new tasks,
and on every failed one (``r1 < τ``):

* ``own``: the second attempt under the model's own reflection, written from the run's (empty) memory as in a
  first training step;
* ``plain``: the "w/o reflection" retry, the initial prompt plus the first attempt's trace and feedback;
* ``fresh``: a fresh first attempt on the same task.

Every phase is the library's own (:mod:`erl_lite.core.phases`: ``attempt_first``, ``gate``, ``reflect``,
``attempt_second``) through an :class:`~erl_lite.ERLTrainer` built with docs/TRAINING.md's settings for a small real
model (``reflection_prefill="<prompt>\\n1."``; the ``cpu`` preset otherwise); nothing trains. Rounds go on until
``--failed`` failures per task are measured or the seeds run out. Each rate has a 95 % Wilson interval; the
paired differences (own against plain, own against fresh) an exact McNemar test on the discordant pairs.

The results (``--out``, JSON) keep per failed attempt the task id, the four rewards, and the raw reflection text,
so the parse rate can be recomputed under any rule; two are computed here (:func:`parse_rates`). ``--render-docs``
rewrites the findings block of docs/TRAINING.md from the results file it names (:func:`findings`).

    nice -n 10 env OMP_NUM_THREADS=1 python scripts/reflection_gain.py --model /tmp/erl_lite_smollm2/model \\
        --out erl_lite/assets/reflection_gain_smollm2.json
    python scripts/reflection_gain.py --render-docs
    python scripts/reflection_gain.py --model DIR --tiny --out /tmp/rg.json   # seconds: a smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this checkout's erl_lite, not another installed copy
#: The round seeds, declared before the measurement ran: round i draws its own tasks and seeds every phase from
#: ``SEEDS[i]`` (the phases: seed, seed + 1, ...).
SEEDS = tuple(range(101, 1701, 100))  # 16 rounds: 101, 201, ..., 1601
TASKS = ("frozenlake", "arithmetic")
#: docs/TRAINING.md's prefill for a small real model.
PREFILL = "<prompt>\n1."
#: The arms, in the order the findings name them.
ARMS = {
    "own": "second attempt under its own reflection",
    "plain": 'the "w/o reflection" retry',
    "fresh": "a fresh first attempt",
}
#: A findings block in markdown: ``<!-- reflection_gain erl_lite/assets/x.json -->`` … ``<!-- /reflection_gain -->``.
BLOCK = re.compile(r"(<!-- reflection_gain (\S+) -->)\n(.*?)\n?(<!-- /reflection_gain -->)", re.DOTALL)
DOCS = os.path.join(ROOT, "docs", "TRAINING.md")


def settings(tiny: bool) -> dict[str, Any]:
    """ERLConfig keywords: the ``cpu`` preset with docs/TRAINING.md's small-real-model settings, no role trained."""
    # 48-token replies and 96-token reflections: docs/TRAINING.md's measurement (benchmarks/small_real_model.py)
    lengths = dict(max_completion_length=8, max_reflection_length=8) if tiny else dict(max_reflection_length=96)
    return dict(
        num_generations=1,
        learning_rate=1e-5,
        eval_steps=0,
        output_dir=None,
        progress_bar=False,
        reflection_prefill=PREFILL,
        train_first=False,
        train_reflection=False,
        train_second=False,
        use_internalization=False,
        **lengths,
    )


def build(model_dir: str, task: str, tiny: bool) -> Any:
    """The trainer whose phase context, tasks and memory a measurement uses."""
    from erl_lite import ERLConfig, ERLTrainer
    from erl_lite.cli.train import build_environment
    from erl_lite.envs import FrozenLake

    cfg = ERLConfig.preset("cpu", **settings(tiny))
    if task == "frozenlake":  # the realmodel tier's maps (tests/test_realmodel.py)
        env = FrozenLake(sizes=(2, 3), max_actions=3, prompt_style="reference", n_train=4000, n_test=10)
        return ERLTrainer(model=model_dir, args=cfg, env=env)
    # erl-lite train --env arithmetic --small's rows (the same first 200), 1000 of them so failures never run short
    env, rows, extra = build_environment("arithmetic", small=True, options={"n": 1000})
    return ERLTrainer(model=model_dir, args=cfg, train_dataset=rows, **{**extra, "eval_dataset": None})


def measure_round(trainer: Any, tasks: list, seed: int) -> tuple[int, list[dict[str, Any]]]:
    """(first attempts played, one record per failed one) of a round: the library's phases, each seeded."""
    import torch

    from erl_lite.core.phases import attempt_first, attempt_second, gate, reflect
    from erl_lite.records import tasks_by_id

    ctx, by_id = trainer.ctx, tasks_by_id(tasks)
    torch.manual_seed(seed)
    first = attempt_first(ctx, tasks, 1)
    failed = gate(first, ctx.config.reward_threshold)
    if not failed:
        return len(first), []
    torch.manual_seed(seed + 1)
    deltas = reflect(ctx, failed, trainer.memory)
    torch.manual_seed(seed + 2)
    own = attempt_second(ctx, failed, by_id, deltas)
    torch.manual_seed(seed + 3)
    plain = attempt_second(ctx, failed, by_id, None)
    torch.manual_seed(seed + 4)
    fresh = attempt_first(ctx, [by_id[a.task_id] for a in failed], 1)
    return len(first), [
        {
            "task_id": a.task_id,
            "seed": seed,
            "first": a.reward,
            "own": o.second.reward,
            "plain": p.second.reward,
            "fresh": f.reward,
            "reflection": d.text,
            "parsed": d.parsed,
            "reflection_cut": d.truncated,
            "cut": {"first": a.truncated, "own": o.second.truncated, "plain": p.second.truncated, "fresh": f.truncated},
        }
        for a, d, o, p, f in zip(failed, deltas, own, plain, fresh)
    ]


def measure(
    model_dir: str, tasks: list[str], failed: int, per_round: int, tiny: bool, out: str | None, command: str = ""
) -> dict:
    """Rounds over :data:`SEEDS`, one task after the other (in ``tasks``' order: the cheap one first where CPU time
    is short), until each has ``failed`` failures measured or the seeds (or its task pool) run out; the results,
    saved after every round. The other tasks of an ``out`` already there are kept, each with its own command."""
    results: dict[str, Any] = {"model": os.path.basename(os.path.normpath(model_dir)), "tasks": {}}
    if out and os.path.isfile(out):
        with open(out, encoding="utf-8") as f:
            results = json.load(f)
        for entry in results["tasks"].values():  # files written before commands were kept per task
            entry.setdefault("command", results.get("command", ""))
        results.pop("command", None)
    results["settings"] = {k: v for k, v in settings(tiny).items() if k != "output_dir"}
    trainers = {name: build(model_dir, name, tiny) for name in tasks}
    for name, trainer in trainers.items():
        results["tasks"][name] = {"threshold": trainer.args.reward_threshold, "command": command, "rounds": []}
        results["tasks"][name]["failed"] = []
    for name, trainer in trainers.items():
        for i, seed in enumerate(SEEDS):
            entry, pool = results["tasks"][name], trainer.train_tasks
            if len(entry["failed"]) >= failed or (i + 1) * per_round > len(pool):
                continue
            start = time.perf_counter()
            played, rows = measure_round(trainer, list(pool[i * per_round : (i + 1) * per_round]), seed)
            seconds = round(time.perf_counter() - start)
            entry["rounds"].append({"seed": seed, "first_attempts": played, "failed": len(rows), "seconds": seconds})
            entry["failed"] += rows
            won = {arm: sum(r[arm] >= entry["threshold"] for r in entry["failed"]) for arm in ARMS}
            print(
                f"{name} round {i + 1} (seed {seed}): {played} first attempts, {len(rows)} failed, {seconds} s; "
                f"so far {len(entry['failed'])} failed, won: {won}",
                flush=True,
            )
            if out:
                save(results, out)
    return results


def save(results: dict, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)
        f.write("\n")


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of ``k`` successes in ``n`` (the plots' :func:`erl_lite.viz.plots.wilson`)."""
    from erl_lite.viz.plots import wilson as interval

    return interval(k / n, n) if n else (0.0, 1.0)


def mcnemar(wins: int, losses: int) -> float:
    """Exact two-sided McNemar p-value: the discordant pairs under Binomial(wins + losses, 1/2)."""
    n = wins + losses
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def parse_rates(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The parse rate of the raw reflections: as the library recorded it when they ran (``recorded``), under its
    rule now (``strict``: :func:`erl_lite.core.prompts.parse_rulebook`, a block that states a rule), and under the
    rule before that one (``loose``: any non-empty block, so the prefill's "1." alone parsed); ``rule``: which of the
    two the recorded flags follow, i.e. which rule decided the rulebooks the second attempts ran under."""
    from erl_lite.core.prompts import parse_rulebook

    def loose(text: str) -> bool:  # the earlier rule, recomputed: the last block, cut or closed, holds anything
        blocks = re.findall(r"<prompt>(.*?)</prompt>", text, re.DOTALL | re.IGNORECASE)
        if not re.search("</prompt>", text, re.IGNORECASE):
            blocks = re.split("<prompt>", text, maxsplit=1, flags=re.IGNORECASE)[-1:]
        return any(b.strip() for b in blocks)

    flags = {
        "recorded": [bool(r["parsed"]) for r in rows],
        "strict": [parse_rulebook(r["reflection"], "", unclosed=True)[1] for r in rows],
        "loose": [loose(r["reflection"]) for r in rows],
    }
    rule = next((k for k in ("strict", "loose") if flags[k] == flags["recorded"]), "neither")
    return {**{k: sum(v) / max(len(rows), 1) for k, v in flags.items()}, "rule": rule}


def summary(entry: dict[str, Any]) -> dict[str, Any]:
    """One task's rates: first-attempt success, each arm's success with its interval, the paired tests."""
    rows, tau = entry["failed"], entry["threshold"]
    played = sum(r["first_attempts"] for r in entry["rounds"])
    n = len(rows)
    won = {arm: [r[arm] >= tau for r in rows] for arm in ARMS}
    out: dict[str, Any] = {
        "first_attempts": played,
        "first_success": (played - n) / played if played else 0.0,
        "failed": n,
        **parse_rates(rows),
    }
    for arm, wins in won.items():
        out[arm] = (sum(wins), *wilson(sum(wins), n))
    for other in ("plain", "fresh"):
        better = sum(a and not b for a, b in zip(won["own"], won[other]))
        worse = sum(b and not a for a, b in zip(won["own"], won[other]))
        out[f"own_vs_{other}"] = (better, worse, mcnemar(better, worse))
    return out


def _rate(k: int, lo: float, hi: float, n: int) -> str:
    return f"{k}/{n} = {k / n if n else 0:.2f} [{lo:.2f}, {hi:.2f}]"


def findings(results: dict[str, Any], path: str) -> str:
    """The findings block: per task the rates with their intervals, the paired tests and a plain verdict."""
    lines = [
        f"Results: `{path}`, measured with the commands below; per failed first "
        'attempt: the second attempt under its own reflection, the "w/o reflection" retry and a fresh first '
        "attempt on the same task. Parse rate: strict, the library's rule (a block that states a rule); loose, the "
        "rule before it (any non-empty block); the rule the run itself applied (an unparsed reflection's second "
        "attempt runs under the initial prompt) is named per task. "
        "Intervals: 95 % Wilson; own against each other arm: exact McNemar test on the pairs where one won and the "
        "other lost.",
        "",
        "| task | first attempts | 1st success | failed | parse rate (strict / loose) | own reflection "
        "| w/o reflection retry | fresh first attempt | own vs retry (won/lost, p) | own vs fresh (won/lost, p) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for name, entry in results["tasks"].items():
        s = summary(entry)
        if not s["failed"]:
            verdicts.append(verdict(name, s))
            continue
        n = s["failed"]
        lines.append(
            f"| {name} | {s['first_attempts']} | {s['first_success']:.2f} | {n} | "
            f"{s['strict']:.2f} / {s['loose']:.2f} (run: {s['rule']}) | "
            + " | ".join(_rate(*s[arm][:1], *s[arm][1:], n) for arm in ARMS)
            + " | "
            + " | ".join(f"{b}/{w}, p = {p:.2g}" for b, w, p in (s["own_vs_plain"], s["own_vs_fresh"]))
            + " |"
        )
        verdicts.append(verdict(name, s))
    commands = [  # files written before commands were kept per task hold one for all
        f"- {name}: `{entry.get('command', results.get('command'))}`"
        for name, entry in results["tasks"].items()
        if entry["failed"]
    ]
    return "\n".join(lines + [""] + commands + [""] + verdicts)


def verdict(name: str, s: dict[str, Any]) -> str:
    """A plain sentence: does its own reflection beat each other arm (exact test, p < 0.05), and on how many."""
    said = []
    for other in ("plain", "fresh"):
        better, worse, p = s[f"own_vs_{other}"]
        if p < 0.05:
            said.append(f"{'beats' if better > worse else 'loses to'} {ARMS[other]} (p = {p:.2g})")
        else:
            said.append(f"is not told apart from {ARMS[other]} (p = {p:.2g})")
    if not s["failed"]:
        why = "no failed first attempt" if s["first_attempts"] else "no round finished in the time the run had"
        return f"- {name}: not measured ({why})."
    short = "" if s["failed"] >= 64 else f" Only {s['failed']} failed first attempts were measured, short of 64."
    none = not any(s[arm][0] for arm in ARMS)
    nothing = f" None of the three won a single one of the {s['failed']} tasks." if none else ""
    return f"- {name}: the second attempt under its own reflection " + "; it ".join(said) + "." + nothing + short


def render_docs(paths: list[str], write: bool = True) -> list[str]:
    """Re-render every reflection-gain block in ``paths`` from the results it names; returns the stale ones."""
    stale = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()

        def fresh(m: re.Match) -> str:
            with open(os.path.join(ROOT, m.group(2)), encoding="utf-8") as f:
                body = findings(json.load(f), m.group(2))
            if body != m.group(3):
                stale.append(f"{path}: {m.group(2)}")
            return f"{m.group(1)}\n{body}\n{m.group(4)}"

        new = BLOCK.sub(fresh, text)
        if write and new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    return stale


def main(argv: list[str] | None = None) -> dict | None:
    from erl_lite.cli import arg_types

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a transformers model folder, e.g. SmolLM2-135M-Instruct converted")
    parser.add_argument("--out", help="the results file (JSON), rewritten after every round")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--failed", type=arg_types.whole(1), default=64, help="failed first attempts per task")
    parser.add_argument("--per-round", type=arg_types.whole(1), default=24, help="tasks (first attempts) a round")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: 8-token replies, one small round")
    parser.add_argument("--render-docs", action="store_true", help="rewrite docs/TRAINING.md's block and stop")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.render_docs:
        print("\n".join(render_docs([DOCS])) or "up to date")
        return None
    if not args.model:
        parser.error("--model DIR is needed to measure (or --render-docs)")
    per_round, failed = (4, 1) if args.tiny else (args.per_round, args.failed)
    command = " ".join(["python", "scripts/reflection_gain.py", *argv])
    results = measure(args.model, args.tasks, failed, per_round, args.tiny, args.out, command)
    for name, entry in results["tasks"].items():
        s = summary(entry)
        print(name, {k: v for k, v in s.items()}, flush=True)
    return results


if __name__ == "__main__":
    main()
