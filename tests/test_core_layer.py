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
