"""What a notebook user meets first: the install from the git repository, the constraints it
uses, the environment report, and the refusal to run a GPU preset on a machine without CUDA."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

import erl_lite
from erl_lite import ERLConfig, ERLTrainer
from erl_lite.config.presets import GPU_PRESETS, PRESETS, require_cuda_for_preset
from erl_lite.integrations.colab import environment_report

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


# --- the install path -------------------------------------------------------------------------
def _git(*args: str, cwd: pathlib.Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _snapshot_of_working_tree(dest: pathlib.Path) -> pathlib.Path:
    """A one-commit git repository holding this checkout's files as they are now (committed or
    not), so the install is tested on the code under test, not on the last commit."""
    files = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=ROOT).split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():  # deleted-but-tracked files are listed too
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    _git("init", "-q", cwd=dest)
    _git("add", "-A", cwd=dest)
    _git("commit", "-q", "-m", "snapshot", cwd=dest)
    _git("tag", erl_lite.RELEASE_REF, cwd=dest)
    return dest


def test_install_from_a_git_url_at_the_release_ref_carries_code_and_data(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    repo = _snapshot_of_working_tree(tmp_path / "repo")
    target = tmp_path / "target"
    # The URL form the notebooks use (git+URL@ref), on a local repository: no network, no deps.
    url = f"git+{repo.as_uri()}@{erl_lite.RELEASE_REF}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            url,
        ],
        check=True,
        timeout=300,
    )

    # Every file of the package in the repository (code and data) is in the installed copy.
    wanted = {p.relative_to(repo) for p in (repo / "erl_lite").rglob("*") if p.is_file()}
    installed = {
        p.relative_to(target) for p in (target / "erl_lite").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    assert wanted - installed == set(), f"not installed: {sorted(map(str, wanted - installed))[:10]}"
    assert pathlib.Path("erl_lite/data/embedded/model.safetensors") in installed

    # Imported from the target alone (plus site-packages for torch & co.), far from the checkout.
    probe = (
        "import erl_lite, erl_lite.integrations.colab; from erl_lite.embedded.loading import EMBEDDED_DIR; "
        "print(erl_lite.__file__); print(sorted(p.name for p in EMBEDDED_DIR.iterdir()))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, check=True, capture_output=True, text=True, timeout=120
    ).stdout.splitlines()
    assert pathlib.Path(out[0]).resolve().is_relative_to(target.resolve()), out[0]
    assert "model.safetensors" in out[1] and "tokenizer.json" in out[1]


def _pip_install_args(text: str) -> list[str]:
    """The package arguments of every ``pip install`` in a cell: shell lines (``!pip install x``,
    ``pip install x``) and Python lists (``[..., "pip", "install", "-q", "x", ...]``)."""
    args = []
    for line in re.findall(r"pip\s+install\s+([^\n]*)", text):
        args += line.split()
    for call in re.findall(r"""["']pip["']\s*,\s*["']install["']\s*,([^\]]*)\]""", text, flags=re.S):
        args += re.findall(r"""["']([^"']*)["']""", call)
    return [a.strip("\"'") for a in args]


BARE_NAME = re.compile(r"erl[-_.]?lite(\[[^\]]*\])?([<>=!~]=?.*)?", re.I)


@pytest.mark.parametrize(
    "text, bare",
    [
        ('subprocess.run([sys.executable, "-m", "pip", "install", "-q", "erl-lite"], check=True)', True),
        ("!pip install -q erl_lite==0.1.0", True),
        ("%pip install 'erl-lite[notebooks]'", True),
        ("!pip install git+https://github.com/o/erl_lite@v1 -c https://x/constraints.txt", False),
        ("import erl_lite\nprint(erl_lite.__version__)", False),
    ],
)
def test_the_bare_name_check_finds_what_it_should(text, bare):
    assert any(BARE_NAME.fullmatch(a) for a in _pip_install_args(text)) is bare


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_notebook_installs_a_bare_name_from_the_index(path):
    """A bare ``erl-lite`` would install whatever a stranger registers under that name."""
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        bare = [a for a in _pip_install_args("".join(cell["source"])) if BARE_NAME.fullmatch(a)]
        assert not bare, (
            f"{path.name} cell {i} installs {bare} from the package index; install "
            "from the repository (scripts/sync_notebooks.py renders the cell)"
        )


def test_the_install_cell_pins_the_repository_and_its_constraints_at_one_ref():
    sys.path.insert(0, str(ROOT / "scripts"))
    from sync_notebooks import install_cell_source

    source = install_cell_source()
    args = _pip_install_args(source)
    ref = erl_lite.RELEASE_REF
    assert f"git+{erl_lite.REPOSITORY_URL}@{ref}" in args
    constraints = args[args.index("-c") + 1]
    assert constraints.endswith(f"/{ref}/constraints.txt") and constraints.startswith("https://")
    assert 'find_spec("erl_lite") is None' in source  # a clone or CI keeps its own copy
    compile(source, "install-cell", "exec")


def test_constraints_pin_every_dependency_within_the_declared_ranges():
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            assert len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==", line
            pins[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in map(Requirement, declared):
        name = canonicalize_name(dep.name)
        if name == "torch":  # left to the platform on purpose (see constraints.txt)
            assert name not in pins
            continue
        assert name in pins, f"constraints.txt has no pin for {dep.name}"
        assert dep.specifier.contains(pins[name]), f"{dep.name}=={pins[name]} is outside {dep}"


# --- the environment report -------------------------------------------------------------------
def test_environment_report_on_the_cpu_names_versions_and_device():
    report = environment_report()
    text = str(report)
    for name in ("python", "torch", "transformers", "peft", "trl", "bitsandbytes", "erl_lite"):
        assert re.search(rf"^{name}\s+\S", text, flags=re.M), f"{name} missing from:\n{text}"
    assert report.versions["torch"] == torch.__version__
    assert report.versions["erl_lite"] == erl_lite.__version__
    if not torch.cuda.is_available():
        assert report.device == "cpu" and report.gpu_free_gib is None
        assert "no CUDA device" in text


def test_environment_report_on_cuda_gives_the_free_gpu_memory(monkeypatch):
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=None: (int(14.5 * gib), 15 * gib))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    report = environment_report()
    assert report.device == "cuda:0" and report.gpu_name == "Tesla T4"
    assert (report.gpu_free_gib, report.gpu_total_gib) == (14.5, 15.0)
    assert "14.5 GiB free of 15.0 GiB" in str(report) and "bf16: no" in str(report)


# --- a GPU preset without CUDA ----------------------------------------------------------------
@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("name", sorted(GPU_PRESETS))
def test_a_gpu_preset_without_cuda_is_an_error_that_says_what_to_do(no_cuda, name):
    with pytest.raises(RuntimeError, match=rf"PRESET = {name!r}.*no CUDA device") as err:
        require_cuda_for_preset(name)
    message = str(err.value)
    assert "PRESET = 'demo'" in message and "allow_cpu=True" in message and "device='cpu'" in message
    require_cuda_for_preset(name, allow_cpu=True)  # the explicit override


def test_cpu_presets_and_gpu_presets_with_cuda_pass(monkeypatch):
    assert GPU_PRESETS < set(PRESETS)
    require_cuda_for_preset("cpu")
    require_cuda_for_preset(None)  # a config not made from a preset
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    require_cuda_for_preset("gpu")
    with pytest.raises(ValueError, match="preset must be one of None, cpu, demo, gpu, paper, got 'gpuu'"):
        require_cuda_for_preset("gpuu")


def test_inspecting_a_gpu_preset_on_the_cpu_still_works(no_cuda):
    assert ERLConfig.preset("gpu").gradient_checkpointing is True  # settings are data, not a run


def test_the_trainer_refuses_to_load_a_named_model_for_a_gpu_preset_on_the_cpu(no_cuda, tmp_path):
    from erl_lite.testing import save_tiny_model

    path = save_tiny_model(tmp_path / "tiny")
    args = ERLConfig.preset("gpu", max_steps=1, num_tasks_per_step=1, progress_bar=False)
    with pytest.raises(RuntimeError, match="no CUDA device"):
        ERLTrainer(
            str(path),
            reward_funcs=lambda prompts, completions, **kw: [0.0] * len(completions),
            args=args,
            train_dataset=[{"prompt": "hi"}],
        )


# --- the wheel: what a pip install carries --------------------------------------------------------
#: Notebook 06's cells that show committed evidence, with the three cells every notebook opens with; the live run
#: (sections 2 and 4) trains for minutes and reads no committed file, so it is left out here.
EVIDENCE_CELLS = ("06-01", "06-02", "06-env", "06-12", "06-share")


def test_a_wheel_install_shows_notebook_06s_committed_evidence_from_an_empty_folder(tmp_path):
    """Built as a wheel and installed into a fresh virtual environment (torch & co. from this one's site-packages:
    nothing downloaded), erl_lite carries the committed comparisons: notebook 06, run from an empty folder, shows
    each world's findings, figure and table, and the live-run share, read from the installed package."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    nbclient, nbformat = pytest.importorskip("nbclient"), pytest.importorskip("nbformat")
    repo = _snapshot_of_working_tree(tmp_path / "repo")  # tracked and new files only, as a release builds them
    pip = ["-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([sys.executable, *pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), repo],
                   check=True, timeout=300)  # fmt: skip
    wheel = next(tmp_path.glob("erl_lite-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([python, *pip, "install", "--no-deps", str(wheel)], check=True, timeout=300)

    empty = tmp_path / "empty"
    empty.mkdir()
    nb = nbformat.read(str(ROOT / "notebooks" / "06_erl_vs_rlvr_and_ablations.ipynb"), as_version=4)
    nb.cells = [c for c in nb.cells if c.get("id") in EVIDENCE_CELLS]
    assert [c.id for c in nb.cells] == list(EVIDENCE_CELLS)
    # the installed copy, not a checkout; matplotlib's inline backend, which draws a displayed figure as a PNG
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MPLBACKEND")}
    # the kernel is the venv's python: a kernel spec that names it, as Colab's kernel is its own interpreter
    spec = {"argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"], "language": "python"}
    (tmp_path / "kernels" / "venv").mkdir(parents=True)
    (tmp_path / "kernels" / "venv" / "kernel.json").write_text(json.dumps({**spec, "display_name": "venv"}))
    env.update(JUPYTER_PATH=str(tmp_path), ERL_LITE_STATIC="1")
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        client = nbclient.NotebookClient(
            nb, timeout=300, kernel_name="venv", resources={"metadata": {"path": str(empty)}}
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)

    def shown(cell_id: str) -> tuple[str, int]:
        """The text a cell printed or displayed, and how many images it drew."""
        outputs = next(c for c in nb.cells if c.id == cell_id).outputs
        text = "".join(o.get("text", "") + o.get("data", {}).get("text/markdown", "") for o in outputs)
        return text, sum("image/png" in o.get("data", {}) for o in outputs)

    report, _ = shown("06-env")
    imported = re.search(r"^erl_lite\s.*?(/\S+)", report, flags=re.M)
    assert imported and pathlib.Path(imported[1]).resolve().is_relative_to(venv.resolve()), report
    evidence, figures = shown("06-12")
    assert "no committed comparison" not in evidence
    for world, prefix in (
        ("hard", "compare_hard_samples_"),
        ("sparse", "compare_sparse_samples_"),
        ("demo", "compare_samples_"),
    ):
        findings = (ROOT / "erl_lite" / "assets" / f"{prefix}findings.md").read_text()
        assert f"**Findings, {world} world**: " + findings in evidence
        assert (ROOT / "erl_lite" / "assets" / f"{prefix}table.md").read_text() in evidence
    assert figures == 3
    share = json.loads((ROOT / "erl_lite" / "assets" / "live_run_share.json").read_text())
    assert (
        f"ERL ended above RLVR on {len(share['erl_ahead_seeds'])} of {len(share['seeds'])} seeds"
        in shown("06-share")[0]
    )


@pytest.mark.parametrize("replaced", [[], ["PyYAML"], ["PyYAML", "numpy"], ["a-package-not-imported"]], ids=str)
def test_the_install_cell_says_to_restart_when_pip_replaced_what_the_kernel_imported(capsys, monkeypatch, replaced):
    """On Colab the install cell runs in a kernel that has already imported packages: when pip replaces one of those
    (a constraint pins another version), the old one stays loaded, so the cell must say to restart; when pip
    replaced none of them (or only packages not imported), it must not."""
    import importlib.metadata as md
    import importlib.util

    import numpy  # noqa: F401  # imported by this kernel, as PyYAML (yaml) is
    import yaml  # noqa: F401

    sys.path.insert(0, str(ROOT / "scripts"))
    from sync_notebooks import install_cell_source

    installed = {}
    real_version = md.version
    monkeypatch.setattr(md, "version", lambda d: installed.get(d) or real_version(d))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # erl_lite not installed: a fresh Colab
    calls = []

    def pip(args, check):  # stands in for pip: the install replaces the distributions named
        calls.append(args)
        installed.update({d: "999.0" for d in replaced})

    monkeypatch.setattr(subprocess, "run", pip)
    exec(install_cell_source(), {})
    out = capsys.readouterr().out
    assert calls and "install" in calls[0]
    imported = [d for d in replaced if d != "a-package-not-imported"]
    assert ("RESTART THE RUNTIME" in out) is bool(imported), out
    assert all(d in out for d in imported), out
