"""One run on FrozenLake + Sokoban + multi-hop QA together: routing by the ``environment``
column, per-environment metrics, one memory per environment (isolated), and checkpoints."""

from __future__ import annotations

import json
import os

import pytest
from test_multiturn import RULEBOOK, Player, config, distinct_tasks

from erl_lite.core.memory import MemoryBank, ReflectionMemory
from erl_lite.core.prompts import REFLECTION_REQUEST
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.envs import FrozenLake, MultiHopQA, Sokoban
from erl_lite.envs.multi import MultiEnvironment
from erl_lite.integrations.dataset import RewardFunctionEnv
from erl_lite.metrics import describe
from erl_lite.records import Task
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

NAMES = ("frozenlake", "sokoban", "qa")
MARKER = "FROZENLAKE-ONLY-MARKER"


def make_multi() -> MultiEnvironment:
    return MultiEnvironment({"frozenlake": FrozenLake.small(), "sokoban": Sokoban.small(), "qa": MultiHopQA.small()})


class MultiPlayer:
    """Dispatches each prompt to the scripted player of the environment whose task it shows."""

    def __init__(self, players) -> None:
        self.players = players

    def __call__(self, prompt: str) -> str:
        for player in self.players:
            try:
                return player(prompt)
            except KeyError:  # not this player's task
                continue
        raise AssertionError(f"no player knows this prompt:\n{prompt[:300]}")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A trainer on two tasks of each environment (rows routed by ``environment``) after one step.

    Task 0 of each environment is solved; task 1 fails first and is rescued by its rulebook.
    FrozenLake's memory starts with a marker rulebook that no other environment may see.
    """
    multi = make_multi()
    rows, players = [], []
    for name in NAMES:
        plain = distinct_tasks(multi.envs[name], 2)
        rows += [{"environment": name, "index": int(t.data["index"])} for t in plain]
        tagged = [multi.tag(name, t) for t in plain]
        players.append(Player(multi.envs[name], tagged, first={tagged[1].task_id: ("fail",)}))
    tok = tiny_tokenizer()
    args = config(max_steps=1, num_tasks_per_step=6, eval_steps=0, output_dir=str(tmp_path_factory.mktemp("out")))
    trainer = ERLTrainer(
        tiny_model(tok),
        args=args,
        env=multi,
        train_dataset=rows,
        processing_class=tok,
        generator=ScriptedGenerator(tok, MultiPlayer(players)),
    )
    trainer._batch = lambda step: list(trainer.train_tasks)  # all six tasks, in row order
    trainer.memory.for_task("frozenlake/x").maybe_store(MARKER, 1.0, 1.0)
    record = trainer.training_step()
    return trainer, record, rows


def test_rows_are_routed_to_their_environment(run):
    trainer, record, rows = run
    assert [t.task_id.split("/")[0] for t in trainer.train_tasks] == [r["environment"] for r in rows]
    assert all(t.data["environment"] == r["environment"] for t, r in zip(trainer.train_tasks, rows))
    multi = trainer.env
    for attempt in record.first_attempts:
        member = multi.envs[multi.env_name(attempt.task_id)]
        assert attempt.system_prompt == member.system_prompt  # the member's own first prompt
    # two rollouts of each solved task succeed, each failing task is rescued by its rulebook
    assert [a.reward for a in record.first_attempts] == [1.0, 1.0, 0.0, 0.0] * 3
    assert [r.second.reward for r in record.retries] == [1.0] * 6
    for retry in record.retries:
        member = multi.envs[multi.env_name(retry.task_id)]
        assert retry.second.system_prompt.endswith(member.action_reminder)
    # an episode ends after its own environment's turn limit, not the longest member's
    qa_turns = [a.num_turns for a in record.first_attempts if a.task_id.startswith("qa/")]
    assert max(qa_turns) <= multi.envs["qa"].max_turns < multi.max_turns


def test_metrics_are_logged_per_environment(run):
    trainer, record, _ = run
    m = record.metrics
    for name in NAMES:
        assert m[f"reward/first/{name}"] == 0.5 and m[f"success/first/{name}"] == 0.5
        assert m[f"gate/rate/{name}"] == 0.5 and m[f"reward/second/{name}"] == 1.0
        assert m[f"memory/size/{name}"] == 1.0
    assert m["reward/first"] == 0.5 and m["memory/size"] == 3.0
    assert all(describe(k) for k in m), [k for k in m if not describe(k)]


def test_memory_is_kept_per_environment(run):
    trainer, record, _ = run
    bank = trainer.memory
    assert isinstance(bank, MemoryBank)
    failing = {name: [r.task_id for r in record.retries if r.task_id.startswith(name + "/")][0] for name in NAMES}
    for name in NAMES:  # each memory holds its own environment's rulebook, nothing else
        assert bank.memories[name].entries == [f"{RULEBOOK} {failing[name]}"]
    # the reflector of a task saw its environment's memory only: the marker reached FrozenLake's
    for refl in (r.reflection for r in record.retries):
        if refl.task_id.startswith("frozenlake/"):
            assert refl.base_prompt == MARKER
        else:
            assert MARKER not in refl.base_prompt
            assert refl.base_prompt == trainer.env.envs[trainer.env.env_name(refl.task_id)].system_prompt
    reflector_prompts = [p for p in trainer.generator.prompts_seen if REFLECTION_REQUEST in p]
    assert sum(MARKER in p for p in reflector_prompts) == 2  # FrozenLake's two failed rollouts


def test_checkpoint_saves_and_restores_every_memory(run, tmp_path):
    trainer, _, _ = run
    path = trainer.save_checkpoint()
    saved = json.load(open(os.path.join(path, "memory.json")))
    assert saved["kind"] == "bank" and set(saved["memories"]) == set(NAMES)
    fresh = MemoryBank(list(NAMES), env_of=trainer.env.env_name)
    fresh.load_state_dict(saved)
    assert fresh.entries == trainer.memory.entries and fresh.total_writes == trainer.memory.total_writes
    with pytest.raises(ValueError, match="one memory per environment"):
        fresh.load_state_dict(ReflectionMemory().state_dict())
    with pytest.raises(ValueError, match=r"covers environments \['frozenlake'\]"):
        MemoryBank(list(NAMES), env_of=str).load_state_dict(
            {"kind": "bank", "memories": {"frozenlake": ReflectionMemory().state_dict()}}
        )


def test_default_tasks_interleave_the_members_splits():
    multi = make_multi()
    ids = [t.task_id for t in multi.train_tasks(5)]
    assert ids == [
        "frozenlake/train/0",
        "sokoban/train/0",
        "qa/multihop_qa/train/0",
        "frozenlake/train/1",
        "sokoban/train/1",
    ]
    assert multi.tasks_from_rows([{"environment": "qa", "index": 0}], "eval")[0].task_id == "qa/multihop_qa/test/0"


def test_dataset_members_and_clear_routing_errors():
    def exact(completions, answer, **kw):
        return [float(c.strip() == a) for c, a in zip(completions, answer)]

    multi = MultiEnvironment({"math": RewardFunctionEnv(exact), "frozenlake": FrozenLake.small()})
    tasks = multi.tasks_from_rows(
        [{"environment": "math", "prompt": "1+1=?", "answer": "2"}, {"environment": "frozenlake", "index": 0}]
    )
    assert [t.task_id for t in tasks] == ["math/train-0", "frozenlake/train/0"]
    episode = multi.new_episode()
    assert episode.reset(tasks[0]) == "1+1=?"
    episode.step("2")
    multi.score_batch([episode], [[]])
    assert episode.reward == 1.0
    with pytest.raises(ValueError, match=r"row 0 has environment='chess'.*\['math', 'frozenlake'\]"):
        multi.tasks_from_rows([{"environment": "chess", "index": 0}])
    with pytest.raises(ValueError, match="row 0 .*no 'prompt'.*integer 'index'"):
        multi.tasks_from_rows([{"environment": "frozenlake", "seed": 3}])
    with pytest.raises(NotImplementedError, match="'math' .*has no train split"):
        multi.train_tasks(2)
    with pytest.raises(ValueError, match="not routed"):
        multi.new_episode().reset(Task("lonely/0"))
    with pytest.raises(ValueError, match="share a name"):
        MultiEnvironment([FrozenLake.small(), FrozenLake.small()])


def test_a_run_over_several_environments_draws_only_the_tasks_it_reads():
    # The trainer samples its batches from train_pool(): over a MultiEnvironment it interleaves the
    # members' splits as train_tasks() does, but draws a member's task only when it is read (a member's
    # split may cost a minute to draw whole: the embedded sparse world's maps take ~30 ms each).
    members = {"frozenlake": FrozenLake.small(n_train=50), "sokoban": Sokoban.small(n_train=20)}
    drawn = {name: [] for name in members}
    for name, env in members.items():
        real = env._splits._generate
        env._splits._generate = lambda split, i, real=real, name=name: drawn[name].append((split, i)) or real(split, i)
    multi = MultiEnvironment(members)
    pool = multi.train_pool()
    assert len(pool) == 70 and all(not d for d in drawn.values())
    assert pool[5].task_id == "sokoban/train/2" and pool[60].task_id == "frozenlake/train/40"  # past sokoban's 20
    assert [i for s, i in drawn["frozenlake"] if s == "train"] == [40]
    assert [i for s, i in drawn["sokoban"] if s == "train"] == [2]
    assert [t.task_id for t in pool[:70]] == [t.task_id for t in multi.train_tasks()]  # the same order
    # A dataset row naming a task by index draws that task, not the split up to it.
    fresh = FrozenLake.small(n_train=50)
    real = fresh._splits._generate
    seen = []
    fresh._splits._generate = lambda split, i: seen.append((split, i)) or real(split, i)
    task = MultiEnvironment({"frozenlake": fresh}).tasks_from_rows([{"environment": "frozenlake", "index": 30}])[0]
    assert task.task_id == "frozenlake/train/30" and [i for s, i in seen if s == "train"] == [30]


@pytest.mark.parametrize(
    "bad, message",
    [
        ([{"role": "assistant", "content": "hi"}], "must end with a user message"),
        ([{"role": "user"}], "message 0 needs 'role' and 'content'"),
        ("bad \ud800 surrogate", "surrogate"),
        (42, "a prompt is a string or a non-empty list"),
    ],
)
def test_a_bad_prompt_is_named_by_its_own_row(bad, message):
    """Each row's errors name that row (the prompt check once named every row 0)."""
    rows = [
        {"environment": "qa", "prompt": "fine", "answer": "x"},
        {"environment": "frozenlake", "index": 0},
        {"environment": "qa", "prompt": bad, "answer": "x"},
    ]
    with pytest.raises(ValueError, match=rf"dataset row 2\b.*{message}"):
        make_multi().tasks_from_rows(rows)
