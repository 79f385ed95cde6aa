"""A run survives faults: a failing step keeps the finished ones, a second run never destroys a
first, NaN weights are never saved nor resumed from, and resume refuses what changes the run.

Grouped by the fault a user meets: an exception inside a step (or after it), an output folder
that already holds a run, weights that stop being finite, and resumes that would silently
change the run (tokenizer, LoRA settings, a hand-edited memory, a lowered ``max_steps``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import warnings

import pytest
import torch
from peft import LoraConfig
from safetensors.torch import load_file, save_file
from test_checkpoint import ARGS as CHECKPOINT_ARGS
from test_checkpoint import ROWS, digest, drop_times, vowel_reward

from erl_lite.config import ERLConfig
from erl_lite.core.memory import MemoryBank, ReflectionMemory
from erl_lite.models import load_policy, trainable_parameters
from erl_lite.run import checkpoint
from erl_lite.run.checkpoint import CheckpointError, find_run, read_checkpoint
from erl_lite.run.identity import RESUMABLE_FIELDS
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

# Two optimizer steps per iteration (test_checkpoint's settings), so a fault can fall between
# them (weights half-updated); four steps, and no periodic saves unless a test asks.
ARGS = {**CHECKPOINT_ARGS, "max_steps": 4, "save_steps": 0}


def failing_reward(fail_at: dict):
    """``vowel_reward`` that raises during step ``fail_at["step"]`` until the test fixes it."""

    def reward(prompts, completions, trainer_state, **kw):
        if trainer_state.global_step == fail_at.get("step"):
            raise ZeroDivisionError(f"bug in the reward at step {trainer_state.global_step}")
        return vowel_reward(prompts, completions)

    # the same rewards/<name>/* keys as the reference run, and the same function to a resume that compares them
    reward.__name__, reward.__qualname__, reward.__module__ = (
        vowel_reward.__name__,
        vowel_reward.__qualname__,
        vowel_reward.__module__,
    )
    return reward


def make_trainer(
    out, reward=vowel_reward, tok=None, lora=None, callbacks=(), optimizers=(None, None), **overrides
) -> ERLTrainer:
    """The same trainer every time (same weights, adapter and seed) unless told otherwise."""
    tok = tok or tiny_tokenizer()
    torch.manual_seed(0)  # LoRA's A matrices are drawn from the global generator
    base = tiny_model(tiny_tokenizer(), seed=3)
    model, tok = load_policy(base, tok, peft=lora or "lora")
    args = ERLConfig.preset("cpu", **{**ARGS, "output_dir": str(out) if out else None, **overrides})
    return ERLTrainer(
        model=model,
        processing_class=tok,
        args=args,
        reward_funcs=reward,
        train_dataset=ROWS,
        callbacks=list(callbacks),
        optimizers=optimizers,
    )


def checkpoints(out) -> list[str]:
    return sorted(
        (n for n in os.listdir(out) if re.fullmatch(r"checkpoint-\d+", n)), key=lambda n: int(n.split("-")[1])
    )


def train_steps(out) -> list[int]:
    lines = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines() if x.strip()]
    return [r["step"] for r in lines if r["kind"] == "train"]


def notes(error: BaseException) -> str:
    return "\n".join(getattr(error, "__notes__", []))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted 4-step run that every recovered run must reproduce."""
    out = tmp_path_factory.mktemp("reference")
    return drop_times(make_trainer(out).train().records)


# --- 1. an exception inside a step keeps every finished step ------------------------------------
def _fail_in_the_reward(trainer, fail_at):
    fail_at["step"] = 3


def _fail_mid_update(trainer, fail_at):
    calls = {"n": 0}

    def hook(optimizer, args, kwargs):  # steps 1 and 2 make 4 optimizer steps; the 6th is step 3's second
        calls["n"] += 1
        if calls["n"] == 6 and fail_at.get("step") == 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    fail_at["step"] = 3
    trainer.optimizer.register_step_post_hook(hook)


@pytest.mark.slow
@pytest.mark.parametrize("fault", [_fail_in_the_reward, _fail_mid_update], ids=["reward", "mid-update"])
def test_a_failing_step_is_undone_saved_and_the_run_continues_without_a_gap(reference, tmp_path, fault):
    out = tmp_path / "run"
    fail_at: dict = {}
    trainer = make_trainer(out, reward=failing_reward(fail_at))
    fault(trainer, fail_at)
    with pytest.raises(Exception, match="bug in the reward at step 3|CUDA error") as err:
        trainer.train()  # the error raised in the step itself, not one raised while saving
    said = notes(err.value)
    assert "checkpoint-2" in said and "resume_from_checkpoint=True" in said and "train()" in said, said
    assert checkpoints(out) == ["checkpoint-2"] and train_steps(out) == [1, 2]
    assert trainer.step == 2
    ck = read_checkpoint(str(out / "checkpoint-2"))
    assert ck.step == 2 and [r["step"] for r in ck.records if r["kind"] == "train"] == [1, 2]
    shutil.copytree(out, tmp_path / "copy")
    # Fixed, the same trainer continues at step 3: steps 1, 2, 3, 4, equal to the uninterrupted run.
    fail_at.clear()
    history = trainer.train()
    assert [r["step"] for r in history.of_kind("train")] == [1, 2, 3, 4] and train_steps(out) == [1, 2, 3, 4]
    assert drop_times(history.records) == reference
    # A new trainer resuming from the saved step does the same.
    resumed = make_trainer(tmp_path / "copy").train(resume_from_checkpoint=True)
    assert drop_times(resumed.records) == reference


@pytest.mark.slow
@pytest.mark.parametrize("where", ["callback", "evaluation", "periodic-save"])
def test_a_failure_after_a_step_finished_keeps_that_step(tmp_path, where, monkeypatch):
    out = tmp_path / "run"
    armed = {"on": True}

    def callback(trainer, record):
        if where == "callback" and record.step == 3 and armed["on"]:
            raise ValueError("the user's callback broke")

    trainer = make_trainer(
        out,
        callbacks=[callback],
        eval_steps=3 if where == "evaluation" else 0,
        save_steps=3 if where == "periodic-save" else 0,
    )
    trainer.eval_tasks = trainer.train_tasks[:1]
    real_eval, real_save = trainer.evaluate, checkpoint.save_checkpoint

    def evaluate(*a, **kw):
        if trainer.step == 3 and armed["on"]:
            raise ValueError("the evaluation broke")
        return real_eval(*a, **kw)

    calls = {"n": 0}

    def save(*a, **kw):  # the periodic save fails once (a full disk freed since), the rescue save works
        calls["n"] += 1
        if calls["n"] == 1 and where == "periodic-save":
            raise CheckpointError("could not write checkpoint-3: No space left on device")
        return real_save(*a, **kw)

    monkeypatch.setattr(trainer, "evaluate", evaluate)
    monkeypatch.setattr("erl_lite.run.saving.save_checkpoint", save)
    with pytest.raises((ValueError, CheckpointError)) as err:
        trainer.train()
    assert trainer.step == 3 and train_steps(out) == [1, 2, 3]
    assert checkpoints(out) == ["checkpoint-3"], checkpoints(out)
    assert "checkpoint-3" in notes(err.value)
    armed["on"] = False
    assert [r["step"] for r in trainer.train().of_kind("train")] == [1, 2, 3, 4]


@pytest.mark.slow
def test_a_failing_rescue_save_never_hides_the_original_error(tmp_path, monkeypatch):
    out = tmp_path / "run"
    trainer = make_trainer(out, reward=failing_reward({"step": 2}))

    def disk_full(*a, **kw):
        raise CheckpointError("could not write checkpoint-1: No space left on device")

    monkeypatch.setattr("erl_lite.run.saving.save_checkpoint", disk_full)
    with pytest.raises(ValueError, match="at step 2") as err, pytest.warns(UserWarning, match="No space left"):
        trainer.train()
    assert trainer.step == 1 and "not saved" in notes(err.value) and "train()" in notes(err.value)


@pytest.mark.slow
def test_a_failure_in_the_first_step_says_nothing_was_saved(tmp_path):
    out = tmp_path / "run"
    fail_at = {"step": 1}
    trainer = make_trainer(out, reward=failing_reward(fail_at), max_steps=1)
    with pytest.raises(ValueError, match="at step 1") as err:
        trainer.train()
    assert trainer.step == 0 and checkpoints(out) == [] and "no step finished" in notes(err.value)
    fail_at.clear()  # nothing of the failed run blocks starting again in the same folder
    assert make_trainer(out).train().records[-1]["step"] == 4


# --- 2. an output folder holding another run ---------------------------------------------------
def _checkpoint_only(out, finished):
    shutil.copytree(finished / "checkpoint-4", out / "checkpoint-4")


def _history_only(out, finished):
    shutil.copy(finished / "history.jsonl", out / "history.jsonl")


def _whole_run(out, finished):
    shutil.copytree(finished, out, dirs_exist_ok=True)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished")
    make_trainer(out, max_steps=4, save_steps=1, save_total_limit=3).train()
    assert checkpoints(out) == ["checkpoint-2", "checkpoint-3", "checkpoint-4"]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("plant", [_checkpoint_only, _history_only, _whole_run], ids=["checkpoint", "history", "both"])
def test_a_fresh_run_into_a_folder_holding_another_run_stops_before_any_step(finished, tmp_path, plant):
    out = tmp_path / "run"
    out.mkdir()
    plant(out, finished)
    record = out / ".erl_lite.lock.json"  # of the folder's last writer: a refused one held the lock a moment
    record.unlink(missing_ok=True)
    before = digest(out)

    def no_step(trainer, record):
        raise AssertionError("a training step ran")

    with pytest.raises(CheckpointError) as err:
        make_trainer(out, callbacks=[no_step], max_steps=1, save_steps=1).train()
    message = str(err.value)
    # A copied checkpoint or history (not recorded as written there) is never deleted: --overwrite is no way out.
    copied = plant is not _whole_run
    advice = ("another folder", "--overwrite or without") if copied else ("another output_dir", "overwrite_output_dir")
    for needed in (str(out), "resume_from_checkpoint=True", "--resume", *advice):
        assert needed in message, message
    if copied:  # nothing of erl_lite's there: the refused writer leaves no record either
        assert not record.exists()
    else:
        record.unlink()
    assert digest(out) == before  # nothing of the run touched


@pytest.mark.slow
@pytest.mark.parametrize("content", ["empty", "other-files", "empty-history"])
def test_a_folder_without_a_run_is_used_as_it_is(tmp_path, content):
    out = tmp_path / "run"
    out.mkdir()
    if content == "other-files":
        (out / "notes.md").write_text("my notes")
        (out / "checkpoint-final.txt").write_text("not a checkpoint folder")
    elif content == "empty-history":
        (out / "history.jsonl").write_text("\n")  # a run that failed before its first step, recorded as it
        (out / ".erl_lite.files.json").write_text('{"by": "training", "written": ["history.jsonl"]}')
    assert make_trainer(out, max_steps=1).train().records[-1]["step"] == 1
    if content == "other-files":
        assert (out / "notes.md").read_text() == "my notes"


@pytest.mark.slow
def test_overwrite_output_dir_removes_the_old_run_so_rotation_never_mixes_two(finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    (out / "notes.md").write_text("mine")
    trainer = make_trainer(out, max_steps=2, save_steps=1, save_total_limit=3, overwrite_output_dir=True)
    history = trainer.train()
    assert checkpoints(out) == ["checkpoint-1", "checkpoint-2"]  # not the old run's 3 and 4
    assert train_steps(out) == [1, 2] and [r["step"] for r in history.of_kind("train")] == [1, 2]
    assert (out / "notes.md").read_text() == "mine"  # only the run's own files go
    # A resume never removes anything, whatever overwrite_output_dir says.
    resumed = make_trainer(out, max_steps=3, overwrite_output_dir=True)
    resumed.train(resume_from_checkpoint=True)
    assert train_steps(out) == [1, 2, 3] and "checkpoint-1" in checkpoints(out)


@pytest.mark.slow
def test_a_checkpoint_from_elsewhere_continues_only_into_a_folder_without_another_run(finished, two_steps, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)  # another run
    with pytest.raises(CheckpointError, match="already holds another run"):
        make_trainer(out).train(resume_from_checkpoint=str(finished / "checkpoint-3"))
    fresh = make_trainer(tmp_path / "new")
    fresh.train(resume_from_checkpoint=str(finished / "checkpoint-3"))
    assert fresh.step == 4 and train_steps(tmp_path / "new") == [1, 2, 3, 4]


def test_overwrite_output_dir_is_a_config_field_and_a_flag_and_may_change_on_resume():
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings

    assert ERLConfig().overwrite_output_dir is False
    assert "overwrite_output_dir" in RESUMABLE_FIELDS
    args = build_parser().parse_args(["train", "--overwrite-output-dir", "--out", "x"])
    assert train_settings(args)[1].overwrite_output_dir is True
    with pytest.raises(ValueError, match="overwrite_output_dir"):
        ERLConfig(overwrite_output_dir="yes")


@pytest.mark.slow
def test_the_demo_runs_twice_into_its_folder(tmp_path, capsys):
    from erl_lite.cli import main

    out = tmp_path / "demo"
    for _ in range(2):
        assert main(["demo", "--steps", "1", "--out", str(out), "--eval-tasks", "2"]) == 0
    assert train_steps(out) == [1] and checkpoints(out) == ["checkpoint-1"]


# --- 3. non-finite weights are never saved, never resumed from, and stop the run ----------------
@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    out = tmp_path_factory.mktemp("two")
    make_trainer(out, max_steps=2, save_steps=1).train()
    return out


def rerecord(path) -> None:
    """Record a hand-edited checkpoint file in its folder's manifest, as if the checkpoint was written so."""
    manifest = path.parent / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"][path.name] = {"size": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    manifest.write_text(json.dumps(data))


def _poison(tensor: torch.Tensor, value: float) -> None:
    with torch.no_grad():
        tensor.view(-1)[1] = value


@pytest.mark.slow
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_checkpoint_with_non_finite_weights_is_never_written(two_steps, tmp_path, value):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    before = {name: digest(out / name) for name in checkpoints(out)}
    trainer = make_trainer(out, max_steps=2, save_total_limit=1)
    trainer.train(resume_from_checkpoint=True)
    name, param = [(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad][3]
    _poison(param, value)
    for step in (3, 2):  # a new folder, and replacing an existing one
        trainer.step = step
        with pytest.raises(CheckpointError, match=rf"checkpoint-{step}.*{re.escape(name)}"):
            trainer.save_checkpoint()
        assert {n: digest(out / n) for n in checkpoints(out)} == before  # rotation did not run either
    assert not [n for n in os.listdir(out) if n.startswith(".checkpoint")]


@pytest.mark.slow
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_checkpoint_with_non_finite_weights_is_never_resumed_from(two_steps, tmp_path, value):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    path = out / "checkpoint-2" / "adapter_model.safetensors"
    tensors = load_file(str(path))
    bad = sorted(tensors)[-1]
    _poison(tensors[bad], value)
    save_file(tensors, str(path))
    rerecord(path)  # as if written so: the manifest agrees, only the values are wrong
    with pytest.raises(CheckpointError, match=rf"adapter_model\.safetensors.*{re.escape(bad)}"):
        read_checkpoint(str(out / "checkpoint-2"))
    with pytest.warns(UserWarning, match=rf"checkpoint-2.*{re.escape(bad)}"):
        assert find_run(str(out)).checkpoint().step == 1
    trainer = make_trainer(out, max_steps=2)
    with pytest.warns(UserWarning, match=re.escape(bad)):
        trainer.train(resume_from_checkpoint=True)
    assert all(torch.isfinite(p).all() for p in trainable_parameters(trainer.model).values())


@pytest.mark.slow
@pytest.mark.parametrize("save_steps", [0, 1])
def test_weights_made_non_finite_by_a_step_stop_the_run_and_keep_the_last_good_checkpoint(tmp_path, save_steps):
    out = tmp_path / "run"
    trainer = make_trainer(out, save_steps=save_steps)
    params = [(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad]
    calls = {"n": 0}

    def diverge(optimizer, args, kwargs):  # the user's optimizer blows up in step 2's last optimizer step
        calls["n"] += 1
        if calls["n"] == 4:
            _poison(params[5][1], float("nan"))

    trainer.optimizer.register_step_post_hook(diverge)
    with pytest.raises(FloatingPointError, match=rf"step 2.*{re.escape(params[5][0])}") as err:
        trainer.train()
    assert trainer.step == 1 and checkpoints(out) == ["checkpoint-1"] and train_steps(out) == [1]
    assert "checkpoint-1" in notes(err.value)
    assert all(torch.isfinite(p).all() for _, p in params)  # rolled back to step 1's weights
    assert read_checkpoint(str(out / "checkpoint-1")).step == 1


# --- 9. resume refuses what changes the run -------------------------------------------------------
def _other_template(tok):
    tok.chat_template = tok.chat_template.replace("<|im_start|>", "<|im_start|> ")


def _other_eos(tok):
    tok.eos_token = "<|eos|>"


def _other_pad(tok):
    tok.pad_token = "<|unk|>"


def _more_tokens(tok):
    tok.add_tokens(["<tool>"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, field",
    [
        (_other_template, "tokenizer.chat_template"),
        (_other_eos, "tokenizer.eos"),
        (_other_pad, "tokenizer.pad"),
        (_more_tokens, "tokenizer.vocab_size"),
    ],
    ids=["template", "eos", "pad", "vocab"],
)
def test_resume_refuses_another_tokenizer(two_steps, tmp_path, change, field):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    tok = tiny_tokenizer()
    change(tok)
    with pytest.raises(ValueError, match=re.escape(field)):
        make_trainer(out, tok=tok).train(resume_from_checkpoint=True)
    assert make_trainer(out).train(resume_from_checkpoint=True).records[-1]["step"] == 4  # the same one resumes


LORA = dict(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", bias="none", task_type="CAUSAL_LM")


@pytest.mark.slow
@pytest.mark.parametrize(
    "change",
    [
        dict(use_rslora=True),
        dict(use_dora=True),
        dict(lora_dropout=0.1),
        dict(alpha_pattern={"q_proj": 8}),
        dict(rank_pattern={"v_proj": 4}),
    ],
    ids=["rslora", "dora", "dropout", "alpha_pattern", "rank_pattern"],
)
def test_resume_refuses_other_lora_settings(two_steps, tmp_path, change):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    (key,) = change
    with pytest.raises(ValueError, match=rf"lora\.{key}"):
        make_trainer(out, lora=LoraConfig(**{**LORA, **change})).train(resume_from_checkpoint=True)
    # The same settings spelled out resume (the default adapter is this LoraConfig).
    trainer = make_trainer(out, lora=LoraConfig(**LORA))
    trainer.train(resume_from_checkpoint=True)
    assert trainer.step == 4


def test_a_checkpoint_without_the_newer_lora_fields_still_resumes_at_their_defaults():
    from erl_lite.run.identity import run_differences

    saved = {
        "config": {},
        "model": {"model": "m", "lora.r": 16, "lora.alpha": 32, "lora.target_modules": ["q"]},
        "tokenizer": {"vocab_size": 9},
    }
    now = {**saved, "model": {**saved["model"], "lora.use_rslora": False, "lora.use_dora": False}}
    assert run_differences(saved, now) == []
    now["model"]["lora.use_rslora"] = True
    assert run_differences(saved, now) == ["lora.use_rslora: checkpoint False, this run True"]


@pytest.mark.parametrize(
    "drop, named",
    [
        ("tokenizer", "tokenizer.vocab_size: checkpoint '<absent>', this run 9"),
        ("model.weights", "model.weights: checkpoint '<absent>', this run 'ab12'"),
    ],
)
def test_a_record_missing_what_every_checkpoint_records_is_a_difference(drop, named):
    """Every format-4 checkpoint records the tokenizer and the model's tensors; a record without them (edited by
    hand, or not erl_lite's) is not taken to match (before: skipped as an older checkpoint's)."""
    from erl_lite.run.identity import run_differences

    now = {"config": {}, "model": {"model": "m", "model.weights": "ab12"}, "tokenizer": {"vocab_size": 9}}
    saved = {k: v for k, v in now.items() if k != drop}
    saved["model"] = {k: v for k, v in now["model"].items() if k != drop}
    assert any(line.startswith(named) for line in run_differences(saved, now)), run_differences(saved, now)


GOOD = {"kind": "single", "size": 1, "top_k": 1, "entries": ["A is you."], "total_writes": 3}
BAD_MEMORY = {
    "entries-a-string": ({"entries": "A is you."}, "entries"),
    "entries-numbers": ({"entries": [1, 2]}, r"entries\[0\]"),
    "entry-none": ({"entries": [None]}, r"entries\[0\]"),
    "entries-a-dict": ({"entries": {"a": "b"}}, "entries"),
    "entry-a-list": ({"entries": [["A"]]}, r"entries\[0\]"),
    "entries-too-many": ({"entries": ["a", "b"]}, "entries"),
    "total-writes-a-string": ({"total_writes": "3"}, "total_writes"),
    "total-writes-none": ({"total_writes": None}, "total_writes"),
    "total-writes-negative": ({"total_writes": -1}, "total_writes"),
    "total-writes-bool": ({"total_writes": True}, "total_writes"),
    "total-writes-below-entries": ({"total_writes": 0}, "total_writes"),
    "kind-a-number": ({"kind": 5}, "kind"),
    "missing-entries": ({"entries": KeyError}, "entries"),
}


@pytest.mark.parametrize("case", list(BAD_MEMORY))
def test_a_hand_edited_memory_state_is_refused_naming_the_field(case):
    change, field = BAD_MEMORY[case]
    state = {**GOOD, **change}
    state = {k: v for k, v in state.items() if v is not KeyError}
    memory = ReflectionMemory()
    memory.maybe_store("kept", 1.0, 1.0)
    with pytest.raises(ValueError, match=field):
        memory.load_state_dict(state)
    assert memory.entries == ["kept"] and memory.total_writes == 1  # nothing half-loaded
    bank = MemoryBank(["a", "b"], env_of=lambda t: t)
    with pytest.raises(ValueError, match=rf"memories\['b'\].*{field}"):
        bank.load_state_dict({"kind": "bank", "memories": {"a": GOOD, "b": state}})
    for whole in ([], "x", None):
        with pytest.raises(ValueError, match="memory"):
            memory.load_state_dict(whole)
    with pytest.raises(ValueError, match="memories"):
        bank.load_state_dict({"kind": "bank", "memories": ["a", "b"]})
    memory.load_state_dict(GOOD)
    assert memory.entries == ["A is you."]


@pytest.mark.slow
@pytest.mark.parametrize(
    "entries, field",
    [("a rulebook", "entries"), ([7], r"entries\[0\]"), ([None], r"entries\[0\]"), (["ok", {"a": 1}], r"entries\[1\]")],
)
def test_a_hand_edited_memory_json_is_named_and_skipped_on_resume(two_steps, tmp_path, entries, field):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    path = out / "checkpoint-2" / "memory.json"
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "entries": entries}))
    rerecord(path)  # an edit recorded in the manifest: still refused, naming the field
    with pytest.raises(CheckpointError, match=rf"checkpoint-2.memory\.json.*{field}"):
        read_checkpoint(str(out / "checkpoint-2"))
    trainer = make_trainer(out, max_steps=2)
    with pytest.warns(UserWarning, match=rf"memory\.json.*{field}"):
        trainer.train(resume_from_checkpoint=True)
    assert trainer.step == 2  # checkpoint-1, then step 2 again


@pytest.mark.slow
@pytest.mark.parametrize("max_steps", [1, 2, 3])
def test_a_max_steps_below_the_checkpoint_is_refused_naming_both(two_steps, tmp_path, max_steps):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    trainer = make_trainer(out, max_steps=max_steps)
    if max_steps < 2:
        with pytest.raises(ValueError, match=rf"step 2.*max_steps={max_steps}"):
            trainer.train(resume_from_checkpoint=True)
        assert trainer.step == 0
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same or a higher max_steps resumes without a word
        trainer.train(resume_from_checkpoint=True)
    assert trainer.step == max_steps
    trainer.args.max_steps = 1  # the live trainer too: a lowered max_steps never returns silently
    with pytest.raises(ValueError, match=rf"step {max_steps}.*max_steps=1"):
        trainer.train()
