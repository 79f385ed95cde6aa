"""Ownership, not guesses: no command replaces or deletes a file erl_lite did not write, and a refused one leaves
nothing behind.

Every writing command (demo, train, plot --out, export) is run on every shape of folder it may meet (a user's
notes, another tool's model, a base model, a sharded model, symlinks, a read-only folder), with and without
``--overwrite``; every file there must come out byte for byte as it went in, and the folder must hold nothing new.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
from test_export import make_adapter
from test_run_faults import make_trainer
from test_run_writers import DEMO

from erl_lite.cli import main
from erl_lite.run.lock import FILES_RECORD, LOCK_FILE, WRITER_FILE, RunLock, written
from erl_lite.testing import save_tiny_model


def snapshot(folder) -> dict[str, object]:
    """Every entry of ``folder`` (one level, and what a symlink points at) with its bytes: what must not change."""
    seen = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.islink(path):
            seen[name] = ("link", os.readlink(path))
        elif os.path.isdir(path):
            seen[name] = ("dir", snapshot(path))
        else:
            with open(path, "rb") as f:
                seen[name] = f.read()
    return seen


def user_notes(out) -> None:
    """The issue's case: a student's folder whose names are ones a run writes too."""
    out.mkdir()
    (out / "report.md").write_text("my report")
    (out / "README.md").write_text("my project")
    (out / "config.json").write_text('{"mine": true}')
    (out / "vocab.txt").write_text("a\nb\n")


def base_model(out) -> None:
    save_tiny_model(out)


def shards(out) -> None:
    out.mkdir()
    for i in (1, 2):
        (out / f"model-0000{i}-of-00002.safetensors").write_bytes(b"shard %d" % i)
    (out / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    (out / "config.json").write_text('{"model_type": "llama"}')


def other_adapter(out) -> None:
    """A PEFT adapter some other tool saved."""
    out.mkdir()
    (out / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    (out / "adapter_model.safetensors").write_bytes(b"their weights")
    (out / "history.jsonl").write_text('{"step": 1, "kind": "train"}\n')


def symlinks(out) -> None:
    """Names a run writes, as links to the user's own files and folders elsewhere."""
    elsewhere = out.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data.txt").write_text("precious")
    (elsewhere / "checkpoint-1").mkdir()
    (elsewhere / "checkpoint-1" / "weights.bin").write_bytes(b"mine")
    out.mkdir()
    os.symlink(elsewhere / "data.txt", out / "training_args.json")
    os.symlink(elsewhere / "checkpoint-1", out / "checkpoint-1")
    os.symlink(elsewhere / "data.txt", out / "eval.png")


SHAPES = {"user-notes": user_notes, "base-model": base_model, "shards": shards, "other-adapter": other_adapter}
SHAPES["symlinks"] = symlinks


def commands(out, adapter, run) -> dict[str, list[str]]:
    return {
        "demo": [*DEMO, "--out", out],
        "train": ["train", "--model", "tiny", "--steps", "1", "--out", out],
        "export": ["export", "--adapter", adapter, "--out", out],
        "plot": ["plot", run, "--out", out],
    }


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """An adapter to export and a finished run to plot."""
    tmp = tmp_path_factory.mktemp("sources")
    _, adapter, _ = make_adapter(tmp)
    run = tmp / "run"
    make_trainer(run, max_steps=1).train()
    return adapter, str(run)


# Which folder shapes hold a name the command writes (refused even with --overwrite); the others are refused
# without it only.
CLASHES = {
    "demo": set(SHAPES),
    "train": set(SHAPES),
    "export": {"user-notes", "base-model", "shards"},
    "plot": {"symlinks"},
}


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("command", ["demo", "train", "export", "plot"])
def test_no_command_replaces_or_deletes_a_file_it_did_not_write(sources, tmp_path, capsys, shape, command):
    out = tmp_path / "out"
    SHAPES[shape](out)
    capsys.readouterr()
    target = snapshot(out.parent)
    argv = commands(str(out), *sources)[command]
    assert main(argv) == 2  # refused, whatever the folder held
    err = capsys.readouterr().err
    assert snapshot(out.parent) == target, "a refused command changed or left something"
    assert "Traceback" not in err and err.count(f"erl-lite {command}: error:") == 1, err
    code = main([*argv, "--overwrite"])
    err = capsys.readouterr().err
    if shape in CLASHES[command]:  # the advice never leads to deleting what erl_lite did not write
        assert code == 2 and "never replaces or deletes" in err and "--overwrite or without" in err, err
        assert snapshot(out.parent) == target
    else:
        assert code == 0, err
        now = snapshot(out.parent)
        kept = {n: now["out"][1].get(n) for n in target["out"][1]}
        assert kept == target["out"][1], "--overwrite changed a file erl_lite did not write"
        assert set(now["out"][1]) - set(target["out"][1]) <= written(str(out)) | {FILES_RECORD, WRITER_FILE}


@pytest.mark.slow
def test_train_on_its_base_model_folder_is_refused_without_advice_to_overwrite(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "M")
    before = snapshot(tmp_path)
    for extra in ([], ["--overwrite"]):
        assert main(["train", "--model", model, "--steps", "1", "--out", model, *extra]) == 2
        err = capsys.readouterr().err
        assert "config.json" in err and "model.safetensors" in err and "pass --overwrite" not in err, err
        assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_a_refused_command_leaves_no_lock_record_and_a_folder_it_made_is_removed(sources, tmp_path, capsys):
    adapter, _ = sources
    work = tmp_path / "work"
    user_notes(work)
    before = snapshot(tmp_path)
    for _ in range(2):  # refused twice: the first leaves no record that would let the second through
        assert main(["export", "--adapter", adapter, "--out", str(work)]) == 2
        assert snapshot(tmp_path) == before
    fresh = tmp_path / "fresh"  # refused inside the lock: the base cannot be loaded
    assert main(["export", "--adapter", adapter, "--out", str(fresh), "--base-model", str(tmp_path / "none")]) == 2
    assert not fresh.exists()
    here = tmp_path / "here"
    user_notes(here)
    before = snapshot(here)
    cwd = os.getcwd()
    try:
        os.chdir(here)
        assert main(["train", "--model", "tiny", "--steps", "1", "--out", "."]) == 2
    finally:
        os.chdir(cwd)
    assert snapshot(here) == before
    capsys.readouterr()


@pytest.mark.slow
def test_overwrite_deletes_only_what_the_earlier_run_recorded(tmp_path):
    out = tmp_path / "run"
    make_trainer(out, max_steps=2, save_steps=1).train()
    ours = written(str(out))
    assert {"checkpoint-1", "checkpoint-2", "history.jsonl", "training_args.json"} <= ours
    (out / "notes.md").write_text("mine")  # a user's file beside the run, of no name a run writes
    make_trainer(out, max_steps=1, overwrite_output_dir=True).train()
    assert (out / "notes.md").read_text() == "mine" and "notes.md" not in written(str(out))
    assert not (out / "checkpoint-2").exists()


@pytest.mark.slow
def test_export_over_its_own_export_replaces_its_shards_and_keeps_no_private_record(sources, tmp_path):
    adapter, _ = sources
    out = tmp_path / "merged"
    assert main(["export", "--adapter", adapter, "--out", str(out)]) == 0
    names = set(os.listdir(out))
    assert WRITER_FILE not in names and LOCK_FILE not in names  # no host or pid in a model's folder
    assert socket.gethostname() not in (out / FILES_RECORD).read_text()
    assert "model.safetensors" in written(str(out))
    (out / "model-00001-of-00002.safetensors").write_bytes(b"stale, but erl_lite's")  # recorded as an export's
    record = json.loads((out / FILES_RECORD).read_text())
    record["written"].append("model-00001-of-00002.safetensors")
    (out / FILES_RECORD).write_text(json.dumps(record))
    assert main(["export", "--adapter", adapter, "--out", str(out)]) == 0
    assert not (out / "model-00001-of-00002.safetensors").exists()  # its own stale shard goes
    assert set(os.listdir(out)) == names


DIES_WITH_EMPTY_MARKER = """
import os, sys
from erl_lite.run.lock import RunLock
lock = RunLock(sys.argv[1], "training").__enter__()
open(lock._lock.lock_file, "w").close()  # the marker emptied (filelock cannot tell its holder)
os._exit(0)
"""


@pytest.mark.slow
def test_an_empty_marker_left_by_a_dead_process_on_this_host_is_taken_over(tmp_path):
    out = tmp_path / "run"
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this erl_lite, whatever the cwd
    subprocess.run(
        [sys.executable, "-c", DIES_WITH_EMPTY_MARKER, str(out)], check=True, env={**os.environ, "PYTHONPATH": repo}
    )
    assert (out / LOCK_FILE).stat().st_size == 0
    with pytest.warns(UserWarning, match="taking over the lock left by training"):
        with RunLock(str(out), "training"):
            pass
    assert not (out / LOCK_FILE).exists()


def test_an_upload_leaves_the_lock_and_erl_lites_records_at_home(tmp_path, monkeypatch):
    from huggingface_hub.utils import filter_repo_objects

    from erl_lite.run import export

    folder = tmp_path / "merged"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", LOCK_FILE, WRITER_FILE, FILES_RECORD):
        (folder / name).write_text("x")
    calls = []

    class Api:  # huggingface_hub.HfApi, offline: what upload_folder was told
        def __init__(self, token=None):
            pass

        def create_repo(self, *a, **kw):
            pass

        def upload_folder(self, **kw):
            calls.append(kw)

    monkeypatch.setattr("huggingface_hub.HfApi", Api)
    export.push_to_hub(folder, "me/model")
    (kw,) = calls
    # The files huggingface_hub's own filter lets through, as upload_folder applies it.
    sent = set(filter_repo_objects(os.listdir(folder), ignore_patterns=kw["ignore_patterns"]))
    assert sent == {"config.json", "model.safetensors"}


def _read_only(folder) -> bool:
    """Make ``folder`` read-only even for root (``chattr +i``; chmod does not stop root): False where it can't."""
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
    if done.returncode != 0:
        return False
    try:
        (folder / ".probe").write_text("x")
    except OSError:
        return True
    os.remove(folder / ".probe")
    subprocess.run(["chattr", "-i", str(folder)], check=True)
    return False


@pytest.mark.slow
def test_a_read_only_folder_is_refused_in_one_paragraph_and_left_as_it_was(sources, tmp_path, capsys):
    """Every writing command on a folder it cannot write: exit 2, one paragraph naming the folder, no traceback."""
    adapter, run = sources
    ro = tmp_path / "ro"
    shutil.copytree(run, ro)  # a finished run: plot's own folder, and train --resume's
    before = snapshot(ro)
    if not _read_only(ro):
        pytest.skip("no chattr +i here (it makes a folder read-only for root too)")
    try:
        for argv in (
            ["plot", str(ro)],
            ["train", "--model", "tiny", "--steps", "2", "--out", str(ro), "--resume"],
            [*DEMO, "--out", str(ro / "demo")],
            ["export", "--adapter", adapter, "--out", str(ro / "merged")],
        ):
            try:
                code = main(argv)
            except SystemExit as e:  # refused by argparse, before the command starts
                code = e.code
            assert code == 2, argv
            err = capsys.readouterr().err
            assert str(ro) in err and "Traceback" not in err and err.count("error:") == 1, err
        assert snapshot(ro) == before
    finally:
        subprocess.run(["chattr", "-i", str(ro)], check=True)
