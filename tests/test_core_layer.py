"""erl_lite/core/ is the algorithm: it imports nothing above it (only erl_lite.config,
erl_lite.records and its own modules), and one iteration has one record type."""

from __future__ import annotations

import pytest

from test_imports import import_graph

ALLOWED = ("erl_lite.config", "erl_lite.records", "erl_lite.core")


def _core_modules() -> list[str]:
    return sorted(m for m in import_graph() if m == "erl_lite.core" or m.startswith("erl_lite.core."))


@pytest.mark.parametrize("module", _core_modules())
def test_core_imports_nothing_above_it(module):
    # Direct imports: what config and records import is the ground floor's own business.
    above = sorted(t for t in import_graph()[module] if not any(t == p or t.startswith(p + ".") for p in ALLOWED))
    assert not above, f"{module} imports {above}"


def test_erl_step_returns_the_step_record():
    import erl_lite.core.phases as phases
    from erl_lite.records import StepRecord

    assert not hasattr(phases, "StepOutcome")
    assert phases.erl_step.__annotations__["return"] in ("StepRecord", StepRecord)


@pytest.mark.parametrize("make", ["one_process", "data_parallel"])
def test_the_update_takes_any_reducer(make):
    from erl_lite.core.reducer import SINGLE_PROCESS, Reducer
    from erl_lite.integrations.distributed import DataParallel

    reducer = SINGLE_PROCESS if make == "one_process" else DataParallel()
    assert isinstance(reducer, Reducer)
    assert reducer.sum({"n": 2.0}) == {"n": 2.0} and reducer.total_count(0.0) == 1.0
    assert reducer.global_positions([None, None]) == [0, 1]


def test_step_record_saved_form_leaves_out_the_batch():
    from erl_lite.records import StepRecord, TrainSample

    record = StepRecord(step=3, samples=[TrainSample("first", [1], [2], [1], 0.5)], memory_writes=1,
                        seconds={"first": 0.1})
    assert sorted(record.to_dict()) == ["first_attempts", "memory_after", "memory_before", "metrics", "retries",
                                        "step", "task_ids"]
