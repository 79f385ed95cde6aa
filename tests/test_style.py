"""The repository's style is the formatter's and the linter's: `ruff format --check` and `ruff check` pass.

The size budgets (tests/test_imports.py) count lines as `ruff format` writes them, so this check is what keeps
them honest: code packed onto long lines fails here before it can meet a budget.
"""

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
