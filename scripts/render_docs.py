"""Re-render the blocks of README.md and docs/*.md that state results, from the committed files they name.

- ``<!-- findings erl_lite/assets/compare_..._results.json -->``: the study's findings paragraph on that comparison
  (``scripts/compare_modes.py``'s :func:`findings`, paired by seed), and each committed
  ``erl_lite/assets/compare_*results.json``'s ``findings.md`` beside it (notebook 06 shows those);
- ``<!-- bands erl_lite/assets/bands.json ... -->``: ``benchmarks/embedded_bands.py``'s table of those bands reports.

    python scripts/render_docs.py           # rewrite what is stale, and say what was
    python scripts/render_docs.py --check   # only say what is stale (exit status 1 when anything is)

A test holds every block to what this renders (tests/test_compare_modes.py).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
import sys

from erl_lite.jsonio import read_json
from erl_lite.study.runs import read_results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: A findings block in a markdown file: the results file it renders, its text, its end.
FINDINGS_BLOCK = re.compile(r"(<!-- findings (\S+) -->)\n(.*?)\n?(<!-- /findings -->)", re.DOTALL)
#: A bands table in markdown: ``<!-- bands erl_lite/assets/bands.json ... -->``, one column per report named.
BANDS_BLOCK = re.compile(r"(<!-- bands ([^>]+?) -->)\n(.*?)\n?(<!-- /bands -->)", re.DOTALL)


def _script(name: str, path: str):
    """The script at ``path`` (relative to the repository) as a module: scripts/ and benchmarks/ are no packages."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def findings(path: str) -> str:
    """The findings paragraph of the results file at ``path`` (relative to the repository, or absolute)."""
    full = os.path.join(ROOT, path)
    return _script("compare_modes", "scripts/compare_modes.py").findings(read_results(read_json(full), path))


def bands_table(paths: list[str]) -> str:
    """``benchmarks/embedded_bands.py``'s table of the bands reports at ``paths`` (relative to the repository)."""
    reports = [read_json(os.path.join(ROOT, p)) for p in paths]
    return _script("embedded_bands", "benchmarks/embedded_bands.py").bands_table(
        {f"{r['world']} world": r for r in reports}
    )


def render_docs(paths: list[str], write: bool = True) -> list[str]:
    """Re-render every findings and bands block in ``paths`` from the files it names, and each committed
    ``erl_lite/assets/compare_*results.json``'s ``findings.md`` beside it; returns what was stale (``path: results``, or
    the findings file), rewriting it when ``write``."""
    stale = []
    for results in sorted(glob.glob(os.path.join(ROOT, "erl_lite", "assets", "compare_*results.json"))):
        path = results[: -len("results.json")] + "findings.md"
        body = findings(results) + "\n"
        if not os.path.isfile(path) or open(path, encoding="utf-8").read() != body:
            stale.append(os.path.relpath(path, ROOT))
            if write:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(body)
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()

        def fresh(render, m: re.Match) -> str:
            body = render(m.group(2))
            if body != m.group(3):
                stale.append(f"{path}: {m.group(2)}")
            return f"{m.group(1)}\n{body}\n{m.group(4)}"

        new = BANDS_BLOCK.sub(lambda m: fresh(lambda names: bands_table(names.split()), m), text)
        new = FINDINGS_BLOCK.sub(lambda m: fresh(findings, m), new)
        if write and new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    return stale


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only list the stale blocks (exit status 1 if any)")
    args = p.parse_args()
    docs = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
    stale = render_docs(docs, write=not args.check)
    print("\n".join(f"{'stale' if args.check else 're-rendered'}: {x}" for x in stale) or "every block is current")
    sys.exit(1 if args.check and stale else 0)


if __name__ == "__main__":
    main()
