"""The embedded tiny policy: offline loading on every path, its tokenizer, its world and teacher,
two real ERL steps, and the reflection bands on a small fixed-seed sample."""

from __future__ import annotations

import doctest
import importlib.util
import json
import pathlib
import shutil
import sys
import time

import pytest
import torch

from erl_lite.core.prompts import REFLECTION_REQUEST, REFLECTION_SYSTEM
from erl_lite.core.rollout import opening_messages
from erl_lite.embedded import EMBEDDED_DIR, demo_config, demo_trainer, demo_world, load_embedded
from erl_lite.embedded.demo import _memory_section
from erl_lite.embedded.rulebooks import (
    contradiction_rate,
    contradictions,
    named_holes,
    named_safe,
    planned_holes,
    rulebook,
)
from erl_lite.embedded.world import (
    IN_HOLE,
    SECOND_HOLE,
    closer_tiles,
    fatal_letter,
    hole_in_the_way,
    hole_letters,
    holes_in_the_way,
    no_dead_end,
    parse_grid,
    run_letters,
)
from erl_lite.engine.chat import encode_messages
from erl_lite.engine.generation import HFGenerator, SamplingParams
from erl_lite.envs.grid import parse_action
from erl_lite.history import History
from erl_lite.models import describe_policy, trainable_parameters
from erl_lite.run.trainer import ERLTrainer

# The build-time teacher and corpus live beside the build script (scripts/embedded/), outside
# the package: import them as the script does, with scripts/ on the path.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
from embedded.corpus import generate_corpus  # noqa: E402
from embedded.teacher import Teacher, TeacherSkill, best_moves, describe_ahead  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Any attempt to reach a hub fails loudly."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def plain():
    return load_embedded(peft="none")


def first_prompt(tok, world, index=0):
    task = world.test_tasks(index + 1)[index]
    obs = world.new_episode().reset(task)
    return encode_messages(opening_messages(world.system_prompt, obs), tok)


# --- the artefact --------------------------------------------------------------------------------


def test_artefact_is_small_and_documented():
    files = {p.name for p in EMBEDDED_DIR.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "BUILD_INFO.json",
    } <= files
    assert (EMBEDDED_DIR / "model.safetensors").stat().st_size <= 5_000_000
    info = json.loads((EMBEDDED_DIR / "BUILD_INFO.json").read_text())
    assert info["command"].startswith("python scripts/build_embedded_model.py")
    assert {"seed", "steps", "train_seconds", "corpus"} <= set(info) and info["corpus"]["sequences"] > 0
    config = json.loads((EMBEDDED_DIR / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "auto_map" not in config


def test_another_build_loads_in_place_of_the_shipped_model(tmp_path):
    # A trial build (`build_embedded_model.py --out DIR`) is tried with the demo, the bands and
    # the comparison by naming its folder; the shipped model stays the default.
    build = tmp_path / "build"
    shutil.copytree(EMBEDDED_DIR, build)
    model, _ = load_embedded(peft="none", model_dir=build)
    assert model.name_or_path == str(build)
    assert load_embedded(peft="none")[0].name_or_path == str(EMBEDDED_DIR)
    trainer = demo_trainer(seed=1, eval_tasks=2, max_steps=1, model_dir=build)
    assert trainer.model.base_model.model.name_or_path == str(build)
    with pytest.raises(FileNotFoundError, match="no embedded model in .*empty.*--out"):
        load_embedded(model_dir=tmp_path / "empty")


def test_a_build_run_twice_on_one_machine_writes_the_same_files(tmp_path):
    # The build script end to end, at toy size: two builds with one seed must write the same
    # bytes (tokenizer, corpus-fed training, weights). This is what "rebuilds it from a seed"
    # can promise; across CPUs the kernels' float sums differ, so the README does not claim
    # byte-identical weights from another machine.
    spec = importlib.util.spec_from_file_location(
        "build_embedded_model", pathlib.Path(__file__).resolve().parent.parent / "scripts" / "build_embedded_model.py"
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    threads = torch.get_num_threads()
    small = [
        "--steps",
        "3",
        "--runs",
        "1",
        "--sparse-runs",
        "1",
        "--tasks-per-run",
        "8",
        "--batch",
        "4",
        "--hidden",
        "16",
        "--ffn",
        "32",
        "--heads",
        "2",
        "--threads",
        str(threads),
        "--log-every",
        "3",
    ]
    try:
        for name in ("a", "b"):
            build.main([*small, "--out", str(tmp_path / name)])
    finally:
        torch.set_num_threads(threads)  # main() sets it for the whole process
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    info = json.loads((tmp_path / "a" / "BUILD_INFO.json").read_text())
    assert info["steps"] == 3 and info["corpus"]["sparse_runs"] == 1 and info["corpus"]["sequences"] > 0


@pytest.mark.parametrize("peft,quantization", [("none", "none"), ("lora", "none"), ("lora", "4bit")])
def test_loads_offline_and_plays_a_valid_move(peft, quantization):
    model, tok = load_embedded(peft=peft, quantization=quantization, lora_r=4)
    described = describe_policy(model)
    assert described.startswith("LlamaForCausalLM")
    assert ("4-bit" in described) == (quantization == "4bit") and ("LoRA" in described) == (peft == "lora")
    torch.manual_seed(0)
    gen = HFGenerator(model, tok)
    world = demo_world(0)
    outs = gen.generate(
        [first_prompt(tok, world, i) for i in range(4)], SamplingParams(demo_config().max_completion_length)
    )
    replies = [tok.decode(o, skip_special_tokens=True) for o in outs]
    assert all(parse_action(r) is not None for r in replies), replies
    assert all(o[-1] == tok.eos_token_id for o in outs)  # it stops by itself within the budget


def test_tokenizer_is_lossless_with_a_chat_template(plain):
    _, tok = plain
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id is not None and tok.chat_template
    examples = generate_corpus(tok, runs=2, tasks_per_run=3, seed=5)
    for e in examples:
        text = tok.decode(e.prompt_ids + e.completion_ids)
        assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text
    for letter in "ABCDEFGHXZ":  # every grid cell is one token: its letter, after its separator
        assert tok.tokenize(f"{letter} {letter}\n{letter}") == [letter, f" {letter}", "\n", letter]
    reply = "Avoid E or H. Down G ok, Right E no.\n```Right```"
    assert tok.decode(tok(reply, add_special_tokens=False).input_ids) == reply
    assert len(tok(reply, add_special_tokens=False).input_ids) <= demo_config().max_completion_length - 1


# --- the world and the teacher -------------------------------------------------------------------


def test_demo_world_letters_vary_by_run_and_maps_put_holes_in_the_way():
    draws = {run_letters(s) for s in range(40)}
    assert len(draws) > 10 and all(len(set(d)) == 3 for d in draws)
    world = demo_world(3)
    assert (*hole_letters(world), world.symbols["frozen"]) == run_letters(3)
    tasks = world.test_tasks()
    share = sum(hole_in_the_way(t.data["map"]) for t in tasks) / len(tasks)
    assert 0.65 <= share <= 0.95  # 75% by construction, plus easy maps that happen to have one
    assert [t.data["kinds"] for t in demo_world(3).test_tasks(5)] == [t.data["kinds"] for t in tasks[:5]]
    both = sum(holes_in_the_way(t.data["kinds"]) == {"H", SECOND_HOLE} for t in tasks) / len(tasks)
    assert both >= 0.35  # often both kinds of hole block: one failure cannot reveal the whole rulebook


def test_maps_have_no_dead_end_so_knowing_both_holes_is_enough():
    """Knowing both holes, a player that only ever steps closer to the goal always wins: the
    ``ahead:`` line holds every tile such a player needs to judge."""
    assert no_dead_end(["SFF", "FHF", "FFG"]) and not no_dead_end(["SFF", "FFH", "FHG"])
    for seed in (0, 3):
        for task in demo_world(seed, n_test=80).test_tasks():
            assert no_dead_end(task.data["map"]), task.data["map"]
            episode = demo_world(seed).new_episode()
            obs = episode.reset(task)
            holes = set(hole_letters(demo_world(seed)))
            while not episode.done:  # step onto any closer tile that is not a hole: always possible
                safe = [a for a, x in closer_tiles(parse_grid(obs)) if x not in holes and x != IN_HOLE]
                assert safe, obs
                obs, reward, _, _ = episode.step(f"```{safe[-1]}```")
            assert reward == 1.0


def _blind_by_paths(rows):
    """blind_success by brute force: every walk of closer steps, weighted by its draws' chances."""
    goal = next((r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "G")
    total, stack = 0.0, [(next((r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "S"), 1.0)]
    while stack:
        (r, c), p = stack.pop()
        if (r, c) == goal:
            total += p
            continue
        if rows[r][c] == "H":
            continue
        gap = abs(r - goal[0]) + abs(c - goal[1])
        closer = [
            (r + dr, c + dc)
            for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))
            if 0 <= r + dr < len(rows)
            and 0 <= c + dc < len(rows[0])
            and abs(r + dr - goal[0]) + abs(c + dc - goal[1]) < gap
        ]
        stack += [(n, p / len(closer)) for n in closer]
    return total


@pytest.mark.parametrize(
    "rows",
    [
        ["SG"],
        ["SH", "FG"],
        ["SHF", "FFH", "HFG"],
        ["GFF", "HFF", "FHS"],
        ["SFFF", "FHFH", "FFHF", "HFFG"],
        ["FFFS", "FHHF", "GFFF", "FFFF"],
    ],
)
def test_blind_success_is_the_chance_of_a_random_closer_walk(rows):
    from erl_lite.embedded.world import blind_success

    # Both sides sum the same few products of 1/2 and 1/3: equal to rounding (1e-12 of values <= 1).
    assert blind_success(rows) == pytest.approx(_blind_by_paths(rows), abs=1e-12)


def test_the_sparse_world_is_a_larger_lake_where_blind_first_attempts_rarely_succeed():
    from erl_lite.embedded.world import WORLDS, blind_success, world_settings

    for seed in (0, 1, 2):
        world = demo_world(seed, "sparse", n_test=40)
        assert (*hole_letters(world), world.symbols["frozen"]) == run_letters(seed)  # letters as on demo
        tasks = world.test_tasks()
        chances = [blind_success(t.data["map"]) for t in tasks]
        assert all(t.data["size"] == 5 and hole_in_the_way(t.data["map"]) and no_dead_end(t.data["map"]) for t in tasks)
        assert max(chances) <= 0.1 and sum(chances) / len(chances) <= 0.08
        assert world.new_episode().max_actions == 14
    # The demo world is left as it was: its maps are those of the release before the sparse world.
    import hashlib

    kinds = "|".join("/".join(t.data["kinds"]) for t in demo_world(0).test_tasks(20))
    assert hashlib.sha256(kinds.encode()).hexdigest()[:16] == "4d14edc9a0132070"
    assert WORLDS["demo"] == {} and sorted(WORLDS) == ["demo", "hard", "sparse"]
    for wrong in ("Sparse", "sokoban", ""):
        with pytest.raises(ValueError, match="embedded world must be one of demo, hard, sparse, got"):
            world_settings(wrong)
        with pytest.raises(ValueError, match="embedded world must be one of"):
            demo_trainer(0, world=wrong)  # before any model is loaded


@pytest.mark.parametrize("seed", [0, 1, 5, 11])
def test_the_hard_world_lines_every_fork_of_one_route_with_its_single_kind_of_hole(seed):
    from erl_lite.embedded.world import blind_success, fatal_letter

    world = demo_world(seed, "hard", n_test=48)
    (hole,) = hole_letters(world)
    assert hole == run_letters(seed)[0] and world.new_episode().max_actions == 14
    tasks = world.test_tasks()
    corners = set()
    for t in tasks:
        rows = t.data["map"]
        # Blind: 1/2 at each of the route's 7 forks, exactly (a power of two, no rounding); knowing the hole: a win.
        assert blind_success(rows) == 0.5**7 and no_dead_end(rows) and t.data["kinds"] == rows
        assert t.data["shortest"] == 8 and len(rows) == 5
        corners.add(next((r, c) for r, row in enumerate(rows) for c, x in enumerate(row) if x == "S"))
    assert corners == {(0, 0), (0, 4), (4, 4), (4, 0)}  # every start corner is drawn
    assert len({"/".join(t.data["map"]) for t in tasks}) == len(tasks)
    # One kind of hole: the map shows one hole letter (never the unused second one), and a fall names it.
    episode, falls = world.new_episode(), set()
    for t in tasks[:8]:
        shown = episode.reset(t)
        assert hole in shown and run_letters(seed)[1] not in shown
        for action in ("Down", "Right", "Up", "Left"):
            episode.reset(t)
            _, _, done, info = episode.step(f"```{action}```")
            if info["event"] == "hole":
                falls.add(fatal_letter(episode.trace()))
    assert falls == {hole}


def test_a_demo_lake_with_an_unknown_number_of_hole_kinds_is_refused():
    from erl_lite.embedded.world import DemoLake

    for wrong in (0, 3, -1):
        with pytest.raises(ValueError, match="hole_kinds must be 1 or 2"):
            DemoLake(hole_kinds=wrong)
    for sizes in ((4, 6), (1, 1)):  # a lined map has one size: it is not silently the first of two
        with pytest.raises(ValueError, match=r"lined maps one size >= 2 \(got sizes="):
            DemoLake(lined=True, sizes=sizes)


def test_the_hard_world_with_two_kinds_lines_its_route_with_both():
    # benchmarks/embedded_bands.py --hole-kinds 2: the measurement behind the hard world's one kind.
    from erl_lite.embedded.world import holes_in_the_way

    world = demo_world(0, "hard", n_test=12, hole_kinds=2)
    assert hole_letters(world) == run_letters(0)[:2]
    for t in world.test_tasks():
        assert t.data["map"] == [row.replace("K", "H") for row in t.data["kinds"]]
        assert {"H", "K"} <= set("".join(t.data["kinds"])) and holes_in_the_way(t.data["kinds"])


def test_a_run_draws_only_the_training_maps_it_reads():
    """The sparse world's maps cost ~30 ms each: a trainer over its 2,000-map split must not draw them all
    before its first step (it did: ~60 s of drawing for a one-step run)."""
    world = demo_world(0, "sparse")
    drawn = []
    generate = world._splits._generate
    world._splits._generate = lambda split, index: drawn.append((split, index)) or generate(split, index)
    args = demo_config(max_steps=2, num_tasks_per_step=3, eval_steps=0, diagnostics="off")
    model, tok = load_embedded(peft="none")
    trainer = ERLTrainer(model=model, processing_class=tok, args=args, env=world)
    assert len(trainer.train_tasks) == 2_000
    batches = [trainer._batch(1), trainer._batch(2), trainer._batch(1)]
    train_drawn = sorted(index for split, index in drawn if split == "train")
    assert len(train_drawn) == 6 and batches[0] == batches[2]  # each map once, whatever reads it again
    # The lazily drawn tasks are the split's own: another world of the same seed draws the same map at each
    # index, and the first ones equal those train_tasks(n) lists in order.
    again = demo_world(0, "sparse")
    for task in batches[0] + batches[1]:
        assert again.train_pool()[int(task.task_id.rsplit("/", 1)[1])] == task
    assert trainer.train_tasks[-1].task_id.endswith("/train/1999") and trainer.train_tasks[0:2] == again.train_tasks(2)


def test_a_task_pool_reads_like_a_list_and_draws_each_task_once():
    from erl_lite.records import Task, TaskPool

    drawn = []
    pool = TaskPool(lambda i: drawn.append(i) or Task(f"t/{i}"), 5)
    assert [t.task_id for t in pool] == [f"t/{i}" for i in range(5)] and pool[-1] is pool[4]
    assert [t.task_id for t in pool[::2]] == ["t/0", "t/2", "t/4"] and drawn == [0, 1, 2, 3, 4]
    for wrong, error in ((5, IndexError), (-6, IndexError), (1.5, TypeError), ("1", TypeError)):
        with pytest.raises(error):
            pool[wrong]


def test_a_failure_names_only_the_hole_stepped_on():
    world = make_lake_with_both_holes()
    seen = set()
    for task in world.test_tasks(60):
        episode = world.new_episode()
        episode.reset(task)
        for action in ("Right", "Down", "Right", "Down"):
            if episode.done:
                break
            _, _, _, info = episode.step(f"```{action}```")
        trace = "\n".join(episode._lines)
        if (letter := fatal_letter(trace)) is not None:
            seen.add(letter)
            assert trace.count("moved into a hole") == 1
    assert seen == set(hole_letters(world))  # either kind can be the one revealed


def make_lake_with_both_holes():
    return demo_world(0, n_test=60)


def test_observation_names_the_tiles_ahead_but_not_what_they_are():
    world = demo_world(0)
    for task in world.test_tasks(20):
        episode = world.new_episode()
        obs = episode.reset(task)
        lines = obs.splitlines()
        assert lines[-1] == "left: 8" and lines[-2].startswith("ahead: ")
        grid = parse_grid(obs)
        assert lines[-2] == "ahead: " + ", ".join(f"{a} {x}" for a, x in closer_tiles(grid))
        assert "hole" not in obs and "ice" not in obs
    assert world.symbols == demo_world(0, hints=False).symbols
    plain_obs = demo_world(0, hints=False).new_episode().reset(task)
    assert "ahead" not in plain_obs and plain_obs.splitlines()[-1] == "left: 8"


def test_teacher_moves_follow_the_belief_about_holes():
    grid = [["A", "H", "F"], ["F", "F", "F"], ["F", "F", "B"]]
    assert best_moves(grid, "H") == ["Down"]
    assert best_moves(grid, "F") == ["Right"]  # fearing the ice, it walks over the hole
    assert describe_ahead(grid, "H") == "Down F ok, Right H no."
    assert describe_ahead(grid, None) == "Down F ok, Right H ok."


def reflection_request(base: str, trace: str, task: str = "A E G\nH G B\nleft: 8") -> str:
    return (
        f"<|im_start|>system\n{REFLECTION_SYSTEM}<|im_end|>\n<|im_start|>user\n## Current instructions\n"
        f"{base}\n\n## Task\n{task}\n\n## What the agent did\n{trace}\n\n## Outcome\n"
        f"reward 0. Failure.\n\n{REFLECTION_REQUEST}<|im_end|>\n<|im_start|>assistant\n"
    )


def test_uninformed_teacher_sometimes_guesses_two_letters_so_two_hole_plans_exist_without_a_rulebook():
    from erl_lite.embedded.rulebooks import plan_sentence, planned_holes

    grid = [["A", "E", "G"], ["F", "H", "B"]]
    guesses = [Teacher(seed=s, skill=TeacherSkill(guess_rate=1.0)).guess(grid) for s in range(200)]
    plans = [planned_holes(plan_sentence(g)) for g in guesses]
    assert all(p and set(p) <= set("EFGH") and len(p) == len(set(p)) for p in plans)
    assert 60 <= sum(len(p) == 2 for p in plans) <= 140  # about half, with TeacherSkill's default share
    quiet = [Teacher(seed=s).guess(grid) for s in range(500)]
    assert 0.01 <= sum(g != [] for g in quiet) / 500 <= 0.12  # rare: mostly suspects nothing


def test_teacher_on_a_plain_retry_avoids_the_letter_its_trace_fell_into():
    # The paper's "w/o reflection" retry: no rulebook, the first attempt's trace and feedback in the system
    # prompt. The corpus plays it so the ablation is in the model's distribution (a retry the model has never
    # seen is cut at its length limit, and would measure that, not the missing rulebook).
    from erl_lite.core.prompts import retry_system_prompt

    trace = "Start:\nA E G\nH G B\nAction 1: Right -> stepped on E: moved into a hole; the episode is over."
    system = retry_system_prompt("Grid game.", trace, "Failure: fell into a hole. Reward 0.")
    prompt = (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nA E G\nH G B\nahead: Right E, Down H\n"
        "left: 8<|im_end|>\n<|im_start|>assistant\n"
    )
    plans = [planned_holes(Teacher(seed=s)(prompt)) for s in range(40)]
    assert plans.count(["E"]) >= 32 and all(len(p) == 1 for p in plans)  # mostly right, rarely misread
    first = prompt.replace(system, "Grid game.")  # the same trace's letters, but no retry: mostly no suspect
    assert sum(planned_holes(Teacher(seed=s)(first)) == ["E"] for s in range(40)) <= 6


def test_teacher_reflection_names_the_fatal_letter():
    trace = "Start:\nA E G\nH G B\nAction 1: Right -> stepped on E: moved into a hole; the episode is over."
    texts = [Teacher(seed=s)(reflection_request("base", trace)) for s in range(20)]
    assert all(t.startswith("<prompt>") and t.endswith("</prompt>") for t in texts)
    holes = [named_holes(t) for t in texts]
    assert holes.count(["E"]) >= 15 and all(len(h) == 1 and h[0] in "EGH" for h in holes)  # mostly right
    assert named_holes(rulebook("E", "G")) == ["E"] and named_holes(rulebook(None)) == []
    assert all(not named_safe(t) for t in texts)  # the teacher states holes only


def test_teacher_reflection_keeps_memory_adds_the_trace_and_never_contradicts():
    trace = (
        "Start:\nA G E\nH G B\nAction 1: Down -> stepped on H: moved to a safe tile\n"
        "Action 2: Right -> stepped on G: moved to a safe tile\n"
        "Action 3: Up -> stepped on E: moved into a hole; the episode is over."
    )
    memory = rulebook(["C"])
    texts = [Teacher(seed=s)(reflection_request(memory, trace)) for s in range(20)]
    right = [t for t in texts if named_holes(t) == ["E", "C"]]
    assert len(right) >= 15  # E from the trace, then C kept from memory
    assert all(t == f"<prompt>{rulebook(['E', 'C'])}</prompt>" for t in right)  # one fact plus a copy
    # memory said H is a hole, but the trace walked on H: the reflector drops it
    texts = [Teacher(seed=s)(reflection_request(rulebook(["H"]), trace)) for s in range(20)]
    assert all(not contradictions(t) and "H" not in named_holes(t) for t in texts)
    assert sum(named_holes(t) == ["E"] for t in texts) >= 15


def test_teacher_reflection_always_starts_with_the_hole_the_trace_names():
    """Adding what the trace shows never depends on noticing it is new: the fatal letter is the
    first fact, and a remembered copy of it is not repeated."""
    trace = "Start:\nA E G\nH G B\nAction 1: Right -> stepped on E: moved into a hole; the episode is over."
    texts = [Teacher(seed=s)(reflection_request(rulebook(["C", "E"]), trace)) for s in range(20)]
    assert sum(named_holes(t) == ["E", "C"] for t in texts) >= 15
    assert all(named_holes(t)[0] in "EGH" and len(named_holes(t)) == len(set(named_holes(t))) for t in texts)


def test_contradiction_detector():
    assert contradictions("A is you. F is a hole: stepping on F ends the game. F is safe ice.") == ["F"]
    assert contradictions(rulebook(["E", "H"], ["G"])) == []
    assert contradiction_rate([rulebook("E", "G"), "E is a hole. E is ice.", "G is a hole. G is safe."]) == 2 / 3
    with pytest.raises(ValueError, match="both hole and safe"):
        rulebook(["E"], ["E"])


def test_report_flags_self_contradicting_rulebooks():
    history = History()
    bad = "A is you. F is a hole. F is safe ice."
    history.samples = [
        {
            "step": 1,
            "retries": [
                {
                    "reflection": {"task_id": "t1", "rulebook": bad, "base_prompt": "x", "parsed": True},
                    "second": {"success": 0},
                },
                {
                    "reflection": {"task_id": "t2", "rulebook": rulebook("E", "G"), "base_prompt": "x", "parsed": True},
                    "second": {"success": 1},
                },
            ],
        }
    ]
    section = _memory_section(history, [bad], ["F", "H"])
    assert "**Self-contradicting rulebooks: 2 of 3**" in section  # the sampled one and memory's, of three
    assert f"- step 1, task `t1`: `{bad}` (letter F)" in section and f"- final memory: `{bad}` (letter F)" in section


def _sample(step, memory, reflections, plans):
    """A samples.jsonl row: ``reflections`` (rulebook, second attempt won) and the first attempts' replies."""
    first = [{"messages": [{"role": "user", "content": "A B"}, {"role": "assistant", "content": p}]} for p in plans]
    retries = [
        {
            "first": 0,
            "reflection": {"task_id": f"t{i}", "rulebook": r, "base_prompt": "x", "parsed": True},
            "second": {"success": won},
        }
        for i, (r, won) in enumerate(reflections)
    ]
    return {"step": step, "memory_before": memory, "first_attempts": first, "retries": retries}


def test_repeated_hole_detector_and_plan_reader():
    from erl_lite.embedded.rulebooks import planned_holes, repeated_holes

    assert repeated_holes("A is you. F is a hole. F is a hole.") == ["F"]
    assert repeated_holes(rulebook(["F", "H"])) == [] and repeated_holes(rulebook(None)) == []
    assert planned_holes("Avoid F or H. Up F no, Right C ok.\n```Right```") == ["F", "H"]
    assert planned_holes("Avoid nothing. Up C ok.") == [] and planned_holes("Avoid H or H.") == ["H", "H"]
    assert planned_holes("```Up```") is None


def test_report_flags_rulebooks_that_state_a_hole_twice():
    from erl_lite.embedded.demo import _memory_section

    twice = rulebook(["F", "F"])
    history = History(samples=[_sample(1, [], [(twice, True), (rulebook(["F", "H"]), True)], [])])
    text = _memory_section(history, [twice], ["F", "H"])
    assert "Rulebooks stating one hole twice: 2 of 3" in text and "final memory" in text and "letter F" in text
    alike = _sample(1, [], [(twice, True), (twice, False)], [])
    for retry in alike["retries"]:  # one task, two rulebooks alike
        retry["reflection"]["task_id"] = "t0"
    alike = History(samples=[alike])
    listed = _memory_section(alike, [], ["F", "H"]).split("twice: 2 of 2")[1]
    assert listed.count("letter F") == 1  # listed once; counted twice
    assert "Repeat check: none of the 1 rulebooks" in _memory_section(History(), [rulebook(["F", "H"])], ["F", "H"])


def test_built_on_memory_shows_a_reflection_that_added_a_real_hole():
    from erl_lite.embedded.demo import built_on_memory

    memory = rulebook(["F"])
    good, wrong = rulebook(["F", "H"]), "A is you. Reach B is a hole. F is a hole. C is a hole."
    reflections = [(good, True), (wrong, True)]
    sample = _sample(3, [memory], reflections, [])
    for retry in sample["retries"]:
        retry["reflection"]["base_prompt"] = memory
    history = History(samples=[sample])
    assert built_on_memory(history, ["F", "H"])["after"] == good  # C and B are not holes of this world
    sample["retries"] = sample["retries"][1:]
    assert built_on_memory(History(samples=[sample]), ["F", "H"]) is None


def test_report_flags_rulebooks_that_call_another_letter_a_hole():
    from erl_lite.embedded.demo import _memory_section

    wrong = "A is you. B is the goal. Reach B and never step on a hole. H is a hole. C is a hole."
    history = History(samples=[_sample(26, [], [(wrong, True), (rulebook(["F", "H"]), True)], [])])
    text = _memory_section(history, [wrong], ["F", "H"])
    assert "Rulebooks calling another letter a hole: 2 of 3" in text and "(letter C)" in text
    assert "final memory" in text
    two = "A is you. Reach B is a hole. H is a hole. C is a hole."  # one letter or two: the word agrees
    assert "(letters B, C)" in _memory_section(History(), [two], ["F", "H"])
    assert "Wrong-hole check: none of the 1 rulebooks" in _memory_section(History(), [rulebook(["F", "H"])], ["F", "H"])


def test_knowledge_timeline_reads_memory_reflections_and_first_plans():
    from erl_lite.embedded.demo import knowledge_timeline, timeline_table

    both, one, dup = rulebook(["F", "H"]), rulebook(["F"]), rulebook(["H", "H"])
    history = History(
        samples=[
            _sample(1, [], [(one, True), (both, False)], ["Avoid nothing. Up C ok.", "Avoid F. Up F no."]),
            _sample(
                2,
                [dup],
                [(dup, True), (both, True), (one, False), (both, True)],
                ["Avoid H or F. Up C ok.", "Avoid F or F.", "```Up```", "Avoid nothing."],
            ),
        ]
    )
    rows = knowledge_timeline(history, ["F", "H"])
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["memory"] == "empty" and rows[1]["memory"] == "H H"
    assert rows[0]["reflections"] == 2 and rows[0]["both"] == 0.5 and rows[0]["repeated"] == 0.0
    assert rows[1]["both"] == 0.5 and rows[1]["repeated"] == 0.25
    # plans: step 1 names a letter once in 2 replies, both holes never; step 2: one of 4 names both
    assert rows[0]["first_named"] == 0.5 and rows[0]["first_both"] == 0.0
    assert rows[1]["first_named"] == 0.5 and rows[1]["first_both"] == 0.25
    assert rows[0]["first_unreadable"] == 0.0 and rows[1]["first_unreadable"] == 0.25  # "```Up```": no plan
    assert "| 2 | H H | 4 | 0.50 | 0.25 | 0.50 | 0.25 | 0.25 |" in timeline_table(rows)


# --- the model inside ERL ------------------------------------------------------------------------


@pytest.mark.slow
def test_two_erl_steps_under_a_minute():
    start = time.perf_counter()
    model, tok = load_embedded(lora_r=8)
    before = trainable_parameters(model)
    args = demo_config(max_steps=2, num_tasks_per_step=4, num_generations=2, eval_steps=0)
    trainer = ERLTrainer(model=model, processing_class=tok, args=args, env=demo_world(0))
    history = trainer.train()
    elapsed = time.perf_counter() - start
    assert elapsed < 60, f"2 ERL steps took {elapsed:.0f}s"
    records = history.of_kind("train")
    assert len(records) == 2 and all(r["reward/first"] is not None for r in records)
    assert all(r["truncated/first"] == 0 for r in records)  # the demo budgets fit its episodes
    after = trainable_parameters(model)
    assert any(not torch.equal(before[n], after[n]) for n in before)


# --- the bands, on a small fixed-seed sample -----------------------------------------------------
# The full measurement is benchmarks/embedded_bands.py (3 runs x 128 tasks x 2 samples). Here:
# 40 tasks x 2 samples of run 0, seeded. With ~80 first attempts the standard error of a rate is
# about 0.055, and with ~40 failed tasks about 0.08, so each band is widened by roughly one
# standard error: first success in [0.15, 0.75] (band 0.2..0.7), parse rate >= 0.9 (band 0.95),
# self-contradicting rulebooks <= 0.1 (band 0.05), own-reflection gain over a plain retry >= 0.15
# (band 0.25). Memory: the reflections written from a memory naming the other hole name both holes
# (measured 0.96 at full size), second attempts under them beat those under reflections from the
# initial prompt by >= 0.15 (the band itself: measured +0.47 at full size, with ~30 cases here),
# and a wrong memory does worse than a good one. A model that does not use its reflection fails
# the gain and the swapped-letter control; one that ignores its memory fails the merge rate and
# the memory gain.


@pytest.fixture(scope="module")
def bands(plain):
    """benchmarks/embedded_bands.py's measure_bands."""
    model, tok = plain
    return bands_module().measure_bands(model, tok, demo_world(0), num_tasks=40, samples=2, seed=0)


def bands_module():
    """benchmarks/embedded_bands.py as a module (benchmarks/ is not a package)."""
    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "embedded_bands.py"
    spec = importlib.util.spec_from_file_location("embedded_bands", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["embedded_bands"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_the_bands_parse_rate_is_low_for_a_model_that_writes_no_rule(plain):
    """The negative control of the bands' parse rate: a random model of the embedded model's vocabulary writes no
    <prompt> block that states a rule, so its rate is near 0 where the embedded model's is at least 0.9."""
    from erl_lite.testing import tiny_model

    _, tok = plain
    control = bands_module().measure_bands(
        tiny_model(tok), tok, demo_world(0), num_tasks=6, samples=1, memory_cases=False
    )
    assert control.num_failed >= 4 and control.parse_rate <= 0.1, control


@pytest.mark.slow
def test_first_attempt_success_is_in_the_band(bands):
    assert 0.15 <= bands.first_success <= 0.75, bands


@pytest.mark.slow
def test_reflections_parse_name_a_hole_and_do_not_contradict_themselves(bands):
    assert bands.parse_rate >= 0.9, bands
    assert bands.names_hole_rate >= 0.7, bands
    assert bands.contradiction_rate <= 0.1, bands


@pytest.mark.slow
def test_own_reflection_beats_a_plain_retry_and_its_content_matters(bands):
    assert bands.num_failed >= 20, bands
    assert bands.reflection_gain >= 0.15, bands
    assert bands.swapped_success < bands.second_success, bands


@pytest.mark.slow
def test_reflections_build_on_memory(bands):
    assert bands.num_memory_cases >= 5, bands
    assert bands.merged_rate >= 0.8, bands
    assert bands.memory_gain >= 0.15, bands  # the band, on the small sample
    assert bands.wrong_memory_success < bands.good_memory_success, bands


# --- the demo (the README's main command) --------------------------------------------------------


@pytest.mark.slow
def test_cli_demo_writes_history_figures_and_report(tmp_path, capsys):
    from erl_lite.cli import main

    assert main(["demo", "--steps", "2", "--out", str(tmp_path), "--eval-tasks", "4"]) == 0
    printed = capsys.readouterr().out
    assert "step   1 |" in printed and "step   2 |" in printed and "eval first-attempt success" in printed
    for name in ("history.jsonl", "report.md", "rewards.png", "gate_rate.png", "memory.png", "eval.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    report = (tmp_path / "report.md").read_text()
    assert "## Final memory" in report and "first-attempt success (eval, before / after" in report


def test_cli_demo_passes_the_model_folder_and_the_report_names_it(tmp_path, monkeypatch):
    import erl_lite.embedded.demo as demo
    from erl_lite.cli import main

    seen = {}
    real = demo.demo_trainer

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(demo, "demo_trainer", spy)
    build = tmp_path / "build"
    shutil.copytree(EMBEDDED_DIR, build)
    out = tmp_path / "out"
    assert main(["demo", "--steps", "1", "--out", str(out), "--eval-tasks", "2", "--model", str(build)]) == 0
    assert seen["model_dir"] == str(build)
    assert f"Model: `{build}`" in (out / "report.md").read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "argument --steps: must be a whole number >= 1, got '0'"),  # while parsing (arg_types)
        (["--steps", "-3"], "argument --steps: must be a whole number >= 1, got '-3'"),
        (["--eval-tasks", "0"], "argument --eval-tasks: must be a whole number >= 1, got '0'"),
        (["--eval-tasks", "-1"], "argument --eval-tasks: must be a whole number >= 1, got '-1'"),
        (["--model", "/no/such/build"], "/no/such/build"),  # when the trainer is built
    ],
)
def test_cli_demo_refuses_bad_arguments_in_one_line_before_training(tmp_path, capsys, argv, message):
    # --eval-tasks -1 evaluated on 99 maps and 0 on the default 64, without a word; --steps 0 printed a traceback.
    from erl_lite.cli import main

    try:
        code = main(["demo", "--out", str(tmp_path / "out"), *argv])
    except SystemExit as exit_:  # argparse's usage error: the usage, then the one line
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("erl-lite demo: error: ") and message in last and "Traceback" not in err
    assert not (tmp_path / "out" / "history.jsonl").exists()


@pytest.mark.slow
def test_default_demo_raises_first_attempt_success(tmp_path):
    """The issue's band: after the default demo, eval first-attempt success is up by >= 0.15.

    Measured with the shipped model (seed 0): 0.45 -> 0.96 over 64 tasks x 2 samples; the
    standard error of the difference is about 0.07.
    """
    from erl_lite.embedded import run_demo

    history = run_demo(out=str(tmp_path), verbose=False)
    _, evals = history.series("eval/success", kind="eval")
    assert len(evals) >= 2
    assert evals[-1] - evals[0] >= 0.15, evals


def test_contradiction_detector_and_the_report_flag():
    from erl_lite.embedded import contradiction_rate, contradictions
    from erl_lite.embedded.demo import _memory_section
    from erl_lite.embedded.rulebooks import rulebook
    from erl_lite.history import History

    bad = "A is you. F is a hole: stepping on F ends the game. F is safe ice."
    assert contradictions(bad) == ["F"] and contradictions(rulebook("F", "E")) == []
    assert contradiction_rate([bad, rulebook("F", "E"), rulebook(None, None)]) == pytest.approx(1 / 3)
    refl = {"parsed": True, "task_id": "t", "base_prompt": ""}
    sample = {
        "step": 1,
        "retries": [
            {"first": 0, "reflection": {**refl, "rulebook": bad}, "second": {"success": False}},
            {"first": 1, "reflection": {**refl, "rulebook": rulebook("F", "E")}, "second": {"success": True}},
        ],
    }
    text = _memory_section(History(samples=[sample]), [bad], ["F", "H"])
    assert "Self-contradicting rulebooks: 2 of 3" in text and "final memory" in text and "(letter F)" in text
    assert "none of the 1 rulebooks" in _memory_section(History(), [rulebook("F", "E")], ["F", "H"])


@pytest.mark.parametrize("name", ["embedded.teacher", "embedded.corpus"])
def test_build_time_docstring_examples(name):
    """tests/test_docstrings.py walks the package only; the build-time modules' examples run here."""
    result = doctest.testmod(importlib.import_module(name), verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{name}: {result.failed} of {result.attempted} failed"
