"""The health checks on each step's record: what each reads, how long it must hold, what it tells.

A check judges a *window* of consecutive training records (one noisy step never fires) and fires on the
first window where it holds after one where it did not: once per episode. :func:`scan` replays a history,
:func:`fired_at` answers for the newest step from the same records, so a live run and a report agree.
The paper has none; the thresholds keep the embedded demo's healthy run free of warnings.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from itertools import groupby
from typing import Any, Callable, Mapping, Sequence

from erl_lite import metric_names as keys
from erl_lite.config import ERLConfig
from erl_lite.config.checks import reflects
from erl_lite.records import INTERNALIZATION

WARNING, NOTE = "warning", "note"

#: A group share above which first attempts carry (almost) no signal; the demo's solved end sits at 0.75-1.0.
SILENT_GROUPS = 0.75
#: Below it the trainable weights count as not moving: at 1e-8 a step, 1,000 steps move them by 1e-5.
FROZEN_RATIO = 1e-8


@dataclass(frozen=True)
class RunFacts:
    """The settings the checks read, from an :class:`~erl_lite.config.ERLConfig` or a saved ``training_args.json``."""

    mode: str = "erl"
    use_reflection: bool = True
    use_memory: bool = True
    use_internalization: bool = True
    reward_threshold: float = ERLConfig.reward_threshold
    learning_rate: float | None = None
    beta: float | None = None
    max_completion_length: int | None = None
    max_reflection_length: int | None = None
    max_steps: int | None = None
    pretrained: bool = True  # the live run reads it from its model; a saved run's report assumes pretrained weights

    @classmethod
    def of(cls, settings: Any = None) -> "RunFacts":
        """From a config object or a dict of its fields; what is missing takes ERLConfig's default."""
        defaults = {f.name: getattr(ERLConfig, f.name, None) for f in fields(cls) if f.name != "max_steps"}
        given = settings if isinstance(settings, Mapping) else vars(settings) if settings is not None else {}
        values = {**defaults, **{k: v for k, v in given.items() if v is not None}}
        return cls(**{f.name: values[f.name] for f in fields(cls) if values.get(f.name) is not None})

    @property
    def reflects(self) -> bool:
        """Whether gated tasks get a reflection (ERL modes with reflection on)."""
        return reflects(self.mode) and self.use_reflection


@dataclass(frozen=True)
class Finding:
    """One episode of a check's condition: where it began (``step``, the first full window's end) and ended."""

    name: str
    level: str  # WARNING or NOTE
    step: int
    saw: str
    means: str
    tries: str
    last_step: int | None = None  # the episode's last step (filled by scan; None while it is open)

    def message(self) -> str:
        """What the check saw, what that usually means, and what to try, in one paragraph."""
        return f"erl_lite {self.level} [{self.name}] at step {self.step}: {self.saw}. {self.means}. Try: {self.tries}."

    def to_record(self) -> dict[str, Any]:
        """The ``history.jsonl`` event (kind ``diagnostic``); trackers receive the 1.0 as a marker at its step."""
        return {
            "step": self.step,
            keys.DIAGNOSTICS_PREFIX + self.name: 1.0,
            "level": self.level,
            "message": self.message(),
            "saw": self.saw,
            "means": self.means,
            "tries": self.tries,
        }


@dataclass(frozen=True)
class Check:
    """A named rule: the metric keys it reads, its window, its judge, and its advice (``{field}``: RunFacts fields)."""

    name: str
    reads: tuple[str, ...]
    window: int
    judge: Callable[[Sequence[Mapping[str, Any]], RunFacts], str | None]
    means: str
    tries: str
    level: str = WARNING

    def finding(self, window: Sequence[Mapping[str, Any]], facts: RunFacts) -> Finding | None:
        """The finding this window shows, or None (too few records, or the condition does not hold)."""
        if len(window) < self.window:
            return None
        saw = self.judge(window[-self.window :], facts)
        if saw is None:
            return None
        means, tries = (text.format(**asdict(facts)) for text in (self.means, self.tries))
        return Finding(
            name=self.name, level=self.level, step=int(window[-1]["step"]), saw=saw, means=means, tries=tries
        )


def _get(record: Mapping[str, Any], key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _all(window: Sequence[Mapping[str, Any]], key: str, holds: Callable[[float], bool]) -> bool:
    return all((v := _get(r, key)) is not None and holds(v) for r in window)


def _mean(window: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [v for r in window if (v := _get(r, key)) is not None]
    return sum(values) / len(values) if values else None


def _steps(window: Sequence[Mapping[str, Any]]) -> str:
    return f"steps {int(window[0]['step'])}-{int(window[-1]['step'])}"


def _silent(window: Sequence[Mapping[str, Any]]) -> str:
    share = _mean(window, keys.ZERO_STD_FIRST)
    return f"{share:.0%} of first-attempt groups had one reward for all rollouts ({_steps(window)})"


def _solved(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    if _all(w, keys.ZERO_STD_FIRST, lambda v: v >= SILENT_GROUPS) and _all(w, keys.SUCCESS_FIRST, lambda v: v >= 0.9):
        return f"{_silent(w)}, and first attempts succeeded {_mean(w, keys.SUCCESS_FIRST):.0%}"
    return None


def _stuck(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    second_fails = not facts.reflects or all((_get(r, keys.SUCCESS_SECOND) or 0.0) <= 0.1 for r in w)
    if (
        _all(w, keys.ZERO_STD_FIRST, lambda v: v >= SILENT_GROUPS)
        and _all(w, keys.SUCCESS_FIRST, lambda v: v <= 0.1)
        and second_fails
    ):
        second = f", second attempts {_mean(w, keys.SUCCESS_SECOND) or 0.0:.0%}" if facts.reflects else ""
        return f"{_silent(w)}, and first attempts succeeded {_mean(w, keys.SUCCESS_FIRST):.0%}{second}"
    return None


def _no_signal(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    if _all(w, keys.ZERO_STD_FIRST, lambda v: v >= 0.9) and _solved(w, facts) is None and _stuck(w, facts) is None:
        return f"{_silent(w)}, with first attempts at {_mean(w, keys.SUCCESS_FIRST) or 0.0:.0%} success"
    return None


def _parse_rate(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    if not facts.reflects or not _all(w, keys.REFLECTION_PARSE_RATE, lambda v: v < 0.5):
        return None
    cut = _mean(w, keys.TRUNCATED_REFLECTION)
    return f"{keys.REFLECTION_PARSE_RATE} was {_mean(w, keys.REFLECTION_PARSE_RATE):.2f} over {_steps(w)}" + (
        f", with {cut:.0%} of reflections cut at max_reflection_length" if cut else ""
    )


def _memory_empty(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    if not (facts.reflects and facts.use_memory) or not _all(w, keys.GATE_RATE, lambda v: v > 0):
        return None
    if _get(w[-1], keys.MEMORY_TOTAL_WRITES) != 0.0:
        return None
    return (
        f"tasks were gated on every one of {_steps(w)}, yet {keys.MEMORY_TOTAL_WRITES} is 0 "
        f"(parse rate {_mean(w, keys.REFLECTION_PARSE_RATE) or 0.0:.2f}, second-attempt success "
        f"{_mean(w, keys.SUCCESS_SECOND) or 0.0:.0%})"
    )


def _gate_fixed(w: Sequence[Mapping[str, Any]], facts: RunFacts, rate: float) -> str | None:
    """Every step's gate rate is ``rate`` although rewards differ within groups: τ sorts nothing."""
    if (
        not reflects(facts.mode)
        or not _all(w, keys.GATE_RATE, lambda v: v == rate)
        or not _all(w, keys.ZERO_STD_FIRST, lambda v: v < SILENT_GROUPS)
    ):
        return None
    return (
        f"{keys.GATE_RATE} was {rate:.2f} on every one of {_steps(w)}, though rewards differed within "
        f"{1 - _mean(w, keys.ZERO_STD_FIRST):.0%} of the first-attempt groups"
    )


def _second_not_better(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    if not facts.reflects:
        return None
    pairs = [(_get(r, keys.REWARD_SECOND), _get(r, keys.REWARD_FIRST_GATED)) for r in w]
    if all(r2 is not None and r1 is not None and r2 <= r1 for r2, r1 in pairs):
        return (
            f"on the gated tasks, second attempts scored {_mean(w, keys.REWARD_SECOND):.2f} against their first "
            f"attempts' {_mean(w, keys.REWARD_FIRST_GATED):.2f} on every one of {_steps(w)}"
        )
    return None


def _internalization_zero(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    rows = keys.SAMPLES_KEYS[INTERNALIZATION]
    if (
        facts.reflects
        and facts.use_internalization
        and _all(w, rows, lambda v: v > 0)
        and _all(w, keys.INTERNALIZATION_WEIGHT, lambda v: v == 0.0)
    ):
        return f"every internalization row of {_steps(w)} had weight 0 ({keys.INTERNALIZATION_WEIGHT})"
    return None


_CUT_KEYS = (
    (keys.TRUNCATED_FIRST, "first attempts", "max_completion_length={max_completion_length}"),
    (keys.TRUNCATED_REFLECTION, "reflections", "max_reflection_length={max_reflection_length}"),
    (keys.TRUNCATED_SECOND, "second attempts", "max_completion_length={max_completion_length}"),
)


def _truncation(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    cut = [
        f"{what} {_mean(w, key):.0%} ({key}, budget {budget.format(**asdict(facts))})"
        for key, what, budget in _CUT_KEYS
        if _all(w, key, lambda v: v >= 0.5)
    ]
    return f"replies were cut at their length budget over {_steps(w)}: " + "; ".join(cut) if cut else None


def _frozen(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    # A step with no advantage, no internalization weight and no gradient had nothing to learn (a solved run).
    moved = all(_had_signal(r) or (_get(r, keys.GRAD_NORM) or 0.0) > 0 for r in w)
    if moved and _all(w, keys.OPTIM_STEPS, lambda v: v > 0) and _all(w, keys.WEIGHT_UPDATE, lambda v: v < FROZEN_RATIO):
        steps = sum(_get(r, keys.OPTIM_STEPS) or 0 for r in w)
        return f"{keys.WEIGHT_UPDATE} stayed below {FROZEN_RATIO:g} through {steps:.0f} optimizer steps ({_steps(w)})"
    return None


#: Share of their norm one optimizer step may move the weights: between SmolLM2-135M's LoRA at 1e-3 (4.7%; 1e-5:
#: 0.047%, `pytest -s -m realmodel tests/test_realmodel.py -k large_step`) and the committed demo at 1e-3 (1.9%).
LARGE_STEP = 0.03


def _large_step(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    steps, moved = _get(w[-1], keys.OPTIM_STEPS) or 0.0, _get(w[-1], keys.WEIGHT_UPDATE) or 0.0
    if facts.pretrained and steps > 0 and moved / steps > LARGE_STEP:
        return f"{keys.WEIGHT_UPDATE} was {moved:.3g} over {steps:.0f} optimizer step(s), over {LARGE_STEP:.0%} a step"
    return None


def _had_signal(r: Mapping[str, Any]) -> bool:
    return any((_get(r, key) or 0.0) > 0 for key in (*keys.ADVANTAGE_KEYS.values(), keys.INTERNALIZATION_WEIGHT))


#: Mean |sampler's log-prob - the update's| per token (both under the sampler's top-k / top-p cut) past which a role
#: is off-policy, where a history has no onpolicy/tolerance (the update logs 1e-3 for fp32, this for 16-bit weights).
#: Stale weights are caught exactly by their version counters (onpolicy/stale_weights).
GAP_TOLERANCE = 0.02


def _off_policy(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    if _all(w, keys.GAP_STALE, lambda v: v > 0):
        return f"{keys.GAP_STALE} was 1 on {_steps(w)}: a sampler drew from weights the update did not score"
    for key in keys.GAP_MEAN_KEYS.values():
        limit = _get(w[-1], keys.GAP_LIMIT) or GAP_TOLERANCE
        if _all(w, keys.GAP_TOKENS, lambda v: v > 0) and _all(w, key, lambda v: v > limit):
            return f"{key} was {_get(w[-1], key):.3g} on {_steps(w)} (tolerance {limit:g})"
    return None


def _zero_grad(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    if (
        _all(w, keys.OPTIM_STEPS, lambda v: v > 0)
        and _all(w, keys.GRAD_NORM, lambda v: v == 0.0)
        and all(map(_had_signal, w))
    ):
        return f"{keys.GRAD_NORM} was 0 on {_steps(w)} although their rows had non-zero advantages or weights"
    return None


def _non_finite(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    def bad(r: Mapping[str, Any]) -> bool:
        values = [_get(r, k) for k in (keys.LOSS_TOTAL, keys.GRAD_NORM, keys.KL)]
        return (_get(r, keys.OPTIM_SKIPPED_STEPS) or 0.0) > 0 or any(
            v is not None and not math.isfinite(v) for v in values
        )

    n = sum(map(bad, w))
    return f"{n} of {_steps(w)} had a non-finite loss or gradient ({keys.OPTIM_SKIPPED_STEPS})" if n >= 2 else None


def _kl_growth(w: Sequence[Mapping[str, Any]], facts: RunFacts) -> str | None:
    values = [_get(r, keys.KL) for r in w]
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    rising = all(b > a for a, b in zip(values, values[1:]))
    if rising and values[-1] >= 0.05 and values[-1] >= 2 * values[0]:
        return f"{keys.KL} rose " + " -> ".join(f"{v:.3f}" for v in values) + f" over {_steps(w)}"
    return None


CHECKS: tuple[Check, ...] = (
    Check(
        name="solved",
        reads=(keys.ZERO_STD_FIRST, keys.SUCCESS_FIRST),
        window=3,
        judge=_solved,
        means="The task is solved for this model: its groups have nothing left to teach (not a fault)",
        tries="stop early, or add harder tasks",
        level=NOTE,
    ),
    Check(
        name="stuck",
        reads=(keys.ZERO_STD_FIRST, keys.SUCCESS_FIRST, keys.SUCCESS_SECOND),
        window=3,
        judge=_stuck,
        means="Almost every group failed on every rollout, so the reward gives no learning signal: the task is too "
        "hard for this model",
        tries="raise num_generations (G) so a group holds a success, start with easier tasks, or add a format or "
        "partial-credit reward to reward_funcs",
    ),
    Check(
        name="no_signal",
        reads=(keys.ZERO_STD_FIRST, keys.SUCCESS_FIRST),
        window=3,
        judge=_no_signal,
        means="Each task is all-or-nothing for this model, so GRPO's advantages are 0 and the policy loss is empty",
        tries="raise num_generations (G) or temperature, or mix easier and harder tasks",
    ),
    Check(
        name="parse_rate",
        reads=(keys.REFLECTION_PARSE_RATE, keys.TRUNCATED_REFLECTION),
        window=3,
        judge=_parse_rate,
        means="Reflections rarely hold a <prompt>...</prompt> block that states a rule, so second attempts get no "
        "rulebook and memory stays empty",
        tries="read a reflection in samples.jsonl; raise max_reflection_length={max_reflection_length} if they are "
        "cut; a small model writes the block when the turn starts with it: reflection_prefill='<prompt>\\n1.'",
    ),
    Check(
        name="memory_empty",
        reads=(keys.GATE_RATE, keys.MEMORY_TOTAL_WRITES, keys.REFLECTION_PARSE_RATE, keys.SUCCESS_SECOND),
        window=5,
        judge=_memory_empty,
        means="A rulebook is stored only when its reflection parses and its second attempt reaches "
        "reward_threshold={reward_threshold}",
        tries="fix the reflection parse rate or the second attempts first (see the other checks)",
    ),
    Check(
        name="gate_always",
        reads=(keys.GATE_RATE, keys.ZERO_STD_FIRST, keys.SUCCESS_SECOND),
        window=5,
        judge=lambda w, facts: _gate_fixed(w, facts, 1.0) if _all(w, keys.SUCCESS_SECOND, lambda v: v == 0.0) else None,
        means="reward_threshold={reward_threshold} is above the reward a success earns, so nothing passes the gate",
        tries="set reward_threshold to a success's reward (1.0 for 0/1 rewards), or rescale the reward; with "
        "partial credit on a hard task, start with easier tasks",
    ),
    Check(
        name="gate_never",
        reads=(keys.GATE_RATE, keys.ZERO_STD_FIRST),
        window=5,
        judge=lambda w, facts: _gate_fixed(w, facts, 0.0),
        means="reward_threshold={reward_threshold} is at or below the reward of failed attempts, so no failure is "
        "reflected on",
        tries="raise reward_threshold to a success's reward",
    ),
    Check(
        name="second_not_better",
        reads=(keys.REWARD_SECOND, keys.REWARD_FIRST_GATED),
        window=5,
        judge=_second_not_better,
        means="The reflections carry nothing the second attempt can use",
        tries="read reflections and second attempts in samples.jsonl; make the environment's feedback say what went "
        "wrong; a stronger model reflects better; pre-flight's system_dropped: the chat template loses rulebooks",
    ),
    Check(
        name="internalization_zero",
        reads=(keys.SAMPLES_KEYS[INTERNALIZATION], keys.INTERNALIZATION_WEIGHT),
        window=3,
        judge=_internalization_zero,
        means="No second attempt scored above 0, so self-distillation learns nothing (raft weighs a row by max(r2, 0))",
        tries="see success/second; with rewards at or below 0 for every outcome, shift them so a success is positive",
    ),
    Check(
        name="truncation",
        reads=tuple(key for key, _, _ in _CUT_KEYS),
        window=3,
        judge=_truncation,
        means="Cut replies end without an answer and without the end-of-turn token the model should learn",
        tries="raise the budget named, ask for shorter replies, or check the model ends its turns (pre-flight)",
    ),
    Check(
        name="frozen_weights",
        reads=(keys.OPTIM_STEPS, keys.WEIGHT_UPDATE),
        window=3,
        judge=_frozen,
        means="The trainable weights are not moving",
        tries="learning_rate={learning_rate} may be too small for these weights (bf16 rounds small updates away); "
        "check that the adapter is trainable and on the intended modules (the pre-flight lists them)",
    ),
    Check(
        name="large_step",
        reads=(keys.OPTIM_STEPS, keys.WEIGHT_UPDATE),
        window=1,
        judge=_large_step,
        means="One optimizer step moved the weights by a large share of their norm: a pretrained model forgets its "
        "format",
        tries="lower learning_rate={learning_rate}; LoRA on a pretrained model trains at 1e-6 to 1e-4",
    ),
    Check(
        name="zero_grad",
        reads=(keys.OPTIM_STEPS, keys.GRAD_NORM, *keys.ADVANTAGE_KEYS.values()),
        window=2,
        judge=_zero_grad,
        means="The loss does not reach the trainable weights",
        tries="check model.print_trainable_parameters() and that lora_target_modules names modules the forward uses",
    ),
    Check(
        name="non_finite",
        reads=(keys.OPTIM_SKIPPED_STEPS, keys.LOSS_TOTAL, keys.GRAD_NORM, keys.KL),
        window=3,
        judge=_non_finite,
        means="Numbers overflowed: a learning rate too high, fp16 overflow, or a reward that is NaN or infinite",
        tries="lower learning_rate={learning_rate}, train in bf16 or fp32, and check that the rewards are finite",
    ),
    Check(
        name="off_policy",
        reads=(keys.GAP_TOKENS, keys.GAP_STALE, keys.GAP_LIMIT, *keys.GAP_MEAN_KEYS.values()),
        window=1,
        judge=_off_policy,
        means="The sampler's log-probs are not the update's: rollouts come from another distribution than the loss "
        "scores",
        tries="look for a penalty or logits processor outside ERLConfig (a custom generator), another temperature in "
        "the sampler, a low-precision sampler, or weights the sampler did not get after a step",
    ),
    Check(
        name="kl_growth",
        reads=(keys.KL,),
        window=4,
        judge=_kl_growth,
        means="The policy is leaving the reference fast; runs that do this often collapse a few steps later",
        tries="lower learning_rate={learning_rate} or raise beta={beta}",
    ),
)

#: The checks by name.
CHECKS_BY_NAME: dict[str, Check] = {c.name: c for c in CHECKS}


def train_records(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("kind", "train") == "train"]


def scan(records: Sequence[Mapping[str, Any]], facts: RunFacts, checks: Sequence[Check] = CHECKS) -> list[Finding]:
    """Every episode of every check over a history's records, in step order, each with its ``last_step``."""
    train = train_records(records)
    found: list[Finding] = []
    for check in checks:
        judged = [(check.finding(train[max(0, i + 1 - check.window) : i + 1], facts), r) for i, r in enumerate(train)]
        for fired, episode in groupby(judged, key=lambda pair: pair[0] is not None):  # a run of windows that hold
            if fired:
                windows = list(episode)
                found.append(replace(windows[0][0], last_step=int(windows[-1][1]["step"])))
    return sorted(found, key=lambda f: (f.step, f.name))


def fired_at(records: Sequence[Mapping[str, Any]], facts: RunFacts, checks: Sequence[Check] = CHECKS) -> list[Finding]:
    """The episodes that begin at the newest training record (what a live run prints after its step)."""
    train = train_records(records)
    out = []
    for check in checks:
        now = check.finding(train[-check.window :], facts)
        if now is not None and check.finding(train[-check.window - 1 : -1], facts) is None:  # None when too short
            out.append(now)
    return out
