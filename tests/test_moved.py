"""The import paths release 0.1 documented keep working for one release, with a DeprecationWarning,
and hand back the very module at its new home (erl_lite/_moved.py)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from erl_lite._moved import MOVED, new_home


@pytest.fixture(scope="module")
def first_imports():
    """{old path: (warning text, the old module is the new one)}, each old path imported for the first time
    in one fresh interpreter (in this one an old name may already sit in sys.modules: no second warning).
    One interpreter for all: each start imports torch and transformers, ~6 s."""
    code = ("import importlib, json, warnings\n"
            f"seen = {{}}\nfor old, new in {sorted(MOVED.items())!r}:\n"
            "    with warnings.catch_warnings(record=True) as caught:\n"
            "        warnings.simplefilter('always', DeprecationWarning)\n"
            "        module = importlib.import_module(old)\n"
            "    texts = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]\n"
            "    seen[old] = [texts, module is importlib.import_module(new)]\n"
            "print(json.dumps(seen))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_and_is_the_module_at_its_new_home(old, first_imports):
    texts, same = first_imports[old]
    assert f"{old} moved to {MOVED[old]}" in " ".join(texts) and same, (texts, same)


@pytest.mark.parametrize("old,new", [("erl_lite.viz", None), ("erl_lite.integrations.multi", "erl_lite.envs.multi"), ("erl_lite.envs.multi", None),
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
