"""Notebooks: committed without outputs, their first cells rendered from the repository constants,
and each one runs top to bottom under the CPU preset."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
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
    dirty = [
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))
    ]
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
def test_notebook_sets_up_in_one_call(path):
    """The model, tokenizer, environment and config come from erl_lite.teach.setup(PRESET, SEED, ...):
    no notebook writes its own cpu/gpu branch, names the gpu model, or builds a preset's config."""
    nb = json.loads(path.read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "setup(PRESET, SEED" in code, f"{path.name}: set up with erl_lite.teach.setup(PRESET, SEED, ...)"
    for own in ("load_policy(", "demo_config(", "ERLConfig.preset(", "Qwen/", "set_seed(SEED)", "config.output_dir ="):
        assert own not in code, f"{path.name}: {own!r} is setup's job (erl_lite.teach.setup)"
    params = "".join(next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))["source"])
    assert "SEED = DEFAULT_SEED" in params, f"{path.name}: SEED defaults to erl_lite.config.DEFAULT_SEED"


# What each notebook samples or trains under PRESET = "gpu": ERLConfig overrides of the gpu preset, built from its
# SETTINGS["gpu"] the way the notebook's own cells use them.
GPU_RUNS = {
    "01_quickstart": lambda S: [dict(num_tasks_per_step=S["tasks_per_step"])],
    "02_first_attempts_and_gate": lambda S: [dict(num_tasks_per_step=S["tasks"], num_generations=S["generations"])],
    "03_reflection_and_second_attempt": lambda S: [
        dict(num_tasks_per_step=S["tasks"], num_generations=S["generations"])
    ],
    "04_memory": lambda S: [dict(num_tasks_per_step=S["tasks_per_step"], num_generations=S["generations"])],
    "05_grpo_update_and_internalization": lambda S: [
        dict(num_tasks_per_step=S["tasks"], num_generations=S["generations"])
    ],
    "06_erl_vs_rlvr_and_ablations": lambda S: [
        dict(num_tasks_per_step=S["tasks_per_step"], max_episode_length=S["episode_tokens"], **run)
        for run in ({}, dict(mode="rlvr", num_generations=S["rlvr_generations"]))
    ],
    "07_bring_your_own_task": lambda S: [
        dict(num_tasks_per_step=S["tasks_per_step"], max_completion_length=S["completion_tokens"])
    ],
    "08_qlora_on_a_colab_gpu": lambda S: [dict(num_tasks_per_step=S["tasks_per_step"])],
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_a_notebooks_gpu_settings_fit_a_t4_by_the_arithmetic(path):
    """Under "gpu" a notebook asks a free Colab T4 for no more than the gpu preset does: erl-lite budget's worst case
    for Qwen2.5-1.5B-Instruct under 13 GiB, the part of a 15 GiB T4 left after the CUDA context (docs/GPU.md).
    Notebooks 01 and 08 trained 8 tasks a step (20.05 GiB) and 06 ran RLVR's 10 rollouts of 4 tasks (24.64 GiB)."""
    from erl_lite.config import ERLConfig
    from erl_lite.integrations.budget import ModelShape, estimate_memory

    nb = json.loads(path.read_text())
    params = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    scope: dict = {}
    exec("".join(params["source"]), scope)
    shape = ModelShape.load("qwen2.5-1.5b-instruct")  # the gpu setup's model (erl_lite.teach.setup.GPU_MODEL)
    for overrides in GPU_RUNS[path.stem](scope["SETTINGS"]["gpu"]):
        peak = estimate_memory(ERLConfig.preset("gpu", **overrides), shape).peak_gib
        assert peak < 13, f"{path.name}: {overrides} needs {peak:.2f} GiB at worst, more than a T4 leaves"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_results_land_in_an_ignored_folder(path):
    """A results folder a notebook names (results_folder(RESULTS_NAME)) sits under trainer_output/, where a
    run's outputs go (transformers' default output_dir) and which git ignores: running a notebook in the
    repository leaves nothing untracked."""
    import re

    nb = json.loads(path.read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    names = re.findall(r"RESULTS_NAME\s*=\s*[\"']([^\"']+)", code) + re.findall(r"results_folder\([\"']([^\"']+)", code)
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "trainer_output/" in ignored
    for name in names:
        assert pathlib.PurePosixPath(name).parts[0] == "trainer_output", f"{path.name}: {name!r} is not ignored by git"


@pytest.mark.parametrize("path", sorted((ROOT / "assignments").glob("*.ipynb")), ids=lambda p: p.name)
def test_an_assignments_install_cell_is_the_notebooks_and_otter_at_the_extras_pin(path):
    """The course assignments (assignments/) install erl_lite as the notebooks do, then the otter-grader the
    ``assignments`` extra pins; they are committed without outputs."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    install = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    assert install.startswith(_sync_script().install_cell_source() + "\n"), path.name
    (pin,) = re.findall(r'"(otter-grader==[^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert f'"{pin}"' in install and not any(c.get("outputs") for c in cells)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_install_cell_badge_and_links_match_the_release_constants(path):
    """Install cell, Colab badge, environment cell and figure links are what erl_lite.REPOSITORY_URL
    and erl_lite.RELEASE_REF render (one place to change when the repository moves)."""
    text = path.read_text(encoding="utf-8")
    sync = _sync_script()
    assert sync.dumps(sync.sync(json.loads(text), path.name)) == text, (
        f"{path.name} differs from the rendered first cells: run python scripts/sync_notebooks.py"
    )
    nb = json.loads(text)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    tags = code[1].get("metadata", {}).get("tags", [])
    assert "parameters" in tags, "code cells open with install, parameters, environment, in that order"
    assert "environment_report()" in "".join(code[2]["source"])
    # a figure is a cell attachment: a relative link does not resolve when Colab opens the notebook alone, a raw
    # URL not offline (nor before the repository is published)
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", "\n".join("".join(c["source"]) for c in nb["cells"]))
    assert [i for i in images if not i.startswith(("attachment:", "https://colab.research.google.com/"))] == []


#: The longest notebooks start first, so the last one to finish is a short one (measured: notebooks/README.md).
LONGEST_FIRST = ("01_quickstart.ipynb", "06_erl_vs_rlvr_and_ablations.ipynb", "07_bring_your_own_task.ipynb")


#: Kernels running notebooks at once: one per core, at most two (the CI machine's cores); ERL_LITE_NOTEBOOK_KERNELS=1
#: runs them one after another, as notebooks/README.md's serial figure was measured.
KERNELS = int(os.environ.get("ERL_LITE_NOTEBOOK_KERNELS", min(2, os.cpu_count() or 1)))


def _execute(path: pathlib.Path, folder: pathlib.Path) -> float:
    """Run one notebook top to bottom in a fresh kernel, in ``folder``; its wall-clock seconds."""
    import nbclient
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    start = time.perf_counter()
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    ).execute()
    return time.perf_counter() - start


@pytest.fixture(scope="module")
def headless_runs(request, tmp_path_factory):
    """The selected notebooks, started at once on a pool of kernels: ``{name: Future of its seconds}``.

    Each kernel is its own process on one thread (OMP_NUM_THREADS=1), so two kernels use both cores of a 2-core
    machine and the headless run takes about half the serial time; a one-core machine runs them one by one.
    Each test waits for its own notebook and fails with that notebook's error."""
    from concurrent.futures import ThreadPoolExecutor

    chosen = [
        item.callspec.params["path"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_notebook_executes_on_cpu"
    ]
    chosen.sort(key=lambda p: LONGEST_FIRST.index(p.name) if p.name in LONGEST_FIRST else len(LONGEST_FIRST))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ERL_LITE_STATIC", "1")  # widgets render as static HTML without a front-end
        patch.setenv("MPLBACKEND", os.environ.get("MPLBACKEND", "Agg"))
        # The kernels import this checkout's erl_lite, whatever copy the environment has installed.
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        pool = ThreadPoolExecutor(max_workers=KERNELS)
        yield {p.name: pool.submit(_execute, p, tmp_path_factory.mktemp(p.stem)) for p in chosen}
        pool.shutdown(cancel_futures=True)  # a session stopped early (-x, Ctrl-C) starts no further notebook


@pytest.mark.notebooks
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_on_cpu(path, request):
    if os.environ.get("ERL_LITE_NOTEBOOKS_IN_BROWSER") == "1":  # set by .ci/run once the browser tier can run
        pytest.skip("CI runs the notebooks in its browser tier (Run All in JupyterLab), where a failure turns it red")
    pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    seconds = request.getfixturevalue("headless_runs")[path.name].result()  # raises the notebook's error
    print(f"{path.name}: {seconds:.1f} s ({KERNELS} kernels at a time)")


def test_notebook_06_live_run_is_the_setting_its_share_was_measured_in():
    """Notebook 06 prints how often its live-run setting put ERL above RLVR over ten seeds
    (``scripts/live_run_share.py``): the notebook's cpu setting and world must be the ones measured."""
    import ast
    import importlib.util

    spec = importlib.util.spec_from_file_location("live_run_share", ROOT / "scripts" / "live_run_share.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    nb = json.loads((ROOT / "notebooks" / "06_erl_vs_rlvr_and_ablations.ipynb").read_text(encoding="utf-8"))
    params = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    names = {}
    for node in ast.parse("".join(params["source"])).body:
        if isinstance(node, ast.Assign) and node.targets[0].id in ("WORLD", "SETTINGS"):
            names[node.targets[0].id] = eval(compile(ast.Expression(node.value), "parameters", "eval"))
    assert names["WORLD"] == script.WORLD and names["SETTINGS"]["demo"] == script.SETTING


@pytest.mark.parametrize("preset, world", [("demo", "demo"), ("demo", "sparse"), ("gpu", "hard"), ("demo", "hard")])
def test_notebook_06_says_when_its_ten_seed_share_is_not_the_setting_just_run(capsys, preset, world):
    """Section 3 prints the share of ten seeds where ERL ended above RLVR, measured in one setting: after
    ``WORLD = "demo"`` (or on the gpu preset) it must say the share is not of the run just made."""
    nb = json.loads((ROOT / "notebooks" / "06_erl_vs_rlvr_and_ablations.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c.get("id") == "06-share")
    exec("".join(cell["source"]), {"PRESET": preset, "WORLD": world})
    out = capsys.readouterr().out
    measured = json.loads((ROOT / "erl_lite" / "assets" / "live_run_share.json").read_text())["world"]
    assert ("NOT this run's setting" in out) is ((preset, world) != ("demo", measured)), out
    assert f"{measured} world" in out


def test_notebook_06_introduces_every_variant_its_committed_tables_show():
    """The intro named four variants while the tables showed six: each committed variant is introduced in bold."""
    nb = json.loads((ROOT / "notebooks" / "06_erl_vs_rlvr_and_ablations.ipynb").read_text(encoding="utf-8"))
    intro = "".join(nb["cells"][0]["source"])
    shown = {
        r["variant"]
        for world in ("hard", "sparse")
        for r in json.loads((ROOT / "erl_lite" / "assets" / f"compare_{world}_samples_results.json").read_text())
    }
    assert len(shown) >= 5  # the check reads the study's variants, not an empty file
    assert not [v for v in sorted(shown) if v != "ERL" and f"**{v}**" not in intro]


@pytest.mark.parametrize("runs", [2, 4])
def test_notebook_06_per_run_panels_share_the_width_with_one_legend_below(runs):
    """Each live run on its own axes: a legend beside the first panel made tight_layout squeeze the panels with a
    wide gap. The panels must be of one width, close together, with one legend under the row."""
    import matplotlib

    matplotlib.use("Agg")
    from synthetic import synthetic_history

    from erl_lite.viz import plot_rewards

    nb = json.loads((ROOT / "notebooks" / "06_erl_vs_rlvr_and_ablations.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c.get("id") == "06-10")
    names = ["ERL", "RLVR", "ERL w/o memory", "ERL w/o reflection"][:runs]
    histories = {n: synthetic_history(steps=6, seed=i, baseline=n == "RLVR") for i, n in enumerate(names)}
    scope = {"histories": histories, "plot_rewards": plot_rewards}  # what the cells above defined
    exec("".join(cell["source"]).removesuffix("fig"), scope)
    fig = scope["fig"]
    fig.canvas.draw()
    boxes = [ax.get_position() for ax in fig.axes]
    widths = [b.width for b in boxes]
    gaps = [b.x0 - a.x1 for a, b in zip(boxes, boxes[1:])]
    assert len(boxes) == runs and max(widths) < 1.1 * min(widths), widths  # one width
    assert max(gaps) < 0.35 * min(widths), (gaps, widths)  # no wide gap: the old layout left about a panel's width
    assert len(fig.legends) == 1 and not [ax for ax in fig.axes if ax.get_legend() is not None]
    assert fig.legends[0].get_window_extent().y1 <= min(b.y0 for b in boxes) * fig.bbox.height  # under the row
