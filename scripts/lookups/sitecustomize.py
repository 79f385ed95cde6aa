"""Logs every host-name lookup of a Python process, and of the Python processes it starts, to check that a command
reaches no network. Put this folder first on PYTHONPATH:

    PYTHONPATH=scripts/lookups OMP_NUM_THREADS=1 python -m pytest -q
    PYTHONPATH=scripts/lookups erl-lite demo --steps 1

Each lookup of a host other than this machine appends a paragraph to the file ``ERL_LITE_LOOKUPS`` names (default:
``erl_lite_lookups.log`` in the temporary folder): the process, the host, the test running, the call stack. No file,
no lookup. Python imports a module named ``sitecustomize`` at start-up when it is on the path; nothing else does."""

import os
import socket
import tempfile
import traceback

LOG = os.environ.get("ERL_LITE_LOOKUPS", os.path.join(tempfile.gettempdir(), "erl_lite_lookups.log"))
THIS_MACHINE = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "", None)
_lookup = socket.getaddrinfo


def logged_lookup(host, *args, **kwargs):
    if host not in THIS_MACHINE:
        with open(LOG, "a", encoding="utf-8") as f:
            test = os.environ.get("PYTEST_CURRENT_TEST", "-")
            f.write(f"pid {os.getpid()} looked up {host} (test: {test})\n{''.join(traceback.format_stack())}\n")
    return _lookup(host, *args, **kwargs)


socket.getaddrinfo = logged_lookup
