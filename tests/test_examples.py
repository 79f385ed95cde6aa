"""The examples moved out of internal helpers' docstrings (tests/examples.py) run and print what they show, each
with its module's globals, as ``doctest.testmod`` ran them in the docstring."""

from __future__ import annotations

import doctest
import importlib
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))  # the notebook renderer's helpers

from examples import EXAMPLES


@pytest.mark.parametrize("where", sorted(EXAMPLES))
def test_moved_example(where):
    module_name, qualified = where.split(":")
    module = importlib.import_module(module_name)
    obj = module
    for part in qualified.split("."):
        obj = getattr(obj, part)  # the helper still exists under its name
    test = doctest.DocTestParser().get_doctest(EXAMPLES[where], dict(vars(module)), where, module.__file__, 0)
    runner = doctest.DocTestRunner(verbose=False)
    runner.run(test)
    assert runner.failures == 0 and runner.tries > 0, f"{where}: {runner.failures} of {runner.tries} failed"
