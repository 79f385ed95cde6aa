"""Tests for erl_lite.teach.exercises and grpo_exercises: every check passes its right answer and
fails each listed wrong answer with the hint written for that mistake.

The notebooks' exercises use the data below (``GATE_REWARDS``, ``GROUP_*``, ``R2`` and the
clipped-loss cases), so these tests also show that the notebooks' data tell the mistakes apart.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from erl_lite.core.advantages import group_advantages
from erl_lite.teach import exercises as ex
from erl_lite.teach import grpo_exercises as gx
from erl_lite.teach.answers import DECIMALS

# notebook 02: 3 of 8 succeed, 5 go on: the success rate (0.375), the share of zeros (0.25)
# and the "r1 <= τ" rate (1.0) all differ from the gate rate (0.625).
GATE_REWARDS = [1.0, 0.0, 0.6, 1.0, 0.0, 1.0, 0.3, 0.9]
GATED = [1, 2, 4, 6, 7]
# notebook 05: one task's second attempts, a lone second attempt, a group with no contrast.
GROUP_REWARDS = [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
GROUP_KEYS = [("t1", "second")] * 3 + [("t2", "second")] + [("t3", "second")] * 2
GROUP_RIGHT = [0.5774, -1.1547, 0.5774, 1.0, 0.0, 0.0]
R2 = [1.0, 0.0, 0.5, -0.2]
NOTEBOOKS = pathlib.Path(__file__).parent.parent / "notebooks"


def _run(capsys, fn, *args, **kwargs) -> tuple[bool, str]:
    ok = fn(*args, **kwargs)
    return ok, capsys.readouterr().out


def _fails_with(capsys, fn, args, hint) -> None:
    ok, out = _run(capsys, fn, *args)
    assert ok is False and out.startswith("✗"), out
    assert hint in out, out


# --- right answers ---------------------------------------------------------------------------------

RIGHT = [
    (ex.check_gated_indices, (GATE_REWARDS, [7, 1, 2, 4, 6])),  # any order
    (ex.check_gated_indices, (GATE_REWARDS, (1, 2, 4, 6, 7))),
    (ex.check_gate_rate, (GATE_REWARDS, 0.625)),
    (ex.check_gate_rate, (GATE_REWARDS, 5 / 8)),
    (gx.check_advantages, ([1.0, 0.0, 0.0, 0.0], [1.5, -0.5, -0.5, -0.5])),
    (gx.check_grouped_advantages, (GROUP_REWARDS, GROUP_KEYS, GROUP_RIGHT)),
    (gx.check_clipped_loss, (1.5, 1.0, -1.28)),
    (gx.check_clipped_loss, (0.5, 1.0, -0.5)),  # the min keeps the unclipped term
    (gx.check_clipped_loss, (0.7, -1.0, 0.8)),
    (gx.check_clipped_loss, (1.5, -1.0, 1.5)),  # the min keeps the unclipped term
    (gx.check_clipped_loss, (5.0, -1.0, 3.0)),  # the dual clip
    (gx.check_loss_curve_prediction, (1.28, 0.8, 3.0)),
    (gx.check_internalization_weights, (R2, [1.0, 0.0, 0.5, 0.0])),
    (gx.check_internalization_weights, (R2, [1, 0, 1, 0], "nll")),
    (ex.check_memory, (["first", "second", "third"], [1.0, 1.0, 0.0], ["second"])),
    (ex.check_memory, (["first", "second", "third"], [1.0, 1.0, 0.0], ["first", "second"], "fifo")),
    (ex.check_gate_function, (lambda rewards, threshold: [i for i, r in enumerate(rewards) if r < threshold],)),
]


@pytest.mark.parametrize("fn, args", RIGHT, ids=[f"{f.__name__}-{i}" for i, (f, _) in enumerate(RIGHT)])
def test_the_right_answer_passes(capsys, fn, args):
    ok, out = _run(capsys, fn, *args)
    assert ok is True and out.startswith("✓"), out


def test_a_tensor_is_a_valid_answer(capsys):
    torch = pytest.importorskip("torch")
    assert _run(capsys, gx.check_advantages, [1.0, 0.0], torch.tensor(group_advantages([1.0, 0.0])))[0]
    assert _run(capsys, ex.check_gated_indices, GATE_REWARDS, torch.tensor(GATED))[0]


# --- wrong answers, each with the hint of its mistake ---------------------------------------------

WRONG = [
    # the gate: positions
    (ex.check_gated_indices, (GATE_REWARDS, [0, 3, 5]), "you picked the successes"),
    (ex.check_gated_indices, (GATE_REWARDS, list(range(8))), "the gate is strict"),
    (ex.check_gated_indices, (GATE_REWARDS, [1, 4]), "partial credit"),
    (ex.check_gated_indices, (GATE_REWARDS, [2, 3, 5, 7, 8]), "positions start at 0"),
    (ex.check_gated_indices, (GATE_REWARDS, [1, 2]), "failures only"),
    (ex.check_gated_indices, ([0.5, 0.8, 0.2], [2], 0.8), "failures only"),
    (ex.check_gated_indices, ([0.5, 0.8, 0.2], [0, 1, 2], 0.8), "the gate is strict"),
    (ex.check_gated_indices, ([0.5, 0.8, 0.2], [0, 1, 2], 0.5), "not with a fixed 1"),
    # the gate: answers of the wrong type
    (ex.check_gated_indices, (GATE_REWARDS, "12467"), "expected a list of integer positions"),
    (ex.check_gated_indices, (GATE_REWARDS, (1.9, 2, 4, 6, 7)), "1.9 is not an integer position"),
    (ex.check_gated_indices, (GATE_REWARDS, (1.0, 2, 4, 6, 7)), "1.0 is not an integer position"),
    (ex.check_gated_indices, (GATE_REWARDS, [True, 2, 4, 6, 7]), "True is a boolean"),
    (ex.check_gated_indices, (GATE_REWARDS, [False, True, True]), "is a boolean"),
    (ex.check_gated_indices, (GATE_REWARDS, [1, 1, 2, 4, 6, 7]), "names a position twice"),
    (ex.check_gated_indices, (GATE_REWARDS, [-1, 2, 4, 6, 7]), "negative"),
    (ex.check_gated_indices, (GATE_REWARDS, 5), "expected a list of integer positions"),
    (ex.check_gated_indices, (GATE_REWARDS, None), "No answer yet"),
    (ex.check_gated_indices, (GATE_REWARDS, ...), "No answer yet"),
    # the gate rate
    (ex.check_gate_rate, (GATE_REWARDS, 0.375), "that is the success rate"),
    (ex.check_gate_rate, (GATE_REWARDS, 5), "number of gated attempts"),
    (ex.check_gate_rate, (GATE_REWARDS, 62.5), "not a percentage"),
    (ex.check_gate_rate, (GATE_REWARDS, 1.0), "the gate is strict"),
    (ex.check_gate_rate, (GATE_REWARDS, 0.25), "not only the zeros"),
    (ex.check_gate_rate, (GATE_REWARDS, 0.5), "count the rewards below τ"),
    (ex.check_gate_rate, (GATE_REWARDS, "0.625 or so"), "expected a number"),
    (ex.check_gate_rate, (GATE_REWARDS, None), "No answer yet"),
    # advantages of one group
    (gx.check_advantages, ([1.0, 0.0, 0.0, 0.0], gx._population_std_advantages([1.0, 0.0, 0.0, 0.0])), "n - 1"),
    (gx.check_advantages, ([1.0, 0.0, 0.0, 0.0], [0.75, -0.25, -0.25, -0.25]), "divide by the group's standard"),
    (gx.check_advantages, ([1.0, 0.0], [-0.7071, 0.7071]), "sign"),
    (gx.check_advantages, ([0.0], [-1.0]), "group of one"),
    (gx.check_advantages, ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]), "every advantage is 0"),
    (gx.check_advantages, ([1.0, 0.0], [1.0]), "2 rewards"),
    (gx.check_advantages, ([1.0, 0.0], "big"), "expected a list of numbers"),
    # advantages per (task, role)
    (gx.check_grouped_advantages, (GROUP_REWARDS, GROUP_KEYS, group_advantages(GROUP_REWARDS)), "whole batch"),
    (gx.check_grouped_advantages, (GROUP_REWARDS, GROUP_KEYS, GROUP_RIGHT[:3] + [0.0, 0.0, 0.0]), "group of one"),
    (gx.check_grouped_advantages, (GROUP_REWARDS, GROUP_KEYS, [0.7071, -1.4142, 0.7071, 1.0, 0.0, 0.0]), "n - 1"),
    (
        gx.check_grouped_advantages,
        (GROUP_REWARDS, GROUP_KEYS, [0.3333, -0.6667, 0.3333, 1.0, 0.0, 0.0]),
        "divide by the group's standard",
    ),
    (gx.check_grouped_advantages, (GROUP_REWARDS, GROUP_KEYS, [1.0] * 6), "split the rewards by key"),
    (gx.check_grouped_advantages, (GROUP_REWARDS, GROUP_KEYS, [1.0] * 5), "expected 6 numbers"),
    # the clipped loss: the four cases of notebook 05 and each misconception
    (gx.check_clipped_loss, (1.5, 1.0, -1.5), "unclipped surrogate"),
    (gx.check_clipped_loss, (1.5, 1.0, 1.28), "the sign"),
    (gx.check_clipped_loss, (1.5, 1.0, -1.2), "clip-higher"),  # ε = 0.2 on both sides
    (gx.check_clipped_loss, (0.5, 1.0, -0.8), "keeps the unclipped term"),  # always clip(r)·A
    (gx.check_clipped_loss, (1.5, -1.0, 1.28), "keeps the unclipped term"),  # always clip(r)·A
    (gx.check_clipped_loss, (0.7, -1.0, 0.72), "asymmetric"),  # ε = 0.28 on both sides
    (gx.check_clipped_loss, (5.0, -1.0, 5.0), "dual clip"),
    (gx.check_clipped_loss, (1.5, 1.0, 7.0), "clip the ratio"),
    (gx.check_clipped_loss, (1.5, 1.0, True), "expected a number"),
    (gx.check_clipped_loss, (1.5, 1.0, None), "No answer yet"),
    # predicting the loss plot
    (gx.check_loss_curve_prediction, (1.2, 0.8, 3.0), "clip-higher"),
    (gx.check_loss_curve_prediction, (0.8, 0.8, 3.0), "keeps the *unclipped* term"),
    (gx.check_loss_curve_prediction, (1.28, 0.72, 3.0), "asymmetric"),
    (gx.check_loss_curve_prediction, (1.28, 1.28, 3.0), "does not flatten the curve"),
    (gx.check_loss_curve_prediction, (1.28, 0.8, 1.28), "until the dual clip"),
    (gx.check_loss_curve_prediction, (1.28, 0.8, 4.0), "write the loss at a few ratios"),
    (gx.check_loss_curve_prediction, (1.28, "low", 3.0), "expected numbers"),
    (gx.check_loss_curve_prediction, (None, 0.8, 3.0), "No answer yet"),
    # internalization weights
    (gx.check_internalization_weights, (R2, [1, 0, 1, 0]), "'nll' rule"),
    (gx.check_internalization_weights, (R2, [1.0, 0.0, 0.5, 0.0], "nll"), "'raft' rule"),
    (gx.check_internalization_weights, (R2, R2), "negative r2 gets weight 0"),
    (gx.check_internalization_weights, (R2, group_advantages(R2)), "no group baseline"),
    (gx.check_internalization_weights, (R2, [1, 1, 1, 1]), "r2 = 0 gets weight 0"),
    (gx.check_internalization_weights, (R2, [0.5, 0.5, 0.5, 0.5]), "raft: max(r2, 0)"),
    (gx.check_internalization_weights, (R2, [1, 0]), "expected 4 numbers"),
    (gx.check_internalization_weights, (R2, None), "No answer yet"),
    # memory
    (ex.check_memory, (["first", "second", "third"], [1.0, 1.0, 0.0], ["first", "second"]), "one slot"),
    (ex.check_memory, (["first", "second", "third"], [1.0, 1.0, 0.0], ["third"]), "only when"),
    (ex.check_memory, (["first", "second", "third"], [1.0, 1.0, 0.0], ["first"]), "last"),
    (ex.check_memory, (["first", "second", "third"], [1.0, 1.0, 0.0], None), "No answer yet"),
    # a position instead of the rulebook: not "the last successful rulebook wins"
    (ex.check_memory, (["first", "second", "third"], [1.0, 1.0, 0.0], [2]), "texts themselves"),
    (ex.check_memory, (["first", "second", "third"], [1.0, 1.0, 0.0], [1]), "texts themselves"),
    (ex.check_memory, (["first", "second", "third"], [1.0, 1.0, 0.0], [0, 1], "fifo"), "texts themselves"),
]


@pytest.mark.parametrize("fn, args, hint", WRONG, ids=[f"{f.__name__}-{i}" for i, (f, _, _) in enumerate(WRONG)])
def test_each_wrong_answer_fails_with_its_hint(capsys, fn, args, hint):
    _fails_with(capsys, fn, args, hint)


# --- code the student writes: the gate, run on hidden cases -----------------------------------------

WRONG_GATES = [
    (lambda rewards, threshold: [i for i, r in enumerate(rewards) if r <= threshold], "the gate is strict"),
    (lambda rewards, threshold: [i for i, r in enumerate(rewards) if r >= threshold], "you picked the successes"),
    (lambda rewards, threshold: [i for i, r in enumerate(rewards) if r == 0], "partial credit"),
    # a gate that drops negative rewards is not told "not only zeros"
    (lambda rewards, threshold: [i for i, r in enumerate(rewards) if 0 <= r < threshold], "negative reward"),
    (lambda rewards, threshold: [i for i, r in enumerate(rewards) if 0 < r < threshold or r == 0], "negative reward"),
    (lambda rewards, threshold: [i + 1 for i, r in enumerate(rewards) if r < threshold], "positions start at 0"),
    (lambda rewards, threshold: [i for i, r in enumerate(rewards) if r < 1], "not with a fixed 1"),
    (lambda rewards, threshold: [r < threshold for r in rewards], "is a boolean"),
    (lambda rewards, threshold: [float(i) for i, r in enumerate(rewards) if r < threshold], "not an integer position"),
    (lambda rewards, threshold: "".join(str(i) for i, r in enumerate(rewards) if r < threshold), "expected a list"),
    (lambda rewards, threshold: None, "forget `return`"),
    (lambda rewards, threshold: rewards.index(-5), "raised ValueError"),
    (lambda rewards: [], "raised TypeError"),
    ("my_gate", "expected a function"),
    (lambda rewards, threshold: (_ for _ in ()).throw(NotImplementedError), "No answer yet"),
    (None, "No answer yet"),
]


@pytest.mark.parametrize("fn, hint", WRONG_GATES, ids=[str(i) for i in range(len(WRONG_GATES))])
def test_check_gate_function_catches_each_wrong_gate(capsys, fn, hint):
    _fails_with(capsys, ex.check_gate_function, (fn,), hint)


def test_hidden_gate_cases_separate_every_listed_mistake():
    for rule, _ in ex.GATE_MISTAKES:
        assert any(sorted(rule(rs, t)) != ex.gated_indices(rs, t) for rs, t in ex.GATE_CASES), rule


# --- the rules behind the checks are the library's ------------------------------------------------


def test_gated_indices_is_the_phase_gate_at_the_configured_threshold():
    from erl_lite.config import ERLConfig
    from erl_lite.core.phases import gate
    from erl_lite.records import Attempt

    attempts = [
        Attempt("t", "first", i, "", [], [], [], [], r, r >= 1.0, "", "", 1) for i, r in enumerate(GATE_REWARDS)
    ]
    tau = ERLConfig().reward_threshold
    assert ex.gated_indices(GATE_REWARDS) == [a.index for a in gate(attempts, tau)] == GATED
    assert ex.gated_indices([0.5, 0.8], threshold=0.6) == [0]


@pytest.mark.parametrize(
    "ratio, adv, expected",
    [
        (1.0, 1.0, -1.0),
        (1.5, 1.0, -1.28),
        (0.5, 1.0, -0.5),
        (0.5, -1.0, 0.8),
        (1.5, -1.0, 1.5),
        (5.0, -1.0, 3.0),
    ],
)
def test_clipped_loss_value_matches_the_formula(ratio, adv, expected):
    assert gx.clipped_loss_value(ratio, adv) == pytest.approx(expected, abs=1e-5)


def test_loss_curve_landmarks_follow_the_settings():
    assert gx.loss_curve_landmarks() == {"flat_above": 1.28, "flat_below": 0.8, "capped_above": 3.0}
    assert gx.loss_curve_landmarks(0.1, 0.1, None) == {"flat_above": 1.1, "flat_below": 0.9, "capped_above": None}


def test_the_notebooks_use_every_check_and_this_data():
    """Each check is used by a notebook; 02 and 05 ask about the data these tests cover."""
    code = {
        p.name[:2]: "".join(
            "".join(c["source"]) for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "code"
        )
        for p in NOTEBOOKS.glob("*.ipynb")
    }
    everything = "".join(code.values())
    for name in [n for n in dir(ex) if n.startswith("check_")]:
        assert f"{name}(" in everything, f"no notebook uses {name}"
    assert str(GATE_REWARDS) in code["02"] and "check_gate_function(" in code["02"]
    assert str(R2) in code["05"] and "check_loss_curve_prediction(" in code["05"]
    text = {p.name[:2]: p.read_text() for p in NOTEBOOKS.glob("*.ipynb")}
    for nb in ("02", "05"):  # the numeric exercises state the precision the checks ask for
        assert f"{DECIMALS} decimal places" in text[nb], nb
    for ratio, adv in [(1.5, 1.0), (0.5, 1.0), (0.7, -1.0), (5.0, -1.0)]:
        assert f"check_clipped_loss({ratio}, {adv}," in code["05"], (ratio, adv)


# --- precision: a rounding slip is told apart from a method error -----------------------------------

ROUNDED = [  # the right method, rounded to fewer decimal places than asked
    (ex.check_gate_rate, (GATE_REWARDS, 0.63)),  # 0.625
    (ex.check_gate_rate, (GATE_REWARDS, 0.6)),
    (gx.check_advantages, ([1.0, 0.0, 0.0], [1.15, -0.58, -0.58])),  # 1.1547, -0.5774
    (gx.check_grouped_advantages, (GROUP_REWARDS, GROUP_KEYS, [0.58, -1.15, 0.58, 1.0, 0.0, 0.0])),
    (gx.check_clipped_loss, (1.15, 1.0, -1.2)),  # -1.15
    (gx.check_internalization_weights, ([0.375, 0.0], [0.38, 0.0])),
    (gx.check_loss_curve_prediction, (1.3, 0.8, 3.0)),  # 1.28
]


@pytest.mark.parametrize("fn, args", ROUNDED, ids=[f"{f.__name__}-{i}" for i, (f, _) in enumerate(ROUNDED)])
def test_a_rounded_answer_gets_a_rounding_hint_not_a_method_hint(capsys, fn, args):
    ok, out = _run(capsys, fn, *args)
    assert ok is False and "method is right" in out and f"{DECIMALS} decimal places" in out, out


#: Wrong methods whose numbers lie within half a unit of the answer at 0 decimals (whole numbers): each exercise
#: of notebook 05 and 02's gate rate, several per exercise; the answer they must not be shown, at 3 decimals.
WRONG_METHODS = [
    (gx.check_internalization_weights, (R2, [1, 0, 0, 0]), ["0.500"]),  # 0.5 dropped
    (gx.check_internalization_weights, (R2, [1, 0, 1, 1]), ["0.500"]),
    (gx.check_loss_curve_prediction, (1, 1, 3), ["1.280", "0.800"]),
    (gx.check_loss_curve_prediction, (1.0, 1.0, 3.0), ["1.280", "0.800"]),
    (gx.check_clipped_loss, (0.5, 1.0, -1), ["-0.500"]),  # no clip below 1 - eps for A > 0
    (gx.check_clipped_loss, (0.5, 1.0, 0), ["-0.500"]),
    (gx.check_clipped_loss, (1.5, 1.0, -1), ["-1.280"]),
    (gx.check_clipped_loss, (0.7, -1.0, 1), ["0.800"]),
    (gx.check_advantages, ([1.0, 0.0, 0.0, 0.0], [1, 0, 0, 0]), ["1.500", "-0.500"]),
    (gx.check_advantages, ([1.0, 0.0, 0.0, 0.0], [2, -1, -1, 0]), ["1.500", "-0.500"]),
    (gx.check_grouped_advantages, (GROUP_REWARDS, GROUP_KEYS, [1, -1, 1, 1, 0, 0]), ["0.577", "-1.155"]),
    (gx.check_grouped_advantages, (GROUP_REWARDS, GROUP_KEYS, [0, -1, 0, 1, 0, 0]), ["0.577", "-1.155"]),
    (ex.check_gate_rate, (GATE_REWARDS, 1), ["0.625"]),
    (ex.check_gate_rate, (GATE_REWARDS, 0), ["0.625"]),
]


@pytest.mark.parametrize("fn, args, answer", WRONG_METHODS, ids=[f"{f.__name__}-{a[-1]}" for f, a, _ in WRONG_METHODS])
def test_a_wrong_method_is_never_called_rounded_nor_shown_the_answer(capsys, fn, args, answer):
    """Whole numbers are a different method, not the right one rounded: no "your method is right", and no hint that
    prints the numbers the exercise asks for."""
    ok, out = _run(capsys, fn, *args)
    assert ok is False and "method is right" not in out, out
    assert not [a for a in answer if a in out], out


@pytest.mark.parametrize(
    "fn, args",
    [
        (ex.check_gate_rate, (GATE_REWARDS, None)),
        (gx.check_advantages, ([1.0, 0.0], None)),
        (gx.check_clipped_loss, (1.5, 1.0, None)),
        (gx.check_loss_curve_prediction, (None, None, None)),
    ],
)
def test_an_empty_numeric_answer_is_told_the_precision_asked(capsys, fn, args):
    ok, out = _run(capsys, fn, *args)
    assert ok is False and f"{DECIMALS} decimal places" in out, out


def test_the_landmarks_are_where_the_library_loss_bends():
    """On a grid of ratios: the A > 0 curve is flat from flat_above on, the A < 0 curve flat up to flat_below and
    constant from capped_above on, and neither is flat any earlier (later)."""
    marks = gx.loss_curve_landmarks()
    grid = [round(0.01 * k, 2) for k in range(5, 801)]
    pos, neg = [gx.clipped_loss_value(r, 1.0) for r in grid], [gx.clipped_loss_value(r, -1.0) for r in grid]
    flat = lambda values: {round(r, 2) for r, a, b in zip(grid, values, values[1:]) if abs(a - b) < 1e-6}
    assert min(flat(pos)) == pytest.approx(marks["flat_above"])
    low = sorted(r for r in flat(neg) if r < 1)
    high = sorted(r for r in flat(neg) if r > 1)
    assert max(low) == pytest.approx(marks["flat_below"] - 0.01) and min(high) == pytest.approx(marks["capped_above"])


def test_require_is_silent_on_a_right_answer_and_raises_the_hint_on_a_wrong_one(capsys):
    """What the assignments' otter tests stand on (assignments/): a pass prints nothing, a miss carries the hint."""
    from erl_lite.teach.answers import require

    require(ex.check_gated_indices, GATE_REWARDS, GATED)
    assert capsys.readouterr().out == ""
    with pytest.raises(AssertionError) as raised:
        require(ex.check_gated_indices, GATE_REWARDS, [i + 1 for i in GATED])
    one_based = next(hint for _, hint in ex.GATE_MISTAKES if "positions start at 0" in hint)
    assert str(raised.value).startswith("✗ Not quite") and one_based in str(raised.value)
    assert capsys.readouterr().out == ""
