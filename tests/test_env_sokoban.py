"""Sokoban: walls, pushes (free, blocked, onto the goal), no pulling, budget, generation, paper levels."""

from __future__ import annotations

from collections import Counter, deque

import pytest

from erl_lite.envs.sokoban import FEEDBACK, Sokoban
from erl_lite.records import Task

MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


def _find(layout: list[str], chars: str) -> tuple[int, int]:
    return next((r, c) for r, row in enumerate(layout) for c, ch in enumerate(row) if ch in chars)


def bfs_path(layout: list[str]) -> list[str] | None:
    """Independent solver over (player, box) with its own move rule: one shortest solution."""
    walls = {(r, c) for r, row in enumerate(layout) for c, ch in enumerate(row) if ch == "#"}
    goal, start = _find(layout, ".*+"), (_find(layout, "@+"), _find(layout, "$*"))
    came: dict = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        player, box = state
        if box == goal:
            path = []
            while came[state] is not None:
                state, action = came[state]
                path.append(action)
            return path[::-1]
        for action, (dr, dc) in MOVES.items():
            step = (player[0] + dr, player[1] + dc)
            if step in walls:
                continue
            new_box = (box[0] + dr, box[1] + dc) if step == box else box
            if new_box in walls:
                continue
            if (step, new_box) not in came:
                came[(step, new_box)] = (state, action)
                queue.append((step, new_box))
    return None


def room(*inner: str) -> list[str]:
    """A level from its interior rows, with the border walls added."""
    width = len(inner[0]) + 2
    return ["#" * width] + [f"#{row}#" for row in inner] + ["#" * width]


def play(env: Sokoban, layout: list[str], actions: list[str]):
    episode = env.new_episode()
    episode.reset(Task("t", data={"layout": layout}))
    outs = [episode.step(f"```{a}```" if a in MOVES else a) for a in actions]
    return episode, outs


def grid_of(observation: str) -> list[str]:
    return [line.replace(" ", "") for line in observation.splitlines()[1:-1]]


@pytest.fixture(scope="module")
def env() -> Sokoban:
    return Sokoban()


LEVEL = room("    ", "@$  ", "    ", "   .")  # player (2,1), box (2,2), goal (4,4)


def test_first_observation_uses_the_letters(env):
    episode = env.new_episode()
    obs = episode.reset(Task("t", data={"layout": LEVEL}))
    assert grid_of(obs) == ["EEEEEE", "EDDDDE", "EABDDE", "EDDDDE", "EDDDCE", "EEEEEE"]
    assert "Actions left: 8" in obs


@pytest.mark.parametrize(
    "actions, events, row, drawn",
    [
        (["Left"], ["wall"], 2, "EABDDE"),  # wall to the left
        (["Up", "Up"], ["moved", "wall"], 1, "EADDDE"),  # wall above
        (["Right"], ["pushed"], 2, "EDABDE"),  # free push
        (["Right"] * 3, ["pushed", "pushed", "box_blocked"], 2, "EDDABE"),  # box against a wall
        (["Down", "Right"], ["moved", "moved"], 2, "EDBDDE"),  # walking past the box
        (["Right", "Left"], ["pushed", "moved"], 2, "EADBDE"),  # no pulling: the box stays
    ],
)
def test_moves_pushes_and_blocks(env, actions, events, row, drawn):
    _, outs = play(env, LEVEL, actions)
    assert [o[3]["event"] for o in outs] == events
    assert grid_of(outs[-1][0])[row] == drawn and not outs[-1][2]


def test_pushing_the_box_onto_the_goal_solves(env):
    level = room("    ", " @$.", "    ")
    episode, [(obs, reward, done, info)] = play(env, level, ["Right"])
    assert (obs, reward, done, info["event"], info["outcome"]) == (None, 1.0, True, "solved", "solved")
    assert episode.success and episode.feedback() == FEEDBACK["solved"].format(n=1)
    assert "E D D A b E" in episode.trace()  # box-on-goal marker
    with pytest.raises(RuntimeError):
        episode.step("```Up```")


def test_agent_on_the_goal_cell_and_box_blocked_by_a_wall_beyond(env):
    level = room(" .  ", " @  ", " $  ", "    ")
    _, outs = play(env, level, ["Up", "Down", "Down"])
    assert [o[3]["event"] for o in outs] == ["moved", "moved", "pushed"]
    assert grid_of(outs[0][0])[1] == "EDaDDE"  # agent standing on the goal
    assert grid_of(outs[1][0])[1] == "EDCDDE"  # the goal shows again once left
    assert grid_of(outs[2][0])[4] == "EDBDDE"  # box pushed down one row
    _, outs = play(env, room(" .  ", "    ", " @  ", " $  "), ["Down"])
    assert outs[0][3]["event"] == "box_blocked" and grid_of(outs[0][0])[3] == "EDADDE"


def test_invalid_reply_does_not_move_but_uses_a_turn(env):
    _, [(obs, _, done, info)] = play(env, LEVEL, ["push right"])
    assert (info["event"], info["actions_left"], done) == ("invalid", 7, False)
    assert grid_of(obs.split("\n", 1)[1])[2] == "EABDDE" and "No valid action" in obs


def test_step_limit_feedback_counts_and_flags_a_stuck_box(env):
    # Push the box up against the top wall (it can never come down again), then wander.
    actions = ["Down", "Right", "Up", "Up", "Left", "Left", "x", "Right"]
    episode, outs = play(env, LEVEL, actions)
    assert [o[3]["event"] for o in outs] == [
        "moved",
        "moved",
        "pushed",
        "box_blocked",
        "moved",
        "wall",
        "invalid",
        "moved",
    ]
    assert outs[-1][2] and episode.outcome == "step_limit" and episode.reward == 0.0
    text = episode.feedback()
    assert "all 8 actions" in text and "4 moved, 1 pushed the box, 2 did not move" in text
    assert "1 had no valid action" in text and "can no longer reach the goal" in text
    trace = episode.trace()
    for comment in ("pushed the box", "did not move (the box is blocked)", "did not move (wall)", "moved one cell"):
        assert comment in trace
    free, _ = play(env, LEVEL, ["Down"] * 8)
    assert free.outcome == "step_limit" and "can no longer" not in free.feedback()


def test_only_invalid_replies(env):
    episode, _ = play(env, LEVEL, ["?"] * 8)
    assert episode.outcome == "no_valid_action" and episode.feedback() == FEEDBACK["no_valid_action"]


def test_system_prompt_states_format_budget_and_no_rules(env):
    prompt = env.system_prompt.lower()
    for word in ("box", "push", "wall", "goal", "sokoban"):
        assert word not in prompt
    assert "8 actions" in prompt and "64" not in prompt


def test_generation_is_deterministic_and_levels_follow_the_spec(env):
    assert [t.data for t in Sokoban(seed=0).test_tasks(10)] == [t.data for t in env.test_tasks(10)]
    assert [t.data["layout"] for t in Sokoban(seed=1).test_tasks(10)] != [t.data["layout"] for t in env.test_tasks(10)]
    tasks = env.test_tasks() + env.train_tasks(300)
    for task in tasks:
        layout, n = task.data["layout"], task.data["size"]
        assert 6 <= n <= 8 and len(layout) == n and all(len(row) == n for row in layout)
        interior = "".join(row[1:-1] for row in layout[1:-1])
        assert "#" not in interior and all(set(r) == {"#"} for r in (layout[0], layout[-1]))
        assert sorted(interior.replace(" ", "")) == sorted("$.@")
        path = bfs_path(layout)
        assert path is not None and 1 <= len(path) == task.data["shortest"] <= 8, task.task_id
    for task in tasks[:150]:
        episode, outs = play(env, task.data["layout"], bfs_path(task.data["layout"]))
        assert episode.success and len(outs) == task.data["shortest"]


def test_train_and_test_splits_are_disjoint():
    for env in (Sokoban(), Sokoban.small()):
        test_levels = {tuple(t.data["layout"]) for t in env.test_tasks()}
        assert not test_levels & {tuple(t.data["layout"]) for t in env.train_tasks(800)}


def test_small_variant():
    small = Sokoban.small()
    tasks = small.test_tasks()
    assert {t.data["size"] for t in tasks} == {6} and max(t.data["shortest"] for t in tasks) <= 5
    assert len(small.system_prompt) < len(Sokoban().system_prompt) / 2


def test_paper_levels_load_and_match_their_shortest_field():
    paper = Sokoban(source="paper")
    test, train = paper.test_tasks(), paper.train_tasks(300)
    assert len(test) == 100 and len(paper.train_tasks()) == 10_000
    for task in test + train:
        assert len(bfs_path(task.data["layout"])) == task.data["shortest"], task.task_id
    assert Counter(t.data["shortest"] for t in test) == {1: 2, 2: 4, 3: 9, 4: 12, 5: 12, 6: 19, 7: 18, 8: 24}
    for task in test:
        episode, outs = play(paper, task.data["layout"], bfs_path(task.data["layout"]))
        assert episode.success and len(outs) == task.data["shortest"]
