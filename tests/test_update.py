"""The update pass: packing is exact, and micro-batching does not change the update."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch
from conftest import assert_close_rel

from erl_lite.config import ERLConfig
from erl_lite.core.update import PolicyUpdater, completion_logprobs, pack
from erl_lite.metric_names import OPTIM_STEPS
from erl_lite.models import load_policy
from erl_lite.records import TrainSample
from erl_lite.testing import tiny_model, tiny_tokenizer


def samples(n=8, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = [rng.randrange(6, 100) for _ in range(rng.randrange(3, 12))]
        c = [rng.randrange(6, 100) for _ in range(rng.randrange(1, 9))]
        m = [1 if rng.random() < 0.8 else 0 for _ in c]
        m[0] = 1
        role = ["first", "reflection", "second", "internalization"][i % 4]
        out.append(TrainSample(role, p, c, m, rng.uniform(-1.5, 1.5), f"t{i % 3}"))
    return out


def lora_model(seed=0):
    tok = tiny_tokenizer()
    model, tok = load_policy(tiny_model(tok, seed=seed), tok, peft="lora")
    return model, tok


def test_packed_logprobs_equal_unpadded_forward():
    tok = tiny_tokenizer()
    model = tiny_model(tok).eval()
    rows = samples(5)
    batch = pack(rows, tok.pad_token_id, nll_internalization=False)
    with torch.no_grad():
        lp = completion_logprobs(model, batch, temperature=1.0)
        for b, s in enumerate(rows):
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            logits = model(input_ids=ids).logits[0, len(s.prompt_ids) - 1 : -1]  # (C, V)
            ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.completion_ids)[:, None])[:, 0]
            # Padded vs unpadded forward: the same float32 sums with masked columns, ~1e-7 of |logp|.
            assert_close_rel(lp[b, : len(s.completion_ids)], ref, 1e-5)
            assert batch.mask[b, len(s.completion_ids) :].sum() == 0


@pytest.mark.parametrize("steps", [1, 2, 3])
@pytest.mark.parametrize("loss_type", ["seq_sum", "token_mean"])
@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_gradient_accumulation_equals_one_big_batch(loss_type, beta, steps):
    # Over several optimizer steps too: every mini-batch's micro-batches accumulate to its
    # gradient, and the later mini-batches' old log-probs do not depend on the micro-batching.
    rows = samples(12)
    before, params_after = None, []
    for micro in (2, 12):  # micro-batches of 2 vs each mini-batch in one pass
        torch.manual_seed(0)
        model, tok = lora_model()
        _moved_off_zero(model)  # so gradients reach LoRA A too
        if before is None:
            before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        cfg = ERLConfig(
            loss_type=loss_type,
            beta=beta,
            per_device_train_batch_size=micro,
            temperature=1.0,
            steps_per_generation=steps,
        )
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        metrics = PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(rows)
        params_after.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
        assert metrics["optim/steps"] == steps
    a, b = params_after
    moved = max(float((a[n] - before[n]).abs().max()) for n in a)
    assert moved > 1e-3  # the update moved the adapter: the comparison means something
    for n in a:
        # Relative to the update: the two runs add the same terms in another order (float32,
        # ~1e-7 of the gradient); 1e-4 of the largest move is far below one row's contribution.
        torch.testing.assert_close(a[n], b[n], rtol=0, atol=1e-4 * moved, msg=n)


@pytest.mark.parametrize("steps", [2, 3])
def test_old_logprobs_are_the_sampling_policys_on_every_minibatch(monkeypatch, steps):
    """Several optimizer steps in one iteration: the ratio is exactly 1 on the first
    mini-batch (nothing has moved yet) and moves on the later ones, whose old log-probs are
    still those of the weights that sampled the rows (computed independently here on a copy
    of the initial model), not of the weights after the earlier steps."""
    import copy

    import erl_lite.core.update as update

    seen, batches = [], []
    real, real_objective = update.policy_objective, update.PolicyUpdater._objective
    model, tok = lora_model()
    _moved_off_zero(model)
    initial = copy.deepcopy(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    steps_taken = []
    real_step = opt.step
    opt.step = lambda *a: (steps_taken.append(1), real_step(*a))[1]
    monkeypatch.setattr(
        update,
        "policy_objective",  # (current, old log-probs, optimizer steps so far)
        lambda logp, old, *a, **kw: (
            seen.append((logp.detach().clone(), old, len(steps_taken))),
            real(logp, old, *a, **kw),
        )[1],
    )
    monkeypatch.setattr(
        update.PolicyUpdater,
        "_objective",
        lambda self, batch, norm, gaps: (batches.append(batch), real_objective(self, batch, norm, gaps))[1],
    )
    cfg = ERLConfig(beta=0.0, temperature=1.0, steps_per_generation=steps, per_device_train_batch_size=64)
    PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(samples(12))
    assert len(steps_taken) == steps and {i for *_, i in seen} == set(range(steps))
    for (logp, old, i), batch in zip(seen, batches):
        keep = batch.mask.bool()
        with torch.no_grad():
            sampled = completion_logprobs(initial, batch, 1.0)
        if i == 0:  # nothing has moved: no old pass, the objective takes the ratio as exactly 1
            assert old is None
            assert_close_rel(logp[keep], sampled[keep], 1e-5)  # and these are the sampling weights' log-probs
            continue
        # Relative to the log-probs (~ -5): the same forward on a copy, in float32.
        assert_close_rel(old[keep], sampled[keep], 1e-5)
        assert float((logp - old)[keep].abs().max()) > 1e-3  # the earlier steps moved the policy


def test_role_losses_are_each_roles_share_of_each_minibatch_loss():
    # Computed independently of the updater: with lr 0 the weights never move, so every ratio
    # is 1 on both mini-batches and a row's seq_sum policy loss is -A x (its loss tokens); the
    # two mini-batches are the rows at even and at odd positions, each divided by its own row
    # count, and every role's loss is the mean over the two of its rows' shares.
    rows = samples(8)
    model, tok = lora_model()
    cfg = ERLConfig(steps_per_generation=2, beta=0.0, per_device_train_batch_size=3)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    m = PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(rows)
    want = {r: 0.0 for r in ("first", "reflection", "second", "internalization")}
    for half in (rows[0::2], rows[1::2]):
        for s in half:
            want[s.role] += -s.advantage * sum(s.completion_mask) / len(half) / 2
    assert m["optim/steps"] == 2 and m["samples/first"] == 2 and m["samples/internalization"] == 2
    for role, value in want.items():
        # Relative: a float32 sum of a few log-ratio terms, ~1e-7 of the values (|loss| ~ 1).
        assert m[f"loss/{role}"] == pytest.approx(value, rel=1e-5), role
    assert m["loss/total"] == pytest.approx(sum(want.values()), rel=1e-5)
    assert len({round(v, 3) for v in want.values()}) == 4  # the roles' shares differ: a mix-up would show


def test_ppo_mini_batch_size_follows_the_reference_rule_on_worked_examples():
    # The reference (verl) splits the iteration's rows into mini-batches of
    # ppo_mini_batch_size x G rows; the last may be smaller. Worked by hand for the paper's
    # setting (64 tasks, ERL G = 4, RLVR G = 10): rows = 256 first attempts + 3 per failure
    # (reflection, second attempt, internalization row).
    erl = ERLConfig(num_tasks_per_step=64, num_generations=4, ppo_mini_batch_size=64)  # 256 rows a step
    assert erl.optimizer_steps(256) == 1  # no failure
    assert erl.optimizer_steps(256 + 3 * 100) == 3  # 100 failures: 556 rows = 256 + 256 + 44
    assert erl.optimizer_steps(256 * 4) == 4 == erl.max_optimizer_steps()  # every attempt failed
    rlvr = ERLConfig(mode="rlvr", num_tasks_per_step=64, num_generations=10, ppo_mini_batch_size=64)
    assert rlvr.optimizer_steps(640) == 1 == rlvr.max_optimizer_steps()
    # The reference's HotpotQA runs use ppo_mini_batch_size 32: 128 / 320 rows a step.
    hotpot_erl, hotpot_rlvr = erl.replace(ppo_mini_batch_size=32), rlvr.replace(ppo_mini_batch_size=32)
    assert (hotpot_erl.optimizer_steps(556), hotpot_erl.max_optimizer_steps()) == (5, 8)
    assert (hotpot_rlvr.optimizer_steps(640), hotpot_rlvr.max_optimizer_steps()) == (2, 2)
    assert ERLConfig(steps_per_generation=2).optimizer_steps(9) == 2
    assert ERLConfig(steps_per_generation=4).optimizer_steps(3) == 3  # never an empty mini-batch
    # The updater takes that many steps: 2 tasks x G 4, ppo_mini_batch_size 1 (4 rows a step);
    # 8 first attempts and 3 failures (9 more rows) = 17 rows: 5 steps.
    small = ERLConfig(num_tasks_per_step=2, num_generations=4, ppo_mini_batch_size=1, beta=0.0)
    rows = samples(17)
    model, tok = lora_model()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    assert PolicyUpdater(model, opt, None, small, tok.pad_token_id).update(rows)["optim/steps"] == 5
    assert _adam_state_steps(opt) == [5] * len(params)
    # RLVR, G 10 (20 first attempts a step with ppo_mini_batch_size 2): 21 rows take 2 steps.
    rlvr_small = ERLConfig(mode="rlvr", num_tasks_per_step=2, ppo_mini_batch_size=2, beta=0.0)
    assert PolicyUpdater(model, opt, None, rlvr_small, tok.pad_token_id).update(samples(21))["optim/steps"] == 2


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(ppo_mini_batch_size=0), "ppo_mini_batch_size"),
        (dict(ppo_mini_batch_size=2.5), "ppo_mini_batch_size"),
        (dict(ppo_mini_batch_size=4, steps_per_generation=2), "steps_per_generation"),
    ],
)
def test_ppo_mini_batch_size_refuses_bad_values(kwargs, named):
    with pytest.raises(ValueError, match=named):
        ERLConfig(**kwargs)


def test_a_layer_of_settings_that_picks_one_split_replaces_the_other():
    # Presets and a user's overrides are layered; the two ways to say how
    # an iteration splits into optimizer steps must not collide across layers.
    from erl_lite.embedded import demo_config

    over_gpu = ERLConfig.preset("gpu", ppo_mini_batch_size=8)  # the reference's rule over gpu's 2 steps
    assert (over_gpu.ppo_mini_batch_size, over_gpu.steps_per_generation) == (8, 1)
    assert demo_config().max_optimizer_steps() == 4 and demo_config(mode="rlvr").max_optimizer_steps() == 1
    user = demo_config(steps_per_generation=2)
    assert (user.steps_per_generation, user.ppo_mini_batch_size) == (2, None)
    assert ERLConfig.preset("paper", steps_per_generation=3).ppo_mini_batch_size is None
    back = user.replace(ppo_mini_batch_size=4)
    assert (back.steps_per_generation, back.ppo_mini_batch_size) == (1, 4)


def test_nll_internalization_rows_use_nll():
    rows = [TrainSample("internalization", [7, 8, 9], [10, 11], [1, 1], 1.0)]
    model, tok = lora_model()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    nll = PolicyUpdater(
        model, opt, None, ERLConfig(internalization_mode="nll", beta=0.0, temperature=1.0), tok.pad_token_id
    ).update(rows)
    with torch.no_grad():
        lp = completion_logprobs(model, pack(rows, tok.pad_token_id, True), 1.0)
    assert nll["loss/internalization"] == pytest.approx(float(-lp.sum()), rel=1e-5)  # seq_sum over one row
    raft = PolicyUpdater(model, opt, None, ERLConfig(beta=0.0, temperature=1.0), tok.pad_token_id).update(rows)
    assert raft["loss/internalization"] == pytest.approx(-2.0, rel=1e-5)  # ratio 1: -A per token, summed


def test_micro_batches_sort_and_never_pad_short_rows_to_long_ones():
    from erl_lite.engine.batching import micro_batches

    rows = [TrainSample("first", [1] * n, [2], [1], 0.0) for n in (5, 300, 6, 7, 290, 8, 5)]
    chunks = list(micro_batches(rows, 4))
    assert [len(c) for c in chunks] == [4, 1, 2]
    assert all(max(len(r.prompt_ids) for r in c) <= 2 * min(len(r.prompt_ids) for r in c) + 2 for c in chunks)
    assert sorted(id(r) for c in chunks for r in c) == sorted(id(r) for r in rows)


def test_micro_batches_bound_the_padded_width_not_only_the_total_length():
    # pack() pads contexts to the longest context and completions to the longest completion
    # separately, so a reflection row (long context, short completion) next to an attempt with
    # a long completion makes a micro-batch wider than either row. The demo's ERL batches had
    # 43% padding this way (short first attempts padded to 470 columns).
    from erl_lite.engine.batching import micro_batches

    rows = [TrainSample("first", [1] * 68, [2] * n, [1] * n, 1.0) for n in (20, 150, 40, 150)] + [
        TrainSample("reflection", [1] * 300, [2] * 30, [1] * 30, 1.0) for _ in range(3)
    ]
    chunks = list(micro_batches(rows, 32))
    for c in chunks:
        width = max(len(r.prompt_ids) for r in c) + max(len(r.completion_ids) for r in c)
        assert width <= 2 * min(len(r.prompt_ids) + len(r.completion_ids) for r in c), [len(c), width]
    assert sorted(id(r) for c in chunks for r in c) == sorted(id(r) for r in rows)


def test_micro_batches_keep_the_rows_of_one_context_together():
    # GRPO's G rollouts of a prompt share its context, and a pass runs a shared context once
    # (erl_lite.engine.logprobs.completion_hidden): sorted by total length alone, RLVR's groups of 10 were
    # spread over every micro-batch, three or four contexts in each.
    from erl_lite.engine.batching import micro_batches

    lengths = [31, 12, 25, 18, 9, 30, 22, 15, 27, 11]
    rows = [
        TrainSample("first", [task] * 60, [2] * (n + task), [1] * (n + task), 1.0)
        for n in lengths
        for task in (3, 4, 5, 6)
    ]  # 4 tasks x G = 10, interleaved
    chunks = list(micro_batches(rows, 10))
    assert [len({r.prompt_ids[0] for r in c}) for c in chunks] == [1, 1, 1, 1]
    assert sorted(id(r) for c in chunks for r in c) == sorted(id(r) for r in rows)


def test_kl_update_stays_finite_with_extreme_logprobs_at_padded_slots():
    # Scale the head so that log-probs are around -1000 and the pad token's far below: with
    # beta > 0, padded slots must not turn into a NaN gradient (exp overflow times a 0 mask).
    model, tok = lora_model()
    head = model.get_base_model().lm_head
    with torch.no_grad():
        head.weight.mul_(1000.0)
        head.weight[tok.pad_token_id] = 0.0
    rows = samples(6)  # unequal completion lengths: every micro-batch has padded slots
    cfg = ERLConfig(beta=0.04, per_device_train_batch_size=3, temperature=1.0, max_grad_norm=1e9)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    with torch.no_grad():
        lp = completion_logprobs(model, pack(rows, tok.pad_token_id, nll_internalization=False), 1.0)
    assert lp.min() < -500  # the setting really is extreme
    m = PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(rows)
    assert all(torch.isfinite(p).all() for p in model.parameters() if p.requires_grad)
    assert torch.isfinite(torch.tensor([m["grad_norm"], m["kl"], m["loss/total"]])).all()


# --- chunked log-probs equal the full-logits path ----------------------------------------


def _qwen2_tied(tok, seed=0):
    """Qwen2-shaped (q/k/v bias) with tied input/output embeddings."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


def _gemma2_softcapped(tok, seed=0):
    """Gemma2-shaped with final-logit soft-capping small enough to matter."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    cfg = Gemma2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=512,
        final_logit_softcapping=2.0,
        query_pre_attn_scalar=32,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Gemma2ForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # logits well past the cap, so a missed tanh would show
    return model


def _logprobs_and_grads(model, batch, chunk_size, temperature):
    model.zero_grad(set_to_none=True)
    lp = completion_logprobs(model, batch, temperature, chunk_size)
    w = torch.linspace(-1.0, 1.0, lp.numel()).view_as(lp)  # weights every position differently
    (lp * w * batch.mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), grads


@pytest.mark.parametrize("family", ["llama", "qwen2_tied", "gemma2_softcap"])
def test_chunked_logprobs_and_gradients_equal_full_logits(family):
    tok = tiny_tokenizer()
    model = {
        "llama": lambda: tiny_model(tok),
        "qwen2_tied": lambda: _qwen2_tied(tok),
        "gemma2_softcap": lambda: _gemma2_softcapped(tok),
    }[family]().train()
    batch = pack(samples(5), tok.pad_token_id, nll_internalization=False)
    B, L = batch.targets.shape
    assert (B * L) % 7 != 0
    for temperature in (1.0, 0.7):
        full, g_full = _logprobs_and_grads(model, batch, None, temperature)
        for chunk in (1, 7, 16, 4096):  # 7 divides neither L nor B·L; 4096 > B·L (one chunk)
            lp, g = _logprobs_and_grads(model, batch, chunk, temperature)
            # Chunked vs full logits: the same float32 products in other shapes, ~1e-7 of |logp|.
            assert_close_rel(lp, full, 1e-5, msg=f"chunk {chunk}")
            assert g.keys() == g_full.keys()
            for n in g:
                # Gradients sum B·L terms: 1e-4 of the tensor's largest entry, a few hundred ulp.
                assert_close_rel(g[n], g_full[n], 1e-4, msg=f"chunk {chunk}: {n}")


@pytest.mark.parametrize("quantization", ["none", "4bit"])
def test_chunked_logprobs_under_lora(tmp_path, quantization):
    from erl_lite.testing import save_tiny_model

    model, tok = load_policy(save_tiny_model(tmp_path), quantization=quantization, lora_r=4, device="cpu")
    with torch.no_grad():  # LoRA B starts at 0: move it so the adapter (and its gradient) matters
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    model.train()
    batch = pack(samples(4), tok.pad_token_id, nll_internalization=False)
    full, g_full = _logprobs_and_grads(model, batch, None, 1.0)
    lp, g = _logprobs_and_grads(model, batch, 5, 1.0)
    assert g and all("lora_" in n for n in g)
    assert_close_rel(lp, full, 1e-5)  # as in the test above: float32, ~1e-7 of |logp|
    for n in g:
        assert_close_rel(g[n], g_full[n], 1e-4, msg=n)  # 1e-4 of the tensor's largest gradient


def test_chunked_logprobs_refuse_heads_they_cannot_read():
    from peft import LoraConfig, get_peft_model

    tok = tiny_tokenizer()
    wrapped = get_peft_model(tiny_model(tok), LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    batch = pack(samples(2), tok.pad_token_id, nll_internalization=False)
    with pytest.raises(ValueError, match="lm-head"):
        completion_logprobs(wrapped, batch, 1.0)
    completion_logprobs(wrapped, batch, 1.0, chunk_size=None)  # the full-logits path still works

    class Scaled(type(tiny_model(tok))):  # logits scaled in forward, unknown to the config
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 3.0
            return out

    odd = Scaled(tiny_model(tok).config)
    with torch.no_grad():
        odd.lm_head.weight.mul_(20.0)
    with pytest.raises(ValueError, match="Scaled.*differ"):
        completion_logprobs(odd, batch, 1.0)
    with pytest.raises(ValueError, match="chunk_size"):
        completion_logprobs(tiny_model(tok), batch, 1.0, chunk_size=0)


# --- normalizer and the stats record -------------------------------------------------------


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type,normalizer", [("seq_sum", 4.0), ("token_mean", 9.0)])
def test_weight_zero_internalization_rows_count_in_the_normalizer(monkeypatch, beta, loss_type, normalizer):
    import erl_lite.core.update as update

    rows = [
        TrainSample("first", [7, 8], [10, 11, 12], [1, 1, 1], 1.0),
        TrainSample("first", [7, 9], [13, 14], [1, 1], 1.0),
        TrainSample("internalization", [7], [10, 11], [1, 1], 0.0),  # failed second attempts: weight 0
        TrainSample("internalization", [7], [15, 16], [1, 1], 0.0),
    ]
    seen = []
    real = update.policy_objective
    monkeypatch.setattr(update, "policy_objective", lambda *a, **kw: (seen.append(kw["normalizer"]), real(*a, **kw))[1])
    model, tok = lora_model()  # LoRA B = 0: policy == reference, KL = 0
    cfg = ERLConfig(beta=beta, loss_type=loss_type, temperature=1.0)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    m = PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(rows)
    assert seen and set(seen) == {normalizer}
    assert m["loss/total"] == pytest.approx(-5.0 / normalizer, rel=1e-6)  # ratio 1: -A per token (float32 sum)
    assert m["loss/internalization"] == 0.0 and m["samples/internalization"] == 2


def test_update_stats_keys_are_the_documented_metrics():
    from erl_lite.core.update_stats import UPDATE_METRICS, UpdateStats
    from erl_lite.metrics import METRIC_GLOSSARY

    today = [
        "samples/first",
        "samples/reflection",
        "samples/second",
        "samples/internalization",
        "advantage/first",
        "advantage/reflection",
        "advantage/second",
        "loss/total",
        "loss/first",
        "loss/reflection",
        "loss/second",
        "loss/internalization",
        "kl",
        "clip_ratio",
        "grad_norm",
        "optim/steps",
        "optim/skipped_steps",
        "weights/update_ratio",
        *[f"onpolicy/gap_{k}/{r}" for k in ("mean", "max") for r in ("first", "reflection", "second")],
        "onpolicy/tokens",
        "onpolicy/stale_weights",
        "onpolicy/tolerance",
    ]
    assert list(UPDATE_METRICS) == today and set(today) <= set(METRIC_GLOSSARY)
    model, tok = lora_model()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    updater = PolicyUpdater(model, opt, None, ERLConfig(beta=0.0), tok.pad_token_id)
    for rows in (samples(4), []):
        stats = updater.update(rows)
        assert isinstance(stats, UpdateStats)
        assert list(stats.to_metrics()) == today and dict(stats) == stats.to_metrics()
    assert stats.optim_steps == 0 and stats["loss/total"] == 0.0


# --- every optimizer step the scheduler counts is an AdamW step on every parameter -----------


def _adam_state_steps(opt):
    return [int(opt.state[p]["step"]) if p in opt.state else 0 for g in opt.param_groups for p in g["params"]]


def _moved_off_zero(model):
    with torch.no_grad():  # LoRA B starts at 0: move it so every adapter weight gets a gradient
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    return model


@pytest.mark.parametrize(
    "zero_rows",
    [
        [TrainSample("first", [7, 8], [10, 11], [1, 1], 0.0, "a"), TrainSample("second", [9], [12], [1], 0.0, "a")],
        [
            TrainSample("internalization", [7, 8, 9], [10, 11, 12], [1, 1, 1], 0.0, "b")
        ],  # a failed second attempt, weight 0
    ],
)
@pytest.mark.parametrize("internalization_mode", ["raft", "nll"])
def test_an_all_zero_advantage_minibatch_still_takes_an_adamw_step(zero_rows, internalization_mode):
    """With beta = 0 rows of A = 0 carry no gradient and are not backpropagated; a mini-batch of
    only such rows must still be an AdamW step on every trainable parameter (zero gradient:
    momentum and weight decay move the weights, the step counter advances), as in TRL/verl,
    whose zero loss is backpropagated. The independent computation is a twin model and
    optimizer given zero gradients by hand."""
    import copy

    torch.manual_seed(0)
    model, tok = lora_model()
    _moved_off_zero(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    cfg = ERLConfig(beta=0.0, temperature=1.0, internalization_mode=internalization_mode)
    updater = PolicyUpdater(model, opt, sched, cfg, tok.pad_token_id)
    updater.update(samples(6))  # an ordinary step first, so Adam has momentum to carry on
    twin = copy.deepcopy(model)
    twin_params = [p for p in twin.parameters() if p.requires_grad]
    twin_opt = torch.optim.AdamW(twin_params, lr=1e-2, weight_decay=0.1)
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # a plain load shares the step tensors
    assert set(_adam_state_steps(opt)) == {1}
    weights_before = [p.detach().clone() for p in params]

    stats = updater.update(zero_rows)

    assert stats["optim/steps"] == 1 and sched.last_epoch == 2  # the scheduler counted the step ...
    assert _adam_state_steps(opt) == [2] * len(params)  # ... and so did Adam, on every parameter
    for p in twin_params:
        p.grad = torch.zeros_like(p)
    twin_opt.step()
    for p, q in zip(params, twin_params):
        # Both sides run the same AdamW arithmetic on a zero gradient, element by element; 1e-6 of
        # the step size covers a different kernel's rounding, far below the step (lr = 1e-2) a
        # skipped step would lose.
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=1e-6 * 1e-2)
    moved = max(float((p.detach() - w).abs().max()) for p, w in zip(params, weights_before))
    assert moved > 1e-3  # momentum and decay really moved the weights (about lr = 1e-2)


@pytest.mark.parametrize("k", [2, 3])
def test_every_minibatch_of_an_iteration_is_an_adamw_step_when_some_are_all_zero(k):
    # Interleaved rows (position % k): mini-batch 0 holds the signal, the others only A = 0 rows.
    signal = [
        TrainSample("first", [7, 8], [10, 11], [1, 1], 1.0, "a"),
        TrainSample("first", [7, 9], [12], [1], -1.0, "a"),
    ]
    zero = TrainSample("second", [9], [13, 14], [1, 1], 0.0, "b")
    rows = [row for s in signal for row in [s] + [zero] * (k - 1)]
    model, tok = lora_model()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    stats = PolicyUpdater(model, opt, sched, ERLConfig(beta=0.0, steps_per_generation=k), tok.pad_token_id).update(rows)
    assert stats["optim/steps"] == k == sched.last_epoch
    assert _adam_state_steps(opt) == [k] * len(params)


# --- a non-finite loss or gradient never reaches the weights ----------------------------------

ROLE_NAMES = ("first", "reflection", "second", "internalization")


def _optimizer_snapshot(opt):
    import copy

    return copy.deepcopy(opt.state_dict())


def _same_optimizer_state(a, b):
    assert a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys()
    for k in a["state"]:
        for name, value in a["state"][k].items():
            assert torch.equal(value, b["state"][k][name]), (k, name)


@pytest.mark.parametrize("steps", [1, 2, 3])
@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_no_old_logprob_pass_where_the_ratio_is_one_and_no_reference_pass_without_kl(monkeypatch, steps, beta):
    """The first mini-batch of an iteration trains on the weights that sampled it: its ratio is 1 by
    construction, so an old-log-prob pass over it would only recompute the forward it is about to
    run. Only the later mini-batches get one; the reference pass runs only when beta > 0."""
    import erl_lite.core.update as update

    passes = {"old": 0, "ref": 0}
    real = update.PolicyUpdater._logprobs
    model, tok = lora_model()
    in_reference = {"on": False}
    real_reference = update.reference_context

    import contextlib

    @contextlib.contextmanager
    def counted_reference(m, *a):
        in_reference["on"] = True
        with real_reference(m, *a) as ref:
            yield ref
        in_reference["on"] = False

    def counted(self, batch):
        passes["ref" if in_reference["on"] else "old"] += len(batch.advantages)
        return real(self, batch)

    monkeypatch.setattr(update, "reference_context", counted_reference)
    monkeypatch.setattr(update.PolicyUpdater, "_logprobs", counted)
    rows = samples(12)
    cfg = ERLConfig(beta=beta, temperature=1.0, steps_per_generation=steps, per_device_train_batch_size=2)
    stats = PolicyUpdater(
        model,
        torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3),
        None,
        cfg,
        tok.pad_token_id,
    ).update(rows)
    active = [s for i, s in enumerate(rows) if beta > 0 or s.advantage != 0]
    first = [s for i, s in enumerate(rows) if i % steps == 0 and (beta > 0 or s.advantage != 0)]
    assert passes["old"] == (len(active) - len(first) if steps > 1 else 0)
    assert passes["ref"] == (len(active) if beta > 0 else 0)
    assert stats[OPTIM_STEPS] == steps


def _update_at(updater, rows, step):
    return updater.update(rows, step=step)  # as the trainer names its iteration


def _updater(lr=1e-2, **cfg):
    model, tok = lora_model()
    _moved_off_zero(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    updater = PolicyUpdater(model, opt, sched, ERLConfig(**{"beta": 0.0, **cfg}), tok.pad_token_id)
    return updater, model, opt, sched


@pytest.mark.parametrize("bad_value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_non_finite_loss_skips_the_step_and_names_step_and_role(role, bad_value):
    updater, model, opt, sched = _updater()
    updater.update(samples(8))  # a good step first: Adam has state that must stay untouched
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    state, lr_steps = _optimizer_snapshot(opt), sched.last_epoch
    rows = samples(8)
    rows[ROLE_NAMES.index(role)] = dataclasses.replace(rows[ROLE_NAMES.index(role)], advantage=bad_value)
    with pytest.warns(RuntimeWarning, match=rf"step 7\b.*loss of {role} .*not finite.*skipped") as caught:
        stats = _update_at(updater, rows, 7)
    assert not any(
        r in str(caught[0].message).split("loss of")[1].split("was")[0] for r in ROLE_NAMES if r != role
    )  # only the culprit is named
    assert stats["optim/skipped_steps"] == 1 and stats["optim/steps"] == 0
    assert all(torch.equal(p, weights[n]) for n, p in model.named_parameters())
    _same_optimizer_state(opt.state_dict(), state)
    assert sched.last_epoch == lr_steps  # the schedule counts AdamW steps only
    assert math.isfinite(stats["loss/total"]) and math.isfinite(stats["grad_norm"])


def test_a_non_finite_gradient_with_a_finite_loss_skips_the_step():
    updater, model, opt, sched = _updater(steps_per_generation=2)
    p = next(p for n, p in model.named_parameters() if p.requires_grad)
    calls = []
    # The second mini-batch's backward turns one gradient into NaN (as an overflow would).
    p.register_hook(lambda g: g * float("nan") if calls.append(1) or len(calls) > 1 else g)
    with pytest.warns(RuntimeWarning, match=r"step 3, optimizer step 2 of 2: the gradient.*not finite.*loss was fin"):
        stats = _update_at(updater, samples(4), 3)
    assert stats["optim/steps"] == 1 and stats["optim/skipped_steps"] == 1 and sched.last_epoch == 1
    assert all(torch.isfinite(q).all() for q in model.parameters())


def test_skipped_steps_in_a_row_stop_the_run_and_a_good_step_resets_the_count():
    updater, model, opt, sched = _updater()
    bad = [dataclasses.replace(s, advantage=float("nan")) if s.role == "second" else s for s in samples(8)]
    limit = updater.max_skipped_in_a_row
    assert limit >= 2
    for step in range(1, limit):
        with pytest.warns(RuntimeWarning):
            _update_at(updater, bad, step)
    _update_at(updater, samples(8), limit)  # a good step in between: the count starts again
    for step in range(limit + 1, 2 * limit):
        with pytest.warns(RuntimeWarning):
            _update_at(updater, bad, step)
    with pytest.raises(FloatingPointError, match=rf"step {2 * limit}\b.*{limit} optimizer steps in a row"):
        _update_at(updater, bad, 2 * limit)


def test_a_huge_learning_rate_stops_the_run_instead_of_training_on_nan():
    # lr 1e30 leaves finite but huge weights whose next forward pass overflows: every later
    # loss is non-finite, so the steps are skipped (weights kept) until the run stops.
    updater, model, opt, sched = _updater(lr=1e30)
    _update_at(updater, samples(8), 1)
    kept = {n: p.detach().clone() for n, p in model.named_parameters()}
    for step in (2, 3):
        with pytest.warns(RuntimeWarning, match=rf"step {step}, optimizer step 1 of 1: the loss of first, "):
            _update_at(updater, samples(8), step)
    with pytest.raises(FloatingPointError, match=r"step 4, optimizer step 1 of 1: .*not finite.*3 optimizer steps"):
        _update_at(updater, samples(8), 4)
    assert all(torch.equal(p, kept[n]) for n, p in model.named_parameters())


def test_a_step_that_leaves_non_finite_weights_stops_the_run():
    class Overflowing(torch.optim.SGD):
        """SGD whose step overflows one weight to inf, as a float16 or too large a step would."""

        def step(self, closure=None):
            super().step(closure)
            with torch.no_grad():
                self.param_groups[0]["params"][0].view(-1)[0] = float("inf")

    model, tok = lora_model()
    opt = Overflowing([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    updater = PolicyUpdater(model, opt, None, ERLConfig(beta=0.0), tok.pad_token_id)
    with pytest.raises(FloatingPointError, match=r"step 5, optimizer step 1 of 1: .*non-finite weights.*learning_rate"):
        _update_at(updater, samples(8), 5)


def test_a_diverging_run_stops_naming_the_step_and_never_trains_on_nan():
    # The reported run: a huge learning rate, a NaN gradient norm logged, NaN weights, and the
    # next step's sampler dying on "probability tensor contains inf/nan".
    from erl_lite.run.trainer import ERLTrainer

    tok = tiny_tokenizer()
    args = ERLConfig.preset(
        "cpu",
        max_steps=6,
        num_tasks_per_step=2,
        eval_steps=0,
        max_completion_length=6,
        max_reflection_length=8,
        progress_bar=False,
        learning_rate=1e8,
    )
    trainer = ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        reward_funcs=lambda prompts, completions, answer, **kw: [float(a in c) for c, a in zip(completions, answer)],
        train_dataset=[{"prompt": f"Say {i}.", "answer": str(i)} for i in range(6)],
    )
    with (
        pytest.warns(RuntimeWarning, match=r"step \d+, optimizer step 1 of 1: .*not finite.*skipped"),
        pytest.raises(FloatingPointError, match=r"step \d+, .*3 optimizer steps in a row"),
    ):
        trainer.train()
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


@pytest.mark.parametrize("loss_type", ["seq_sum", "token_mean"])
@pytest.mark.parametrize("n_rows", [17, 13, 8])
def test_a_trailing_partial_mini_batch_is_dealt_in_turn_at_full_weight(monkeypatch, loss_type, n_rows):
    # docs/REFERENCE.md, row 13: with ppo_mini_batch_size x G = 4 rows a nominal mini-batch, verl cuts 17 rows into
    # 4 + 4 + 4 + 4 + 1 and scales the last step by 1/4; erl_lite takes the same ceil(17 / 4) = 5 steps over rows
    # dealt in turn (position p into mini-batch p mod 5: 4, 4, 3, 3, 3 rows), each normalised by its own rows
    # (seq_sum) or loss tokens (token_mean), at full weight. Worked by hand here with lr 0 (every ratio 1), so a
    # row's policy loss is -A per loss token.
    import erl_lite.core.update as update

    rows = samples(n_rows, seed=5)
    model, tok = lora_model()
    cfg = ERLConfig(
        num_tasks_per_step=2,
        num_generations=4,
        ppo_mini_batch_size=1,
        beta=0.0,
        loss_type=loss_type,
        per_device_train_batch_size=2,
    )
    seen, real = [], update.policy_objective
    monkeypatch.setattr(update, "policy_objective", lambda *a, **kw: (seen.append(kw["normalizer"]), real(*a, **kw))[1])
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    m = PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(rows)
    k = math.ceil(n_rows / 4)
    minis = [rows[i::k] for i in range(k)]
    assert [len(x) for x in minis] == {17: [4, 4, 3, 3, 3], 13: [4, 3, 3, 3], 8: [4, 4]}[n_rows]
    norms = [len(x) if loss_type == "seq_sum" else sum(sum(s.completion_mask) for s in x) for x in minis]
    assert m[OPTIM_STEPS] == k and sorted(set(seen)) == sorted(set(norms))
    # loss/total: the mean over steps of each step's loss, every step at weight 1.
    ours = sum(sum(-s.advantage * sum(s.completion_mask) for s in x) / n for x, n in zip(minis, norms)) / k
    # float32 sums of ~20 terms of magnitude ~1: ~1e-6 relative; 1e-5 leaves room.
    assert m["loss/total"] == pytest.approx(ours, rel=1e-5)
    if n_rows % 4:  # verl's consecutive cut with the last step scaled by its share differs: the test can tell
        cut = [rows[i : i + 4] for i in range(0, n_rows, 4)]
        share = [len(x) / 4 for x in cut]
        verl = (
            sum(
                w
                * sum(-s.advantage * sum(s.completion_mask) for s in x)
                / (len(x) if loss_type == "seq_sum" else sum(sum(s.completion_mask) for s in x))
                for x, w in zip(cut, share)
            )
            / k
        )
        assert abs(verl - ours) > 1e-3 * abs(ours)
