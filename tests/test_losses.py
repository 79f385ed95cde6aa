"""Loss functions on random tensors: clipping, KL, masks, aggregation, accumulation, TRL parity."""

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from conftest import assert_close_rel

from erl_lite.core.losses import (
    LOSS_TYPES,
    aggregate,
    clipped_policy_loss,
    k3_kl,
    masked_mean,
    nll_loss,
    normalizer_for,
    policy_objective,
)
from erl_lite.engine.logprobs import token_logprobs

EL, EH, C = 0.2, 0.28, 3.0


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _ragged_mask(lengths: list[int], T: int) -> torch.Tensor:
    """(B, T) mask with the given number of leading loss tokens per row."""
    return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()


# --- token log-probs and KL ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_matches_naive(dtype, temperature):
    g = _gen(1)
    logits = torch.randn(3, 5, 11, generator=g, dtype=dtype) * 4
    ids = torch.randint(0, 11, (3, 5), generator=g)
    naive = torch.log_softmax(logits / temperature, -1).gather(-1, ids[..., None]).squeeze(-1)
    got = token_logprobs(logits, ids, temperature=temperature)
    assert got.shape == (3, 5) and got.dtype == dtype
    # Relative to |logp| (up to ~20 here): a few ulp of the dtype (float32 ~1e-7, float64 ~1e-16).
    assert_close_rel(got, naive, 1e-6 if dtype == torch.float32 else 1e-12)


def test_token_logprobs_bfloat16_upcasts():
    g = _gen(2)
    logits = torch.randn(2, 4, 50, generator=g) * 3
    ids = torch.randint(0, 50, (2, 4), generator=g)
    naive = torch.log_softmax(logits.bfloat16().float(), -1).gather(-1, ids[..., None]).squeeze(-1)
    got = token_logprobs(logits.bfloat16(), ids)
    assert got.dtype == torch.float32
    assert_close_rel(got, naive, 1e-6)  # both in float32 from the same bf16 logits: a few ulp of |logp|


def test_k3_is_nonnegative_and_zero_at_equality():
    g = _gen(3)
    logp = -torch.rand(4, 6, generator=g) * 5
    ref = -torch.rand(4, 6, generator=g) * 5
    kl = k3_kl(logp, ref)
    assert (kl >= 0).all() and (kl[logp != ref] > 0).all()
    assert torch.equal(k3_kl(logp, logp), torch.zeros_like(logp))


# --- clipped policy loss -------------------------------------------------------------------


def test_ratio_one_gives_minus_advantage_per_token():
    g = _gen(4)
    logp = -torch.rand(3, 5, generator=g)
    adv = torch.tensor([1.5, -0.7, 0.0])
    loss, clipped = clipped_policy_loss(logp, logp.clone(), adv, torch.ones(3, 5))
    assert torch.allclose(loss, -adv[:, None].expand(3, 5))
    assert not clipped.any()


def _ratios_loss(ratios: torch.Tensor, adv: float, dual_clip=C):
    """Loss, clip flags and per-token gradient for given ratios, one sequence per ratio."""
    old = torch.full_like(ratios, -1.0)
    logp = (old + ratios.log()).requires_grad_(True)
    loss, clipped = clipped_policy_loss(
        logp[:, None],
        old[:, None],
        torch.full((len(ratios),), adv),
        torch.ones(len(ratios), 1),
        epsilon_low=EL,
        epsilon_high=EH,
        dual_clip=dual_clip,
    )
    loss.sum().backward()
    return loss.detach().squeeze(1), clipped.squeeze(1), logp.grad


RATIOS = torch.tensor([0.5, 0.79, 0.81, 1.0, 1.27, 1.29, 2.0, 2.9, 3.1, 10.0], dtype=torch.float64)


def test_positive_advantage_clips_above_one_plus_eps_high():
    loss, clipped, grad = _ratios_loss(RATIOS, adv=2.0)
    expect_clipped = RATIOS > 1 + EH
    assert torch.equal(clipped, expect_clipped)
    assert torch.allclose(loss, -2.0 * torch.minimum(RATIOS, torch.full_like(RATIOS, 1 + EH)))
    assert (grad[expect_clipped] == 0).all() and (grad[~expect_clipped] != 0).all()


def test_negative_advantage_clips_below_one_minus_eps_low():
    loss, clipped, grad = _ratios_loss(RATIOS, adv=-2.0, dual_clip=None)
    expect_clipped = RATIOS < 1 - EL
    assert torch.equal(clipped, expect_clipped)
    assert torch.allclose(loss, 2.0 * torch.maximum(RATIOS, torch.full_like(RATIOS, 1 - EL)))
    assert (grad[expect_clipped] == 0).all() and (grad[~expect_clipped] != 0).all()


def test_dual_clip_caps_negative_advantage_loss():
    loss, clipped, grad = _ratios_loss(RATIOS, adv=-2.0)
    over = RATIOS > C
    assert torch.allclose(loss[over], torch.full_like(loss[over], C * 2.0))
    assert clipped[over].all() and (grad[over] == 0).all()
    # Below the cap the dual clip changes nothing.
    plain, _, _ = _ratios_loss(RATIOS, adv=-2.0, dual_clip=None)
    assert torch.allclose(loss[~over], plain[~over])
    assert (plain[over] > C * 2.0).all()
    # Positive advantages are never dual-clipped.
    pos, _, _ = _ratios_loss(RATIOS, adv=2.0)
    pos_plain, _, _ = _ratios_loss(RATIOS, adv=2.0, dual_clip=None)
    assert torch.equal(pos, pos_plain)


def test_invalid_clip_settings_are_refused_by_the_config():
    from erl_lite.config import ERLConfig

    with pytest.raises(ValueError, match="dual_clip"):
        ERLConfig(dual_clip=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        ERLConfig(epsilon=-0.1)


# --- masks ---------------------------------------------------------------------------------


def _random_batch(seed: int, B: int = 4, T: int = 7):
    g = _gen(seed)
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    old = logp + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = logp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = _ragged_mask([T, 3, 1, 5][:B] + [2] * max(0, B - 4), T)
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_masked_tokens_change_neither_loss_nor_grads(loss_type):
    logp, old, ref, adv, mask = _random_batch(5)
    out = ~mask.bool()
    results = []
    for noise in (0.0, 1.0):
        g = _gen(6)

        def bump(t):
            return t + noise * out * torch.randn(t.shape, generator=g, dtype=t.dtype)

        lp = bump(logp).requires_grad_(True)
        loss, stats = policy_objective(lp, bump(old), bump(ref), adv, mask, beta=0.1, loss_type=loss_type)
        loss.backward()
        results.append((loss.detach(), lp.grad, stats))
        lw = bump(logp).requires_grad_(True)
        aggregate(nll_loss(lw, adv.abs(), mask), mask, loss_type).backward()
        results.append((None, lw.grad, None))
    (l0, g0, s0), (_, n0, _), (l1, g1, s1), (_, n1, _) = results
    assert torch.equal(l0, l1) and torch.equal(g0, g1) and torch.equal(n0, n1)
    assert s0 == s1
    assert (g0[out] == 0).all() and (g0[~out] != 0).any()


def test_clip_flags_and_stats_ignore_masked_tokens():
    logp = torch.zeros(1, 4)
    old = torch.tensor([[-1.0, -1.0, 0.0, 0.0]])  # ratio e > 1 + eps_high on the first two
    mask = torch.tensor([[1, 0, 1, 1]])
    _, clipped = clipped_policy_loss(logp, old, torch.tensor([1.0]), mask)
    assert clipped.tolist() == [[True, False, False, False]]
    _, stats = policy_objective(logp, old, logp - 0.5, torch.tensor([1.0]), mask, beta=0.1)
    assert stats.clip_ratio == pytest.approx(1 / 3)
    assert stats.kl == pytest.approx(float(k3_kl(torch.zeros(()), torch.tensor(-0.5))))
    assert stats.num_tokens == 3


# --- aggregation ---------------------------------------------------------------------------


def test_aggregation_hand_checked():
    per_token = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, 100.0], [100.0, 100.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])  # last row: no loss tokens
    assert aggregate(per_token, mask, "seq_sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate(per_token, mask, "token_mean").item() == pytest.approx(10 / 4)
    assert aggregate(per_token, mask, "seq_mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(per_token, mask, "seq_sum", normalizer=5.0).item() == pytest.approx(2.0)
    assert normalizer_for(mask, "token_mean") == 4.0
    assert normalizer_for(mask, "seq_sum") == normalizer_for(mask, "seq_mean") == 2.0
    assert normalizer_for(torch.zeros(2, 3), "token_mean") == 1.0
    assert aggregate(per_token, torch.zeros(3, 4), "seq_mean").item() == 0.0
    with pytest.raises(ValueError, match="loss_type"):
        aggregate(per_token, mask, "sum")
    with pytest.raises(ValueError, match="normalizer"):
        aggregate(per_token, mask, "seq_sum", normalizer=0.0)


def test_masked_mean():
    assert masked_mean(torch.tensor([[2.0, 4.0, 9.0]]), torch.tensor([[1, 1, 0]])).item() == 3.0
    assert masked_mean(torch.ones(2, 2), torch.zeros(2, 2)).item() == 0.0


def test_nll_loss_weights_and_mask():
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    out = nll_loss(logp, torch.tensor([1.0, 0.0]), torch.tensor([[1, 0], [1, 1]]))
    assert out.tolist() == [[1.0, 0.0], [0.0, 0.0]]


# --- gradient accumulation -----------------------------------------------------------------


def _tiny_model_batch(B: int = 6, T: int = 5, V: int = 9, D: int = 4):
    g = _gen(7)
    model = torch.nn.Linear(D, V).double()
    with torch.no_grad():
        model.weight.copy_(torch.randn(V, D, generator=g, dtype=torch.float64))
        model.bias.copy_(torch.randn(V, generator=g, dtype=torch.float64))
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    ids = torch.randint(0, V, (B, T), generator=g)
    with torch.no_grad():
        base = token_logprobs(model(x), ids)
    old = base + 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)  # some tokens clip
    ref = base + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    # Very unequal lengths (and one empty row) so that naive micro-averaging is wrong.
    mask = _ragged_mask([5, 5, 5, 1, 0, 2][:B], T)
    return model, x, ids, old, ref, adv, mask


def _grad(model, x, ids, old, ref, adv, mask, loss_type, normalizer, kind):
    logp = token_logprobs(model(x), ids)
    if kind == "policy":
        loss, _ = policy_objective(logp, old, ref, adv, mask, beta=0.05, loss_type=loss_type, normalizer=normalizer)
    else:
        loss = aggregate(nll_loss(logp, adv.abs(), mask), mask, loss_type, normalizer)
    loss.backward()


@pytest.mark.parametrize("kind", ["policy", "nll"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_gradient_accumulation_matches_full_batch(loss_type, kind):
    model, x, ids, old, ref, adv, mask = _tiny_model_batch()
    _grad(model, x, ids, old, ref, adv, mask, loss_type, None, kind)
    full = [p.grad.clone() for p in model.parameters()]
    assert all(f.abs().sum() > 0 for f in full)

    def accumulate(normalizer_of):
        model.zero_grad()
        for sl in (slice(0, 3), slice(3, 6)):
            _grad(model, x[sl], ids[sl], old[sl], ref[sl], adv[sl], mask[sl], loss_type, normalizer_of(mask[sl]), kind)
        return [p.grad.clone() for p in model.parameters()]

    exact = accumulate(lambda _: normalizer_for(mask, loss_type))
    for f, a in zip(full, exact):
        assert_close_rel(a, f, 1e-12)  # float64, the same terms in two sums: ~1e-15 of the gradient
    # Each micro-batch normalised by its own count, then halved: not the same gradient.
    naive = accumulate(lambda m: 2 * normalizer_for(m, loss_type))
    # Mis-weighted micro-batches change the gradient by a sizeable fraction of itself.
    assert any(float((f - a).abs().max()) > 1e-3 * float(f.abs().max()) for f, a in zip(full, naive))


# --- parity with TRL's GRPO loss -----------------------------------------------------------


def _trl_formula(logp, old, ref, adv, mask, beta, trl_loss_type, num_items=None, level="token"):
    """Independent re-derivation of TRL 1.16.0 `GRPOTrainer._compute_loss`
    (trl/trainer/grpo_trainer.py, no vLLM, one process, no gradient accumulation):
    log_w = logp - old (token level) or, at sequence level (GSPO), its mean over the mask,
    shape (B, 1); coef_1 = exp(log_w); coef_2 = clamp(coef_1, 1-εl, 1+εh);
    per_token_loss = -min(coef_1·A, coef_2·A) + beta·k3; then the `loss_type` branch."""
    a = adv[:, None]
    log_w = logp - old
    if level == "sequence":
        log_w = ((log_w * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_w)
    coef_2 = torch.clamp(coef_1, 1 - EL, 1 + EH)
    ptl = -torch.min(coef_1 * a, coef_2 * a)
    ptl = ptl + beta * (torch.exp(ref - logp) - (ref - logp) - 1)
    m = mask.to(ptl.dtype)
    if trl_loss_type == "grpo":
        return ((ptl * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if trl_loss_type == "bnpo":
        return (ptl * m).sum() / m.sum().clamp(min=1.0)
    if trl_loss_type == "luspo":
        return (ptl * m).sum(-1).mean()
    if trl_loss_type == "dapo":
        return (ptl * m).sum() / num_items
    raise ValueError(trl_loss_type)


# Our aggregation ↔ TRL's loss_type (TRL's "dapo" is token_mean with a whole-batch normalizer;
# "bnpo" is token_mean only for a batch in one micro-batch, as here, so erl_lite refuses the name).
TRL_MATCH = [("token_mean", "bnpo"), ("seq_mean", "grpo"), ("seq_sum", "luspo"), ("token_mean", "dapo")]


def _parity_batch(seed: int):
    logp, old, ref, adv, _ = _random_batch(seed, B=6, T=9)
    mask = _ragged_mask([9, 4, 1, 7, 2, 5], 9)  # every row has a token: TRL counts all rows
    return logp.requires_grad_(True), old, ref, adv, mask


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("ours,theirs", TRL_MATCH)
def test_parity_with_trl_grpo_formula(ours, theirs, level):
    logp, old, ref, adv, mask = _parity_batch(8)
    if level == "sequence":  # shift whole sequences so some sequence-level ratios leave the clip range
        old = old + torch.tensor([-0.4, 0.4, 0.0, 0.3, 0.0, 0.0], dtype=old.dtype)[:, None]
    loss, stats = policy_objective(
        logp,
        old,
        ref,
        adv,
        mask,
        beta=0.04,
        epsilon_low=EL,
        epsilon_high=EH,
        dual_clip=None,
        loss_type=ours,
        importance_sampling_level=level,
    )
    (g_ours,) = torch.autograd.grad(loss, logp)
    expected = _trl_formula(logp, old, ref, adv, mask, 0.04, theirs, num_items=mask.sum(), level=level)
    (g_trl,) = torch.autograd.grad(expected, logp)
    # float64, the same formula written twice: ~1e-15 of the magnitudes.
    assert_close_rel(loss, expected, 1e-12)
    assert_close_rel(g_ours, g_trl, 1e-12)
    assert 0 < stats.clip_ratio < 1  # the batch exercises both clipped and free tokens


def _run_trl_compute_loss(logp, old, ref, adv, mask, beta, trl_loss_type, level="token"):
    """Call the installed TRL's `GRPOTrainer._compute_loss` with a stand-in trainer whose
    forward pass returns `logp`; relies on private attributes, so skip when they move."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    B, T = mask.shape
    identity = SimpleNamespace(
        gather=lambda t: t, gather_for_metrics=lambda t: t, reduce=lambda t, reduction="sum": t, num_processes=1
    )
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        loss_type=trl_loss_type,
        epsilon_low=EL,
        epsilon_high=EH,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        accelerator=identity,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
    )
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    try:
        loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    except (AttributeError, KeyError, TypeError) as err:
        pytest.skip(
            f"TRL's private GRPO loss internals changed ({err!r}); "
            "test_parity_with_trl_grpo_formula still checks the formula"
        )
    return loss, trainer._metrics["train"]


@pytest.mark.slow  # importing GRPOTrainer takes ~12 s on a small CPU
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("ours,theirs", TRL_MATCH)
def test_parity_with_installed_trl_compute_loss(ours, theirs, level):
    logp, old, ref, adv, mask = _parity_batch(9)
    loss, stats = policy_objective(
        logp,
        old,
        ref,
        adv,
        mask,
        beta=0.04,
        epsilon_low=EL,
        epsilon_high=EH,
        dual_clip=None,
        loss_type=ours,
        importance_sampling_level=level,
    )
    (g_ours,) = torch.autograd.grad(loss, logp)
    trl_loss, metrics = _run_trl_compute_loss(logp, old, ref, adv, mask, 0.04, theirs, level)
    (g_trl,) = torch.autograd.grad(trl_loss, logp)
    assert_close_rel(loss, trl_loss, 1e-12)  # float64 through TRL's code: ~1e-15 of the magnitudes
    assert_close_rel(g_ours, g_trl, 1e-12)
    assert stats.clip_ratio == pytest.approx(metrics["clip_ratio/region_mean"][0])
    assert stats.kl == pytest.approx(metrics["kl"][0])


# --- numerical safety of the KL term -------------------------------------------------------


def test_kl_gradient_is_finite_with_extreme_logprobs_at_masked_slots():
    # A padded slot whose policy log-prob is -1000 against a reference of 0 (how padded
    # reference slots used to be filled): exp(1000) overflows, and the masked 0·inf of the
    # backward must not turn into a NaN gradient.
    logp = torch.tensor([[-1.0, -1000.0, -1000.0]], requires_grad=True)
    ref = torch.tensor([[-1.2, 0.0, 0.0]])
    old = torch.tensor([[-1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 0, 0]])
    loss, stats = policy_objective(logp, old, ref, torch.tensor([1.0]), mask, beta=0.1)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert logp.grad[0, 1:].eq(0).all() and logp.grad[0, 0] != 0
    assert stats.kl == pytest.approx(float(k3_kl(torch.tensor(-1.0), torch.tensor(-1.2))))


def test_k3_kl_is_clamped_like_verl():
    logp = torch.tensor([-1000.0, -30.0, -1.0, 0.0], requires_grad=True)
    ref = torch.tensor([0.0, 0.0, -1.5, -1000.0])
    kl = k3_kl(logp, ref)
    kl.sum().backward()
    assert torch.isfinite(kl).all() and torch.isfinite(logp.grad).all()
    assert kl[0] == kl[1] == 10.0  # the estimate is capped at 10
    assert kl[3] == 10.0 and (logp.grad[[0, 1, 3]] == 0).all()  # clamped: no KL gradient
    d = torch.tensor(-0.5)
    assert float(kl[2]) == pytest.approx(float(torch.exp(d) - d - 1))  # unchanged inside the range


# --- the objective PolicyUpdater trains with is the one checked against TRL ----------------


def _train_rows(n: int = 8, seed: int = 0):
    import random

    from erl_lite.records import TrainSample

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        prompt = [rng.randrange(6, 100) for _ in range(rng.randrange(3, 12))]
        completion = [rng.randrange(6, 100) for _ in range(rng.randrange(1, 9))]
        mask = [1] + [int(rng.random() < 0.8) for _ in completion[1:]]
        rows.append(
            TrainSample(
                ("first", "reflection", "second", "internalization")[i % 4],
                prompt,
                completion,
                mask,
                rng.uniform(-1.5, 1.5),
            )
        )
    return rows


def _lora_policy():
    from erl_lite.models import load_policy
    from erl_lite.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    torch.manual_seed(0)  # LoRA A is drawn from the global generator: fixed, whatever ran before
    model, tok = load_policy(tiny_model(tok), tok, peft="lora")
    with torch.no_grad():  # off the zero-initialised LoRA B: policy != reference, gradients reach A
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1, generator=_gen(11))
    return model, tok


@pytest.mark.parametrize("steps", [1, 2])
def test_policy_updater_calls_the_trl_parity_objective(monkeypatch, steps):
    import erl_lite.core.update as update
    from erl_lite.config import ERLConfig

    real, calls = update.policy_objective, []

    def checked(logp, old, ref, adv, mask, **kw):
        loss, stats = real(logp, old, ref, adv, mask, **kw)
        old_or_current = logp.detach() if old is None else old
        expected = _trl_formula(logp, old_or_current, ref, adv, mask, kw["beta"], "dapo", num_items=kw["normalizer"])
        (g_ours,) = torch.autograd.grad(loss, logp, retain_graph=True)
        (g_trl,) = torch.autograd.grad(expected, logp, retain_graph=True)
        # float32 (the model's log-probs), the same formula twice: ~1e-7 of the magnitudes.
        assert_close_rel(loss, expected, 1e-5)
        assert_close_rel(g_ours, g_trl, 1e-5)
        calls.append(stats.clip_ratio)
        return loss, stats

    monkeypatch.setattr(update, "policy_objective", checked)
    model, tok = _lora_policy()
    cfg = ERLConfig(
        beta=0.04,
        dual_clip=None,
        loss_type="token_mean",
        steps_per_generation=steps,
        per_device_train_batch_size=3,
        temperature=1.0,
    )
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=2.0)
    update.PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(_train_rows(12))
    assert len(calls) >= 2 * steps
    if steps == 2:  # the second mini-batch is off-policy after the first step: ratios move, some clip
        assert any(c > 0 for c in calls)


def test_policy_updater_gradient_equals_trl_loss_on_the_whole_batch():
    from erl_lite.config import ERLConfig
    from erl_lite.core.update import PolicyUpdater, completion_logprobs, pack

    model, tok = _lora_policy()
    rows = _train_rows(8)
    cfg = ERLConfig(
        beta=0.04,
        dual_clip=None,
        loss_type="seq_sum",
        per_device_train_batch_size=3,
        temperature=0.7,
        max_grad_norm=1e9,
    )
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    opt = torch.optim.SGD(params.values(), lr=0.0)
    seen = {}
    step = opt.step
    opt.step = lambda: (seen.update({n: p.grad.clone() for n, p in params.items()}), step())
    PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(rows)  # chunked, 3 micro-batches
    # Independently: the whole batch at once, full logits, TRL's documented loss ("luspo").
    batch = pack(rows, tok.pad_token_id, nll_internalization=False)
    with torch.no_grad(), model.disable_adapter():
        ref = completion_logprobs(model, batch, 0.7, chunk_size=None)
    logp = completion_logprobs(model, batch, 0.7, chunk_size=None)
    _trl_formula(logp, logp.detach(), ref, batch.advantages, batch.mask, 0.04, "luspo").backward()
    assert seen.keys() == params.keys()
    for n, p in params.items():
        # Chunked, 3 micro-batches vs one full-logits pass (float32): 1e-4 of the largest entry.
        assert_close_rel(seen[n], p.grad, 1e-4, msg=n)
    assert all(p.grad.abs().sum() > 0 for p in params.values())


# --- TRL's loss_type names and the sequence-level ratio ---------------------------------------


@pytest.mark.parametrize("trl_name,ours", [("grpo", "seq_mean"), ("dapo", "token_mean"), ("luspo", "seq_sum")])
def test_trl_loss_type_names_are_the_same_formula(trl_name, ours):
    from erl_lite.config import ERLConfig

    # ERLConfig resolves TRL's name to erl_lite's; the loss functions take erl_lite's names only
    assert ERLConfig(loss_type=trl_name).loss_type == ours
    with pytest.raises(ValueError, match="loss_type must be one of"):
        policy_objective(*_parity_batch(3), loss_type=trl_name)


@pytest.mark.parametrize("name", ["bnpo", "dr_grpo", "cispo", "sapo", "vespo"])
def test_unimplemented_trl_loss_types_name_the_closest(name):
    from erl_lite.config import ERLConfig

    with pytest.raises(ValueError, match=f"loss_type='{name}'.*closest is"):
        ERLConfig(loss_type=name)


def test_sequence_level_ratio_is_shared_by_the_sequence():
    """One ratio per sequence: exp(mean log-ratio over its loss tokens), masked slots ignored."""
    logp = torch.tensor([[0.0, 0.0, 0.0]])
    old = torch.tensor([[-0.1, 0.1, 5.0]])  # mean over the two loss tokens: 0; the masked slot is ignored
    mask = torch.tensor([[1, 1, 0]])
    tok, clipped_tok = clipped_policy_loss(logp, old, torch.tensor([1.0]), mask, dual_clip=None)
    seq, clipped_seq = clipped_policy_loss(
        logp, old, torch.tensor([1.0]), mask, dual_clip=None, importance_sampling_level="sequence"
    )
    assert torch.allclose(seq, torch.tensor([[-1.0, -1.0, 0.0]]))  # ratio exp(0) = 1 for both tokens
    assert not torch.allclose(tok, seq)
    with pytest.raises(ValueError, match="importance_sampling_level"):
        clipped_policy_loss(logp, old, torch.tensor([1.0]), mask, importance_sampling_level="seq")


def test_the_loss_functions_read_their_defaults_from_erlconfig():
    """One home for the loss defaults: every default of a loss setting in core/losses.py names ERLConfig's field
    (ε, c, β, the loss type, the ratio's level), so changing the config's default changes the functions' too."""
    import ast
    import inspect

    import erl_lite.core.losses as losses
    from erl_lite.config import ERLConfig

    field_of = {"epsilon_low": "epsilon", "epsilon_high": "epsilon_high", "dual_clip": "dual_clip", "beta": "beta"}
    field_of.update(loss_type="loss_type", importance_sampling_level="importance_sampling_level")
    seen = 0
    for node in ast.walk(ast.parse(inspect.getsource(losses))):
        if isinstance(node, ast.FunctionDef):
            for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
                if arg.arg in field_of:
                    seen += 1
                    assert ast.unparse(default) == f"ERLConfig.{field_of[arg.arg]}", f"{node.name}({arg.arg}=...)"
    assert seen >= 10  # clipped_policy_loss's four and policy_objective's six
    defaults = inspect.signature(losses.policy_objective).parameters
    assert defaults["epsilon_high"].default == ERLConfig().epsilon_high and defaults["beta"].default == ERLConfig().beta
