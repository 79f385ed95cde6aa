"""Notebooks: committed without outputs, their first cells rendered from the repository constants,
and each one runs top to bottom under the CPU preset."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _sync_script():
    """scripts/sync_notebooks.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("sync_notebooks", ROOT / "scripts" / "sync_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; strip them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_has_a_parameters_cell_and_imports_the_library(path):
    nb = json.loads(path.read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
    assert "PRESET" in "".join(tagged[0]["source"])
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "erl_lite" in code


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_install_cell_badge_and_links_match_the_release_constants(path):
    """Install cell, Colab badge, environment cell and figure links are what erl_lite.REPOSITORY_URL
    and erl_lite.RELEASE_REF render (one place to change when the repository moves)."""
    text = path.read_text(encoding="utf-8")
    sync = _sync_script()
    assert sync.dumps(sync.sync(json.loads(text), path.name)) == text, \
        f"{path.name} differs from the rendered first cells: run python scripts/sync_notebooks.py"
    nb = json.loads(text)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    tags = code[1].get("metadata", {}).get("tags", [])
    assert "parameters" in tags, "code cells open with install, parameters, environment, in that order"
    assert "environment_report()" in "".join(code[2]["source"])
    assert "](../assets" not in text  # relative links do not resolve when Colab opens the notebook alone


@pytest.mark.notebooks
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_on_cpu(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(str(path), as_version=4)
    os.environ["ERL_LITE_STATIC"] = "1"  # widgets render as static HTML without a front-end
    os.environ.setdefault("MPLBACKEND", "Agg")
    # The kernel imports this checkout's erl_lite, whatever copy the environment has installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    print(f"{path.name}: {time.perf_counter() - start:.1f} s")
