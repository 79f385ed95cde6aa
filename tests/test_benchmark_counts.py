"""The counts behind the README's cost tables: benchmarks/rollout_waste.py's row-token waste and
prefill of ``model.generate``, with and without a repeated prompt run once."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("rollout_waste", ROOT / "benchmarks" / "rollout_waste.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["rollout_waste"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_generate_waste_and_prefill_count_a_shared_prompt_once():
    rw = _script()
    # Two copies of a 4-token prompt and one 2-token prompt (left-padded to 4), replies of 3, 1 and 2 tokens.
    prompts, replies = [[1, 2, 3, 4], [1, 2, 3, 4], [5, 6]], [[7, 8, 9], [7], [8, 9]]
    whole = rw.Call("first attempts", prompts, replies, 1.0)
    # Prefill 3 rows x 4 columns (2 of them padding); 2 decode steps x 3 rows, of which row 0 uses both,
    # row 1 none (it stopped after 1 token) and row 2 one: 3 steps of finished rows.
    assert rw.waste(whole) == (3 * 4 + 3 * 2, 2, 3 * 2 - (2 + 0 + 1))
    assert rw.generate_prefill(whole) == 10
    shared = rw.Call("first attempts", prompts, replies, 1.0, shares_prompts=True)
    # The 2 distinct prompts over the first 3 columns (2 padding cells), then the last column of all 3 rows.
    assert rw.waste(shared) == (2 * 3 + 3 + 3 * 2, 2, 3)
    assert rw.generate_prefill(shared) == (3 + 1) + 3
