"""The import paths release 0.1 documented keep working for one release, with a DeprecationWarning,
and hand back the very module at its new home (erl_lite/_moved.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from erl_lite._moved import MOVED, new_home


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_and_is_the_module_at_its_new_home(old):
    code = (f"import warnings, importlib\n"
            f"warnings.simplefilter('error', DeprecationWarning)\n"
            f"try:\n    importlib.import_module({old!r})\nexcept DeprecationWarning as w:\n    print('warned:', w)\n"
            f"warnings.simplefilter('ignore')\n"
            f"old, new = importlib.import_module({old!r}), importlib.import_module({MOVED[old]!r})\n"
            f"print('same:', old is new)\n")
    # a fresh interpreter: in this one the old name may already sit in sys.modules (no second warning)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"warned: {old} moved to {MOVED[old]}" in out.stdout and "same: True" in out.stdout


@pytest.mark.parametrize("old,new", [("erl_lite.viz", None), ("erl_lite.envs.multi", "erl_lite.integrations.multi"),
                                     ("erl_lite.envs.multiple", None), ("erl_lite.chat.x", "erl_lite.core.chat.x"),
                                     ("erl_lite.chatter", None)])
def test_only_moved_names_and_their_submodules_are_redirected(old, new):
    assert new_home(old) == new


def test_a_name_that_never_existed_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("erl_lite.no_such_module")


def test_every_new_home_exists_and_no_old_path_is_a_file():
    from pathlib import Path
    package = Path(importlib.import_module("erl_lite").__file__).parent
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        rel = Path(*old.split(".")[1:])
        assert not rel.with_suffix(".py").is_absolute() and not (package / rel.with_suffix(".py")).exists(), old
        assert not (package / rel / "__init__.py").exists(), old
