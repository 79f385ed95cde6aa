"""Runs you can trust: one run per folder root, checkpoints checked whole against their manifest, a
model known by its content, and a raised ``max_steps`` that trains from its first new step.

Every command (``eval``, ``export``, ``doctor``, ``plot``, resume) reads a run folder through
:func:`erl_lite.run.checkpoint.find_run`, so the cases below check that they all agree.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file
from test_checkpoint import ROWS, vowel_reward
from test_run_faults import failing_reward, make_trainer, rerecord, train_steps

from erl_lite.cli import main
from erl_lite.cli.evaluate import _load_checkpoint
from erl_lite.config import ERLConfig
from erl_lite.integrations.reward_calls import RewardFunctionError
from erl_lite.models import load_policy
from erl_lite.run import checkpoint
from erl_lite.run.checkpoint import CheckpointError, read_checkpoint
from erl_lite.run.export import describe_adapter
from erl_lite.run.report import load_run
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import save_tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    """A finished 2-step run with checkpoint-1 and checkpoint-2 (every step keeps a sample)."""
    out = tmp_path_factory.mktemp("two")
    make_trainer(out, max_steps=2, save_steps=1).train()
    return out


@pytest.fixture
def copy(two_steps, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(two_steps, dst)
    return dst


def _lines(path):
    return [x for x in path.read_text().splitlines() if x.strip()]


# --- 1. one run per folder root ------------------------------------------------------------------
@pytest.mark.slow
def test_an_overwritten_folder_holds_only_the_new_run_and_every_command_reads_it(two_steps, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)  # run A, finished: its final adapter, tokenizer and args at the root
    assert {"training_args.json", "adapter_model.safetensors", "tokenizer_config.json"} <= set(os.listdir(out))
    (out / "notes.md").write_text("mine")
    fail_at = {"step": 2}
    with pytest.raises(RewardFunctionError):  # run B overwrites the folder and crashes in its step 2
        make_trainer(out, reward=failing_reward(fail_at), max_steps=3, overwrite_output_dir=True).train()
    left = set(os.listdir(out))
    # nothing of run A; run B's records: the folder's last writer (ended), the files it wrote, its last checkpoint
    records = {".erl_lite.lock.json", ".erl_lite.files.json", ".erl_lite.last_checkpoint.json"}
    assert left == {"checkpoint-1", "history.jsonl", "samples.jsonl", "notes.md"} | records, left
    assert train_steps(out) == [1]
    # Every command means run B's checkpoint-1, and says so first.
    assert checkpoint.find_run(str(out)).state.path == str(out / "checkpoint-1")
    assert load_run(str(out))[1]["max_steps"] == 3  # run B's settings, not run A's 2
    base = save_tiny_model(tmp_path / "base")  # (this run's model has no name to load its base by)
    assert describe_adapter(str(out), base_model=base).adapter_dir == str(out / "checkpoint-1")
    assert _load_checkpoint(str(out))[0] == str(out / "checkpoint-1")
    capsys.readouterr()
    main(["doctor", str(out)])
    assert "checkpoint-1 (step 1)" in capsys.readouterr().out.splitlines()[0]
    main(["plot", str(out), "--out", str(tmp_path / "figs")])
    assert "checkpoint-1 (step 1)" in capsys.readouterr().err.splitlines()[0]


@pytest.mark.slow
def test_a_finished_run_folder_is_another_run_even_without_checkpoints(two_steps, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(two_steps / "training_args.json", out)  # a final model whose checkpoints were deleted
    with pytest.raises(CheckpointError, match="training_args.json"):
        make_trainer(out, max_steps=1).train()


# --- 2. a checkpoint is checked whole before it is used ------------------------------------------
def _empty(path):
    path.write_bytes(b"")


def _drop_last_line(path):
    path.write_text("".join(line + "\n" for line in _lines(path)[:-1]))


def _cut_half(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _unlist(*names):
    """Drop ``names`` (all: None) from the manifest and triple the adapter's weights it no longer checks."""

    def damage(manifest):
        from safetensors.torch import load_file, save_file

        weights = manifest.parent / "adapter_model.safetensors"
        save_file({k: 3 * v for k, v in load_file(weights).items()}, weights)
        record = json.loads(manifest.read_text())
        record["files"] = {k: v for k, v in record["files"].items() if names and k not in names}
        manifest.write_text(json.dumps(record))

    return damage


DAMAGE = {  # each leaves files that parse (or are not parsed at all): only the manifest tells
    "history-emptied": ("history.jsonl", _empty),
    "history-last-line-dropped": ("history.jsonl", _drop_last_line),
    "samples-emptied": ("samples.jsonl", _empty),
    "adapter-config-emptied": ("adapter_config.json", _empty),
    "adapter-half-cut": ("adapter_model.safetensors", _cut_half),
    "tokenizer-missing": ("tokenizer_config.json", os.remove),
    "manifest-missing": ("manifest.json", os.remove),
    "manifest-lists-nothing": ("manifest.json", _unlist()),
    "manifest-leaves-out-the-weights": ("manifest.json", _unlist("adapter_model.safetensors")),
    "memory-edited": (
        "memory.json",
        lambda p: p.write_text(p.read_text().replace('"total_writes"', '"total_writes" ')),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_checkpoint_is_skipped_by_resume_and_every_command(copy, case, capsys):
    name, damage = DAMAGE[case]
    assert _lines(copy / "checkpoint-2" / "samples.jsonl")  # there is something to lose
    damage(copy / "checkpoint-2" / name)
    where = re.escape(os.path.join("checkpoint-2", name))
    base = save_tiny_model(copy.parent / "base")
    with pytest.raises(CheckpointError, match=where):
        read_checkpoint(str(copy / "checkpoint-2"))
    for read in (
        lambda: checkpoint.find_run(str(copy)).state.path,
        lambda: _load_checkpoint(str(copy))[0],
        lambda: describe_adapter(str(copy), base_model=base).adapter_dir,
    ):
        with pytest.warns(UserWarning, match=where):
            assert read() == str(copy / "checkpoint-1")
    trainer = make_trainer(copy, max_steps=2)
    with pytest.warns(UserWarning, match=where):
        trainer.train(resume_from_checkpoint=True)
    assert train_steps(copy) == [1, 2] and len(_lines(copy / "samples.jsonl")) == 2
    # With the older checkpoint damaged too, nothing is used.
    damage(copy / "checkpoint-1" / name) if os.path.exists(copy / "checkpoint-1" / name) else None
    shutil.rmtree(copy / "checkpoint-2")
    with pytest.raises(CheckpointError, match="damaged"), pytest.warns(UserWarning):
        make_trainer(copy, max_steps=2).train(resume_from_checkpoint=True)


@pytest.mark.slow
def test_the_manifest_records_every_file_and_the_record_counts(two_steps):
    folder = two_steps / "checkpoint-2"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["step"] == 2
    assert set(manifest["files"]) == set(os.listdir(folder)) - {"manifest.json"}
    size = manifest["files"]["optimizer.pt"]["size"]
    assert size == os.path.getsize(folder / "optimizer.pt") and len(manifest["files"]["optimizer.pt"]["sha256"]) == 64
    lines = {name: (folder / name).read_text().splitlines() for name in ("history.jsonl", "samples.jsonl")}
    assert manifest["records"] == {name: len(rows) for name, rows in lines.items()}  # a health warning logs too
    assert [json.loads(r)["step"] for r in lines["history.jsonl"] if json.loads(r)["kind"] == "train"] == [1, 2]
    assert len(lines["samples.jsonl"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [None, 1, 2, 3, 5, "4"])
def test_a_checkpoint_of_another_format_is_refused_naming_the_file(copy, fmt):
    """Formats 1-3 were written by development versions before the first release, which reads its own format
    alone; a newer, absent or malformed one likewise (the manifest is rewritten: only the format is wrong)."""
    folder = copy / "checkpoint-2"
    state = json.loads((folder / "erl_state.json").read_text())
    (folder / "erl_state.json").write_text(json.dumps({**state, "format": fmt}))
    rerecord(folder / "erl_state.json")
    want = rf"checkpoint-2/erl_state.json has format {re.escape(repr(fmt))}; this erl_lite reads format 4 alone"
    with pytest.raises(CheckpointError, match=want):
        read_checkpoint(str(folder))


@pytest.mark.slow
def test_a_checkpoint_without_its_manifest_or_record_is_refused(copy):
    folder = copy / "checkpoint-2"
    (folder / "manifest.json").rename(folder / "manifest.bak")
    with pytest.raises(CheckpointError, match=r"checkpoint-2/manifest.json is missing"):
        read_checkpoint(str(folder))
    (folder / "manifest.bak").rename(folder / "manifest.json")
    (folder / "erl_state.json").unlink()  # a transformers Trainer's checkpoint has trainer_state.json alone
    with pytest.raises(CheckpointError, match=r"checkpoint-2/erl_state.json is missing"):
        read_checkpoint(str(folder))


@pytest.mark.slow
def test_eval_on_a_damaged_newest_checkpoint_falls_back_naming_the_file(copy, tmp_path, capsys, monkeypatch):
    _cut_half(copy / "checkpoint-2" / "adapter_model.safetensors")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:1]))
    base = save_tiny_model(tmp_path / "base", seed=3)
    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    capsys.readouterr()
    code = main(
        [
            "eval",
            "--checkpoint",
            str(copy),
            "--dataset",
            str(rows),
            "--reward-funcs",
            "test_checkpoint:vowel_reward",
            "--num-generations",
            "1",
            "--base-model",
            base,
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    err = captured.err.splitlines()
    assert "checkpoint-1 (step 1)" in err[0] and any("adapter_model.safetensors" in e for e in err), err
    assert json.loads(captured.out)["checkpoint"] == str(copy / "checkpoint-1")


# --- 3. the model is known by its content ---------------------------------------------------------
def _folder_trainer(base, out, **overrides):
    torch.manual_seed(0)
    model, tok = load_policy(str(base), peft="lora", lora_r=2, device="cpu")
    settings = dict(
        num_tasks_per_step=2,
        num_generations=2,
        max_completion_length=6,
        max_reflection_length=6,
        eval_steps=0,
        progress_bar=False,
        save_steps=1,
        seed=7,
        output_dir=str(out),
    )
    args = ERLConfig.preset("cpu", **{**settings, **overrides})
    return ERLTrainer(model=model, processing_class=tok, args=args, reward_funcs=vowel_reward, train_dataset=ROWS)


@pytest.mark.slow
def test_resume_refuses_another_model_written_under_the_same_path(tmp_path):
    base, out = tmp_path / "model", tmp_path / "run"
    save_tiny_model(base, seed=3)
    _folder_trainer(base, out, max_steps=1).train()
    save_tiny_model(base, seed=3)  # the same model written again: resumes
    _folder_trainer(base, out, max_steps=2).train(resume_from_checkpoint=True)
    shutil.rmtree(base)
    save_tiny_model(base, seed=4)  # another model of the same shapes, under the same path
    with pytest.raises(ValueError, match=r"(?s)model\.weights: checkpoint .*another model") as err:
        _folder_trainer(base, out, max_steps=3).train(resume_from_checkpoint=True)
    assert "model.architecture" not in str(err.value)  # same config: only the tensors differ


# --- 8. a raised max_steps trains its first new step ---------------------------------------------
def _rates_used(trainer) -> list[float]:
    """The learning rate of every optimizer step the trainer takes from now on."""
    used, step = [], trainer.optimizer.step

    def recording(*args, **kwargs):
        used.append(trainer.optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    trainer.optimizer.step = recording
    return used


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_a_raised_max_steps_trains_its_first_step_at_the_new_schedules_rate(tmp_path, schedule):
    from transformers import get_scheduler

    short, fresh = tmp_path / "short", tmp_path / "fresh"
    one_update = dict(steps_per_generation=1, lr_scheduler_type=schedule, save_steps=1)  # one optimizer step a step
    make_trainer(short, max_steps=2, **one_update).train()
    resumed = make_trainer(short, max_steps=4, **one_update)
    used = _rates_used(resumed)
    resumed.train(resume_from_checkpoint=True)
    a, b = (load_file(str(short / f"checkpoint-{s}" / "adapter_model.safetensors")) for s in (2, 3))
    assert any(not torch.equal(a[n], b[n]) for n in a), "step 3 did not move the weights"
    # Steps 3 and 4 run at the rates of a fresh 4-step run, which are transformers' schedule's.
    reference = make_trainer(fresh, max_steps=4, **one_update)
    fresh_used = _rates_used(reference)
    reference.train()
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=resumed.args.learning_rate)
    sched = get_scheduler(schedule, opt, num_warmup_steps=0, num_training_steps=4)
    rates = []
    for _ in range(4):
        rates.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert rates[2] > 0  # the old 2-step schedule's last rate, 0.0, is not the new one's
    # The same float operations on the same numbers: equal up to rounding (relative 1e-12).
    assert used == pytest.approx(fresh_used[2:], rel=1e-12) and used == pytest.approx(rates[2:], rel=1e-12)


def test_the_environment_identity_names_the_class_and_the_reward_specs():
    from erl_lite.envs.arithmetic import arithmetic_reward
    from erl_lite.integrations.dataset import RewardFunctionEnv
    from erl_lite.run.identity import environment_identity

    assert environment_identity(RewardFunctionEnv(arithmetic_reward)) == {
        "name": "dataset",
        "class": "erl_lite.integrations.dataset.RewardFunctionEnv",
        "reward_funcs": ["erl_lite.envs.arithmetic:arithmetic_reward"],
        "feedback_func": None,
        "reward_weights": [1.0],
        "system_prompt": "",
        "action_reminder": "",
    }  # and its settings


def test_model_fingerprint_tells_same_shaped_models_apart_and_ignores_the_adapter():
    from erl_lite.run.identity import model_fingerprint
    from erl_lite.testing import tiny_model

    a, b, again = (model_fingerprint(tiny_model(tiny_tokenizer(), seed=s)) for s in (3, 4, 3))
    assert a["model.architecture"] == b["model.architecture"] and a["model.weights"] != b["model.weights"]
    assert a == again
    torch.manual_seed(1)
    lora, _ = load_policy(tiny_model(tiny_tokenizer(), seed=3), tiny_tokenizer(), peft="lora")
    torch.manual_seed(2)
    other_init, _ = load_policy(tiny_model(tiny_tokenizer(), seed=3), tiny_tokenizer(), peft="lora")
    assert model_fingerprint(lora) == model_fingerprint(other_init)  # the adapter's random start is not the model


def test_the_fingerprint_reads_a_tensor_past_float32s_whole_numbers():
    # Qwen2.5-0.5B's embedding has 136,134,656 entries; a float32 linspace of positions overran its end.
    from erl_lite.run.identity import model_fingerprint

    module = torch.nn.Module()
    module.weight = torch.nn.Parameter(torch.zeros(136_134_656, dtype=torch.uint8), requires_grad=False)
    assert len(model_fingerprint(module)["model.weights"]) == 16


@pytest.mark.slow
def test_resume_follows_the_lineage_the_run_last_wrote_and_names_the_abandoned_branch(tmp_path):
    out = tmp_path / "run"
    make_trainer(out, max_steps=4, save_steps=1).train()  # the old reward's run: checkpoints 1 to 4
    old = _lines(out / "checkpoint-4" / "history.jsonl")
    # The reward fixed, the user goes back to checkpoint-2 and stops at step 3.
    make_trainer(out, max_steps=3, save_steps=1, reward_threshold=0.5).train(
        resume_from_checkpoint=str(out / "checkpoint-2"), ignore_config_mismatch=True
    )
    with pytest.warns(UserWarning, match=r"skipping checkpoint-4 .* the run last wrote checkpoint-3 .* abandoned"):
        choice = checkpoint.find_run(str(out))
    assert choice.state.path == str(out / "checkpoint-3")
    assert _lines(out / "checkpoint-4" / "history.jsonl") == old  # left where it is, not deleted
    branch = _lines(out / "checkpoint-3" / "history.jsonl")
    trainer = make_trainer(out, max_steps=4, save_steps=1, reward_threshold=0.5)
    with pytest.warns(UserWarning, match="abandoned"):
        trainer.train(resume_from_checkpoint=True)  # continues the new branch: no mismatch with its settings
    assert train_steps(out) == [1, 2, 3, 4]
    new = _lines(out / "checkpoint-4" / "history.jsonl")
    assert new[: len(branch)] == branch and new != old
