"""Every metric name erl_lite logs, once: the phases' and the update's keys, TRL's names. It imports only the
role names, so :mod:`erl_lite.core.update` writes the constants :mod:`erl_lite.metrics` describes and viz plots."""

from __future__ import annotations

from typing import Any

from erl_lite.records import ADVANTAGE_ROLES, FIRST, INTERNALIZATION, REFLECTION, ROLES, SECOND

STEP = "step"
REWARD_FIRST, REWARD_SECOND = "reward/first", "reward/second"
REWARD_FIRST_GATED = "reward/first_gated"
SUCCESS_FIRST, SUCCESS_SECOND = "success/first", "success/second"
GATE_RATE = "gate/rate"
REFLECTION_PARSE_RATE, REFLECTION_REWARD = "reflection/parse_rate", "reflection/reward"
MEMORY_SIZE, MEMORY_WRITES, MEMORY_TOTAL_WRITES = "memory/size", "memory/writes", "memory/total_writes"
TOKENS_FIRST, TOKENS_REFLECTION, TOKENS_SECOND = "tokens/first", "tokens/reflection", "tokens/second"
TURNS_FIRST, TRUNCATED_FIRST = "turns/first", "truncated/first"
TRUNCATED_REFLECTION, TRUNCATED_SECOND = "truncated/reflection", "truncated/second"
TIME_FIRST, TIME_REFLECT, TIME_SECOND = "time/first", "time/reflect", "time/second"
TIME_UPDATE, TIME_STEP = "time/update", "time/step"
TOKENS_PER_SECOND, PEAK_GPU_GB = "tokens/per_second", "memory/peak_gpu_gb"
LR = "lr"
INTERNALIZATION_WEIGHT = "internalization/weight"
ZERO_STD_FIRST = "frac_reward_zero_std/first"
ZERO_STD_REFLECTION = "frac_reward_zero_std/reflection"
ZERO_STD_SECOND = "frac_reward_zero_std/second"
#: The roles with GRPO groups (internalization has none).
ZERO_STD_KEYS = {FIRST: ZERO_STD_FIRST, REFLECTION: ZERO_STD_REFLECTION, SECOND: ZERO_STD_SECOND}
EVAL_REWARD, EVAL_SUCCESS, EVAL_NUM_EPISODES = "eval/reward", "eval/success", "eval/num_episodes"
EVAL_TRUNCATED = "eval/truncated"
# TRL 1.16's names (GRPOTrainer._generate_and_score_completions), for the first attempts.
TRL_REWARD, TRL_REWARD_STD, TRL_ZERO_STD = "reward", "reward_std", "frac_reward_zero_std"
LEN_MEAN, LEN_MIN, LEN_MAX = "completions/mean_length", "completions/min_length", "completions/max_length"
CLIPPED_RATIO = "completions/clipped_ratio"
TERM_MEAN, TERM_MIN, TERM_MAX = (
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
)

# The update's keys (core/update_stats.py writes them).
LOSS_KEYS = {role: f"loss/{role}" for role in ROLES}
ADVANTAGE_KEYS = {role: f"advantage/{role}" for role in ADVANTAGE_ROLES}
SAMPLES_KEYS = {role: f"samples/{role}" for role in ROLES}
#: Keys renamed since runs first wrote them (the internalization role was called "distill"), old -> new.
RENAMED_KEYS = {"loss/distill": LOSS_KEYS[INTERNALIZATION], "samples/distill": SAMPLES_KEYS[INTERNALIZATION]}
LOSS_TOTAL, KL, CLIP_RATIO, GRAD_NORM = "loss/total", "kl", "clip_ratio", "grad_norm"
OPTIM_STEPS, OPTIM_SKIPPED_STEPS = "optim/steps", "optim/skipped_steps"
WEIGHT_UPDATE = "weights/update_ratio"
#: The on-policy check: |sampler's log-prob - the update's own| per loss token, per sampled role.
GAP_MEAN_KEYS = {role: f"onpolicy/gap_mean/{role}" for role in ADVANTAGE_ROLES}
GAP_MAX_KEYS = {role: f"onpolicy/gap_max/{role}" for role in ADVANTAGE_ROLES}
GAP_TOKENS = "onpolicy/tokens"  # tokens compared (0: the sampler reports no log-probs)
GAP_STALE = "onpolicy/stale_weights"  # 1: a sampler drew from other weights than those the update scored
GAP_LIMIT = "onpolicy/tolerance"  # the mean gap a token past which the check fires: 1e-3 in fp32, 0.02 in 16 bits
GAP_RECORD = (*GAP_MEAN_KEYS.values(), *GAP_MAX_KEYS.values(), GAP_TOKENS, GAP_STALE, GAP_LIMIT)  # what the update logs
#: A diagnostic event's key is the check's name under this prefix (``diagnostics/parse_rate``).
DIAGNOSTICS_PREFIX = "diagnostics/"
#: An evaluation record's keys are the training keys under this prefix (``eval/success``).
EVAL_PREFIX = "eval/"


def current_names(row: dict[str, Any]) -> dict[str, Any]:
    """A history or step record (and its ``metrics``) with :data:`RENAMED_KEYS` in today's names: old runs read anew."""
    row = {RENAMED_KEYS.get(k, k): v for k, v in row.items()}
    return {**row, "metrics": current_names(row["metrics"])} if isinstance(row.get("metrics"), dict) else row
