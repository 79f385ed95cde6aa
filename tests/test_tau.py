"""τ (``ERLConfig.reward_threshold``) has one home: the gate, memory writes, ``success/*``, the episodes,
evaluation and the health checks read it alike, whatever the environment (issue 35, item 7).

Rewards are scaled with τ: a right answer earns 1.2 τ, a wrong one 0.9 τ (partial credit just below
τ), so at τ = 0.5 a success earns 0.6 and at τ = 2 a failure earns 1.8; both sat on the wrong side of
the old fixed ``reward >= 1`` while the gate read τ.
"""

from __future__ import annotations

import itertools
import re
from types import SimpleNamespace

import pytest

from erl_lite.config import ERLConfig
from erl_lite.core.env import Environment, Episode
from erl_lite.core.memory import ReflectionMemory
from erl_lite.core.phases import PhaseContext, attempt_first, erl_step
from erl_lite.core.prompts import REFLECTION_REQUEST
from erl_lite.diagnostics import RunFacts, scan
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.envs.multi import ENV_COLUMN, MultiEnvironment
from erl_lite.envs.rows import rows_to_tasks
from erl_lite.integrations import wiring
from erl_lite.integrations.dataset import RewardFunctionEnv
from erl_lite.integrations.trl_adapter import TRLEnvironment
from erl_lite.metric_names import EVAL_SUCCESS, GATE_RATE, SUCCESS_FIRST, SUCCESS_SECOND
from erl_lite.metrics import eval_metrics, step_metrics
from erl_lite.records import Task

TAUS = (0.5, 1.0, 2.0)
SECRETS = {"t0": "apple", "t1": "berry"}


def reply(prompt: str) -> str:
    """t0's first attempts miss; the reflection names its word; t1 is answered right at once."""
    task = re.findall(r"task (?:\w/)?(t\d)", prompt)[-1]
    if REFLECTION_REQUEST in prompt:
        return f"<prompt>RULEBOOK: the word is {SECRETS[task]}</prompt>"
    return "nope" if task == "t0" and "RULEBOOK" not in prompt else SECRETS[task]


def scaled(tau: float):
    def reward(completions, answer, **kw):
        return [1.2 * tau if a in str(c) else 0.9 * tau for c, a in zip(completions, answer)]

    return reward


class ScaledEpisode(Episode):
    """A plain custom episode: one reply, 1.2 τ when it names the word, else 0.9 τ (no ``success`` of its own)."""

    def __init__(self, tau: float, right: float = 1.2, wrong: float = 0.9) -> None:
        self.tau, self.right, self.wrong = tau, right, wrong

    def reset(self, task: Task) -> str:
        self.secret, self.reward, self.done = task.data["answer"], 0.0, False
        return f"Say the word (task {task.task_id})."

    def step(self, action: str):
        self.reward, self.done = (self.right if self.secret in action else self.wrong) * self.tau, True
        return None, self.reward, True, {}

    def feedback(self) -> str:
        return f"Reward {self.reward:g}."

    def trace(self) -> str:
        return self.feedback()


class ScaledEnv(Environment):
    name = "scaled"

    def __init__(self, tau: float, right: float = 1.2, wrong: float = 0.9) -> None:
        self.tau, self.right, self.wrong = tau, right, wrong

    def new_episode(self) -> Episode:
        return ScaledEpisode(self.tau, self.right, self.wrong)


class PlainTRL:
    """A TRL ``environment_factory`` class without tools: the reward functions score the reply."""

    def reset(self, **row):
        return None


def rows():
    return [{"id": t, "prompt": f"Say the word (task {t}).", "answer": w} for t, w in SECRETS.items()]


def _multi(cfg, tau):
    env = MultiEnvironment({"a": RewardFunctionEnv(scaled(tau)), "b": ScaledEnv(tau)})
    return env, env.tasks_from_rows([{**r, ENV_COLUMN: e} for r, e in zip(rows(), "ab")])


#: Every way an environment reaches a run: (config, τ) -> (environment, tasks).
ENVS = {
    "custom_env": lambda cfg, tau: (ScaledEnv(tau), rows_to_tasks(rows())),
    "reward_funcs_wired": lambda cfg, tau: (
        wiring.build_environment(cfg, None, None, scaled(tau), None, None, rows())[0],
        rows_to_tasks(rows()),
    ),
    "reward_funcs_by_hand": lambda cfg, tau: (RewardFunctionEnv(scaled(tau)), rows_to_tasks(rows())),
    "trl_env_wired": lambda cfg, tau: (
        wiring.build_environment(cfg, None, PlainTRL, scaled(tau), None, None, rows())[0],
        rows_to_tasks(rows()),
    ),
    "trl_env_by_hand": lambda cfg, tau: (TRLEnvironment(PlainTRL, scaled(tau)), rows_to_tasks(rows())),
    "multi_env": _multi,
}


def config(tau: float, **kw) -> ERLConfig:
    return ERLConfig.preset("cpu", **{"num_generations": 2, "reward_threshold": tau, **kw})


@pytest.mark.parametrize("tau", TAUS)
@pytest.mark.parametrize("kind", sorted(ENVS))
def test_gate_memory_and_success_read_one_tau(kind, tau, tok):
    cfg = config(tau)
    env, tasks = ENVS[kind](cfg, tau)
    memory = ReflectionMemory()
    out = erl_step(PhaseContext(ScriptedGenerator(tok, reply), tok, env, cfg), tasks, memory)
    m = step_metrics(out, memory, cfg.mode)
    # exact: 1.2 τ and 0.9 τ are products of one float, compared with the same products
    assert sorted(a.reward for a in out.first_attempts) == [0.9 * tau] * 2 + [1.2 * tau] * 2
    assert m[SUCCESS_FIRST] == 0.5 == 1 - m[GATE_RATE], m  # success/first counts what the gate let through
    assert m[SUCCESS_SECOND] == 1.0 and out.memory_writes == 2
    assert all(a.success == (a.reward >= tau) for a in out.first_attempts + out.second_attempts)


class OwnVerdict(ScaledEpisode):
    """An episode with its own success test (reward >= 1), which disagrees with τ = 0.5."""

    @property
    def success(self) -> bool:
        return self.reward >= 1.0


def test_an_episodes_own_success_that_disagrees_with_tau_is_refused(tok):
    env = ScaledEnv(0.5)
    env.new_episode = lambda: OwnVerdict(0.5)
    ctx = PhaseContext(ScriptedGenerator(tok, reply), tok, env, config(0.5))
    with pytest.raises(ValueError, match=r"OwnVerdict\.success.*reward_threshold=0\.5"):
        attempt_first(ctx, rows_to_tasks(rows()), 1)
    ctx = PhaseContext(ScriptedGenerator(tok, reply), tok, env, config(1.0))  # agrees at τ = 1: taken
    assert [a.success for a in attempt_first(ctx, rows_to_tasks(rows()), 1)] == [False, False]


@pytest.mark.parametrize("tau", TAUS)
@pytest.mark.parametrize("source", ["env", "reward_funcs"])
def test_erl_lite_eval_reads_the_checkpoints_tau(source, tau, tok, tmp_path, monkeypatch):
    """``erl-lite eval`` (evaluate_checkpoint) with the model and checkpoint stubbed: eval/success at τ."""
    import erl_lite.cli.evaluate as evaluate
    import erl_lite.engine.continuous as continuous
    import erl_lite.models as models

    cfg = config(tau)
    monkeypatch.setattr(evaluate, "_load_checkpoint", lambda c: (c, SimpleNamespace(step=1, run={}), cfg))
    monkeypatch.setattr(models, "load_policy", lambda *a, **k: (None, tok))
    import erl_lite.integrations.wiring as wiring

    monkeypatch.setattr(wiring, "generator_for", lambda *a, **k: ScriptedGenerator(tok, reply))
    monkeypatch.setattr(continuous, "end_phase", lambda g: None)
    if source == "env":
        monkeypatch.setattr(evaluate, "_evaluation_tasks", lambda *a: (ScaledEnv(tau), rows_to_tasks(rows())))
        got = evaluate.evaluate_checkpoint(str(tmp_path), env="demo", num_generations=2)
    else:
        (tmp_path / "rewards.py").write_text(
            f"def scaled(completions, answer, **kw):\n"
            f"    return [{1.2 * tau!r} if a in str(c) else {0.9 * tau!r} for c, a in zip(completions, answer)]\n"
        )
        (tmp_path / "eval.jsonl").write_text("\n".join(__import__("json").dumps(r) for r in rows()))
        got = evaluate.evaluate_checkpoint(
            str(tmp_path),
            dataset=str(tmp_path / "eval.jsonl"),
            num_generations=2,
            reward_funcs=[f"{tmp_path / 'rewards.py'}:scaled"],
        )
    assert got[EVAL_SUCCESS] == 0.5, got


def test_evaluation_in_python_reads_tau(tok):
    ctx = PhaseContext(ScriptedGenerator(tok, reply), tok, ScaledEnv(0.5), config(0.5))
    assert eval_metrics(attempt_first(ctx, rows_to_tasks(rows()), 2, params=ctx.eval_params()))[EVAL_SUCCESS] == 0.5


def _alternating():
    """0/1 rewards whose groups split: every other reply names the word."""
    turn = itertools.count()

    def play(prompt: str) -> str:
        if REFLECTION_REQUEST in prompt:
            return "<prompt>RULEBOOK: guess</prompt>"
        task = re.findall(r"task (?:\w/)?(t\d)", prompt)[-1]
        return SECRETS[task] if next(turn) % 2 else "nope"

    return play


@pytest.mark.parametrize("tau, check", [(2.0, "gate_always"), (0.0, "gate_never")])
def test_a_misplaced_tau_is_named_from_real_step_records(tau, check, tok):
    """0/1 rewards: τ = 2 gates every attempt, τ = 0 none, though each group holds a 1 and a 0."""
    cfg = config(tau)
    records = []
    for step in range(1, 6):
        memory = ReflectionMemory()
        ctx = PhaseContext(ScriptedGenerator(tok, _alternating()), tok, ScaledEnv(1.0, 1.0, 0.0), cfg)
        out = erl_step(ctx, rows_to_tasks(rows()), memory)
        records.append({"kind": "train", "step": step, **step_metrics(out, memory, cfg.mode)})
    assert check in [f.name for f in scan(records, RunFacts.of(cfg))], records[-1]
