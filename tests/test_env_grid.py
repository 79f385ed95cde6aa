"""Action parsing, letter symbols and seeded splits shared by the grid games."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from erl_lite.envs.grid import parse_action, resolve_symbols
from erl_lite.envs.splits import SeededSplits, derive_seed

ACTION_NAMES = ["Up", "Down", "Left", "Right"]
no_ticks = st.text(max_size=40).filter(lambda s: "`" not in s)


def cased(word: str) -> st.SearchStrategy[str]:
    """The word with arbitrary letter case."""
    return st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda flips: "".join(c.upper() if f else c.lower() for c, f in zip(word, flips))
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("```\nUp\n```", "Up"),
        ("I go left.\n```left```", "Left"),
        ("```  RIGHT \n```", "Right"),
        ("```text\nDown\n```", "Down"),  # language tag on the fence line
        ("```Up``` no wait ```Down```", "Down"),  # the last block wins
        ("```Down``` and ```jump```", None),  # ... even when it is not an action
        ("```\nUp\nDown\n```", None),  # two actions in one block
        ("```Up\nDown```", None),
        ("```\ntext\nUp\n```", None),  # a tag must sit on the fence line
        ("Up", None),  # no block at all
        ("```Up", None),  # unclosed fence
        ("``````", None),
        ("```Upward```", None),
    ],
)
def test_parse_action_examples(text, expected):
    assert parse_action(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parse_action_never_raises_and_returns_an_action_or_none(text):
    assert parse_action(text) in (None, *ACTION_NAMES)


@settings(max_examples=200, deadline=None)
@given(no_ticks)
def test_parse_action_without_a_block_is_none(text):
    assert parse_action(text) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(ACTION_NAMES), min_size=1, max_size=4).flatmap(
        lambda names: st.tuples(
            st.just(names),
            st.lists(no_ticks, min_size=len(names) + 1, max_size=len(names) + 1),
            st.tuples(*[cased(n) for n in names]),
        )
    )
)
def test_parse_action_picks_the_last_block(case):
    names, fillers, spelled = case
    text = fillers[0] + "".join(f"```\n{word}\n```{fill}" for word, fill in zip(spelled, fillers[1:]))
    assert parse_action(text) == names[-1]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ACTION_NAMES), st.text(alphabet="abcxyz !?.,-", min_size=1, max_size=20))
def test_parse_action_rejects_garbage_in_the_last_block(earlier, garbage):
    assert parse_action(f"```{earlier}``` then ```{garbage}```") is None


def test_resolve_symbols_defaults_overrides_and_seeded_draws():
    defaults = {"agent": "A", "goal": "B", "hole": "C"}
    assert resolve_symbols(defaults) == defaults
    assert resolve_symbols(defaults, {"hole": "Q"}) == {"agent": "A", "goal": "B", "hole": "Q"}
    drawn = resolve_symbols(defaults, seed=5)
    assert drawn == resolve_symbols(defaults, seed=5)
    assert len(set(drawn.values())) == 3 and all(v.isupper() for v in drawn.values())
    assert any(resolve_symbols(defaults, seed=s) != drawn for s in range(6, 10))
    with pytest.raises(ValueError, match="distinct"):
        resolve_symbols(defaults, {"goal": "A"})
    with pytest.raises(ValueError, match="unknown"):
        resolve_symbols(defaults, {"wall": "W"})
    with pytest.raises(ValueError, match="one visible"):
        resolve_symbols(defaults, {"goal": "BB"})


def test_seeded_splits_are_lazy_deterministic_and_disjoint():
    # A generator with only 6 possible outcomes, so training draws hit test tasks often.
    make = lambda seed: {"value": seed % 6}
    splits = SeededSplits(make, lambda d: str(d["value"]), "toy", seed=3, n_train=40, n_test=3)
    test_values = {t.data["value"] for t in splits.tasks("test")}
    train = splits.tasks("train")
    assert len(train) == 40 and not test_values & {t.data["value"] for t in train}
    again = SeededSplits(make, lambda d: str(d["value"]), "toy", seed=3, n_train=40, n_test=3)
    assert [t.data for t in again.tasks("train", 10)] == [t.data for t in train[:10]]
    assert train[7].task_id == "toy/train/7" and train[7].data["index"] == 7
    assert derive_seed(0, "train", 1) != derive_seed(0, "test", 1) != derive_seed(1, "test", 1)
    assert len(splits.tasks("test", 99)) == 3  # capped at the split size


# --- one breadth-first search for every grid game -------------------------------------------------
@pytest.mark.parametrize("module", ["erl_lite.envs.frozenlake", "erl_lite.envs.sokoban"])
def test_the_games_search_with_the_one_bfs_in_grid(module):
    """Shortest-path search is written once (grid.shortest_moves); the games only say how a state moves."""
    import importlib

    from erl_lite.envs import grid

    source = importlib.import_module(module)
    assert "deque" not in vars(source), f"{module} runs its own breadth-first search"
    assert source.shortest_moves is grid.shortest_moves


@pytest.mark.parametrize(
    "rows, limit, expected",
    [
        (["SH", "FG"], None, 2),
        (["SH", "FG"], 2, 2),
        (["SH", "FG"], 1, None),
        (["SH", "HG"], None, None),
        (["SFF", "HHF", "GFF"], None, 6),
        (["SFF", "HHF", "GFF"], 5, None),
        (["GS"], 1, 1),
        (["GS"], 0, None),
    ],
)
def test_frozenlake_solver_finds_the_shortest_path_within_its_limit(rows, limit, expected):
    from erl_lite.envs.frozenlake import solve_frozenlake

    path = solve_frozenlake(rows, limit=limit)
    assert (None if path is None else len(path)) == expected


@pytest.mark.parametrize(
    "layout, limit, expected",
    [
        (["######", "#@$ .#", "######"], None, 2),
        (["######", "#@$ .#", "######"], 2, 2),
        (["######", "#@$ .#", "######"], 1, None),
        (["#####", "#@$.#", "#####"], 0, None),
        (["######", "#@ $.#", "######"], None, 2),
        (["#####", "#$@.#", "#####"], None, None),
        (["######", "#@   #", "# $  #", "#   .#", "######"], None, 6),
        (["######", "#@   #", "# $  #", "#   .#", "######"], 5, None),
    ],
)
def test_sokoban_solver_finds_the_shortest_solution_within_its_limit(layout, limit, expected):
    from erl_lite.envs.sokoban import Level, solve_sokoban

    for board in (layout, Level.parse(layout)):
        path = solve_sokoban(board, limit=limit)
        assert (None if path is None else len(path)) == expected
