"""The ERL phases on a scripted policy: who sees what, gate, memory, advantages, targets."""

from __future__ import annotations

import re

import pytest

from erl_lite.config import ERLConfig
from erl_lite.core.memory import ReflectionMemory
from erl_lite.core.phases import (
    PhaseContext,
    assign_advantages,
    attempt_first,
    erl_step,
    gate,
    internalize,
)
from erl_lite.core.prompts import REFLECTION_REQUEST, RETRY_HEADER
from erl_lite.engine.generation import ScriptedGenerator

SECRETS = {"t0": "apple", "t1": "berry", "t2": "cherry", "t3": "date"}


def script(fail_first=("t0", "t1"), fail_second=(), tags=True):
    """First attempts fail on ``fail_first``; reflections name the secret; second attempts use it."""

    def reply(prompt: str) -> str:
        task = re.findall(r"task (t\d+)", prompt)[-1]
        if REFLECTION_REQUEST in prompt:
            body = f"RULEBOOK: the word is {SECRETS[task]}"
            return f"<prompt>{body}</prompt>" if tags else body
        if "RULEBOOK" in prompt:
            return "nope" if task in fail_second else SECRETS[task]
        return "FIRST-REPLY nope" if task in fail_first else SECRETS[task]

    return reply


def make_ctx(env, tok, reply, **cfg):
    config = ERLConfig.preset("cpu", **{"num_generations": 2, **cfg})
    return PhaseContext(ScriptedGenerator(tok, reply), tok, env, config)


def tasks_of(env, n=4):
    return env.train_tasks(n)


def test_first_attempts_are_batched_and_use_the_initial_prompt(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script())
    first = attempt_first(ctx, tasks_of(guess_env), 2)
    assert len(first) == 8 and [a.index for a in first[:2]] == [0, 1]
    assert all(a.system_prompt == guess_env.system_prompt for a in first)
    # two turns at most: one call for turn 1, one for the failed episodes' turn 2
    assert ctx.generator.calls == 2
    assert [a.success for a in first] == [False, False, False, False, True, True, True, True]
    assert all(a.num_turns == 2 for a in first[:4]) and all(a.num_turns == 1 for a in first[4:])


def test_gate_is_strictly_below_threshold(guess_env, tok):
    first = attempt_first(make_ctx(guess_env, tok, script()), tasks_of(guess_env), 2)
    failed = gate(first, 1.0)
    assert {a.task_id for a in failed} == {"t0", "t1"} and len(failed) == 4


def test_memory_is_never_shown_to_first_attempts(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script())
    memory = ReflectionMemory()
    memory.maybe_store("MEMORY-MARKER rulebook", 1.0, 1.0)
    erl_step(ctx, tasks_of(guess_env), memory)
    first_prompts = [p for p in ctx.generator.prompts_seen if REFLECTION_REQUEST not in p and "RULEBOOK" not in p]
    refl_prompts = [p for p in ctx.generator.prompts_seen if REFLECTION_REQUEST in p]
    assert first_prompts and not any("MEMORY-MARKER" in p for p in first_prompts)
    assert refl_prompts and all("MEMORY-MARKER" in p for p in refl_prompts)


def test_reflection_sees_trace_reward_feedback_and_second_attempt_sees_only_delta(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script())
    erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    refl = [p for p in ctx.generator.prompts_seen if REFLECTION_REQUEST in p]
    assert all("FIRST-REPLY" in p and "FEEDBACK: not solved" in p and "reward 0" in p for p in refl)
    assert all(guess_env.system_prompt in p for p in refl)  # base = initial prompt (memory empty)
    second = [p for p in ctx.generator.prompts_seen if "RULEBOOK" in p and REFLECTION_REQUEST not in p]
    assert len(second) == 4
    for p in second:
        assert "FIRST-REPLY" not in p and "FEEDBACK" not in p
        assert guess_env.action_reminder in p and guess_env.system_prompt not in p


def test_one_generate_call_per_phase_for_single_turn(tok):
    from conftest import GuessEnv

    env = GuessEnv(max_turns=1)
    ctx = make_ctx(env, tok, script())
    out = erl_step(ctx, tasks_of(env), ReflectionMemory())
    assert ctx.generator.calls == 3  # first attempts, reflections, second attempts
    assert len(out.reflections) == len(out.second_attempts) == 4


def test_memory_fills_on_successful_second_attempt_with_binary_rewards(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(fail_second=("t1",)))
    memory = ReflectionMemory()
    out = erl_step(ctx, tasks_of(guess_env), memory)
    assert [a.reward for a in out.second_attempts] == [1.0, 1.0, 0.0, 0.0]
    assert out.memory_writes == 2 and memory.entries == ["RULEBOOK: the word is apple"]
    assert [r.reward for r in out.reflections] == [1.0, 1.0, 0.0, 0.0]  # r̃ = r2


def test_unparsed_reflection_falls_back_to_base_and_is_not_stored(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(tags=False))
    memory = ReflectionMemory()
    out = erl_step(ctx, tasks_of(guess_env), memory)
    assert all(not r.parsed and r.rulebook == guess_env.system_prompt for r in out.reflections)
    assert len(memory) == 0


def test_no_memory_ablation_keeps_memory_empty_and_shows_initial_prompt(guess_env, tok):
    from erl_lite.run.trainer import ERLTrainer
    from erl_lite.testing import tiny_model

    args = ERLConfig.preset(
        "cpu",
        use_memory=False,
        max_steps=1,
        num_generations=2,
        num_tasks_per_step=4,
        eval_steps=0,
        progress_bar=False,
        beta=0.0,
    )
    gen = ScriptedGenerator(tok, script())
    trainer = ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        env=guess_env,
        train_dataset=tasks_of(guess_env),
        generator=gen,
    )
    trainer.memory.maybe_store("MEMORY-MARKER", 1.0, 1.0)
    trainer.train()
    assert trainer.memory.entries == ["MEMORY-MARKER"]  # the ablation neither reads nor writes it
    refl = [p for p in gen.prompts_seen if REFLECTION_REQUEST in p]
    assert refl and not any("MEMORY-MARKER" in p for p in gen.prompts_seen)
    assert all(guess_env.system_prompt in p for p in refl)


def test_no_reflection_ablation_retries_with_the_raw_attempt(guess_env, tok):
    seen = []

    def reply(prompt):
        seen.append(prompt)
        task = re.findall(r"task (t\d+)", prompt)[-1]
        return (
            SECRETS[task] if RETRY_HEADER in prompt else ("FIRST-REPLY nope" if task in ("t0", "t1") else SECRETS[task])
        )

    ctx = make_ctx(guess_env, tok, reply, use_reflection=False)
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    assert out.reflections == [] and not any(REFLECTION_REQUEST in p for p in seen)
    assert len(out.second_attempts) == 4 and all(a.success for a in out.second_attempts)
    assert all(
        "FEEDBACK: not solved" in a.system_prompt and "FIRST-REPLY" in a.system_prompt for a in out.second_attempts
    )
    assert {s.role for s in out.samples} == {"first", "second", "internalization"}


def test_advantages_grouped_per_task_and_role_with_singletons(tok):
    """Through erl_step: t0 fails one of its 3 first attempts (a singleton for reflection and
    second attempt: A = r2), t1 fails two whose second attempts differ (grouped within t1)."""
    from collections import Counter

    from conftest import GuessEnv

    first_ok = {"t0": [False, True, True], "t1": [False, False, True]}  # per rollout
    second_ok = {"t0": [True], "t1": [True, False]}  # per failed rollout, in order
    seen: Counter = Counter()

    def reply(prompt):
        task = re.findall(r"task (t\d+)", prompt)[-1]
        if REFLECTION_REQUEST in prompt:
            return f"<prompt>RULEBOOK: the word is {SECRETS[task]}</prompt>"
        kind = "second" if "RULEBOOK" in prompt else "first"
        n = seen[kind, task]
        seen[kind, task] += 1
        ok = (second_ok if kind == "second" else first_ok)[task][n]
        return SECRETS[task] if ok else "nope"

    env = GuessEnv(max_turns=1)
    out = erl_step(make_ctx(env, tok, reply, num_generations=3), tasks_of(env, 2), ReflectionMemory())
    by: dict = {}
    for s in out.samples:
        by.setdefault((s.role, s.task_id), []).append(s.advantage)
    hand = lambda *values: pytest.approx(values, abs=1e-4)  # the hand-worked figures have 4 decimals
    # Worked by hand: rewards (0, 1, 1) have mean 2/3 and sample std sqrt(1/3).
    assert by[("first", "t0")] == hand(-1.1547, 0.5774, 0.5774)
    assert by[("first", "t1")] == hand(-0.5774, -0.5774, 1.1547)
    assert by[("reflection", "t0")] == [1.0] and by[("second", "t0")] == [1.0]  # singleton: A = r2
    assert by[("reflection", "t1")] == hand(0.7071, -0.7071) == by[("second", "t1")]  # r2 = (1, 0) in t1
    assert by[("internalization", "t0")] == [1.0] and by[("internalization", "t1")] == [
        1.0,
        0.0,
    ]  # max(r2, 0), no baseline


def test_singleton_group_gets_its_reward():
    from erl_lite.records import Attempt, Reflection, Retry

    def att(task, idx, r, role):
        return Attempt(task, role, idx, "s", [], [1], [2], [1], r, r >= 1, "f", "t", 1)

    first = [att("a", 0, 0.0, "first"), att("a", 1, 1.0, "first"), att("b", 0, 0.0, "first"), att("b", 1, 0.0, "first")]
    second = [att("a", 0, 1.0, "second"), att("b", 0, 0.0, "second"), att("b", 1, 1.0, "second")]
    retries = [
        Retry(y1, Reflection(y2.task_id, y2.index, "base", "x", "x", True, [1], [2]), y2)
        for y1, y2 in zip([first[0], first[2], first[3]], second)
    ]
    samples = assign_advantages(ERLConfig(), first, retries)
    by = {(s.role, s.task_id): [] for s in samples}
    for s in samples:
        by[(s.role, s.task_id)].append(round(s.advantage, 4))
    assert by[("reflection", "a")] == [1.0]  # singleton: A = r
    assert by[("second", "a")] == [1.0]
    assert by[("reflection", "b")] == [-0.7071, 0.7071]  # grouped within task b only
    assert by[("first", "a")] == [-0.7071, 0.7071] and by[("first", "b")] == [0.0, 0.0]


def test_internalization_targets_use_initial_context_and_end_with_eos(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script())
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    internalized = [s for s in out.samples if s.role == "internalization"]
    first_header = {a.task_id: a.prompt_ids for a in out.first_attempts}
    assert len(internalized) == 4 == len(out.retries)
    for s, a in zip(internalized, out.second_attempts):
        assert s.prompt_ids == first_header[s.task_id]
        assert "RULEBOOK" not in tok.decode(s.prompt_ids) and guess_env.system_prompt in tok.decode(s.prompt_ids)
        assert s.completion_ids == a.completion_ids and s.completion_ids[-1] == tok.eos_token_id
        assert s.advantage == 1.0


def test_internalization_weights_follow_the_mode():
    from erl_lite.records import Attempt, Retry

    first = Attempt("a", "first", 0, "s", [], [9], [2, 3], [1, 1], 0.0, False, "f", "t", 1)
    retries = [
        Retry(first, None, Attempt("a", "second", i, "s", [], [1], [2, 3], [1, 1], r, r >= 1, "f", "t", 1))
        for i, r in enumerate([0.0, 0.5, 1.0])
    ]
    raft = internalize(retries, "raft", 2.0, [3])
    nll = internalize(retries, "nll", 1.0, [3])
    assert [s.advantage for s in raft] == [0.0, 1.0, 2.0] and [s.advantage for s in nll] == [0.0, 1.0, 1.0]
    assert all(s.prompt_ids == [9] and s.completion_ids == [2, 3] for s in raft + nll)


def test_erl_simple_trains_only_first_attempts_with_combined_reward(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(fail_second=("t1",)), mode="erl_simple")
    out = erl_step(ctx, tasks_of(guess_env, 2), ReflectionMemory())
    assert {s.role for s in out.samples} == {"first"}
    # t0's failed rollouts were rescued by r2 = 1 -> all combined rewards equal -> 0; t1 stays 0
    assert all(s.advantage == 0 for s in out.samples)


def test_rlvr_skips_every_erl_phase(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(), mode="rlvr")
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    assert out.reflections == [] and out.second_attempts == [] and {s.role for s in out.samples} == {"first"}


def test_role_switches_remove_roles(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(), train_reflection=False, train_second=False, use_internalization=False)
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    assert {s.role for s in out.samples} == {"first"}


# --- defects fixed by "correct by construction" (each failed on the earlier code) ----------------


def _graded_env():
    """GuessEnv whose right answer scores 0.6: the env's own success test (>= 1) never passes."""
    from conftest import GuessEnv, GuessEpisode

    class GradedEpisode(GuessEpisode):
        def step(self, action):
            obs, reward, done, info = super().step(action)
            if self.reward == 1.0:
                self.reward = reward = 0.6
            return obs, reward, done, info

    class GradedEnv(GuessEnv):
        def new_episode(self):
            return GradedEpisode(self.max_turns)

    return GradedEnv()


def test_gate_reads_tau_from_the_config_not_the_environment(tok):
    env = _graded_env()
    ctx = make_ctx(env, tok, script(fail_first=("t0",)), reward_threshold=0.5)
    memory = ReflectionMemory()
    out = erl_step(ctx, tasks_of(env, 2), memory)
    # t0's first attempts scored 0 (< τ) and are gated; t1's scored 0.6 >= τ = 0.5 and are not
    assert {r.task_id for r in out.retries} == {"t0"}
    # the second attempts scored 0.6 >= τ: memory is written on the same τ the gate used
    assert out.memory_writes == 2 and len(memory) == 1
    assert gate(out.first_attempts, 0.5) == [a for a in out.first_attempts if a.reward < 0.5]
    assert len(gate(out.first_attempts, 1.0)) == 4  # with τ = 1 every 0.6 counts as a failure


def test_nan_threshold_is_rejected():
    with pytest.raises(ValueError, match="reward_threshold"):
        ERLConfig(reward_threshold=float("nan"))


def answer_then_run_on(prompt):
    """A scripted policy whose second attempts answer, then run on past a small reply budget."""
    task = re.findall(r"task (t\d+)", prompt)[-1]
    if REFLECTION_REQUEST in prompt:
        return f"<prompt>RULEBOOK: the word is {SECRETS[task]}</prompt>"
    if "RULEBOOK" in prompt:
        return SECRETS[task] + " and then some more words that run on past the budget"
    return "FIRST-REPLY nope"


def test_internalization_target_ends_with_eos_when_the_last_reply_was_cut(guess_env, tok):
    """A successful second attempt whose reply was cut by max_completion_length after a valid
    answer still teaches the model to stop: its internalization target ends with EOS."""

    reply = answer_then_run_on

    ctx = make_ctx(guess_env, tok, reply, max_completion_length=6, max_reflection_length=60)
    out = erl_step(ctx, tasks_of(guess_env, 1), ReflectionMemory())
    assert all(r.second.success and r.second.completion_ids[-1] != tok.eos_token_id for r in out.retries)
    internalized = [s for s in out.samples if s.role == "internalization"]
    assert internalized and all(
        s.completion_ids[-1] == tok.eos_token_id and s.completion_mask[-1] == 1 for s in internalized
    )
    # the second attempt's own RL row is what was sampled: nothing appended there
    second = [s for s in out.samples if s.role == "second"]
    assert all(s.completion_ids[-1] != tok.eos_token_id for s in second)


def test_weight_zero_internalization_rows_are_kept_and_counted(guess_env, tok):
    """As in the reference, a failed second attempt is internalized with advantage 0: it still
    counts in the sequence-mean denominator the updater divides by (and the KL term)."""
    import torch

    from erl_lite.core.update import PolicyUpdater
    from erl_lite.models import load_policy
    from erl_lite.testing import tiny_model

    ctx = make_ctx(guess_env, tok, script(fail_second=("t1",)))
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    internalized = [s for s in out.samples if s.role == "internalization"]
    assert [s.advantage for s in internalized] == [1.0, 1.0, 0.0, 0.0]
    rows = len(out.samples)
    assert rows == 8 + 4 * 3
    model, tok = load_policy(tiny_model(tok), tok, peft="lora")
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    cfg = ctx.config.replace(beta=0.0, temperature=1.0, loss_type="seq_sum", steps_per_generation=1)
    m = PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(out.samples)
    # One on-policy step (ratio 1): a row's seq_sum loss is -A x its loss tokens, and the sum is
    # divided by every row, the weight-0 ones included (18 would be the denominator without them).
    numerator = sum(-s.advantage * sum(s.completion_mask) for s in out.samples)
    assert numerator != 0
    # Relative: a float32 sum of 20 terms (~1e-7 of the value); 20 vs 18 rows differ by 10%.
    assert m["loss/total"] == pytest.approx(numerator / rows, rel=1e-5)
    assert m["samples/internalization"] == 4 and m["loss/internalization"] == pytest.approx(
        sum(-s.advantage * sum(s.completion_mask) for s in internalized) / rows, rel=1e-5
    )


def test_retry_joins_first_attempt_reflection_and_second_attempt(guess_env, tok):
    ctx = make_ctx(guess_env, tok, script(fail_second=("t1",)))
    out = erl_step(ctx, tasks_of(guess_env), ReflectionMemory())
    assert len(out.retries) == 4
    for r in out.retries:
        assert not r.first.success and r.first.role == "first" and r.second.role == "second"
        assert (r.reflection.task_id, r.reflection.index) == (r.first.task_id, r.first.index)
        assert (r.second.task_id, r.second.index) == (r.first.task_id, r.first.index)
        assert r.reflection.reward == r.second.reward  # r̃ = r2, credited where r2 is scored


# --- the token that closes a cut internalization target is the template's end-of-turn --------

GEMMA_LIKE = (
    "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
LLAMA3_LIKE = (
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}"
    "<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant"
    "<|end_header_id|>\n\n{% endif %}"
)


def _tokenizer_whose_turns_end_with(kind):
    """(tokenizer, the end-of-turn token its chat template writes): eos differs from it except
    for the plain format, which ends a reply with eos itself."""
    from erl_lite.testing import find_qwen3_tokenizer, qwen3_tokenizer, tiny_tokenizer

    if kind == "qwen3_base_eos":  # Qwen base checkpoints: eos <|endoftext|>, turns end with <|im_end|>
        if find_qwen3_tokenizer() is None:
            pytest.skip("shared/qwen3_tokenizer not found")
        tok = qwen3_tokenizer()
        tok.eos_token = "<|endoftext|>"
        return tok, "<|im_end|>"
    if kind == "plain":
        tok = tiny_tokenizer(chat_template=False)
        return tok, tok.eos_token
    tok = tiny_tokenizer()
    tok.eos_token = "<|eos|>"
    if kind == "chatml_base_eos":
        return tok, "<|im_end|>"
    specials = {
        "gemma": ["<start_of_turn>", "<end_of_turn>"],
        "llama3": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    }[kind]
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.chat_template = {"gemma": GEMMA_LIKE, "llama3": LLAMA3_LIKE}[kind]
    return tok, specials[-1]


@pytest.mark.parametrize("kind", ["chatml_base_eos", "gemma", "llama3", "qwen3_base_eos", "plain"])
def test_a_cut_internalization_target_is_closed_with_the_templates_end_of_turn_token(kind):
    from conftest import GuessEnv

    tok, end_of_turn = _tokenizer_whose_turns_end_with(kind)
    eot = tok.convert_tokens_to_ids(end_of_turn)
    assert kind == "plain" or eot != tok.eos_token_id

    reply = answer_then_run_on

    env = GuessEnv(max_turns=1)
    budget = 4 if kind.startswith("qwen3") else 8  # cut inside " and then ...", after the answer
    ctx = make_ctx(env, tok, reply, max_completion_length=budget, max_reflection_length=200)
    out = erl_step(ctx, tasks_of(env, 1), ReflectionMemory())
    assert out.retries and all(r.second.success for r in out.retries)
    internalized = [s for s in out.samples if s.role == "internalization"]
    assert internalized and all(s.completion_ids[-1] == eot and s.completion_mask[-1] == 1 for s in internalized)
    assert all(s.completion_ids.count(eot) == 1 for s in internalized)  # appended once, not after a stop
    if kind != "qwen3_base_eos":  # the sampler stops on it too (a tiny model needs the tiny vocabulary)
        from erl_lite.engine.policy import eos_token_ids
        from erl_lite.testing import tiny_model

        assert eot in eos_token_ids(tiny_model(tok), tok)


def test_an_internalization_row_never_runs_past_the_episode_budget(tok):
    """A internalized row is the first attempt's opening (the initial prompt) plus the second
    attempt's whole completion (played under a shorter rulebook): with a long initial prompt and
    a second attempt that uses its budget, it would be longer than any attempt was allowed to
    be, and with ``max_episode_length`` at the model's context the update would run past it."""
    from conftest import GuessEnv

    class LongPromptEnv(GuessEnv):
        system_prompt = "INITIAL-SYSTEM: guess a word. " + "Think before you guess. " * 12

    def reply(prompt):
        task = re.findall(r"task (t\d+)", prompt)[-1]
        if REFLECTION_REQUEST in prompt:
            return f"<prompt>RULEBOOK: the word is {SECRETS[task]}</prompt>"
        if "RULEBOOK" in prompt and prompt.count("Wrong guess") < 3:
            return "nope " * 8  # the second attempt spends three turns before it answers
        return SECRETS[task] if "RULEBOOK" in prompt else "FIRST-REPLY nope"

    env = LongPromptEnv(max_turns=5)
    ctx = make_ctx(env, tok, reply, max_completion_length=40, max_episode_length=560, max_reflection_length=60)
    with pytest.warns(RuntimeWarning, match=r"internalization row of task 't0' \(rollout 0\).*max_episode_length=560"):
        out = erl_step(ctx, tasks_of(env, 2), ReflectionMemory())
    assert all(r.second.success for r in out.retries)  # the retries themselves fit their budget
    c = ctx.config
    for s in out.samples:  # every row of every role, against its own budget
        budget = c.max_reflection_prompt_length + c.max_reflection_length if s.role == "reflection" else 560
        assert len(s.prompt_ids) + len(s.completion_ids) <= budget, s.role
    assert not [s for s in out.samples if s.role == "internalization"]  # too long here: dropped, not cut


# --- the one retry join (records.py) -------------------------------------------------------------
@pytest.mark.parametrize("gated", [[], [0], [2], [0, 2], [2, 0, 1]])
def test_the_retry_join_round_trips_through_the_saved_record(gated):
    """retry_of_first (objects) and retries_by_first (saved dicts) give the same pairs, in order."""
    from erl_lite.records import Attempt, Retry, StepRecord, Task, retries_by_first, retry_of_first

    firsts = [Attempt("t", "first", i, "", [], [], [], [], 0.0, False, "", "", 1) for i in range(3)]
    retries = [
        Retry(firsts[i], None, Attempt("t", "second", i, "", [], [], [], [], 1.0, True, "", "", 1)) for i in gated
    ]
    aligned = retry_of_first(firsts, retries)
    assert [i for i, r in enumerate(aligned) if r is not None] == sorted(gated)
    saved = retries_by_first(StepRecord(1, [Task("t", "")], firsts, retries, [], [], {}).to_dict())
    assert list(saved) == gated  # the retries' own order
    assert all(saved[i]["first"] == firsts[i].to_dict() and saved[i]["second"]["index"] == i for i in gated)


@pytest.mark.parametrize("position", [3, -1, "0", None, True])
def test_a_saved_retry_with_a_bad_position_is_named(position):
    from erl_lite.records import retries_by_first

    sample = {"step": 7, "first_attempts": [{}, {}, {}], "retries": [{"first": 0}, {"first": position}]}
    with pytest.raises(ValueError, match=r"step 7, retry 1: 'first' must be the position"):
        retries_by_first(sample)


def test_a_retry_of_an_unknown_first_attempt_is_named():
    from erl_lite.records import Attempt, Retry, retry_of_first

    a, stray = (Attempt("t", "first", i, "", [], [], [], [], 0.0, False, "", "", 1) for i in range(2))
    with pytest.raises(ValueError, match=r"retry 0 \(task 't'\) retries a first attempt that is not in"):
        retry_of_first([a], [Retry(stray, None, a)])
