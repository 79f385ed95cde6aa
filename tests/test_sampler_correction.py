"""The sampler's importance-sampling correction (TRL's ``vllm_importance_sampling_*``): each sampled token's
policy loss weighted by ``exp(log pi_old - log q)``, truncated or masked, per token or per sequence."""

from __future__ import annotations

import math

import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.core.losses import policy_objective, sampler_weights

NAN = float("nan")
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -1.0, -3.0]], dtype=torch.float64)
SAMPLED = torch.tensor([[-1.2, -1.0, NAN], [-1.5, -4.0, -3.5]], dtype=torch.float64)  # NaN: not reported
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _hand(mode: str, low: float | None, high: float | None) -> list[list[float]]:
    """The formula, one element at a time: d = (old - sampled) on loss tokens (0 where the sampler reported
    nothing); a sequence mode sums d over the row; w = exp(d), clipped into [low, high] or zeroed outside it."""
    lo, hi = -math.inf if low is None else low, math.inf if high is None else high
    rows = []
    for old, sampled, mask in zip(OLD.tolist(), SAMPLED.tolist(), MASK.tolist()):
        d = [(o - s) * m if not math.isnan(s) else 0.0 for o, s, m in zip(old, sampled, mask)]
        ratios = [math.exp(sum(d))] * len(d) if mode.startswith("sequence") else [math.exp(x) for x in d]
        if mode.endswith("truncate"):
            rows.append([min(max(r, lo), hi) for r in ratios])
        else:
            rows.append([r if lo <= r <= hi else 0.0 for r in ratios])
    return rows


@pytest.mark.parametrize("clip", [(None, 3.0), (0.5, 2.0), (None, None)])
@pytest.mark.parametrize("mode", MODES)
def test_the_weights_follow_the_formula(mode, clip):
    got = sampler_weights(OLD, SAMPLED, MASK, mode, *clip)
    assert got.shape == ((2, 3) if mode.startswith("token") else (2, 1))
    want = torch.tensor(_hand(mode, *clip), dtype=torch.float64)
    # float64 throughout: exp and a sum of three terms agree to ~1e-15 relative; 1e-12 leaves room.
    assert torch.allclose(got.expand(2, 3), want, rtol=1e-12, atol=0.0)


def test_a_token_the_sampler_did_not_score_gets_weight_one():
    got = sampler_weights(OLD, SAMPLED, MASK, "token_truncate", None, 3.0)
    assert got[0, 2].item() == 1.0  # not reported (NaN): no correction
    assert got[1, 2].item() == 1.0  # no loss on it: no correction
    assert got[1, 1].item() == 3.0  # exp(-1 + 4) = e^3, cut at the cap


def test_the_weight_scales_each_tokens_policy_loss_and_nothing_else():
    lp = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -1.0, -3.0]], requires_grad=True)
    adv = torch.tensor([1.0, -0.5])
    mask = torch.ones(2, 3)
    weight = torch.tensor([[2.0, 0.5, 1.0], [3.0, 0.0, 1.0]])
    plain, _ = policy_objective(lp, None, None, adv, mask, beta=0.0, loss_type="token_mean")
    (g_plain,) = torch.autograd.grad(plain, lp)
    weighted, _ = policy_objective(lp, None, None, adv, mask, beta=0.0, loss_type="token_mean", sampler_weight=weight)
    (g_weighted,) = torch.autograd.grad(weighted, lp)
    # ratio 1 (old = current): nothing is clipped, so each token's gradient is its plain one times its weight
    # (float32 products of small numbers: exact to a few ulps; 1e-6 relative).
    assert torch.allclose(g_weighted, g_plain * weight, rtol=1e-6, atol=1e-9)
    # internalization rows (weighted NLL) are not a sampled distribution: left unweighted
    nll = torch.tensor([True, True])
    a, _ = policy_objective(lp, None, None, adv, mask, nll_rows=nll, beta=0.0, loss_type="token_mean")
    b, _ = policy_objective(
        lp, None, None, adv, mask, nll_rows=nll, beta=0.0, loss_type="token_mean", sampler_weight=weight
    )
    assert a.item() == b.item()


@pytest.mark.parametrize("on", [False, True])
def test_the_update_weights_with_the_samplers_logprobs_only_when_asked(monkeypatch, on):
    import erl_lite.core.update as update
    from erl_lite.records import TrainSample
    from erl_lite.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    model = tiny_model(tok)
    cfg = ERLConfig(
        beta=0.0,
        generation_backend="vllm",
        vllm_importance_sampling_correction=on,
        vllm_importance_sampling_clip_max=1.5,
    )
    seen, real = [], update.policy_objective
    monkeypatch.setattr(
        update,
        "policy_objective",
        lambda logp, old, *a, **kw: (
            seen.append((logp.detach(), old, kw.get("sampler_weight"))),
            real(logp, old, *a, **kw),
        )[1],
    )
    rows = [
        TrainSample("first", [5, 6, 7], [8, 9, 10], [1, 1, 1], 1.0, "t", None, [-9.0, -1e-3, NAN]),
        TrainSample("first", [5, 6, 7], [11, 12], [1, 1], -1.0, "t", None, [-2.0, -3.0]),
    ]
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    update.PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(rows)
    assert seen
    for logp, old, weight in seen:
        if not on:
            assert weight is None
            continue
        assert weight is not None and weight.shape == logp.shape
        assert (weight <= 1.5).all() and (weight >= 0).all()
        assert weight.max().item() == 1.5  # a token sampled at log q = -9 is far above the cap
        assert (weight < 1.5).any()  # ... and one at log q = -1e-3 is below it
    assert ERLConfig().vllm_importance_sampling_correction is False  # opt-in


def test_the_settings_are_checked_and_take_trls_names():
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode must be one of"):
        ERLConfig(vllm_importance_sampling_mode="token")
    with pytest.raises(ValueError, match="vllm_importance_sampling_clip_min.*clip_max"):
        ERLConfig(vllm_importance_sampling_clip_min=2.0, vllm_importance_sampling_clip_max=1.0)
    with pytest.raises(ValueError, match="vllm_importance_sampling_clip_max must be > 0"):
        ERLConfig(vllm_importance_sampling_clip_max=0.0)
    assert (
        ERLConfig(use_vllm=True, vllm_importance_sampling_cap=2.0).vllm_importance_sampling_clip_max == 2.0
    )  # TRL's old name
    cfg = ERLConfig(
        generation_backend="vllm",
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode="sequence_mask",
    )
    assert cfg.vllm_importance_sampling_mode == "sequence_mask"


def _refusal(make):
    """The ValueError ``make()`` raises, or None."""
    try:
        make()
    except ValueError as err:
        return str(err)
    return None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("on", [True, False])
def test_the_clip_rules_are_trls(tmp_path, mode, on):
    # TRL's GRPOConfig refuses clip_min >= clip_max, and a *_truncate correction with both clips None (it would
    # clip nothing); every other pair of positive bounds or None passes. ERLConfig must accept and refuse the
    # same pairs (it refuses a bound <= 0 besides: a weight cap at 0 removes every policy gradient).
    from trl import GRPOConfig

    for low in (None, 0.5, 2.0, 3.0):
        for high in (None, 2.0, 3.0):
            kw = dict(
                vllm_importance_sampling_correction=on,
                vllm_importance_sampling_mode=mode,
                vllm_importance_sampling_clip_min=low,
                vllm_importance_sampling_clip_max=high,
            )
            theirs = _refusal(
                lambda: GRPOConfig(output_dir=str(tmp_path), report_to=[], bf16=False, use_cpu=True, **kw)
            )
            ours = _refusal(lambda: ERLConfig(generation_backend="vllm", **kw))
            assert (ours is None) == (theirs is None), (kw, ours, theirs)
            if ours is not None:  # named by field and value
                assert "vllm_importance_sampling_clip" in ours and str(low if high is None else high) in ours
