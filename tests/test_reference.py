"""The paper's runs as its released code ran them (docs/REFERENCE.md): the ``paper`` preset's numbers
against the docs' table, the reference prompt style of FrozenLake and Sokoban, the hints the paper
preset turns off, and the two opt-in emulations (doubled reflection rows, round-robin memory slots)."""

from __future__ import annotations

import pathlib
import re

import pytest

from erl_lite.config import ERLConfig
from erl_lite.config.presets import PAPER_GAMES, PRESETS
from erl_lite.envs import FrozenLake, Sokoban

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "REFERENCE.md").read_text()
#: A file of microsoft/experiential_rl (its scripts, examples and vendored rllm / verl).
CITED = re.compile(r"`((?:train_scripts|examples|rllm|verl)/[\w./-]+)`")


def _table(heading: str) -> list[list[str]]:
    """The rows (cells, stripped) of the first table after ``heading`` in docs/REFERENCE.md."""
    lines = DOC.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _value(text: str):
    """A table cell as a number, or its text between backticks."""
    text = text.replace(",", "").strip("`")
    try:
        return float(text)
    except ValueError:
        return text


def test_every_number_of_the_paper_preset_is_the_docs_table_s_and_each_row_cites_the_reference():
    rows = _table("## The `paper` preset")
    fields = {row[0].strip("`"): row for row in rows}
    assert set(PRESETS["paper"]) <= set(fields), "a preset setting without its row in docs/REFERENCE.md"
    cfg, rlvr = ERLConfig.preset("paper"), ERLConfig.preset("paper", mode="rlvr")
    for name, (_, ours, reference, source, _why) in fields.items():
        got = rlvr.num_generations if name == "num_generations (RLVR)" else getattr(cfg, name.split(" ")[0])
        assert _value(ours) == (float(got) if isinstance(got, (int, float)) else got), name
        assert CITED.search(source), f"row {name!r} cites no file of the reference"
        if reference != "—":  # where erl_lite differs, the row says why (and the value is erl_lite's)
            assert _value(reference) == _value(ours), f"{name}: the preset differs from the reference's {reference}"
    from erl_lite.config.presets import PAPER_MAX_STEPS

    steps = {row[0].strip("`"): _value(row[1]) for row in _table("## Iterations per environment")}
    assert steps == {k: float(v) for k, v in PAPER_MAX_STEPS.items()}


def test_the_preset_s_lengths_are_the_reference_s_budgets():
    cfg = ERLConfig.preset("paper")
    assert (cfg.max_reflection_prompt_length, cfg.max_reflection_length) == (6114, 10240)
    assert cfg.max_episode_length == 6114 + 10240 and cfg.max_completion_length == 10240  # no cap per turn
    assert cfg.max_optimizer_steps() == 4 and cfg.replace(reflection_copies=2).max_optimizer_steps() == 5


@pytest.mark.parametrize("env,steps", [("sokoban", 200), ("frozenlake", 100), ("qa", 100)])
def test_erl_lite_train_with_the_paper_preset_runs_each_environment_as_long_as_the_paper(env, steps):
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import build_environment, train_settings

    run, cfg = train_settings(build_parser().parse_args(["train", "--preset", "paper", "--env", env]))
    assert cfg.max_steps == steps
    flags = ["train", "--preset", "paper", "--env", env, "--steps", "3"]
    assert train_settings(build_parser().parse_args(flags))[1].max_steps == 3  # a flag still wins
    if env != "qa":
        game = build_environment(env, False, preset="paper")[0]
        assert (game.source, game.prompt_style, game.hint) == ("paper", "reference", False)
        assert build_environment(env, False)[0].prompt_style == "plain"


def _play(env, moves):
    """The observations of an episode of ``env``'s first test task under ``moves``."""
    episode = env.new_episode()
    seen = [episode.reset(env.test_tasks(1)[0])]
    for move in moves:
        obs, _, done, _ = episode.step(move)
        if done:
            break
        seen.append(obs)
    return episode, seen


def test_reference_style_frozenlake_asks_for_structured_reasoning_and_flags_every_non_move():
    env = FrozenLake(prompt_style="reference", sizes=(4, 4))
    for part in ("<reason>", "</reason>", "**1.", "**2.", "**3.", "High, Medium or Low", "two most promising"):
        assert part in env.system_prompt
    assert env.system_prompt.endswith(env.action_reminder) and "Up, Down, Left and Right" in env.action_reminder
    episode, seen = _play(env, ["no move here", "```Up```", "```Up```", "```Up```", "```Up```"])
    assert seen[0].startswith("Current observation (0):") and "Steps remaining: 8." in seen[0]
    assert all("not reached the goal yet" in obs for obs in seen)
    assert "invalid" in seen[1] and "Steps remaining: 7." in seen[1]  # an unparsable reply
    blocked = [obs for obs, e in zip(seen[2:], episode.events[1:]) if e == "blocked"]
    valid = [obs for obs, e in zip(seen[2:], episode.events[1:]) if e == "safe"]
    assert blocked and all("invalid" in obs for obs in blocked)  # moving into the edge is flagged too
    assert all("invalid" not in obs for obs in valid)


def test_reference_style_sokoban_reminds_of_free_cells_and_reports_blocked_pushes_with_the_real_budget():
    env = Sokoban(prompt_style="reference")
    assert "cell behind it is free" in env.action_reminder
    assert env.system_prompt.endswith(env.action_reminder)  # the first attempt gets the reminder too
    assert env.system_prompt.count("Keep in mind:") == 2  # the generic one, then Sokoban's
    level = ["######", "#@$ .#", "######"]
    from erl_lite.records import Task

    episode = env.new_episode()
    episode.reset(Task("s", "sokoban", {"layout": level}))
    moved = episode.step("```Right```")[0]  # pushes the box
    stuck = episode.step("```Up```")[0]  # a wall
    assert "Current board (1):" in moved and "worked" in moved and "Moves remaining: 7." in moved
    assert "changed nothing" in stuck and "Moves remaining: 6." in stuck and "not solved yet" in stuck
    assert "64" not in moved + stuck  # the budget is the episode's, not the reference prompt's 64


def test_the_default_style_is_unchanged_and_the_embedded_worlds_keep_their_prompts():
    from erl_lite.embedded.world import demo_world
    from erl_lite.envs.grid import action_reminder_text, grid_system_prompt

    for env in (FrozenLake(), Sokoban(), FrozenLake.small()):
        assert env.system_prompt == grid_system_prompt(8, env.compact)
        assert env.action_reminder == action_reminder_text() and env.prompt_style == "plain"
    world = demo_world(0)
    assert world.system_prompt == grid_system_prompt(world.max_turns, True) and world.turns is None
    assert "Actions left" in world.new_episode().reset(world.test_tasks(1)[0]) or "left:" in world.new_episode().reset(
        world.test_tasks(1)[0]
    )
    with pytest.raises(ValueError, match="prompt_style"):
        FrozenLake(prompt_style="fancy")
    with pytest.raises(ValueError, match="compact"):
        Sokoban.small(prompt_style="reference")


def test_the_reference_prompts_are_restated_not_copied():
    """Sentences of the released code's prompts must not appear word for word."""
    from erl_lite.envs.grid import PROMPTS

    text = str(PROMPTS["reference"]).lower()
    for sentence in (
        "acting as a reasoning engine",
        "you have not achieved the goal",
        "your last response is invalid",
        "predict their consequences using",
        "maximum remaining moves",
        "puzzle not solved yet",
        "only push a box if the space behind it is free",
        "make the final line only",
    ):
        assert sentence not in text


def test_the_tile_letter_and_the_dead_end_hint_sit_behind_settings_the_paper_set_up_turns_off():
    from erl_lite.records import Task

    hole = Task("h", "frozenlake", {"map": ["SH", "FG"]})
    for env, named in (
        (FrozenLake(), True),
        (FrozenLake(hint=False), False),
        (FrozenLake(**PAPER_GAMES["frozenlake"]), False),
    ):
        episode = env.new_episode()
        episode.reset(hole)
        episode.step("```Right```")
        assert ("stepped on" in episode.trace()) is named and "moved into a hole" in episode.trace()
    dead = Task("d", "sokoban", {"layout": ["#####", "#@$ #", "#  .#", "#####"]})  # Right: the box in a corner
    for env, hinted in ((Sokoban(), True), (Sokoban(hint=False), False), (Sokoban(**PAPER_GAMES["sokoban"]), False)):
        episode = env.new_episode()
        episode.reset(dead)
        for move in ["Right"] + ["Up"] * 7:
            episode.step(f"```{move}```")
        assert ("can no longer reach the goal" in episode.feedback()) is hinted


def test_one_erl_step_with_the_reference_style_on_a_tiny_model():
    from erl_lite.run.trainer import ERLTrainer
    from erl_lite.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    env = FrozenLake(prompt_style="reference", sizes=(2, 3), max_actions=2, hint=False)
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=2,
        eval_steps=0,
        max_completion_length=16,
        max_reflection_length=24,
        max_episode_length=4000,
        max_reflection_prompt_length=3900,
        progress_bar=False,
        output_dir=None,
        reflection_copies=2,
    )
    trainer = ERLTrainer(model=tiny_model(tok), processing_class=tok, args=args, env=env)
    history = trainer.train()
    out = trainer.last_outcome
    first = out.first_attempts[0]
    assert first.messages[0]["content"] == env.system_prompt and "<reason>" in first.messages[0]["content"]
    assert "Steps remaining: 2." in first.messages[1]["content"]
    roles = [s.role for s in out.samples]
    failed = len(out.retries)
    assert failed and roles.count("reflection") == 2 * failed and roles.count("second") == failed
    assert history.of_kind("train")[0]["optim/steps"] >= 1


def test_doubled_reflection_rows_give_a_lone_failure_no_signal_and_count_the_others_twice():
    from erl_lite.core.phases import assign_advantages
    from erl_lite.records import Attempt, Reflection, Retry

    def attempt(task, index, reward):
        return Attempt(task, "first", index, "sys", [], [1], [2], [1], reward, reward >= 1, "", "", 1)

    def retry(task, index, r2):
        y1, y2 = attempt(task, index, 0.0), attempt(task, index, r2)
        return Retry(y1, Reflection(task, index, "b", "t", "rb", True, [1], [3], reward=r2), y2)

    first = [attempt("a", 0, 0.0), attempt("a", 1, 1.0), attempt("b", 0, 0.0), attempt("b", 1, 0.0)]
    retries = [retry("a", 0, 1.0), retry("b", 0, 1.0), retry("b", 1, 0.0)]
    adv = {}
    for copies in (1, 2):
        rows = [
            s for s in assign_advantages(ERLConfig(reflection_copies=copies), first, retries) if s.role == "reflection"
        ]
        adv[copies] = sorted((s.task_id, round(s.advantage, 4)) for s in rows)
    assert adv[1] == [("a", 1.0), ("b", -0.7071), ("b", 0.7071)]  # a group of one: A = r
    # Each row twice: task a's pair is identical (A = 0); task b's four rows have a smaller std (n - 1).
    assert adv[2] == [("a", 0.0), ("a", 0.0), ("b", -0.866), ("b", -0.866), ("b", 0.866), ("b", 0.866)]
    with pytest.raises(ValueError, match="reflection_copies"):
        ERLConfig(mode="rlvr", reflection_copies=2)


def test_memory_slots_are_dealt_in_turn_so_a_rollout_reads_and_writes_only_its_own():
    from erl_lite.core.memory import ReflectionMemory, SlotMemory

    mem = SlotMemory(3)
    mem.deal([("t", 0), ("t", 1)])  # slots 0 and 1
    assert mem.for_task("t", 1).maybe_store("R1", reward=1.0, threshold=1.0)
    assert mem.for_task("t", 0).context() is None and len(mem) == 1
    mem.deal([("u", 0), ("u", 1)])  # slots 2 and 0: another rollout's write is not seen
    assert [mem.for_task("u", i).context() for i in (0, 1)] == [None, None]
    mem.deal([("v", 0)])  # slot 1 again, two steps later: never reset
    assert mem.for_task("v", 0).context() == "R1"
    with pytest.raises(KeyError):
        mem.for_task("t", 0)  # not dealt this step
    again = SlotMemory(3)
    again.load_state_dict(mem.state_dict())  # erl_lite checkpoints the slots (the reference does not)
    assert (again.cursor, again.entries, again.total_writes) == (0, ["[1] R1"], 1)  # dealing starts again
    for other in (SlotMemory(4), ReflectionMemory()):
        with pytest.raises(ValueError):
            SlotMemory(3).load_state_dict(other.state_dict())


def test_erl_step_deals_every_rollout_a_slot_as_the_reference_s_workflow_instances(guess_env, tok):
    from test_phases import make_ctx, script

    from erl_lite.core.memory import SlotMemory
    from erl_lite.core.phases import erl_step
    from erl_lite.core.prompts import REFLECTION_REQUEST
    from erl_lite.integrations.wiring import memory_for

    ctx = make_ctx(guess_env, tok, script(), memory_type="slots", memory_size=16)
    memory = memory_for(guess_env, ctx.config)
    assert isinstance(memory, SlotMemory) and len(memory.memories) == 16
    tasks = guess_env.train_tasks(4)  # 4 tasks x G 2 = 8 rollouts a step; t0 and t1 fail their first attempts
    seen = []
    for _ in range(3):
        before = len(ctx.generator.prompts_seen)
        out = erl_step(ctx, tasks, memory)
        seen.append([p for p in ctx.generator.prompts_seen[before:] if REFLECTION_REQUEST in p])
        assert out.memory_writes == 4
    assert memory.cursor == 24 % 16 and len(memory) == 8  # slots 0-3, then 8-11, written
    assert not any("RULEBOOK" in p for p in seen[0] + seen[1])  # step 2 got fresh slots: nothing to build on
    assert all("RULEBOOK: the word is" in p for p in seen[2])  # step 3 is dealt slots 0-7 again
