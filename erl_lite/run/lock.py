"""One writer per run folder: :class:`RunLock`, held by training, the demo, a logged evaluation and export.

filelock's ``SoftFileLock`` (a marker created exclusively: any filesystem will do) refuses a second holder and takes
over a marker whose process died on this host. ``.erl_lite.lock.json`` records the writer (what, pid, host, start;
its end once released): named in a refusal, warned about if it died holding the lock, and read by the commands
that write over their own earlier output only (:func:`last_writer`, :func:`check_out`)."""

from __future__ import annotations

import os
import socket
import time
import warnings
from typing import Any

from filelock import SoftFileLock, Timeout

from erl_lite.jsonio import read_json
from erl_lite.run.checkpoint import RUN_NAMES, ensure_writable, previous_run
from erl_lite.run.layout import write_json
from erl_lite.run.state import CheckpointError

LOCK_FILE, WRITER_FILE = ".erl_lite.lock", ".erl_lite.lock.json"


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
    """``with RunLock(folder, "training"):`` the only writer of ``folder``; reentrant in its holder."""

    def __init__(self, folder: str, purpose: str) -> None:
        self.folder, self._lock = folder, SoftFileLock(os.path.join(folder, LOCK_FILE), timeout=0)
        self.record, self.before = {"by": purpose}, {}  # this writer; the one before it

    def __enter__(self) -> "RunLock":
        if self._lock.is_locked:
            self._lock.acquire()  # reentry: filelock counts
            return self
        ensure_writable(self.folder)  # a file there, or a read-only folder: named
        self.before = last_writer(self.folder)
        try:
            self._lock.acquire()
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
        self.record.update(pid=os.getpid(), host=socket.gethostname(), started=_now())
        write_json(os.path.join(self.folder, WRITER_FILE), self.record)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._lock.lock_counter == 1:
            write_json(os.path.join(self.folder, WRITER_FILE), {**self.record, "ended": _now()})
        self._lock.release()


def check_out(out_dir: str, command: str, own: bool) -> None:
    """Refuse a non-empty ``out_dir`` that is not ``command``'s ``own`` earlier output, naming what it holds."""
    held = sorted(n for n in os.listdir(out_dir) if not n.startswith(".")) if os.path.isdir(out_dir) else []
    if held and not own:
        run = previous_run(out_dir)
        others = [n for n in held if not any(p.match(n) for p in RUN_NAMES)][:8]
        what = " and ".join(
            [f"another run ({', '.join(run)})"] * bool(run) + [f"other files ({', '.join(others)})"] * bool(others)
        ) or ", ".join(held[:8])
        raise CheckpointError(
            f"{out_dir} holds {what}. {command} writes only into an empty folder or over its own "
            "earlier output: choose another folder, or pass --overwrite to write there anyway"
        )
