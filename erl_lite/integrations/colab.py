"""The notebooks' first cells (install cell, Colab badge, figure links, environment report), rendered by
``scripts/sync_notebooks.py`` at :data:`erl_lite.RELEASE_REF` with the pins the tests passed with.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass, field
from importlib import metadata

from erl_lite import RELEASE_REF, REPOSITORY_URL, __version__

REPORTED_PACKAGES = ("torch", "transformers", "peft", "trl", "bitsandbytes", "accelerate")

_GITHUB = re.compile(r"https://github\.com/(?P<owner>[\w.-]+)/(?P<name>[\w.-]+?)(?:\.git)?/?")


def github_path(repository: str = REPOSITORY_URL) -> str:
    """``owner/name`` of a GitHub repository URL (Colab opens notebooks from GitHub only)."""
    match = _GITHUB.fullmatch(repository)
    if match is None:
        raise ValueError(f"repository must be https://github.com/<owner>/<name>, got {repository!r}")
    return f"{match['owner']}/{match['name']}"


def raw_url(path: str, repository: str = REPOSITORY_URL, ref: str = RELEASE_REF) -> str:
    """The URL of a file of the repository at ``ref``, as served raw (images, constraints)."""
    return f"https://raw.githubusercontent.com/{github_path(repository)}/{ref}/{path}"


def colab_url(notebook: str, repository: str = REPOSITORY_URL, ref: str = RELEASE_REF) -> str:
    """The URL that opens ``notebook`` (a path inside the repository) in Colab, at ``ref``."""
    return f"https://colab.research.google.com/github/{github_path(repository)}/blob/{ref}/{notebook}"


def badge_markdown(notebook: str, repository: str = REPOSITORY_URL, ref: str = RELEASE_REF) -> str:
    """The "Open in Colab" badge of ``notebook`` (a path inside the repository), as markdown."""
    return ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({colab_url(notebook, repository, ref)})")


def install_cell_source(repository: str = REPOSITORY_URL, ref: str = RELEASE_REF) -> str:
    """The source of every notebook's install cell: erl_lite and its ``constraints.txt`` pins at ``ref``."""
    return f'''\
# Installs erl_lite from its repository at the pinned release, with the dependency versions its
# tests passed with. Does nothing where erl_lite is already importable (a local clone, CI).
# Rendered by scripts/sync_notebooks.py from erl_lite.REPOSITORY_URL and erl_lite.RELEASE_REF.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("erl_lite") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "git+{repository}@{ref}",
                    "-c", "{raw_url("constraints.txt", repository, ref)}"], check=True)
    importlib.invalidate_caches()'''


#: The cell after the parameters cell: what the notebook runs on, and the GPU-preset check.
REPORT_CELL_SOURCE = '''\
# What this notebook runs on: versions, device, free GPU memory (paste it into a bug report).
from erl_lite.integrations.colab import environment_report
from erl_lite.config.presets import require_cuda_for_preset

print(environment_report())
# A GPU preset on a machine without CUDA stops here; allow_cpu=True runs it on the CPU anyway (hours).
require_cuda_for_preset(PRESET, allow_cpu=False)'''


@dataclass(frozen=True)
class RuntimeReport:
    """Versions and device of the running Python, as :func:`environment_report` found them."""

    versions: dict[str, str | None] = field(default_factory=dict)
    location: str = ""  # where erl_lite was imported from
    device: str = "cpu"  # or "cuda:<i>"
    gpu_name: str | None = None
    gpu_free_gib: float | None = None
    gpu_total_gib: float | None = None
    native_bf16: bool | None = None  # a T4 has none: its 4-bit compute runs in fp16

    def __str__(self) -> str:
        width = max(map(len, self.versions))
        lines = [f"{name:<{width}}  {version or 'not installed'}" for name, version in self.versions.items()]
        lines[-1] += f"  ({self.location})" if self.location else ""
        if self.gpu_name is None:
            lines.append(f"{'device':<{width}}  cpu (no CUDA device)")
        else:
            lines.append(f"{'device':<{width}}  {self.device} · {self.gpu_name} · "
                         f"{self.gpu_free_gib:.1f} GiB free of {self.gpu_total_gib:.1f} GiB · "
                         f"bf16: {'yes' if self.native_bf16 else 'no'}")
        return "\n".join(lines)


def environment_report() -> RuntimeReport:
    """Versions of Python, :data:`REPORTED_PACKAGES` and erl_lite, the device and its free memory."""
    import torch
    import erl_lite
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in REPORTED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    versions["torch"] = torch.__version__  # with its build: +cu126 (CUDA 12.6), +cpu, ...
    versions["erl_lite"] = __version__
    location = str(erl_lite.__file__).removesuffix("__init__.py").rstrip("/\\")
    if not torch.cuda.is_available():
        return RuntimeReport(versions, location)
    index = torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(index)
    return RuntimeReport(versions, location, device=f"cuda:{index}",
                         gpu_name=torch.cuda.get_device_name(index), gpu_free_gib=round(free / 2**30, 2),
                         gpu_total_gib=round(total / 2**30, 2),
                         native_bf16=torch.cuda.is_bf16_supported(including_emulation=False))
