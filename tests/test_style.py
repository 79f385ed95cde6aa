"""The repository's style is the formatter's and the linter's: `ruff format --check` and `ruff check` pass.

The size budgets (tests/test_imports.py) count lines as `ruff format` writes them, so this check is what keeps
them honest: code packed onto long lines fails here before it can meet a budget.
"""

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pinned_ruff() -> str:
    """The ruff version pyproject.toml's dev extra pins (the formatted source depends on it)."""
    found = re.search(r'"ruff==([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert found, "pyproject.toml's dev extra pins ruff (ruff==X.Y.Z)"
    return found.group(1)


def _installed_ruff() -> str:
    """The installed ruff's version; the test skips, saying how to install it, where there is none."""
    try:
        return importlib.metadata.version("ruff")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' installs it)")


def _ruff(*args: str) -> subprocess.CompletedProcess:
    installed = _installed_ruff()
    if installed != _pinned_ruff():
        pytest.skip(f"ruff {installed} is installed; the source is formatted by the pinned ruff {_pinned_ruff()}")
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )


def test_the_repository_is_formatted_by_ruff():
    done = _ruff("format", "--check")
    assert done.returncode == 0, f"run `ruff format .` (files it would change):\n{done.stdout}{done.stderr}"


def test_the_repository_passes_ruff_check():
    done = _ruff("check")
    assert done.returncode == 0, f"`ruff check .` finds:\n{done.stdout}{done.stderr}"


def test_the_style_checks_see_a_violation(tmp_path):
    """The checks read real files: an unformatted file and an unused import are found."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = {  'a':1 }\n")
    _installed_ruff()
    run = lambda *a: subprocess.run([sys.executable, "-m", "ruff", *a, "--no-cache", str(bad)], capture_output=True)
    assert run("format", "--check").returncode == 1
    assert run("check", "--select", "F401").returncode == 1


def _records(sources: dict[str, str]) -> dict[str, int]:
    """Dataclass name -> number of fields, for every ``@dataclass`` in ``sources`` (ClassVars are not fields)."""
    fields = {}
    for text in sources.values():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
                own = [s for s in node.body if isinstance(s, ast.AnnAssign) and "ClassVar" not in ast.unparse(s)]
                fields.setdefault(node.name, len(own))
    return fields


def positional_records(sources: dict[str, str]) -> list[str]:
    """``file:line Name`` for each record of more than three fields built with a positional argument: in
    ``TrainSample(role, ids, A, None)`` a reader cannot tell which field the ``None`` fills."""
    wide = {name for name, n in _records(sources).items() if n > 3}
    found = []
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and node.args:
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in wide:
                    found.append(f"{path}:{node.lineno} {name}")
    return sorted(found)


def test_records_of_more_than_three_fields_are_built_by_keyword():
    sources = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "erl_lite").rglob("*.py")}
    found = positional_records(sources)
    assert not found, "build these records by keyword (name=value):\n" + "\n".join(found)


def test_the_keyword_check_sees_a_positional_record():
    text = (
        "@dataclass\nclass R:\n    a: int\n    b: int\n    c: int\n    d: int = 0\n\nR(1, b=2, c=3)\nR(a=1, b=2, c=3)\n"
    )
    assert positional_records({"m.py": text}) == ["m.py:8 R"]
    assert positional_records({"m.py": text.replace("    d: int = 0\n", "")}) == []  # three fields: positional is fine
