"""One writer per run folder, and what erl_lite owns there: :class:`RunLock`, held by every writing command.

filelock's ``SoftFileLock`` (a marker created exclusively: any filesystem will do) refuses a second holder and takes
over a marker whose process died on this host (also an empty marker, when the writer's record names a dead pid
here). ``.erl_lite.lock.json`` records the writer (what, pid, host, start, the names the folder held then; its end
once released): named in a refusal, warned about if it died holding the lock. ``.erl_lite.files.json`` records every
name a writer added to the folder (:func:`written`): the only files a command may replace or delete
(:func:`check_out`). A refused command leaves no trace: a release that leaves nothing of erl_lite's removes the
records, and the folder if the writer made it."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
import warnings
from typing import Any

from filelock import SoftFileLock, Timeout

from erl_lite.jsonio import read_json
from erl_lite.run.checkpoint import RUN_NAMES, ensure_writable, previous_run
from erl_lite.run.layout import write_json
from erl_lite.run.state import CheckpointError

LOCK_FILE, WRITER_FILE, FILES_RECORD = ".erl_lite.lock", ".erl_lite.lock.json", ".erl_lite.files.json"
PRIVATE = ".erl_lite.lock*"  # the lock and its record (host, pid): never uploaded nor exported


def _files_record(folder: str) -> dict[str, Any]:
    try:
        found = read_json(os.path.join(folder, FILES_RECORD))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) and isinstance(found.get("written"), list) else {}


def written(folder: str) -> set[str]:
    """The names in ``folder`` that erl_lite wrote (recorded in :data:`FILES_RECORD`) and that are still there, with
    those added since a writer that has not ended (running, or dead) took the folder."""
    names = set(_files_record(folder).get("written", []))
    if (w := last_writer(folder)) and "ended" not in w and isinstance(w.get("found"), list):
        names |= set(_entries(folder)) - set(w["found"])
    return {n for n in names if isinstance(n, str) and os.path.lexists(os.path.join(folder, n))}


def _entries(folder: str) -> list[str]:
    """What ``folder`` holds, but its hidden entries (erl_lite's records, a half-written checkpoint, ``.git``)."""
    return sorted(n for n in os.listdir(folder) if not n.startswith(".")) if os.path.isdir(folder) else []


def _record_written(folder: str, found: list[str], by: str) -> None:
    """Add the names that appeared since ``found`` was listed to :data:`FILES_RECORD` (removed when empty); ``by``:
    the command that wrote first, kept while any of its names are left."""
    names = sorted(written(folder) | (set(_entries(folder)) - set(found)))
    if names:
        first = _files_record(folder).get("by", by) if written(folder) else by
        write_json(os.path.join(folder, FILES_RECORD), {"by": first, "written": names})
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, FILES_RECORD))


def _dead_here(w: dict[str, Any]) -> bool:
    """Whether the writer ``w`` ran on this host and its process is gone."""
    if w.get("host") != socket.gethostname() or not isinstance(w.get("pid"), int) or "ended" in w:
        return False
    try:
        os.kill(w["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def last_writer(folder: str) -> dict[str, Any]:
    """The record of ``folder``'s last (or present) writer: ``by``, ``pid``, ``host``, ``started``, ``ended``."""
    try:
        found = read_json(os.path.join(folder, WRITER_FILE))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def _who(w: dict[str, Any]) -> str:
    if not w:
        return f"another process (its record, {WRITER_FILE}, is missing or unreadable)"
    return f"{w.get('by')} (pid {w.get('pid')} on host {w.get('host')}, started {w.get('started')})"


class RunLock:
    """``with RunLock(folder, "training"):`` the only writer of ``folder``; reentrant in its holder. ``keep_record``:
    leave the writer's record (host, pid) once released (not in an exported model's folder)."""

    def __init__(self, folder: str, purpose: str, keep_record: bool = True) -> None:
        self.folder, self._lock = folder, SoftFileLock(os.path.join(folder, LOCK_FILE), timeout=0)
        self.record, self.before, self.keep = {"by": purpose}, {}, keep_record  # this writer; the one before it

    def __enter__(self) -> "RunLock":
        if self._lock.is_locked:
            self._lock.acquire()  # reentry: filelock counts
            return self
        made = not os.path.isdir(self.folder)
        ensure_writable(self.folder)  # a file there, or a read-only folder: named
        self.before = last_writer(self.folder)
        try:
            self._take()
        except Timeout:
            raise CheckpointError(
                f"{self.folder} is being written by {_who(last_writer(self.folder))}; a folder "
                "takes one writer at a time: wait for it to end, stop it, or choose another. If "
                f"it ended on another machine, delete {self._lock.lock_file}"
            ) from None
        if self.before and "ended" not in self.before:  # died holding it (filelock took the marker over)
            warnings.warn(
                f"{self.folder}: taking over the lock left by {_who(self.before)}, which is no longer "
                "running (it stopped without releasing it)",
                stacklevel=2,
            )
            _record_written(
                self.folder, self.before.get("found", []), self.before.get("by", "?")
            )  # what the dead writer added is erl_lite's
        self.record.update(
            pid=os.getpid(), host=socket.gethostname(), started=_now(), found=_entries(self.folder), made=made
        )
        write_json(os.path.join(self.folder, WRITER_FILE), self.record)
        return self

    def _take(self) -> None:
        """Acquire; an empty marker (filelock cannot tell its holder) is taken over when our record names a writer
        that died on this host."""
        try:
            self._lock.acquire()
        except Timeout:
            marker = self._lock.lock_file
            if not (os.path.isfile(marker) and os.path.getsize(marker) == 0 and _dead_here(self.before)):
                raise
            os.remove(marker)
            self._lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        if self._lock.lock_counter == 1:
            _record_written(self.folder, self.record["found"], self.record["by"])
            ended = {**self.record, "ended": _now()}
            write_json(os.path.join(self.folder, WRITER_FILE), ended)
            self._lock.release()
            self._leave(self.record["made"])
        else:
            self._lock.release()

    def _leave(self, made: bool) -> None:
        """Remove the writer's record when nothing of erl_lite's is left (or it is not kept), and a folder this
        writer made that is now empty."""
        if not self.keep or not written(self.folder):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.folder, WRITER_FILE))
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(self.folder)  # only when empty


def check_out(out_dir: str, command: str, by: str, overwrite: bool, writes: tuple[re.Pattern, ...] = RUN_NAMES) -> None:
    """Refuse an ``out_dir`` holding files erl_lite did not write whose names ``command`` writes (``writes``), even
    with ``overwrite``; or, unless ``overwrite``, any other files or another command's than ``by``, naming them."""
    ours, record = written(out_dir), _files_record(out_dir)
    others = [n for n in _entries(out_dir) if n not in ours]
    clash = [n for n in others if any(p.match(n) for p in writes)]
    if clash:
        raise CheckpointError(
            f"{out_dir} holds files that erl_lite did not write and {command} would write over "
            f"({', '.join(clash[:8])}): erl_lite never replaces or deletes a file it did not write (its own are "
            f"named in {FILES_RECORD}), with --overwrite or without. Choose another folder, or move those files"
        )
    if (others or (ours and record.get("by") != by)) and not overwrite:
        run = previous_run(out_dir, ours)
        what = " and ".join(
            [f"another run ({', '.join(run)})"] * bool(run) + [f"other files ({', '.join(others[:8])})"] * bool(others)
        ) or ", ".join(sorted(ours)[:8])
        raise CheckpointError(
            f"{out_dir} holds {what}. {command} writes only into an empty folder or over its own "
            "earlier output: choose another folder, or pass --overwrite to write there anyway (files erl_lite "
            "did not write are kept)"
        )
