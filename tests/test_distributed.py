"""Data-parallel ERL (erl_lite.integrations.distributed): two CPU processes (gloo) against one process.

The two-process run uses accelerate's ``debug_launcher`` (forked CPU processes joined by a
file store: no network, no port). Completions come from a scripted sampler whose reply is a
function of the prompt and of its rollout index, so both runs see the same completions and
every difference left is the data-parallel machinery's.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.core.memory import ReflectionMemory
from erl_lite.integrations.distributed import DataParallel, DeferredMemory
from erl_lite.metrics import is_measurement
from erl_lite.records import TrainSample

ROWS = [{"prompt": f"Say {n}.", "answer": str(n)} for n in range(1, 7)]
COMPARED_EXACTLY = (
    "memory/size",
    "memory/writes",
    "memory/total_writes",
    "samples/first",
    "samples/reflection",
    "samples/second",
    "samples/internalization",
    "optim/steps",
    "step",
)


# --- unit: the pieces, in one process ------------------------------------------------------------
def fake_rank(rank: int, world: int, others: dict[int, object] | None = None) -> DataParallel:
    """A DataParallel that believes it is ``rank`` of ``world``; gathers return ``others``' values."""
    dp = DataParallel()
    dp.world_size, dp.rank = world, rank
    dp._gather_parts = lambda obj: [obj if r == rank else others[r] for r in range(world)]
    return dp


def test_shard_gives_contiguous_blocks_in_rank_order():
    items = list(range(7))
    blocks = [fake_rank(r, 3).shard(items) for r in range(3)]
    assert blocks == [[0, 1, 2], [3, 4], [5, 6]]
    with pytest.raises(ValueError, match="num_tasks_per_step=2 is smaller than the number of processes"):
        fake_rank(2, 3).shard([0, 1])
    assert fake_rank(2, 3).shard([0, 1], allow_empty=True) == []


def test_global_positions_reproduce_the_single_process_batch_order():
    # One process would list: first a0 a1 b0 | reflection a0 b0 | second a0 b0 (tasks a, b).
    def rows(task_roles):
        return [TrainSample(role, [], [], [], 0.0, t) for role, t in task_roles]

    rank0 = rows([("first", "a0"), ("first", "a1"), ("reflection", "a0"), ("second", "a0")])
    rank1 = rows([("first", "b0"), ("reflection", "b0"), ("second", "b0")])
    counts = {0: [2, 1, 1, 0], 1: [1, 1, 1, 0]}
    pos0 = fake_rank(0, 2, counts).global_positions(rank0)
    pos1 = fake_rank(1, 2, counts).global_positions(rank1)
    order = sorted(zip(pos0 + pos1, rank0 + rank1), key=lambda x: x[0])
    assert [p for p, _ in order] == list(range(7))
    assert [(s.role, s.task_id) for _, s in order] == [
        ("first", "a0"),
        ("first", "a1"),
        ("first", "b0"),
        ("reflection", "a0"),
        ("reflection", "b0"),
        ("second", "a0"),
        ("second", "b0"),
    ]
    with pytest.raises(RuntimeError, match="grouped by role"):
        fake_rank(0, 2, counts).global_positions(list(reversed(rank0)))
    assert DataParallel().global_positions(list(reversed(rank0))) == [0, 1, 2, 3]  # one process: as given


def test_deferred_memory_reads_the_shared_one_and_holds_writes_back():
    shared = ReflectionMemory("fifo", size=5, top_k=2)
    shared.maybe_store("old rules", 1.0, 1.0)
    view = DeferredMemory(shared)
    assert view.context() == "old rules"
    assert view.maybe_store("new rules", 1.0, 1.0) and not view.maybe_store("  ", 1.0, 1.0)
    assert shared.entries == ["old rules"] and view.pending == [("new rules", 1.0, 1.0)]


def test_single_process_view_changes_nothing():
    dp, memory = DataParallel(), ReflectionMemory()
    assert dp.deferred(memory) is memory and dp.merge("outcome", memory) == "outcome"
    assert dp.total_count(0.0) == 1.0 and dp.gather([1, 2]) == [1, 2]
    assert dp.on_main(lambda: 5, default=0) == 5


# --- integration: two processes against one ------------------------------------------------------
class RolloutIndexedGenerator:
    """Replies chosen by ``(prompt text, how many times this prompt came earlier in the call)``.

    Within one batched call a task's G rollouts have the same prompt, so the occurrence count
    is the rollout index whether the call holds every task (one process) or a block of them.
    First attempts: rollout g of task n answers right when (n + g) % 3 == 0. Reflections: a
    rulebook naming the task. Second attempts: right when (n + occurrence) is even, so each
    task writes one rulebook and memory's order shows the order of the writes.
    """

    def __init__(self, tokenizer):
        self.tokenizer, self.calls, self.first_prompts = tokenizer, 0, 0
        self.stop_ids = [tokenizer.eos_token_id]

    def generate(self, prompts, params):
        self.calls += 1
        seen: Counter = Counter()
        outs = []
        for ids in prompts:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            occurrence = seen[text]
            seen[text] += 1
            n = int(re.search(r"Say (\d+)\.", text).group(1))
            if "You coach an agent" in text:
                reply = f"<prompt>Rule for task {n}: reply {n}.</prompt>"
            elif "Rule for task" in text:
                reply = str(n) if (n + occurrence) % 2 == 0 else "no"
            else:
                self.first_prompts += 1
                reply = str(n) if (n + occurrence) % 3 == 0 else "no"
            ids_out = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            outs.append(ids_out[: params.max_new_tokens])
        return outs


def reward(prompts, completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def make_trainer(out_dir: str, max_steps: int, model=None, multi: bool = False):
    """The run both sides compare; ``model`` replaces the tiny model built (seeded) here, and
    ``multi`` routes the rows to two environments (one memory each) instead of one reward."""
    from erl_lite.envs import MultiEnvironment
    from erl_lite.integrations.dataset import RewardFunctionEnv
    from erl_lite.run.trainer import ERLTrainer
    from erl_lite.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    # Uneven shards (3 tasks on 2 processes), KL on, two optimizer steps per iteration (so
    # mini-batch membership and the old log-probs matter), FIFO memory (so the order of the
    # writes shows).
    args = ERLConfig.preset(
        "cpu",
        max_steps=max_steps,
        num_tasks_per_step=3,
        num_generations=3,
        max_completion_length=8,
        max_reflection_length=64,
        max_reflection_prompt_length=700,
        eval_steps=0,
        progress_bar=False,
        learning_rate=5e-2,
        beta=0.05,
        steps_per_generation=2,
        per_device_train_batch_size=4,
        memory_type="fifo",
        memory_size=10,
        memory_top_k=2,
        output_dir=out_dir,
        save_steps=1,
        seed=3,
    )
    lora = None if model is not None else lora_config()
    if multi:  # tasks 1, 3, 5 in "odd", 2, 4, 6 in "even": both memories get writes
        where = {"env": MultiEnvironment({"odd": RewardFunctionEnv(reward), "even": RewardFunctionEnv(reward)})}
        rows = [{**r, "environment": ["even", "odd"][int(r["answer"]) % 2]} for r in ROWS]
    else:
        where, rows = {"reward_funcs": reward}, ROWS
    return ERLTrainer(
        model=model if model is not None else tiny_model(tok),
        processing_class=tok,
        args=args,
        train_dataset=rows,
        peft_config=lora,
        generator=RolloutIndexedGenerator(tok),
        **where,
    )


def lora_config():
    from peft import LoraConfig

    return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "o_proj"])


def trainable(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def snapshot(trainer) -> dict:
    return {
        "records": [dict(r) for r in trainer.history.records],
        "memory": trainer.memory.state_dict(),
        "weights": trainable(trainer),
        "first_prompts": trainer.generator.first_prompts,
        "world": trainer.reducer.world_size,
        "rank": trainer.reducer.rank,
    }


def two_process_worker(root: str) -> None:
    """Runs in each of the two processes (accelerate's debug_launcher calls it)."""
    from accelerate.state import PartialState

    PartialState._reset_state()  # a state inherited through fork would say "one process"
    fresh = make_trainer(os.path.join(root, "two"), max_steps=1)
    fresh.train()
    resumed = make_trainer(os.path.join(root, "two_resumed"), max_steps=2)
    resumed.train(resume_from_checkpoint=os.path.join(root, "one", "checkpoint-1"))
    torch.save(
        {"fresh": snapshot(fresh), "resumed": snapshot(resumed)}, os.path.join(root, f"rank{fresh.reducer.rank}.pt")
    )


def assert_same_step(got: dict, want: dict, what: str) -> None:
    for key, value in want.items():
        if is_measurement(key) or key == "kind":  # wall-clock and device figures differ per run
            continue
        if key in COMPARED_EXACTLY or not isinstance(value, float):
            assert got[key] == value, f"{what}: {key} is {got[key]!r}, one process {value!r}"
        else:
            # Relative: losses, KL and the gradient norm are sums over the batch taken in another
            # order (processes, kernels), ~1e-6 apart; abs covers values that are ~0 (KL of a
            # barely moved adapter), far below any metric a wrong row would change.
            assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), f"{what}: {key}"
    assert set(got) == set(want), f"{what}: other metric keys"


def assert_same_weights(got: dict, want: dict, before: dict, what: str) -> None:
    moved = {name: float((value - before[name]).abs().max()) for name, value in want.items()}
    largest = max(moved.values())
    assert largest > 1e-3, "the update did not move the adapter: the comparison would prove nothing"
    for name, value in want.items():
        # Tolerance relative to how far the update moved this tensor: float32 sums taken in
        # another order (two processes, AVX-512 / AVX2 / plain kernels) differ by ~1e-7 of the
        # gradient, and Adam's g / sqrt(v) passes that on to the step. It passes it on in full where
        # a gradient entry is within rounding of Adam's eps: seen 2.1e-6 after a 0.1 move with
        # vector kernels, and 4.5e-5 after a 0.037 move (1.2e-3 of it) with ATEN_CPU_CAPABILITY=default.
        # 5e-3 of the move leaves 4x room over that, and is 400x below a sign flip of an entry's Adam
        # step (twice the move), the difference a changed batch makes wherever it tips a gradient's sign.
        # A tensor the update barely moved is held to the largest move's scale.
        atol = 5e-3 * max(moved[name], 1e-2 * largest)
        torch.testing.assert_close(got[name], value, rtol=0, atol=atol, msg=f"{what}: {name}")


def train_records(records):
    return [r for r in records if r["kind"] == "train"]


def test_two_processes_match_one_process_at_the_same_global_batch(tmp_path):
    from accelerate import debug_launcher

    from erl_lite.run.checkpoint import read_checkpoint

    root = str(tmp_path)
    one = make_trainer(os.path.join(root, "one"), max_steps=2)
    before = trainable(one)
    one.train()
    ref = train_records(one.history.records)
    # The checkpoint holds PEFT's adapter, whose tensor names drop the adapter name ("default").
    saved = read_checkpoint(os.path.join(root, "one", "checkpoint-1")).trainable
    ref_step1_weights = {n: saved[n.replace(".default.", ".")] for n in before}
    ref_step1_memory = json.load(open(os.path.join(root, "one", "checkpoint-1", "memory.json")))
    assert ref[0]["memory/writes"] == 3 and ref[0]["samples/reflection"] == 6 and ref[0]["loss/total"] != 0

    debug_launcher(two_process_worker, args=(root,), num_processes=2)
    ranks = [torch.load(os.path.join(root, f"rank{r}.pt"), weights_only=False) for r in (0, 1)]

    for r, got in enumerate(ranks):
        fresh = got["fresh"]
        assert (fresh["world"], fresh["rank"]) == (2, r)
        # Sharding: 3 tasks x G=3 first attempts, split 2 tasks / 1 task.
        assert fresh["first_prompts"] == [6, 3][r]
        # Step 1: every rank holds the global metrics, memory (same writes in the same order)
        # and weights of the one-process step.
        assert_same_step(train_records(fresh["records"])[0], ref[0], f"rank {r}, step 1")
        assert fresh["memory"] == ref_step1_memory
        assert_same_weights(fresh["weights"], ref_step1_weights, before, f"rank {r}, step 1")
        # Resumed on two processes from the one-process checkpoint: step 2 as in one process.
        resumed = got["resumed"]
        assert_same_step(train_records(resumed["records"])[-1], ref[1], f"rank {r}, step 2 after 1->2 resume")
        assert resumed["memory"] == one.memory.state_dict()
        assert_same_weights(resumed["weights"], trainable(one), before, f"rank {r}, step 2")

    # Rank 0 alone wrote the history and the checkpoint.
    lines = open(os.path.join(root, "two", "history.jsonl")).read().splitlines()
    assert [json.loads(x)["step"] for x in lines if json.loads(x)["kind"] == "train"] == [
        1
    ]  # a health warning may log too
    assert os.path.isdir(os.path.join(root, "two", "checkpoint-1"))

    # Resume the two-process checkpoint in one process: step 2 as in the uninterrupted run.
    again = make_trainer(os.path.join(root, "one_resumed"), max_steps=2)
    again.train(resume_from_checkpoint=os.path.join(root, "two", "checkpoint-1"))
    assert_same_step(train_records(again.history.records)[-1], ref[1], "one process, step 2 after 2->1 resume")
    assert_same_weights(trainable(again), trainable(one), before, "one process, step 2 after 2->1 resume")


# --- a model object built before seeding: DDP broadcasts rank 0's weights ------------------------
def unseeded_model_worker(root: str) -> None:
    """Each process builds its adapter under its own seed (as a script that seeds after building
    the model would), then trains; saves its weights before the trainer, after it and after training."""
    from accelerate.state import PartialState
    from peft import get_peft_model

    from erl_lite.testing import tiny_model, tiny_tokenizer

    PartialState._reset_state()
    rank = PartialState(cpu=True).process_index
    torch.manual_seed(1000 + 17 * rank)  # another LoRA initialisation on every rank
    model = get_peft_model(tiny_model(tiny_tokenizer()), lora_config())
    built = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    trainer = make_trainer(os.path.join(root, "two"), max_steps=2, model=model)
    wrapped = trainable(trainer)
    trainer.train()
    torch.save(
        {"built": built, "wrapped": wrapped, "trained": trainable(trainer)}, os.path.join(root, f"rank{rank}.pt")
    )


def test_a_model_built_before_seeding_trains_one_model_on_every_rank(tmp_path):
    from accelerate import debug_launcher

    debug_launcher(unseeded_model_worker, args=(str(tmp_path),), num_processes=2)
    ranks = [torch.load(os.path.join(tmp_path, f"rank{r}.pt")) for r in (0, 1)]
    names = sorted(ranks[0]["built"])
    assert names and all(not torch.equal(ranks[0]["built"][n], ranks[1]["built"][n]) for n in names if "lora_A" in n), (
        "the two ranks must start apart, or the test proves nothing"
    )
    for r in (0, 1):
        for n in names:
            # Exact: DDP copies rank 0's tensors at wrap time, and every rank then applies the same
            # all-reduced gradient to the same weights with the same optimizer.
            assert torch.equal(ranks[r]["wrapped"][n], ranks[0]["built"][n]), f"rank {r} after wrap: {n}"
            assert torch.equal(ranks[r]["trained"][n], ranks[0]["trained"][n]), f"rank {r} after training: {n}"
    moved = max(float((ranks[0]["trained"][n] - ranks[0]["built"][n]).abs().max()) for n in names)
    assert moved > 1e-3, "training did not move the adapter: the comparison would prove nothing"


# --- several environments: one memory each, identical on every rank ------------------------------
def multi_env_worker(root: str) -> None:
    from accelerate.state import PartialState

    PartialState._reset_state()
    trainer = make_trainer(os.path.join(root, "two"), max_steps=2, multi=True)
    trainer.train()
    torch.save(snapshot(trainer), os.path.join(root, f"rank{trainer.reducer.rank}.pt"))


def test_a_multi_environment_run_trains_under_two_processes_as_in_one(tmp_path):
    from accelerate import debug_launcher

    one = make_trainer(os.path.join(tmp_path, "one"), max_steps=2, multi=True)
    before = trainable(one)
    one.train()
    ref = train_records(one.history.records)
    want = one.memory.state_dict()
    assert want["kind"] == "bank" and all(m["entries"] for m in want["memories"].values()), (
        "both environments' memories must be written, or the test proves nothing"
    )

    debug_launcher(multi_env_worker, args=(str(tmp_path),), num_processes=2)
    for r in (0, 1):
        got = torch.load(os.path.join(tmp_path, f"rank{r}.pt"), weights_only=False)
        assert got["world"] == 2 and got["memory"] == want, f"rank {r}: memory"
        for step, (mine, theirs) in enumerate(zip(train_records(got["records"]), ref), start=1):
            assert_same_step(mine, theirs, f"rank {r}, step {step}")
        assert_same_weights(got["weights"], trainable(one), before, f"rank {r}")


@pytest.mark.parametrize("kind", ["single", "fifo"])
def test_deferred_view_of_a_memory_bank_holds_writes_per_environment(kind):
    from erl_lite.core.memory import MemoryBank

    bank = MemoryBank(["a", "b"], kind, size=4, top_k=2, env_of=lambda task_id: task_id.split("/")[0])
    bank.for_task("a/0").maybe_store("old a", 1.0, 1.0)
    view = fake_rank(0, 2).deferred(bank)
    assert view.for_task("a/1").context() == "old a" and view.for_task("b/1").context() is None
    assert view.for_task("b/1").maybe_store("new b", 1.0, 1.0)
    assert not view.for_task("a/1").maybe_store("low", 0.0, 1.0)
    assert bank.state_dict()["memories"]["b"]["entries"] == []  # held back until the merge


# --- launch configurations: refused or detected, never run partly ----------------------------------
@pytest.mark.parametrize(
    "env, match",
    [
        ({"ACCELERATE_USE_FSDP": "true"}, "FSDP"),
        ({"ACCELERATE_USE_DEEPSPEED": "true"}, "DeepSpeed"),
        ({"ACCELERATE_USE_MEGATRON_LM": "true"}, "Megatron"),
        ({"ACCELERATE_USE_FSDP": "1"}, "FSDP"),  # each spelling accelerate itself reads as true
        ({"ACCELERATE_USE_DEEPSPEED": "T"}, "DeepSpeed"),
        ({"ACCELERATE_MIXED_PRECISION": "bf16"}, "mixed_precision='bf16'.*no mixed-precision autocast"),
        ({"ACCELERATE_MIXED_PRECISION": "fp8"}, "mixed_precision='fp8'"),
        ({"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"}, "dynamo_backend='INDUCTOR'"),
    ],
)
def test_unsupported_accelerate_configurations_are_refused(monkeypatch, env, match):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=match):
        DataParallel.from_environment()


@pytest.mark.parametrize(
    "env",
    [
        {
            "ACCELERATE_USE_FSDP": "false",
            "ACCELERATE_USE_DEEPSPEED": "0",
            "ACCELERATE_USE_MEGATRON_LM": "off",
            "ACCELERATE_MIXED_PRECISION": "no",
            "ACCELERATE_DYNAMO_BACKEND": "NO",
            "ACCELERATE_USE_CPU": "True",
        },  # `accelerate launch --cpu script.py`
        {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},  # a cluster's variables, no --cpu launch
    ],
)
def test_a_plain_one_process_launch_stays_one_process(monkeypatch, env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert DataParallel.from_environment().world_size == 1


@pytest.mark.parametrize("name", ["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"])
def test_every_launcher_s_world_size_is_read(monkeypatch, name):
    # mpirun (accelerate launch --cpu --mpirun_hostfile) sets PMI_SIZE or OMPI_COMM_WORLD_SIZE, not WORLD_SIZE:
    # reading WORLD_SIZE alone made every rank train alone.
    from erl_lite.integrations.distributed import launched_world_size

    for other in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "3")
    assert launched_world_size() == 3


def test_accelerate_launch_cpu_with_several_processes_is_not_run_as_one(tmp_path):
    """``accelerate launch --cpu --num_processes 2`` goes to accelerate's simple launcher, which
    starts one process (several CPU processes need mpirun): the script must say so, not train alone."""
    import subprocess
    import sys

    script = tmp_path / "probe.py"
    script.write_text(
        "from erl_lite.integrations.distributed import DataParallel\n"
        "print('world', DataParallel.from_environment().world_size)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--cpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode != 0, f"ran as one process: {run.stdout}"
    assert "--num_processes N" in run.stderr and "one process" in run.stderr and "torchrun" in run.stderr


# --- the update under DDP: processes with unequal, inactive or no rows ----------------------------
# Rows of each process (all first attempts, so the global batch is rank 0's rows, then rank 1's).
# "uneven": 5 micro-batches against 1; "inactive": rank 1's rows all have A = 0 with beta = 0, so it
# backpropagates nothing; "empty": rank 1 has no row at all. Each needs DDP's all-reduce to happen on
# both processes the same number of times, whatever rows they hold.
UPDATE_CASES = {"uneven": (10, 2, 1.0), "inactive": (6, 3, 0.0), "empty": (6, 0, 1.0)}


def update_rows(n: int, offset: int, advantage_scale: float) -> list[TrainSample]:
    import random

    rng = random.Random(offset)
    rows = []
    for i in range(n):
        prompt = [rng.randrange(5, 40) for _ in range(rng.randrange(2, 6))]
        completion = [rng.randrange(5, 40) for _ in range(rng.randrange(1, 5))]
        rows.append(
            TrainSample(
                "first",
                prompt,
                completion,
                [1] * len(completion),
                advantage_scale * rng.uniform(-1.5, 1.5),
                f"t{offset + i}",
            )
        )
    return rows


def case_rows(case: str) -> tuple[list[TrainSample], list[TrainSample]]:
    n0, n1, scale1 = UPDATE_CASES[case]
    return update_rows(n0, 0, 1.0), update_rows(n1, 100, scale1)


def update_policy():
    from peft import get_peft_model

    from erl_lite.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    torch.manual_seed(5)
    model = get_peft_model(tiny_model(tok), lora_config())
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    return model, opt, ERLConfig(beta=0.0, steps_per_generation=2, per_device_train_batch_size=2), tok.pad_token_id


def update_worker(root: str, case: str) -> None:
    from accelerate.state import PartialState

    from erl_lite.core.update import PolicyUpdater

    PartialState._reset_state()
    dist = DataParallel.from_environment()
    model, opt, cfg, pad = update_policy()
    stats = PolicyUpdater(model, opt, None, cfg, pad, reducer=dist).update(case_rows(case)[dist.rank])
    torch.save(
        {
            "weights": {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad},
            "stats": dict(stats),
        },
        os.path.join(root, f"rank{dist.rank}.pt"),
    )


@pytest.mark.parametrize("case", sorted(UPDATE_CASES))
def test_the_ddp_update_is_the_one_process_update_whatever_rows_each_process_holds(tmp_path, case):
    from accelerate import debug_launcher

    from erl_lite.core.update import PolicyUpdater

    model, opt, cfg, pad = update_policy()
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    rank0, rank1 = case_rows(case)
    want = dict(PolicyUpdater(model, opt, None, cfg, pad).update(rank0 + rank1))
    after = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    debug_launcher(update_worker, args=(str(tmp_path), case), num_processes=2)
    got = [torch.load(os.path.join(tmp_path, f"rank{r}.pt")) for r in (0, 1)]
    for n in after:
        assert torch.equal(got[0]["weights"][n], got[1]["weights"][n]), f"{case}: the ranks' {n} differ"
    assert want["optim/steps"] == got[0]["stats"]["optim/steps"] == 2
    assert_same_step(got[0]["stats"], want, case)
    assert_same_weights(got[0]["weights"], after, before, case)
