"""The trainer is handed its environment, reporter and process group: of integrations/ it imports
only the wiring module, and its constructor takes GRPOTrainer's parameters plus ERL's own."""

from __future__ import annotations

import ast
import inspect

import pytest

from erl_lite.run.trainer import ERLTrainer
from test_imports import import_graph, module_files

TRAINER_MODULES = ["erl_lite.run.trainer", "erl_lite.run.saving", "erl_lite.run.args"]


@pytest.mark.parametrize("module", TRAINER_MODULES)
def test_the_trainer_reaches_integrations_only_through_wiring(module):
    reached = {m for m in import_graph()[module] if m.startswith("erl_lite.integrations.")}
    assert reached <= {"erl_lite.integrations.wiring", "erl_lite.run.callbacks",
                       "erl_lite.run.export"}, reached
    if module == "erl_lite.run.trainer":
        assert reached == {"erl_lite.integrations.wiring"}, reached


@pytest.mark.parametrize("method", ["__init__", "train", "training_step", "evaluate"])
def test_the_trainer_methods_fit_a_screen(method):
    tree = ast.parse(module_files()["erl_lite.run.trainer"].read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == method)
    assert node.end_lineno - node.lineno + 1 <= 60


def test_the_constructor_takes_trl_s_six_positionals_then_keywords():
    params = list(inspect.signature(ERLTrainer.__init__).parameters.values())[1:]
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ["model", "reward_funcs", "args", "train_dataset", "eval_dataset", "processing_class"]
    names = {p.name for p in params}
    assert not names & {"reward_processing_classes", "tools", "rollout_func"}
    assert {"callbacks", "optimizers", "quantization_config", "peft_config", "environment_factory"} <= names
