"""Checkpoints: safe loading, resume checks, corrupt folders, rotation, failed saves, Ctrl-C.

One short run (2 steps, a checkpoint after each) is trained once per module; every test works
on its own copy of that folder, so a test can damage files without disturbing the others.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import re
import shutil
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig
from safetensors.torch import load_file

from erl_lite.config import ERLConfig
from erl_lite.metrics import is_measurement
from erl_lite.models import load_policy, trainable_parameters
from erl_lite.run.checkpoint import CheckpointError
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

ROWS = [{"prompt": f"Add {i} and {i}.", "answer": str(2 * i)} for i in range(6)]

# Two optimizer steps per iteration, so an interrupt can fall between them.
ARGS = dict(
    max_steps=2,
    num_tasks_per_step=2,
    num_generations=2,
    max_completion_length=8,
    max_reflection_length=12,
    max_reflection_prompt_length=700,
    eval_steps=0,
    progress_bar=False,
    learning_rate=1e-2,
    beta=0.0,
    per_device_train_batch_size=8,
    steps_per_generation=2,
    save_steps=1,
    seed=7,
)


def vowel_reward(prompts, completions, **kw):
    """Varies between the random model's samples, so every step has advantages and updates."""
    return [sum(ch in "aeiou" for ch in c) % 3 / 2 for c in completions]


def make_trainer(out, model_name="tiny-a", lora=None, callbacks=(), **overrides) -> ERLTrainer:
    """The same trainer every time (same weights, adapter and seed) unless told otherwise."""
    tok = tiny_tokenizer()
    torch.manual_seed(0)  # LoRA's A matrices are drawn from the global generator
    base = tiny_model(tok, seed=3)
    base.config._name_or_path = model_name
    model, tok = load_policy(base, tok, peft=lora or "lora")
    args = ERLConfig.preset("cpu", **{**ARGS, "output_dir": str(out) if out else None, **overrides})
    return ERLTrainer(
        model=model, processing_class=tok, args=args, reward_funcs=vowel_reward, train_dataset=ROWS, callbacks=callbacks
    )


def resume(out, where, **overrides) -> ERLTrainer:
    trainer = make_trainer(out, **overrides)
    trainer.train(resume_from_checkpoint=where)
    return trainer


def checkpoints(out) -> list[str]:
    return sorted(n for n in os.listdir(out) if n.startswith("checkpoint-"))


def digest(folder) -> str:
    """One hash over every file of a folder (names and bytes)."""
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            h.update(os.path.relpath(os.path.join(root, name), folder).encode())
            with open(os.path.join(root, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def drop_times(records):
    return [{k: v for k, v in r.items() if not is_measurement(k)} for r in records]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished 2-step run with checkpoint-1 and checkpoint-2, and the weights after each step."""
    out = tmp_path_factory.mktemp("run")
    params = {}

    def keep(trainer, record):
        params[record.step] = {k: v.clone() for k, v in trainable_parameters(trainer.model).items()}

    trainer = make_trainer(out, callbacks=[keep])
    params[0] = trainable_parameters(trainer.model)
    history = trainer.train()
    assert checkpoints(out) == ["checkpoint-1", "checkpoint-2"]
    for step in (1, 2):  # every step moves the weights, so a test cannot pass by standing still
        assert any(not torch.equal(params[step][n], params[step - 1][n]) for n in params[0])
    return SimpleNamespace(dir=out, history=history, params=params)


@pytest.fixture
def copy(run, tmp_path):
    """A private copy of the run's folder."""
    dst = tmp_path / "run"
    shutil.copytree(run.dir, dst)
    return dst


class Planted:
    """Unpickling this creates the folder ``marker``: it stands for any code a file could run."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


# --- 1. a shared checkpoint cannot run code -----------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt"])
def test_planted_pickle_is_refused(copy, tmp_path, name):
    marker = tmp_path / "code-ran"
    torch.save({"state": {0: Planted(str(marker))}, "param_groups": []}, copy / "checkpoint-2" / name)
    with pytest.raises(CheckpointError, match=re.escape(name)):
        resume(copy, str(copy / "checkpoint-2"))
    assert not marker.exists()


@pytest.mark.slow
def test_random_states_are_plain_json_and_never_unpickled(copy, tmp_path):
    marker = tmp_path / "code-ran"
    ck = copy / "checkpoint-2"
    rng = json.loads((ck / "rng.json").read_text())
    assert {"python", "numpy", "torch"} <= set(rng)
    # An older layout kept a pickled rng.pt; a planted one is never opened: the manifest does not list it.
    torch.save({"python": Planted(str(marker)), "numpy": None, "torch": None}, ck / "rng.pt")
    with pytest.raises(CheckpointError, match="does not list rng.pt"):
        resume(copy, str(ck))
    assert not marker.exists()
    os.remove(ck / "rng.pt")
    (ck / "rng.json").write_bytes(pickle.dumps(Planted(str(marker))))
    with pytest.raises(CheckpointError, match="rng.json"):
        resume(copy, str(ck))
    assert not marker.exists()


# --- 2. resume checks the settings that change a run ------------------------------------------
@pytest.mark.slow
def test_resume_names_every_mismatched_setting(copy):
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    with pytest.raises(ValueError) as err:
        resume(
            copy,
            True,
            mode="erl_simple",
            num_generations=3,
            memory_type="fifo",
            reward_threshold=0.5,
            model_name="tiny-b",
            lora=lora,
        )
    lines = str(err.value).splitlines()

    def line(field):
        found = [x for x in lines if x.strip().startswith(field + ":")]
        assert found, f"{field} not named in:\n{err.value}"
        return found[0]

    for field, old, new in [
        ("mode", "'erl'", "'erl_simple'"),
        ("num_generations", "2", "3"),
        ("memory_type", "'single'", "'fifo'"),
        ("reward_threshold", "1.0", "0.5"),
        ("model", "'tiny-a'", "'tiny-b'"),
        ("lora.r", "16", "4"),
        ("lora.alpha", "32", "8"),
    ]:
        assert old in line(field) and new in line(field), line(field)
    assert "q_proj" in line("lora.target_modules")
    assert "ignore_config_mismatch=True" in str(err.value)


@pytest.mark.slow
def test_override_resumes_despite_a_mismatch_and_bookkeeping_may_change(copy):
    trainer = make_trainer(copy, reward_threshold=0.5, learning_rate=1e-3)
    with pytest.warns(UserWarning, match="reward_threshold"):
        trainer.train(resume_from_checkpoint=True, ignore_config_mismatch=True)
    assert trainer.step == 2
    assert trainer.optimizer.param_groups[0]["lr"] == 1e-3  # the override takes effect
    # Fields that only change how a run is watched or saved never block a resume.
    resumed = resume(copy, True, eval_steps=7, save_steps=0, sample_every=2, per_device_train_batch_size=4)
    assert resumed.step == 2


# --- 3. corrupt or partial checkpoints ---------------------------------------------------------
def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGE = {
    "missing-optimizer": ("optimizer.pt", lambda p: p.unlink()),
    "truncated-optimizer": ("optimizer.pt", _truncate),
    "truncated-weights": ("adapter_model.safetensors", _truncate),
    "missing-weights": ("adapter_model.safetensors", lambda p: p.unlink()),
    "missing-rng": ("rng.json", lambda p: p.unlink()),
    "bad-state-json": ("trainer_state.json", lambda p: p.write_text('{"global_step": ')),
    "missing-state": ("trainer_state.json", lambda p: p.unlink()),
    "state-of-another-step": (
        "trainer_state.json",
        lambda p: p.write_text(p.read_text().replace('"global_step": 2', '"global_step": 1')),
    ),
    "bad-erl-state": ("erl_state.json", lambda p: p.write_text('{"step": ')),
    "missing-erl-state": ("erl_state.json", lambda p: p.unlink()),
    "erl-state-without-config": ("erl_state.json", lambda p: p.write_text('{"step": 2}')),
    "bad-memory-json": ("memory.json", lambda p: p.write_text("not json")),
    "bad-history": ("history.jsonl", lambda p: p.write_text('{"step": 1}\n{oops\n')),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(DAMAGE))
def test_corrupt_checkpoint_names_the_file(copy, case):
    name, damage = DAMAGE[case]
    damage(copy / "checkpoint-2" / name)
    with pytest.raises(CheckpointError, match=re.escape(name)):
        resume(copy, str(copy / "checkpoint-2"))


@pytest.mark.slow
def test_resume_true_falls_back_to_the_newest_good_checkpoint(run, copy):
    _truncate(copy / "checkpoint-2" / "optimizer.pt")  # its weights file is fine: nothing may be half-loaded
    trainer = make_trainer(copy, max_steps=1)
    with pytest.warns(UserWarning, match=r"checkpoint-2.*optimizer\.pt"):
        trainer.train(resume_from_checkpoint=True)
    assert trainer.step == 1
    live = trainable_parameters(trainer.model)
    assert all(torch.equal(live[n], run.params[1][n]) for n in live)
    # With every checkpoint broken, the error names the folder and each one skipped.
    (copy / "checkpoint-1" / "memory.json").write_text("{")
    with pytest.raises(CheckpointError) as err, pytest.warns(UserWarning):
        make_trainer(copy).train(resume_from_checkpoint=True)
    assert str(copy) in str(err.value) and "checkpoint-1" in str(err.value) and "checkpoint-2" in str(err.value)


def test_resume_with_nothing_to_resume(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match=re.escape(str(empty))):
        make_trainer(empty).train(resume_from_checkpoint=True)
    with pytest.raises(ValueError, match="output_dir"):
        make_trainer(None).train(resume_from_checkpoint=True)
    with pytest.raises(CheckpointError, match="nowhere"):
        make_trainer(empty).train(resume_from_checkpoint=str(tmp_path / "nowhere"))


# --- 4. rotation, failed saves, an unwritable folder --------------------------------------------
def test_save_total_limit_is_validated():
    assert ERLConfig().save_total_limit is None
    for bad in (1.5, True, "2"):  # 0 and below: transformers' "no rotation" (tests/test_trl_meanings.py)
        with pytest.raises(ValueError, match="save_total_limit"):
            ERLConfig(save_total_limit=bad)


def test_save_total_limit_keeps_the_newest(tmp_path):
    out = tmp_path / "run"
    trainer = make_trainer(out, save_total_limit=2)
    for step in (1, 2, 3):
        trainer.step = step
        trainer.save_checkpoint()
    assert checkpoints(out) == ["checkpoint-2", "checkpoint-3"]
    # A higher-numbered folder left by an abandoned run never pushes out the one just written.
    shutil.copytree(out / "checkpoint-3", out / "checkpoint-10")
    trainer.args.save_total_limit = 1
    trainer.step = 4
    trainer.save_checkpoint()
    assert "checkpoint-4" in checkpoints(out) and "checkpoint-2" not in checkpoints(out)


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.slow
@pytest.mark.parametrize("target", ["safetensors", "torch.save", "json.dump"])
def test_failed_save_leaves_the_previous_checkpoint_intact(copy, monkeypatch, target):
    trainer = resume(copy, True)
    before = {name: digest(copy / name) for name in checkpoints(copy)}
    listing = sorted(os.listdir(copy))
    if target == "safetensors":  # the adapter is written by PEFT's save_pretrained
        import peft.peft_model

        monkeypatch.setattr(peft.peft_model, "safe_save_file", _disk_full)
    elif target == "torch.save":
        monkeypatch.setattr(torch, "save", _disk_full)
    else:
        monkeypatch.setattr(json, "dump", _disk_full)
    for step in (3, 2):  # a new checkpoint, then replacing an existing one
        trainer.step = step
        with pytest.raises(CheckpointError, match=rf"checkpoint-{step}.*{os.strerror(errno.ENOSPC)}"):
            trainer.save_checkpoint()
        assert sorted(os.listdir(copy)) == listing  # no half-written folder left behind
        assert {name: digest(copy / name) for name in checkpoints(copy)} == before
    monkeypatch.undo()
    assert resume(copy, True).step == 2


def test_unwritable_output_dir_fails_before_any_step(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "run"

    def no_step(trainer, record):
        raise AssertionError("a training step ran")

    trainer = make_trainer(out, callbacks=[no_step])
    with pytest.raises(CheckpointError, match=re.escape(str(out))):
        trainer.train()
    assert trainer.step == 0


# --- 5. Ctrl-C during the update ----------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_mid_update_saves_the_last_finished_step(run, tmp_path):
    out = tmp_path / "run"
    trainer = make_trainer(out, save_steps=0)
    calls = {"n": 0}

    def interrupt(optimizer, args, kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # step 2's first of two optimizer steps has just moved the weights
            raise KeyboardInterrupt

    trainer.optimizer.register_step_post_hook(interrupt)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert checkpoints(out) == ["checkpoint-1"]
    ck = out / "checkpoint-1"
    assert json.loads((ck / "erl_state.json").read_text())["step"] == 1
    assert json.loads((ck / "trainer_state.json").read_text())["global_step"] == 1
    # PEFT saves each LoRA tensor under its parameter name without the adapter's name ("default")
    saved = load_file(str(ck / "adapter_model.safetensors"))
    assert saved.keys() == {n.replace(".default", "") for n in run.params[1]}
    assert all(torch.equal(saved[n.replace(".default", "")], run.params[1][n]) for n in run.params[1])
    optim = torch.load(ck / "optimizer.pt", weights_only=True)
    assert {int(s["step"]) for s in optim["state"].values()} == {2}  # two optimizer steps, not three
    # The live trainer is rolled back to the same point.
    assert trainer.step == 1
    live = trainable_parameters(trainer.model)
    assert all(torch.equal(live[n], run.params[1][n]) for n in live)
    # Resuming reproduces the uninterrupted run.
    history = make_trainer(out, save_steps=0).train(resume_from_checkpoint=True)
    assert drop_times(history.records) == drop_times(run.history.records)


# --- rotation while another command reads the run ------------------------------------------------
@pytest.mark.parametrize("when", ["before the read", "mid-read"])
def test_a_reader_racing_rotation_takes_the_new_checkpoint_not_damage(tmp_path, monkeypatch, when, recwarn):
    """``erl-lite eval`` (find_run) lists checkpoint-1, then the trainer writes checkpoint-2 and rotates
    checkpoint-1 away (``save_total_limit=1``) before or while it is read: the reader takes checkpoint-2 and
    warns of no damage."""
    import erl_lite.run.checkpoint as ck

    out = tmp_path / "run"
    trainer = make_trainer(out, save_total_limit=1)
    trainer.step = 1
    trainer.save_checkpoint()
    real_read, real_file = ck.read_checkpoint, ck._read
    raced = []

    def rotate_once():
        if not raced:
            raced.append(True)
            trainer.step = 2
            trainer.save_checkpoint()

    def read_checkpoint(path):
        if when == "before the read":
            rotate_once()
        return real_read(path)

    def read_file(folder, name, *args, **kwargs):
        got = real_file(folder, name, *args, **kwargs)
        if when == "mid-read" and folder.endswith("checkpoint-1"):
            rotate_once()  # after the first file: the rest of checkpoint-1 is gone
        return got

    monkeypatch.setattr(ck, "read_checkpoint", read_checkpoint)
    monkeypatch.setattr(ck, "_read", read_file)
    choice = ck.find_run(out)
    assert raced and checkpoints(out) == ["checkpoint-2"]
    assert choice.checkpoint().step == 2 and not choice.skipped
    assert not [w for w in recwarn if "skipping" in str(w.message)], [str(w.message) for w in recwarn]


def test_rotation_never_deletes_a_checkpoint_in_place(tmp_path, monkeypatch):
    """A reader sees a whole checkpoint or none: rotation renames a folder out of the checkpoint names first."""
    out = tmp_path / "run"
    trainer = make_trainer(out, save_total_limit=1)
    deleted = []
    real = shutil.rmtree
    monkeypatch.setattr(
        shutil, "rmtree", lambda path, *a, **k: (deleted.append(os.path.basename(path)), real(path, *a, **k))
    )
    for step in (1, 2, 3):
        trainer.step = step
        trainer.save_checkpoint()
    assert checkpoints(out) == ["checkpoint-3"] and len(deleted) >= 2
    assert not [name for name in deleted if name.startswith("checkpoint-")], deleted
    assert not [n for n in os.listdir(out) if n.startswith(".checkpoint-")]  # nothing left behind
