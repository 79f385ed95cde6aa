"""Who may write a run folder, and what a command may delete there.

1. One writer per folder: training, the demo, a logged evaluation and export hold a lock on their folder for the
   whole run; a second writer (in this process or another) is refused naming the holder; a lock left by a process
   that died on this host is taken over with a warning; the lock goes at the end, normal or not.
2. A checkpoint is known by its content: a folder whose name and recorded step disagree is skipped, named.
3. No command deletes what it did not write: demo, train and export refuse a folder holding another kind of run
   or other files unless told to ``--overwrite`` (test_run_ownership.py: files of the names they write that
   erl_lite did not write are refused even then).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from test_checkpoint import digest as digest_all
from test_export import make_adapter
from test_run_faults import checkpoints, failing_reward, make_trainer, train_steps

from erl_lite.cli import main
from erl_lite.cli.evaluate import _load_checkpoint
from erl_lite.run import checkpoint
from erl_lite.run.checkpoint import CheckpointError, read_checkpoint
from erl_lite.run.export import describe_adapter, export_merged
from erl_lite.run.lock import LOCK_FILE, WRITER_FILE, RunLock, last_writer
from erl_lite.testing import save_tiny_model

HERE = os.path.dirname(os.path.abspath(__file__))


from test_run_trust import copy, two_steps  # noqa: E402,F401  (a finished 2-step run, and a copy of it per test)


def digest(out) -> str:
    """Of everything in ``out`` but the record of its last writer (a refused writer held the lock a moment)."""
    record = out / WRITER_FILE
    kept = record.read_bytes() if record.exists() else None
    record.unlink(missing_ok=True)
    try:
        return digest_all(out)
    finally:
        if kept is not None:
            record.write_bytes(kept)


def released(out) -> bool:
    """The lock is free and the writer's record says it ended."""
    return not os.path.exists(out / LOCK_FILE) and "ended" in (last_writer(str(out)) or {})


# --- 1. one writer per folder ------------------------------------------------------------------------
@pytest.mark.slow
def test_a_second_trainer_in_this_process_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    refusals = []

    def second_writer(trainer, record):
        if record.step != 1:
            return
        for write in (
            lambda: make_trainer(out, max_steps=1).train(),
            lambda: make_trainer(out, max_steps=1).train(resume_from_checkpoint=True),
            lambda: make_trainer(out, max_steps=1, eval_steps=1).evaluate(log=True),
        ):
            with pytest.raises(CheckpointError) as err:
                write()
            refusals.append(str(err.value))

    make_trainer(out, max_steps=2, save_steps=1, callbacks=[second_writer]).train()
    assert len(refusals) == 3
    for message in refusals:
        for needed in (str(out), "training", f"pid {os.getpid()}", socket.gethostname(), "started"):
            assert needed in message, message
    assert train_steps(out) == [1, 2] and checkpoints(out) == ["checkpoint-1", "checkpoint-2"]  # one run's
    assert released(out)


HOLDER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {tests!r})
    from test_run_faults import make_trainer

    def wait(trainer, record):  # holds the folder mid-run until the test says go
        open({ready!r}, "w").close()
        while not os.path.exists({go!r}):
            time.sleep(0.05)

    make_trainer({out!r}, max_steps=2, save_steps=1, callbacks=[wait]).train()
""")


def _wait_for(path, process, seconds=120):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_trainer_in_another_process_holds_the_folder_until_it_ends(tmp_path, capsys):
    out, ready, go = tmp_path / "run", tmp_path / "ready", tmp_path / "go"
    script = HOLDER.format(tests=HERE, ready=str(ready), go=str(go), out=str(out))
    holder = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.path.dirname(HERE)},  # this erl_lite
    )
    try:
        _wait_for(ready, holder)
        before = digest(out)
        with pytest.raises(CheckpointError, match=rf"pid {holder.pid} on host"):
            make_trainer(out, max_steps=3).train(resume_from_checkpoint=True)
        with pytest.raises(CheckpointError, match=rf"pid {holder.pid} on host"):
            make_trainer(out, max_steps=1, overwrite_output_dir=True).train()  # would delete the running run
        capsys.readouterr()
        # The demo into a running training folder: refused for what is there, and, told to overwrite, by the lock.
        assert main(["demo", "--steps", "1", "--eval-tasks", "2", "--out", str(out)]) == 2
        assert "holds another run" in capsys.readouterr().err
        assert main(["demo", "--steps", "1", "--eval-tasks", "2", "--out", str(out), "--overwrite"]) == 2
        assert f"pid {holder.pid} on host" in capsys.readouterr().err
        assert digest(out) == before  # nothing of the running run touched
    finally:
        go.touch()
        output = holder.communicate(timeout=300)[0]
    assert holder.returncode == 0, output.decode()
    assert train_steps(out) == [1, 2] and released(out)
    make_trainer(out, max_steps=3).train(resume_from_checkpoint=True)  # free again once it ended
    assert train_steps(out) == [1, 2, 3]


DIES_HOLDING = textwrap.dedent("""
    import os, signal, sys
    from erl_lite.run.lock import RunLock
    lock = RunLock({out!r}, "training").__enter__()  # kept: filelock releases a lock it collects
    {end}
""")


@pytest.mark.slow
@pytest.mark.parametrize("end", ["os._exit(0)", "os.kill(os.getpid(), signal.SIGKILL)"], ids=["exit", "killed"])
def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_warning(tmp_path, end):
    out = tmp_path / "run"
    dead = subprocess.run([sys.executable, "-c", DIES_HOLDING.format(out=str(out), end=end)])
    assert dead.returncode in (0, -signal.SIGKILL)
    left = last_writer(str(out))
    assert os.path.exists(out / LOCK_FILE) and "ended" not in left
    with pytest.warns(UserWarning, match=rf"taking over the lock left by training \(pid {left['pid']} on host "):
        make_trainer(out, max_steps=1).train()
    assert train_steps(out) == [1] and released(out)


@pytest.mark.slow
def test_a_lock_held_on_another_host_is_never_taken_over(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).write_text("4242\nother-machine\n")  # filelock's marker: pid, host
    (out / WRITER_FILE).write_text(
        json.dumps({"by": "training", "pid": 4242, "host": "other-machine", "started": "2026-01-01 00:00:00 UTC"})
    )
    with pytest.raises(CheckpointError, match=r"pid 4242 on host other-machine.*delete .*\.erl_lite\.lock"):
        make_trainer(out, max_steps=1).train()
    assert sorted(os.listdir(out)) == [LOCK_FILE, WRITER_FILE]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["reward", "interrupt"])
def test_the_lock_is_released_after_a_failure_and_the_run_continues(tmp_path, fault):
    out = tmp_path / "run"
    fail_at = {"step": 2}

    def interrupt(trainer, record):
        if record.step == 2 and fail_at:
            raise KeyboardInterrupt

    reward, callbacks, error = (
        (failing_reward(fail_at), [], Exception) if fault == "reward" else (None, [interrupt], KeyboardInterrupt)
    )
    trainer = make_trainer(out, max_steps=3, callbacks=callbacks, **({"reward": reward} if reward else {}))
    with pytest.raises(error):
        trainer.train()
    assert released(out)
    fail_at.clear()
    make_trainer(out, max_steps=3).train(resume_from_checkpoint=True)  # another trainer may take the folder
    assert train_steps(out)[-1] == 3 and released(out)


@pytest.mark.slow
def test_a_logged_evaluation_holds_the_lock_and_releases_it(tmp_path):
    out = tmp_path / "run"
    trainer = make_trainer(out, max_steps=1)
    with RunLock(str(out), "export"):  # another writer holds it
        with pytest.raises(CheckpointError, match="being written by export"):
            trainer.evaluate(tasks=trainer.train_tasks[:1], log=True)
    assert not os.path.exists(out / "history.jsonl")
    trainer.evaluate(tasks=trainer.train_tasks[:1], log=True)
    assert released(out) and last_writer(str(out))["by"] == "training"


# --- 2. a checkpoint is known by its content ------------------------------------------------------
def _rename(copy, old, new):
    os.rename(copy / f"checkpoint-{old}", copy / f"checkpoint-{new}")


def _copy(copy, old, new):
    shutil.copytree(copy / f"checkpoint-{old}", copy / f"checkpoint-{new}")


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, old, new",
    [(_rename, 1, 7), (_copy, 1, 3), (_rename, 1, 10)],
    ids=["renamed-7", "copied-3", "renamed-10"],
)
def test_a_checkpoint_whose_name_and_step_disagree_is_skipped_by_resume_and_every_command(
    copy, capsys, change, old, new
):
    change(copy, old, new)
    bogus = str(copy / f"checkpoint-{new}")
    named = rf"checkpoint-{new} is named for step {new} but holds step {old}"
    with pytest.raises(CheckpointError, match=named):
        read_checkpoint(bogus)
    with pytest.raises(CheckpointError, match=named):
        checkpoint.find_run(bogus)  # given directly: refused, not read as step 7
    base = save_tiny_model(copy.parent / "base")
    for read in (
        lambda: checkpoint.find_run(str(copy)).state.path,
        lambda: _load_checkpoint(str(copy))[0],
        lambda: describe_adapter(str(copy), base_model=base).adapter_dir,
    ):
        with pytest.warns(UserWarning, match=named):
            assert read() == str(copy / "checkpoint-2")
    capsys.readouterr()
    main(["doctor", str(copy)])
    assert "checkpoint-2 (step 2)" in capsys.readouterr().out.splitlines()[0]
    trainer = make_trainer(copy, max_steps=3)
    with pytest.warns(UserWarning, match=named):
        trainer.train(resume_from_checkpoint=True)
    assert trainer.step == 3 and train_steps(copy) == [1, 2, 3]  # step 3 after step 2, not 2 again


@pytest.mark.slow
def test_a_run_whose_only_checkpoint_is_misnamed_has_nothing_to_resume(copy):
    shutil.rmtree(copy / "checkpoint-2")
    _rename(copy, 1, 7)
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="named for step 7 but holds step 1"):
        make_trainer(copy, max_steps=3).train(resume_from_checkpoint=True)
    assert checkpoints(copy) == ["checkpoint-7"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, new, kept", [(_rename, 7, [3, 4, 7]), (_copy, 9, [3, 4, 9])], ids=["renamed-7", "copied-9"]
)
def test_rotation_keeps_the_newest_checkpoints_by_content_and_leaves_a_misnamed_one_alone(copy, change, new, kept):
    change(copy, 1, new)
    before = digest_all(copy / f"checkpoint-{new}")
    with pytest.warns(UserWarning, match=f"named for step {new} but holds step 1"):
        make_trainer(copy, max_steps=4, save_steps=1, save_total_limit=2).train(resume_from_checkpoint=True)
    # Steps 3 and 4 are the two newest; the misnamed folder is not erl_lite's to delete (nor to count).
    assert checkpoints(copy) == [f"checkpoint-{n}" for n in kept]
    assert digest_all(copy / f"checkpoint-{new}") == before


@pytest.mark.slow
def test_the_command_line_checks_the_environment_of_the_checkpoint_it_resumes_not_a_misnamed_one(tmp_path, capsys):
    out = tmp_path / "run"
    cmd = ["train", "--env", "arithmetic", "--small", "--model", save_tiny_model(tmp_path / "base"), "--out", str(out)]
    assert main([*cmd, "--steps", "1"]) == 0
    _copy(out, 1, 5)  # a copy named for step 5, from a run on another world
    record = json.loads((out / "checkpoint-5" / "erl_state.json").read_text())
    record["config"]["extra"]["small"] = False
    (out / "checkpoint-5" / "erl_state.json").write_text(json.dumps(record))
    capsys.readouterr()
    with pytest.warns(UserWarning, match="checkpoint-5 is named for step 5 but holds step 1"):
        assert main([*cmd, "--steps", "2", "--resume"]) == 0, capsys.readouterr().err
    assert train_steps(out) == [1, 2]


# --- 3. no command deletes what it did not write ---------------------------------------------------
DEMO = ["demo", "--steps", "1", "--eval-tasks", "2"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo"
    assert main([*DEMO, "--out", str(out)]) == 0
    assert (out / "report.md").is_file() and last_writer(str(out))["by"] == "demo"
    return out


def _plant_unrelated(out):
    out.mkdir()
    (out / "notes.md").write_text("mine")
    (out / "data.csv").write_text("my project")


@pytest.mark.slow
@pytest.mark.parametrize("held", ["training", "unrelated"])
def test_the_demo_refuses_a_folder_it_did_not_write_unless_told_to_overwrite(two_steps, tmp_path, capsys, held):
    out = tmp_path / "out"
    shutil.copytree(two_steps, out) if held == "training" else _plant_unrelated(out)
    before = digest(out)
    assert main([*DEMO, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    named = (
        ["checkpoint-2", "history.jsonl with", "training_args.json"] if held == "training" else ["notes.md", "data.csv"]
    )
    for needed in [str(out), "--overwrite", *named]:
        assert needed in err, err
    assert digest(out) == before
    assert main([*DEMO, "--out", str(out), "--overwrite"]) == 0
    assert train_steps(out) == [1] and checkpoints(out) == ["checkpoint-1"]  # the old run's 2 is gone
    if held == "unrelated":
        assert (out / "notes.md").read_text() == "mine"  # other files are kept


@pytest.mark.slow
def test_the_demo_writes_again_over_its_own_folder_even_after_it_was_interrupted(demo_run, tmp_path):
    out = tmp_path / "demo"
    shutil.copytree(demo_run, out)
    os.remove(out / "report.md")  # stopped before its report: its file record still says demo
    assert main([*DEMO, "--out", str(out)]) == 0 and (out / "report.md").is_file()


@pytest.mark.slow
def test_a_report_alone_is_not_taken_for_an_earlier_demo(tmp_path, capsys):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "report.md").write_text("my report")
    assert main([*DEMO, "--out", str(out), "--overwrite"]) == 2
    assert "report.md" in capsys.readouterr().err and os.listdir(out) == ["report.md"]


@pytest.mark.slow
@pytest.mark.parametrize("held", ["demo", "unrelated"])
def test_train_refuses_a_demo_or_files_it_would_write_over(demo_run, tmp_path, held):
    out = tmp_path / "out"
    if held == "demo":
        shutil.copytree(demo_run, out)
    else:  # a name a run writes, not erl_lite's
        _plant_unrelated(out)
        (out / "README.md").write_text("my project")
    before = digest(out)
    with pytest.raises(CheckpointError, match="report.md" if held == "demo" else "README.md"):
        make_trainer(out, max_steps=1).train()
    assert digest(out) == before
    assert main(["train", "--model", "tiny", "--steps", "1", "--out", str(out)]) == 2
    assert digest(out) == before


@pytest.mark.slow
@pytest.mark.parametrize("held", ["training", "demo", "unrelated", "own"])
def test_export_refuses_a_folder_it_did_not_write_unless_told_to_overwrite(two_steps, demo_run, tmp_path, held, capsys):
    base, adapter, _ = make_adapter(tmp_path)
    out = tmp_path / "out"
    if held == "own":
        export_merged(adapter, out)
    else:
        {
            "training": lambda: shutil.copytree(two_steps, out),
            "demo": lambda: shutil.copytree(demo_run, out),
            "unrelated": lambda: _plant_unrelated(out),
        }[held]()
    before = digest(out)
    code = main(["export", "--adapter", adapter, "--out", str(out)])
    if held == "own":  # an earlier export is written over
        assert code == 0
        return
    assert code == 2 and "--overwrite" in capsys.readouterr().err and digest(out) == before
    assert main(["export", "--adapter", adapter, "--out", str(out), "--overwrite"]) == 0
    assert (out / "model.safetensors").is_file()


def test_export_into_a_folder_being_written_is_refused(tmp_path):
    _, adapter, _ = make_adapter(tmp_path)
    out = tmp_path / "out"
    with RunLock(str(out), "training"):
        with pytest.raises(CheckpointError, match=re.escape(f"being written by training (pid {os.getpid()}")):
            export_merged(adapter, out, overwrite=True)
    assert not out.exists()  # nothing written, and the folder the lock made is gone with it


@pytest.mark.parametrize("held", ["training", "figures", "unrelated-figure"])
def test_plot_refuses_an_out_folder_holding_another_run_or_figures_unless_told_to_overwrite(
    two_steps, tmp_path, capsys, held
):
    out = tmp_path / "figs"
    if held == "training":
        shutil.copytree(two_steps, out)
        named = ["checkpoint-2", "history.jsonl with"]
    else:
        out.mkdir()
        name = "eval.png" if held == "figures" else "overview.png"
        (out / name).write_bytes(b"not erl_lite's")
        named = [name]
    before = digest(out)
    assert main(["plot", str(two_steps), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    for needed in [str(out), "--overwrite" if held == "training" else "never replaces", *named]:
        assert needed in err, err
    assert digest(out) == before
    code = main(["plot", str(two_steps), "--out", str(out), "--overwrite"])
    if held == "training":  # figures beside another run: written, the run untouched
        assert code == 0 and (out / "eval.png").stat().st_size > 1000 and train_steps(out) == [1, 2]
    else:  # a figure erl_lite did not write is never replaced
        assert code == 2 and digest(out) == before


def test_plot_refuses_a_file_without_history_records_before_replacing_any_figure(demo_run, tmp_path, capsys):
    out = tmp_path / "demo"
    shutil.copytree(demo_run, out)
    before = digest(out)
    for other, why in (("samples.jsonl", "holds no history records"), ("report.md", "not valid JSON")):
        assert main(["plot", str(out / other)]) == 2
        assert why in capsys.readouterr().err
    assert digest(out) == before
    assert main(["plot", str(out / "history.jsonl")]) == 0  # the demo's own history: its figures redrawn


def test_plot_redraws_a_runs_own_figures_and_fills_a_new_folder_without_being_told(two_steps, tmp_path):
    own = tmp_path / "run"
    shutil.copytree(two_steps, own)
    for _ in range(2):  # its own folder, drawn twice: figures of that run, replaced
        assert main(["plot", str(own)]) == 0
        assert main(["plot", str(own), "--out", str(own)]) == 0
    assert main(["plot", str(own), "--out", str(tmp_path / "new")]) == 0
    assert main(["plot", str(own / "history.jsonl"), "--out", str(tmp_path / "empty")]) == 0
