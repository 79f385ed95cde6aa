"""FrozenLake: dynamics in every cell situation, budget, feedback, generation, splits, paper maps."""

from __future__ import annotations

from collections import Counter, deque

import pytest

from erl_lite.envs.frozenlake import FEEDBACK, FrozenLake
from erl_lite.records import Task

MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


def bfs_path(rows: list[str]) -> list[str] | None:
    """Independent solver: the action names of one shortest S->G path avoiding H."""
    cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
    start = next(p for p, ch in cells.items() if ch == "S")
    came: dict[tuple[int, int], tuple] = {start: None}
    queue = deque([start])
    while queue:
        pos = queue.popleft()
        if cells[pos] == "G":
            path = []
            while came[pos] is not None:
                pos, action = came[pos]
                path.append(action)
            return path[::-1]
        if cells[pos] == "H":
            continue
        for action, (dr, dc) in MOVES.items():
            nxt = (pos[0] + dr, pos[1] + dc)
            if nxt in cells and nxt not in came:
                came[nxt] = (pos, action)
                queue.append(nxt)
    return None


def play(env: FrozenLake, rows: list[str], actions: list[str]):
    episode = env.new_episode()
    episode.reset(Task("t", data={"map": rows}))
    outs = [episode.step(f"```\n{a}\n```" if a in MOVES else a) for a in actions]
    return episode, outs


def grid_of(observation: str) -> list[str]:
    return [line.replace(" ", "") for line in observation.splitlines()[1:-1]]


@pytest.fixture(scope="module")
def env() -> FrozenLake:
    return FrozenLake()


def test_first_observation_draws_letters_and_budget(env):
    episode = env.new_episode()
    obs = episode.reset(Task("t", data={"map": ["SF", "HG"]}))
    assert grid_of(obs) == ["AD", "CB"]
    assert "Actions left: 8" in obs


@pytest.mark.parametrize(
    "action, event, grid",
    [
        ("Up", "blocked", ["AD", "CB"]),  # top edge
        ("Left", "blocked", ["AD", "CB"]),  # left edge
        ("Right", "safe", ["DA", "CB"]),  # frozen tile
    ],
)
def test_non_terminal_moves(env, action, event, grid):
    episode, [(obs, reward, done, info)] = play(env, ["SF", "HG"], [action])
    assert (info["event"], reward, done, grid_of(obs)) == (event, 0.0, False, grid)
    assert info["actions_left"] == 7


def test_every_direction_from_the_centre_and_the_far_edges(env):
    rows = ["FFF", "FSF", "FFG"]
    for action, (dr, dc) in MOVES.items():
        _, [(obs, _, _, info)] = play(env, rows, [action])
        assert info["event"] == "safe"
        assert grid_of(obs)[1 + dr][1 + dc] == "A"
    _, outs = play(env, rows, ["Down", "Down", "Left", "Left", "Down"])
    assert [o[3]["event"] for o in outs] == ["safe", "blocked", "safe", "blocked", "blocked"]


def test_hole_ends_the_episode_with_zero_reward(env):
    episode, [(obs, reward, done, info)] = play(env, ["SF", "HG"], ["Down"])
    assert (obs, reward, done, info["event"], info["outcome"]) == (None, 0.0, True, "hole", "hole")
    assert not episode.success and episode.outcome == "hole"
    assert "fell into a hole" in episode.feedback()
    assert "moved into a hole" in episode.trace()
    assert "stepped on C: moved into a hole" in episode.trace()  # the trace names the tile's letter
    assert "D D\nE B" in episode.trace()  # agent-in-hole marker, start tile now frozen


def test_goal_ends_the_episode_with_reward_one(env):
    episode, outs = play(env, ["SF", "HG"], ["Right", "Down"])
    assert outs[-1][1:3] == (1.0, True) and outs[-1][3]["event"] == "goal"
    assert episode.success and episode.reward == 1.0 and episode.outcome == "goal"
    assert episode.feedback().startswith("Success") and "2 action" in episode.feedback()
    assert "reached the goal" in episode.trace() and "D D\nC F" in episode.trace()
    with pytest.raises(RuntimeError):
        episode.step("```Up```")


def test_invalid_action_does_not_move_but_uses_a_turn(env):
    episode, [(obs, reward, done, info)] = play(env, ["SF", "HG"], ["I would go up"])
    assert (info["event"], info["valid"], info["action"], done) == ("invalid", False, None, False)
    assert grid_of(obs.split("\n", 1)[1]) == ["AD", "CB"] and "No valid action" in obs
    assert info["actions_left"] == 7


def test_budget_exhaustion_is_a_step_limit(env):
    episode, outs = play(env, ["SFF", "FFF", "FFG"], ["Up"] * 7 + ["nonsense"])
    assert [o[2] for o in outs] == [False] * 7 + [True]
    assert outs[-1][0] is None and episode.reward == 0.0 and episode.outcome == "step_limit"
    assert "all 8 actions" in episode.feedback() and "1 of the replies had no valid action" in episode.feedback()
    assert episode.trace().count("did not move (edge of the grid)") == 7


def test_only_invalid_replies_is_no_valid_action(env):
    episode, outs = play(env, ["SF", "FG"], ["hmm"] * 8)
    assert outs[-1][2] and episode.outcome == "no_valid_action"
    assert episode.feedback() == FEEDBACK["no_valid_action"]
    assert episode.trace().count("no valid action") == 8


def test_system_prompt_states_format_but_no_rules(env):
    prompt = env.system_prompt.lower()
    for word in ("hole", "goal", "frozen", "ice", "lake"):
        assert word not in prompt
    assert "up, down, left or right" in prompt and "8 actions" in prompt and "```" in prompt


def test_custom_and_seeded_symbols_change_only_the_drawing():
    custom = FrozenLake(symbols={"agent": "X", "hole": "Q"})
    _, [(obs, *_)] = play(custom, ["SF", "HG"], ["Right"])
    assert grid_of(obs) == ["DX", "QB"]
    one, two = FrozenLake(symbol_seed=1), FrozenLake(symbol_seed=1)
    assert one.symbols == two.symbols != FrozenLake().symbols
    _, [(obs, _, _, info)] = play(one, ["SF", "HG"], ["Right"])
    assert info["event"] == "safe" and grid_of(obs)[0][1] == one.symbols["agent"]


def test_generation_is_deterministic_in_the_seed():
    a, b, c = FrozenLake(seed=0), FrozenLake(seed=0), FrozenLake(seed=1)
    assert [t.data for t in a.test_tasks(20)] == [t.data for t in b.test_tasks(20)]
    assert [t.data["map"] for t in a.test_tasks(20)] != [t.data["map"] for t in c.test_tasks(20)]
    assert [t.data for t in a.train_tasks(5)] == [t.data for t in b.train_tasks(30)[:5]]


def test_generated_maps_are_solvable_within_six_and_follow_the_spec(env):
    tasks = env.test_tasks() + env.train_tasks(300)
    assert len(env.test_tasks()) == 100
    for task in tasks:
        rows, data = task.data["map"], task.data
        path = bfs_path(rows)
        assert path is not None and len(path) == data["shortest"] <= 6, task.task_id
        assert 2 <= data["size"] <= 9 and len(rows) == len(rows[0]) == data["size"]
        assert 0.6 <= data["p"] < 0.85
        assert sum(row.count("S") for row in rows) == sum(row.count("G") for row in rows) == 1
    assert len({t.data["size"] for t in tasks}) == 8  # every size 2..9 occurs
    # Playing the optimal path wins in exactly `shortest` actions (dynamics agree with the BFS).
    for task in tasks[:150]:
        episode, outs = play(env, task.data["map"], bfs_path(task.data["map"]))
        assert episode.success and len(outs) == task.data["shortest"]


def test_train_and_test_splits_are_disjoint():
    for env in (FrozenLake(), FrozenLake.small()):
        test_maps = {tuple(t.data["map"]) for t in env.test_tasks()}
        assert not test_maps & {tuple(t.data["map"]) for t in env.train_tasks(1500)}


def test_small_variant_has_small_maps_and_a_short_prompt():
    small = FrozenLake.small()
    assert {t.data["size"] for t in small.test_tasks()} <= {2, 3, 4}
    assert len(small.system_prompt) < len(FrozenLake().system_prompt) / 2
    episode = small.new_episode()
    obs = episode.reset(small.test_tasks(1)[0])
    assert obs.endswith("left: 8") and "Grid" not in obs


def test_paper_maps_load_and_match_their_shortest_field():
    paper = FrozenLake(source="paper")
    test, train = paper.test_tasks(), paper.train_tasks()
    assert (len(test), len(train)) == (100, 10_000)
    assert test[0].task_id == "frozenlake/paper-test/0"
    for task in test + train:
        assert len(bfs_path(task.data["map"])) == task.data["shortest"], task.task_id
    assert Counter(t.data["shortest"] for t in test) == {1: 25, 2: 15, 3: 22, 4: 22, 5: 6, 6: 10}
    # Kept as released: a few small test maps also occur in the paper's training file.
    shared = {tuple(t.data["map"]) for t in test} & {tuple(t.data["map"]) for t in train}
    assert len(shared) == 15 and max(len(m) for m in shared) <= 4
    for task in test:
        episode, outs = play(paper, task.data["map"], bfs_path(task.data["map"]))
        assert episode.success and len(outs) == task.data["shortest"]
