"""Rewrite the notebooks' first cells from erl_lite's repository constants.

    python scripts/sync_notebooks.py            # rewrite notebooks/*.ipynb in place
    python scripts/sync_notebooks.py --check    # exit 1 and name the notebooks that differ

What it writes, each rendered here from ``erl_lite.REPOSITORY_URL`` and
``erl_lite.RELEASE_REF``:

* the "Open in Colab" badge, first line of the first markdown cell;
* the install cell, the first code cell;
* the environment cell right after the cell tagged ``parameters`` (inserted when missing, with
  the id ``<nn>-env``): versions, device, free GPU memory, and the GPU-preset check;
* the repository's figures a markdown cell shows (``![...](../erl_lite/assets/x.png)``), as cell attachments
  (``attachment:x.png``) holding the committed file: they show on Colab, where the notebook is opened alone,
  and offline, with nothing to fetch.

Every other cell is left as it is. Publishing under another path: change the two constants in
``erl_lite/__init__.py``, then run this script.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # render from this checkout's constants, not an installed copy

from erl_lite import RELEASE_REF, REPOSITORY_URL  # noqa: E402

NOTEBOOK_DIR = ROOT / "notebooks"
ASSETS = ROOT / "erl_lite" / "assets"
_BADGE = re.compile(r"^\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)$")
# A figure link relative to notebooks/, or one already rendered as an attachment (re-rendered from the file).
_ASSET_LINK = re.compile(r"\]\((?:\.\./erl_lite/assets/|attachment:)([^)\s]+)\)")


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
    return (
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({colab_url(notebook, repository, ref)})"
    )


def install_cell_source(repository: str = REPOSITORY_URL, ref: str = RELEASE_REF) -> str:
    """The source of every notebook's install cell: erl_lite and its ``constraints.txt`` pins at ``ref``."""
    return f'''\
# Installs erl_lite from its repository at the pinned release, with the dependency versions its
# tests passed with. Does nothing where erl_lite is already importable (a local clone, CI).
# Rendered by scripts/sync_notebooks.py from erl_lite.REPOSITORY_URL and erl_lite.RELEASE_REF.
import importlib.metadata as md
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("erl_lite") is None:
    # what this kernel has already imported (Colab imports some packages at start): pip must not swap them unseen
    loaded = {{d: md.version(d) for m, ds in md.packages_distributions().items() if m in sys.modules for d in ds}}
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "git+{repository}@{ref}",
                    "-c", "{raw_url("constraints.txt", repository, ref)}"], check=True)
    importlib.invalidate_caches()
    changed = sorted(d for d, v in loaded.items() if md.version(d) != v)
    if changed:
        print(f"RESTART THE RUNTIME NOW (Runtime > Restart session), then run the notebook from the top: pip "
              f"replaced {{', '.join(changed)}}, which this kernel had already imported in its old version.")'''


#: The cell after the parameters cell: what the notebook runs on, and the GPU-preset check.
REPORT_CELL_SOURCE = """\
# What this notebook runs on: versions, device, free GPU memory (paste it into a bug report).
from erl_lite.integrations.colab import environment_report
from erl_lite.config.presets import require_cuda_for_preset

print(environment_report())
# A GPU preset on a machine without CUDA stops here; allow_cpu=True runs it on the CPU anyway (hours).
require_cuda_for_preset(PRESET, allow_cpu=False)"""


def _lines(text: str) -> list[str]:
    """A cell's ``source`` in the notebook format: lines keeping their newline, the last without."""
    return text.splitlines(keepends=True)


def _code_cell(cell_id: str, text: str) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": cell_id,
        "metadata": {},
        "outputs": [],
        "source": _lines(text),
    }


def sync(nb: dict, filename: str) -> dict:
    """``nb`` (a notebook's JSON) with its badge, install cell, environment cell and figure
    links rendered for ``notebooks/<filename>``; a new dict, ``nb`` is not changed."""
    nb = copy.deepcopy(nb)
    cells = nb["cells"]
    first_md = next(c for c in cells if c["cell_type"] == "markdown")
    lines = "".join(first_md["source"]).split("\n")
    badge = badge_markdown(f"notebooks/{filename}")
    if _BADGE.match(lines[0]):
        lines[0] = badge
    else:
        lines[:0] = [badge, ""]
    first_md["source"] = _lines("\n".join(lines))

    first_code = next(c for c in cells if c["cell_type"] == "code")
    first_code["source"] = _lines(install_cell_source())

    params = [i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(params) != 1:
        raise ValueError(f"{filename}: needs exactly one cell tagged 'parameters', found {len(params)}")
    env_id = f"{filename[:2]}-env"
    following = cells[params[0] + 1] if params[0] + 1 < len(cells) else None
    if following is not None and following.get("id") == env_id:
        following["source"] = _lines(REPORT_CELL_SOURCE)
    else:
        cells.insert(params[0] + 1, _code_cell(env_id, REPORT_CELL_SOURCE))

    for cell in cells:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            names = _ASSET_LINK.findall(text)
            cell["source"] = _lines(_ASSET_LINK.sub(lambda m: f"](attachment:{m[1]})", text))
            if names:
                cell["attachments"] = {name: {"image/png": _png_base64(name)} for name in names}
                keys = sorted(cell.items())  # in the order Jupyter writes a cell's keys
                cell.clear()
                cell.update(keys)
    return nb


def _png_base64(name: str) -> str:
    """The committed figure ``erl_lite/assets/<name>``, base64-encoded as a cell attachment holds it."""
    path = ASSETS / name
    if path.suffix != ".png" or not path.is_file():
        raise ValueError(f"a notebook shows {name!r}, which is not a PNG under {ASSETS}")
    return base64.b64encode(path.read_bytes()).decode("ascii")


def dumps(nb: dict) -> str:
    """The notebook as the repository stores it (the layout Jupyter writes)."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook differs")
    args = parser.parse_args(argv)
    stale = []
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        text = path.read_text(encoding="utf-8")
        new = dumps(sync(json.loads(text), path.name))
        if new != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    verb = "differ from erl_lite's repository constants" if args.check else "rewritten"
    print(f"{len(stale)} notebook(s) {verb}" + (": " + ", ".join(stale) if stale else ""))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
