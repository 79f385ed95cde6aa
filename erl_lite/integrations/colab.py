"""What a notebook's environment cell prints (:func:`environment_report`): versions, device and free GPU memory.
``scripts/sync_notebooks.py`` renders that cell, the install cell, the Colab badge and the figure links."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from importlib import metadata

REPORTED_PACKAGES = ("torch", "transformers", "peft", "trl", "bitsandbytes", "accelerate")


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
            lines.append(
                f"{'device':<{width}}  {self.device} · {self.gpu_name} · "
                f"{self.gpu_free_gib:.1f} GiB free of {self.gpu_total_gib:.1f} GiB · "
                f"bf16: {'yes' if self.native_bf16 else 'no'}"
            )
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
    versions["erl_lite"] = erl_lite.__version__
    location = str(erl_lite.__file__).removesuffix("__init__.py").rstrip("/\\")
    if not torch.cuda.is_available():
        return RuntimeReport(versions=versions, location=location)
    index = torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(index)
    return RuntimeReport(
        versions=versions,
        location=location,
        device=f"cuda:{index}",
        gpu_name=torch.cuda.get_device_name(index),
        gpu_free_gib=round(free / 2**30, 2),
        gpu_total_gib=round(total / 2**30, 2),
        native_bf16=torch.cuda.is_bf16_supported(including_emulation=False),
    )
