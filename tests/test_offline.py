"""The default path stays off the network: ``erl-lite demo`` resolves no host name and opens no connection, and
bitsandbytes (which peft imports) is imported with the Hub offline, so its CPU kernel lookup reads only the cache
(bitsandbytes 0.49 and later ask huggingface.co for one when imported on a CPU with AVX512-BF16)."""

import os
import subprocess
import sys

import pytest

# Run first in the child process: any host lookup or connection is written to stderr and refused.
NO_NETWORK = """
import socket, sys
def refuse(*args, **kwargs):
    sys.stderr.write(f"NETWORK {args[:2]}\\n")
    raise OSError("this test allows no network")
socket.getaddrinfo = refuse
socket.socket.connect = refuse
"""


def _run(code: str, *args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["OMP_NUM_THREADS"] = "1"
    if path:
        env["PYTHONPATH"] = os.pathsep.join([path, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, env=env)


# Each default path, as a user starts it: the README's command, `erl-lite train` on its defaults, the memory
# estimate (no model loaded), a notebook's imports, a local model loaded from Python.
CLI = "from erl_lite.cli import main\nsys.exit(main({} + ['--out', OUT]))"
DEFAULT_PATHS = {
    "demo": CLI.format(["demo", "--steps", "1", "--eval-tasks", "1"]),
    "train": CLI.format(["train", "--max-steps", "1", "--eval-steps", "0"]),
    "budget": "from erl_lite.cli import main\nsys.exit(main(['budget', '--preset', 'gpu']))",
    "notebook": "from erl_lite.teach import setup\nfrom erl_lite import ERLTrainer\nsetup('demo')",
    "python": "from erl_lite import load_policy, testing\nload_policy(testing.save_tiny_model(OUT))",
}


@pytest.mark.parametrize("path", sorted(DEFAULT_PATHS))
def test_a_default_path_reaches_no_network(tmp_path, path):
    """Every host lookup and connection refused and noted; the run ends well and printed no failed lookup."""
    done = _run(NO_NETWORK + f"OUT = {str(tmp_path / 'out')!r}\n" + DEFAULT_PATHS[path])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NETWORK" not in done.stderr, done.stderr[-3000:]
    for notice in ("Failed to load", "Skipping publisher trust check"):  # bitsandbytes' and kernels' on the lookup
        assert notice not in done.stderr, done.stderr[-3000:]


# However erl_lite is reached first: the command line and the notebooks' setup, the Python API (a model loaded
# through load_policy, the core that imports peft) and a user's own peft imported after erl_lite.
IMPORT_ROUTES = {
    "cli": "import erl_lite.cli",
    "teach": "import erl_lite.teach.setup",
    "load_policy": "from erl_lite import load_policy",
    "core": "import erl_lite.engine.policy",
    "peft after erl_lite": "import erl_lite\nimport peft",
}


@pytest.mark.parametrize("route", sorted(IMPORT_ROUTES))
def test_bitsandbytes_is_imported_with_the_hub_offline_on_any_cpu(tmp_path, route):
    """A stand-in bitsandbytes notes whether the Hub was offline while it was imported and logs the notice the
    real one logs when its lookup fails, and an error; the flag is put back afterwards (a user's own downloads are
    untouched), and the error still shows."""
    (tmp_path / "bitsandbytes").mkdir()
    (tmp_path / "bitsandbytes" / "__init__.py").write_text(
        "import logging\nfrom huggingface_hub import constants\nOFFLINE_WHILE_IMPORTED = constants.HF_HUB_OFFLINE\n"
        "logging.getLogger('bitsandbytes.backends.cpu.ops').warning('Failed to load CPU gemm_4bit_forward')\n"
        "logging.getLogger('bitsandbytes').error('a real fault')\n"
    )
    code = IMPORT_ROUTES[route] + (
        "\nimport bitsandbytes\nfrom huggingface_hub import constants\n"
        "print(bitsandbytes.OFFLINE_WHILE_IMPORTED, constants.HF_HUB_OFFLINE)"
    )
    done = _run(code, path=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "False"]
    assert "gemm_4bit_forward" not in done.stderr and "a real fault" in done.stderr  # warnings muted, errors shown


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_reading_a_local_dataset_file_reaches_no_network(tmp_path, suffix):
    """``--dataset rows.jsonl`` and ``train_dataset="rows.csv"`` read a file: datasets' ``load_dataset`` also
    pinged a download counter on S3 for its json/csv/parquet builder."""
    import json

    import datasets

    rows = [{"prompt": "Say one.", "answer": "one"}, {"prompt": "Say two.", "answer": "two"}]  # CSV: words stay text
    path = tmp_path / f"rows{suffix}"
    if suffix in (".jsonl", ".json"):
        lines = [json.dumps(r) for r in rows]
        path.write_text("\n".join(lines) + "\n" if suffix == ".jsonl" else "[" + ",".join(lines) + "]")
    else:
        getattr(datasets.Dataset.from_list(rows), f"to_{suffix[1:]}")(str(path))
    code = "from erl_lite.integrations.data_sources import load_rows\nprint(load_rows(sys.argv[1]))"
    done = _run(NO_NETWORK + code, str(path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NETWORK" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip() == repr(rows)


def test_reading_a_local_hotpotqa_file_reaches_no_network():
    """``MultiHopQA(source="hotpotqa", hotpot_path=...)`` reads the file only."""
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "hotpot_distractor_sample.jsonl")
    code = "from erl_lite.envs.qa import load_hotpotqa\nprint(len(load_hotpotqa(path=sys.argv[1])))"
    done = _run(NO_NETWORK + code, fixture)
    assert done.returncode == 0 and "NETWORK" not in done.stderr, done.stderr[-3000:]
    assert int(done.stdout) > 0


def test_every_test_runs_without_a_network(no_network):
    """conftest's ``no_network`` is on in every test: a lookup fails here, and would fail the test."""
    import socket

    with pytest.raises(OSError, match="no network in tests"):
        socket.getaddrinfo("example.com", 443)
    assert no_network == ["example.com"]
    no_network.clear()  # this test's lookup was on purpose


def test_the_lookup_logger_notes_a_lookup_and_nothing_for_this_machine(tmp_path):
    """scripts/lookups (the check behind "no test reaches the network", subprocesses included) logs a lookup of
    another host and none of this machine; the child answers the lookup itself, so nothing leaves it."""
    log = tmp_path / "lookups.log"
    code = (
        "import socket, sitecustomize\nsitecustomize._lookup = lambda *a, **k: []\n"
        "socket.getaddrinfo('localhost', 80)\nsocket.getaddrinfo('example.com', 443)"
    )
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "lookups")
    env = {**os.environ, "PYTHONPATH": folder, "ERL_LITE_LOOKUPS": str(log)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
    heads = [line for line in log.read_text().splitlines() if line.startswith("pid ")]  # one paragraph a lookup
    assert len(heads) == 1 and "looked up example.com" in heads[0], heads


@pytest.mark.parametrize("adapter", [False, True])
def test_loading_a_model_fetches_no_hub_kernels(tmp_path, monkeypatch, adapter):
    # transformers (5.x) turns `use_kernels` on by default and, on a CUDA machine, kernelizes the
    # model with layers downloaded from the Hub: a lookup at load time and code nobody pinned (the
    # GPU check met it). On this CPU no kernel matches, so the test watches the switch itself.
    from transformers import PreTrainedModel

    from erl_lite.models import load_policy
    from erl_lite.testing import save_tiny_model

    asked = []
    real = PreTrainedModel.set_use_kernels
    monkeypatch.setattr(
        PreTrainedModel, "set_use_kernels", lambda self, use, *a, **k: asked.append(use) or real(self, use, *a, **k)
    )
    source = save_tiny_model(tmp_path / "base")
    if adapter:
        policy, _ = load_policy(source)
        policy.save_pretrained(tmp_path / "adapter")
        asked.clear()
        source = tmp_path / "adapter"
    load_policy(source)
    assert asked and not any(asked), f"set_use_kernels was asked for {asked}"
