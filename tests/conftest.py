"""Shared fixtures: the tiny offline model, and a toy multi-turn environment."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
# No test reaches the network, a test's subprocesses included (TRL's usage pings, bitsandbytes' kernel lookup).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from erl_lite.core.env import Environment, Episode
from erl_lite.records import Task

torch.set_num_threads(1)


_THIS_MACHINE = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "", None)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test runs as on a machine without a network: a lookup of another host fails, and fails the test
    (subprocesses are checked where they run: tests/test_offline.py)."""
    import socket

    reached, lookup = [], socket.getaddrinfo

    def refuse(host, *args, **kwargs):
        if host in _THIS_MACHINE:
            return lookup(host, *args, **kwargs)
        reached.append(host)
        raise OSError(f"no network in tests: {host}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield reached  # the hosts looked up (a test of this guard empties it)
    assert not reached, f"the test reached for the network: {sorted(set(reached))}"


class GuessEpisode(Episode):
    """Guess the secret word within ``max_turns`` replies; the secret is in the task data."""

    def __init__(self, max_turns: int) -> None:
        self.max_turns = max_turns
        self.steps: list[str] = []

    def reset(self, task: Task) -> str:
        self.secret = task.data["secret"]
        self.reward, self.done, self.steps = 0.0, False, []
        return f"Guess the word (task {task.task_id})."

    def step(self, action: str):
        self.steps.append(action)
        if self.secret in action:
            self.reward, self.done = 1.0, True
            return None, 1.0, True, {}
        if len(self.steps) >= self.max_turns:
            self.done = True
            return None, 0.0, True, {}
        return f"Wrong guess #{len(self.steps)}. Try again.", 0.0, False, {}

    def feedback(self) -> str:
        return "FEEDBACK: solved." if self.reward else f"FEEDBACK: not solved after {len(self.steps)} guesses."

    def trace(self) -> str:
        return "\n".join(f"guess {i + 1}: {a}" for i, a in enumerate(self.steps)) or "(no guesses)"


class GuessEnv(Environment):
    name = "guess"
    system_prompt = "INITIAL-SYSTEM: guess a word."
    action_reminder = "Reply with one word."

    def __init__(self, max_turns: int = 2, n: int = 6) -> None:
        self.max_turns = max_turns
        self.n = n

    def new_episode(self) -> GuessEpisode:
        return GuessEpisode(self.max_turns)

    def train_tasks(self, n=None):
        words = ["apple", "berry", "cherry", "date", "elder", "fig", "grape", "honey"]
        return [Task(f"t{i}", None, {"secret": words[i % len(words)]}) for i in range(n or self.n)]

    def test_tasks(self, n=None):
        return self.train_tasks(n or 2)


@pytest.fixture
def guess_env() -> GuessEnv:
    return GuessEnv()


@pytest.fixture(scope="session")
def tok():
    from erl_lite.testing import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def tok_plain():
    from erl_lite.testing import tiny_tokenizer

    return tiny_tokenizer(chat_template=False)


def assert_close_rel(got: torch.Tensor, want: torch.Tensor, rel: float, msg: str = "") -> None:
    """Assert ``|got - want| <= rel x max|want|`` everywhere.

    The tolerance follows the magnitude of what is compared, not a fixed ``atol``: float sums
    taken in another order (AVX-512, AVX2 or plain kernels, x86 or ARM) differ by a few ulp of
    the largest terms, whatever their scale. Each caller says in a comment why its ``rel``.
    """
    scale = max(float(want.detach().abs().max()) if want.numel() else 0.0, torch.finfo(want.dtype).tiny)
    torch.testing.assert_close(got, want, rtol=0, atol=rel * scale, msg=msg or None)


@pytest.fixture(autouse=True, scope="module")
def _module_runs_in_a_fresh_folder(tmp_path_factory):
    """The same for a module's shared fixtures (they are built before any test's own folder)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path_factory.mktemp("module_cwd"))
        yield


@pytest.fixture(autouse=True)
def _run_in_a_fresh_folder(tmp_path, monkeypatch):
    """Every test runs in its own empty working directory: a run left at ERLConfig's default
    ``output_dir`` ("trainer_output", relative, as in transformers) lands there, never in the
    repository, and never meets another test's run."""
    monkeypatch.chdir(tmp_path)
