"""The reading path of one ERL step: the erl_lite lines that run in ``core.phases.erl_step`` and its update.

It runs the demo (the embedded model, the ``demo`` preset, ERL with every phase) for one iteration with
a profiler on, records every erl_lite function entered while ``erl_step`` or the update after it
(``core.update.PolicyUpdater.update``) is on the stack, and counts
the lines of those functions (decorators, signature, docstring and body; a nested function once, inside
its parent). Module docstrings, imports and class bodies outside the functions are not counted: what a
reader follows is the code that runs. The game the step plays (``envs/``, ``embedded/``) and the engine that samples
and scores the model (``engine/``) are listed apart.
docs/ARCHITECTURE.md quotes this table.

Usage:
    OMP_NUM_THREADS=1 python scripts/reading_path.py
"""

from __future__ import annotations

import ast
import os
import sys
import tempfile
from collections import defaultdict

import erl_lite

PACKAGE = os.path.dirname(os.path.abspath(erl_lite.__file__))


def traced_functions(run_step) -> set[tuple[str, int]]:
    """(file, first line) of every erl_lite code object entered during the step in ``run_step()``."""
    from erl_lite.core import phases, update

    targets, depth, seen = {phases.erl_step.__code__, update.PolicyUpdater.update.__code__}, [0], set()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code in targets:
                depth[0] += 1
            if depth[0] and code.co_filename.startswith(PACKAGE):
                seen.add((code.co_filename, code.co_firstlineno))
        elif event == "return" and frame.f_code in targets:
            depth[0] -= 1

    sys.setprofile(profile)
    try:
        run_step()
    finally:
        sys.setprofile(None)
    return seen


def function_lines(seen: set[tuple[str, int]]) -> dict[str, int]:
    """Module path (relative to the package) -> lines of its functions that ran, nested ones once."""
    by_file = defaultdict(set)
    for path, first in seen:
        by_file[path].add(first)
    counts = {}
    for path, firsts in by_file.items():
        tree = ast.parse(open(path, encoding="utf-8").read())
        covered = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if start in firsts or node.lineno in firsts:
                    covered |= set(range(start, node.end_lineno + 1))
        if covered:
            counts[os.path.relpath(path, PACKAGE)] = len(covered)
    return counts


#: Modules the step calls that are the environment it plays, not the algorithm.
GAME = ("envs/", "embedded/")
#: Modules that sample and score the model: a student changing the algorithm need not read them.
ENGINE = ("engine/",)


def main() -> None:
    from erl_lite.embedded.demo import demo_trainer

    trainer = demo_trainer(max_steps=1, eval_tasks=1, eval_steps=0, output_dir=tempfile.mkdtemp())
    counts = function_lines(traced_functions(trainer.train))
    game = {m: n for m, n in counts.items() if m.startswith(GAME)}
    engine = {m: n for m, n in counts.items() if m.startswith(ENGINE)}
    step = {m: n for m, n in counts.items() if m not in game and m not in engine}
    print("| module | lines |\n|---|---|")
    for module, n in sorted(step.items(), key=lambda kv: -kv[1]):
        print(f"| `{module}` | {n} |")
    print(f"| **the step: {len(step)} modules** | **{sum(step.values())}** |")
    for label, rows in (("the engine", engine), ("the game", game)):
        names = ", ".join(f"`{m}`" for m, _ in sorted(rows.items(), key=lambda kv: -kv[1]))
        print(f"| {names} ({label}) | {sum(rows.values())} |")


if __name__ == "__main__":
    main()
