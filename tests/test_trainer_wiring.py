"""The trainer is handed its environment, reporter and process group: of integrations/ it imports
only the wiring module, and its constructor takes GRPOTrainer's parameters plus ERL's own."""

from __future__ import annotations

import ast
import inspect

import pytest
from test_imports import MAX_FUNCTION_LINES, import_graph, module_files

from erl_lite.config import ERLConfig
from erl_lite.run.trainer import ERLTrainer

TRAINER_MODULES = ["erl_lite.run.trainer", "erl_lite.run.saving", "erl_lite.run.args"]


@pytest.mark.parametrize("module", TRAINER_MODULES)
def test_the_trainer_reaches_integrations_only_through_wiring(module):
    reached = {m for m in import_graph()[module] if m.startswith("erl_lite.integrations.")}
    assert reached <= {"erl_lite.integrations.wiring", "erl_lite.run.callbacks", "erl_lite.run.export"}, reached
    if module == "erl_lite.run.trainer":
        assert reached == {"erl_lite.integrations.wiring"}, reached


@pytest.mark.parametrize("method", ["__init__", "train", "training_step", "evaluate"])
def test_the_trainer_methods_fit_a_screen(method):
    tree = ast.parse(module_files()["erl_lite.run.trainer"].read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == method)
    assert node.end_lineno - node.lineno + 1 <= MAX_FUNCTION_LINES  # the package's budget (formatted lines)


def test_the_constructor_takes_trl_s_six_positionals_then_keywords():
    params = list(inspect.signature(ERLTrainer.__init__).parameters.values())[1:]
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ["model", "reward_funcs", "args", "train_dataset", "eval_dataset", "processing_class"]
    names = {p.name for p in params}
    assert not names & {"reward_processing_classes", "tools", "rollout_func"}
    assert {"callbacks", "optimizers", "quantization_config", "peft_config", "environment_factory"} <= names


@pytest.mark.parametrize("where", ["the generator", "the trainer"])
def test_a_vllm_backend_without_vllm_installed_is_refused_before_the_run_by_name(monkeypatch, where):
    """generation_backend="vllm" on a machine without vLLM fails when the sampler is built, before any
    step, naming the package and how to install it (not a ModuleNotFoundError at the first rollout)."""
    import importlib.util

    from erl_lite.testing import tiny_model, tiny_tokenizer

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    args = ERLConfig.preset("cpu", generation_backend="vllm", max_steps=1)
    tok = tiny_tokenizer()
    with pytest.raises(ImportError, match=r"vLLM is not installed.*\[vllm\].*docs/VLLM.md"):
        if where == "the generator":
            from erl_lite.integrations.wiring import generator_for

            generator_for(tiny_model(tok), tok, args)
        else:
            from erl_lite.envs.frozenlake import FrozenLake

            ERLTrainer(tiny_model(tok), args=args, processing_class=tok, env=FrozenLake.small())


def test_the_saving_half_reads_only_its_declared_trainer_attributes_and_the_trainer_sets_each():
    """CheckpointSaving's interface: every ``self.x`` it reads is its own member or one of the trainer attributes
    it annotates, and a constructed ERLTrainer has each of those (so the half cannot silently depend on a new one)."""
    from erl_lite.run.saving import CheckpointSaving
    from erl_lite.testing import tiny_model, tiny_tokenizer

    tree = ast.parse(module_files()["erl_lite.run.saving"].read_text())
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and ast.unparse(n.value) == "self"}
    own = set(vars(CheckpointSaving))
    declared = {name for name in CheckpointSaving.__annotations__ if not name.startswith("_")}
    assert declared and not declared & own  # annotated only: each is the trainer's to set
    assert used - own - declared == set(), "annotate it in CheckpointSaving's class body"
    assert declared <= used  # none declared that it does not read
    tok = tiny_tokenizer()
    config = ERLConfig.preset("cpu", max_steps=1, output_dir=None, report_to="none")
    rows = [{"prompt": "Say 1.", "answer": "1"}]
    trainer = ERLTrainer(tiny_model(tok), lambda completions, **kw: [0.0] * len(completions), config, rows, rows, tok)
    assert [a for a in sorted(declared) if not hasattr(trainer, a)] == []
