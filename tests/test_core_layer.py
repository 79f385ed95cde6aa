"""erl_lite/core/ is the algorithm: it imports nothing above the ground floor (config, records,
metric names) and its own modules, and one iteration has one record type."""

from __future__ import annotations

import pytest
from test_imports import CORE, IMPORT_RULES, _in, _short, import_graph, room


# Per module and by direct import, so a failure names the module; the rule itself is test_imports.py's.
@pytest.mark.parametrize("module", sorted(m for m in import_graph() if _in(m, CORE)))
def test_core_imports_nothing_above_it(module):
    allowed = IMPORT_RULES["core"] | {"core"}
    above = sorted(t for t in import_graph()[module] if _short(room(t)) not in allowed)
    assert not above, f"{module} imports {above}"


def test_erl_step_returns_the_step_record():
    import erl_lite.core.phases as phases
    from erl_lite.records import StepRecord

    assert not hasattr(phases, "StepOutcome")
    assert phases.erl_step.__annotations__["return"] in ("StepRecord", StepRecord)


@pytest.mark.parametrize("make", ["one_process", "data_parallel"])
def test_the_update_takes_any_reducer(make):
    from erl_lite.engine.reducer import SINGLE_PROCESS, Reducer
    from erl_lite.integrations.distributed import DataParallel

    reducer = SINGLE_PROCESS if make == "one_process" else DataParallel()
    assert isinstance(reducer, Reducer)
    assert reducer.sum({"n": 2.0}) == {"n": 2.0} and reducer.total_count(0.0) == 1.0
    assert reducer.global_positions([None, None]) == [0, 1]


def test_step_record_saved_form_leaves_out_the_batch():
    from erl_lite.records import StepRecord, TrainSample

    record = StepRecord(
        step=3, samples=[TrainSample("first", [1], [2], [1], 0.5)], memory_writes=1, seconds={"first": 0.1}
    )
    assert sorted(record.to_dict()) == [
        "first_attempts",
        "memory_after",
        "memory_before",
        "metrics",
        "retries",
        "step",
        "task_ids",
    ]
