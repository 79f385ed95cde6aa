"""What the sampler draws from is what the update scores (issue "What it samples is what it trains on").

A model's own ``generation_config`` must not reach sampling; every backend reports the log-prob of each
token it drew under the distribution it drew from; the update compares it with its own pass.
"""

import pytest
import torch
from transformers import GenerationConfig

from erl_lite.engine.batching import completion_logprobs, pack
from erl_lite.engine.continuous import ContinuousGenerator
from erl_lite.engine.generation import HFGenerator, SamplingParams
from erl_lite.records import TrainSample
from erl_lite.testing import tiny_model, tiny_tokenizer

#: Checkpoint defaults that change the distribution, one per case (values as Qwen2.5/Llama/Phi publish
#: them, or stronger, so a leak shows on a random tiny model).
PLANTED = {
    "top_k": {"top_k": 5},
    "top_p": {"top_p": 0.05},
    "min_p": {"min_p": 0.5},
    "typical_p": {"typical_p": 0.05},
    "repetition_penalty": {"repetition_penalty": 5.0},
    "no_repeat_ngram_size": {"no_repeat_ngram_size": 1},
    "suppress_tokens": {"suppress_tokens": list(range(10, 60))},
    "temperature": {"temperature": 0.05},
}


def _model(planted: dict):
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=1)
    model.generation_config = GenerationConfig(**{**model.generation_config.to_dict(), **planted})
    return model, tok


def _first_token_tv(gen, model, tok, temperature: float, n: int = 3000) -> float:
    """Total variation between the first sampled token's frequencies and softmax(z / T)."""
    prompt = tok("hello world", add_special_tokens=False).input_ids
    torch.manual_seed(0)
    outs = gen.generate([prompt] * n, SamplingParams(1, temperature=temperature, top_p=1.0, top_k=0))
    # An empty row drew the pad token (the sampler drops trailing padding).
    counts = torch.bincount(torch.tensor([o[0] if o else tok.pad_token_id for o in outs]), minlength=len(tok)).float()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    p = torch.softmax(logits / temperature, -1)
    return 0.5 * float((counts / n - p).abs().sum())


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_checkpoints_sampling_defaults_never_reach_generate(name):
    model, tok = _model(PLANTED[name])
    # A random tiny model's next-token distribution is near-uniform over ~100 tokens; with n = 3000
    # draws the sampling noise of the TV distance is about 0.5 * sqrt(2V / (pi n)) ~ 0.07; every
    # planted default moves it past 0.3.
    assert _first_token_tv(HFGenerator(model, tok), model, tok, temperature=1.0) < 0.15


def test_no_repeat_ngram_in_the_checkpoint_does_not_forbid_repeats():
    model, tok = _model({"no_repeat_ngram_size": 1})
    torch.manual_seed(0)
    outs = HFGenerator(model, tok, stop_ids=[]).generate([[5, 6]] * 32, SamplingParams(40, temperature=1.0))
    # 40 draws from ~100 near-uniform tokens repeat one with probability ~1 - e^-8: every row should.
    assert sum(len(set(o)) < len(o) for o in outs) >= 24


def _scored(model, prompt, out, temperature):
    row = TrainSample("first", prompt, out, [1] * len(out), 0.0)
    with torch.no_grad():
        return completion_logprobs(model, pack([row], 0, False), temperature, None)[0]


@pytest.mark.parametrize("backend", ["generate", "continuous"])
@pytest.mark.parametrize("planted", ["none", "repetition_penalty", "top_k"])
def test_every_backend_reports_the_logprob_the_update_scores(backend, planted):
    model, tok = _model({} if planted == "none" else PLANTED[planted])
    gen = HFGenerator(model, tok) if backend == "generate" else ContinuousGenerator(model, tok, cache_tokens=4096)
    prompts = [tok("hi there", add_special_tokens=False).input_ids, [7, 8, 9]]
    torch.manual_seed(0)
    outs = gen.generate(prompts * 2, SamplingParams(12, temperature=0.7))
    assert [len(lp) for lp in gen.last_logprobs] == [len(o) for o in outs]
    for prompt, out, reported in zip(prompts * 2, outs, gen.last_logprobs):
        scored = _scored(model, prompt, out, 0.7)
        # Both are fp32 log-probs of magnitude ~log(100) = 4.6 from the same weights; the sampler's runs
        # with a KV cache (another summation order), so they agree to ~1e-5 relative; 1e-3 is generous.
        assert torch.allclose(torch.tensor(reported), scored, atol=1e-3), (reported, scored.tolist())
    getattr(gen, "flush", lambda: None)()


def _phases(gen, prompt, n_phases=3):
    out = []
    for _ in range(n_phases):
        out.append(gen.generate([prompt] * 4, SamplingParams(8, temperature=1.0)))
        gen.flush()  # the trainer ends every rollout phase so
    return out


def test_the_continuous_backend_draws_fresh_noise_per_phase_and_per_rank():
    tok = tiny_tokenizer()
    model, prompt = tiny_model(tok, seed=1), [5, 6, 7]

    def run(seed, rank):
        torch.manual_seed(11)  # each call's seed is drawn from the run's generator (restored on resume)
        return _phases(ContinuousGenerator(model, tok, cache_tokens=1024, seed=seed, rank=rank), prompt)

    runs = {(seed, rank): run(seed, rank) for seed, rank in [(0, 0), (0, 1), (1, 0)]}
    first = runs[(0, 0)]
    assert first[0] != first[1] != first[2]  # a new step draws new completions
    assert run(0, 0) == first  # same seed, same run
    assert runs[(0, 1)] != first and runs[(1, 0)] != first  # another rank or seed: another stream


# -- every generation setting is honoured or refused when the config is built --------------------------
from transformers.generation.configuration_utils import GenerationConfig as _GC  # noqa: E402

from erl_lite.config import ERLConfig  # noqa: E402
from erl_lite.config.trl_fields import TRL_SAME_AS  # noqa: E402

_SAMPLE_VALUE = {
    "repetition_penalty": 1.3,
    "no_repeat_ngram_size": 2,
    "min_p": 0.05,
    "typical_p": 0.9,
    "top_h": 0.5,
    "bad_words_ids": [[5]],
    "suppress_tokens": [5],
    "begin_suppress_tokens": [5],
    "sequence_bias": {(5,): -1.0},
    "min_new_tokens": 2,
    "use_cache": False,
    "num_return_sequences": 2,
    "return_dict_in_generate": True,
    "num_beams": 2,
    "output_scores": True,
}


def _generation_fields():
    return sorted(set(_GC().to_dict()) | set(_GC._get_default_generation_params()))


@pytest.mark.parametrize("key", _generation_fields())
def test_every_generation_config_field_is_taken_or_refused_by_name(key):
    value = _SAMPLE_VALUE.get(key, "static" if key == "cache_implementation" else 1)
    try:
        cfg = ERLConfig(generation_kwargs={key: value})
    except (ValueError, TypeError) as err:
        assert repr(key) in str(err) or key in str(err)
        return
    assert key == "cache_implementation" and cfg.generation_kwargs == {key: "static"}


def test_the_one_taken_key_changes_a_step_as_documented():
    tok = tiny_tokenizer()
    gen = HFGenerator(tiny_model(tok), tok)
    outs = gen.generate([[5, 6, 7]] * 3, SamplingParams(4, generation_kwargs={"cache_implementation": "static"}))
    assert len(outs) == 3 and [len(o) for o in outs] == [len(lp) for lp in gen.last_logprobs]


@pytest.mark.parametrize("name,value", [("repetition_penalty", 1.1), ("min_p", 0.05)])
def test_trl_penalties_are_refused_by_name_unless_neutral(name, value):
    with pytest.raises(ValueError, match=name):
        ERLConfig(**{name: value})
    ERLConfig(**{name: TRL_SAME_AS[name]})  # the neutral value is what erl_lite does anyway


# -- old and reference log-probs under the modes sampling used --------------------------------------------
def _dropout_lora(p=0.2):
    from erl_lite.models import load_policy

    tok = tiny_tokenizer()
    model, tok = load_policy(tiny_model(tok), tok, peft="lora", lora_dropout=p)
    return model, tok


def _rows(n=6):
    return [
        TrainSample(["first", "second"][i % 2], [5 + i, 6, 7], [8, 9 + i, 10], [1, 1, 1], (-1) ** i * 0.5, f"t{i % 3}")
        for i in range(n)
    ]


@pytest.mark.parametrize("model_mode", ["eval", "train"])
def test_old_and_reference_logprobs_run_with_dropout_off_on_every_step(monkeypatch, model_mode):
    import erl_lite.core.update as update

    model, tok = _dropout_lora()
    getattr(model, model_mode)()  # step 1 finds the model in eval mode (after sampling), later steps in train mode
    modes, real = [], update.PolicyUpdater._logprobs
    monkeypatch.setattr(
        update.PolicyUpdater, "_logprobs", lambda self, b: (modes.append(self.model.training), real(self, b))[1]
    )
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    cfg = ERLConfig(beta=0.01, temperature=1.0, steps_per_generation=1, per_device_train_batch_size=64)
    updater = update.PolicyUpdater(model, opt, None, cfg, tok.pad_token_id)
    seen = []
    real_objective = update.PolicyUpdater._objective
    monkeypatch.setattr(
        update.PolicyUpdater,
        "_objective",
        lambda self, batch, norm, gaps: (
            seen.append(batch.old_logp is not None),
            real_objective(self, batch, norm, gaps),
        )[1],
    )
    updater.update(_rows())
    # One mini-batch: its training pass draws dropout, so it needs an explicit old pass (and a ref pass).
    assert modes and not any(modes)
    assert seen and all(seen)


def test_dropout_is_looked_up_at_every_pass_not_on_first_sight():
    from peft import LoraConfig, get_peft_model

    from erl_lite.engine.logprobs import _may_share

    tok = tiny_tokenizer()
    model = tiny_model(tok).train()
    assert _may_share(model.model)  # no dropout yet: contexts are shared
    get_peft_model(model, LoraConfig(r=4, lora_dropout=0.3, target_modules=["q_proj", "v_proj"])).train()
    assert not _may_share(model.model)  # the adapter brought dropout that draws


def test_each_row_is_scored_at_the_temperature_it_was_sampled_at():
    from erl_lite.engine.batching import micro_batches

    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=1)
    gen = HFGenerator(model, tok)
    prompt = [5, 6, 7]
    rows = []
    for role, temperature in (("first", None), ("reflection", 0.5), ("second", None), ("reflection", 0.5)):
        out = gen.generate([prompt], SamplingParams(6, temperature=temperature or 0.7))[0]
        rows.append(TrainSample(role, prompt, out, [1] * len(out), 0.0, "t", temperature, gen.last_logprobs[0]))
    batches = [pack(chunk, 0, False) for chunk in micro_batches(rows, 8)]
    assert sorted(b.temperature or 0.7 for b in batches) == [0.5, 0.7]  # one temperature per pass
    for b in batches:
        with torch.no_grad():
            scored = completion_logprobs(model, b, 0.7, None)  # 0.7: the run's; a reflection batch keeps its 0.5
        keep = b.mask.bool()
        # fp32, same weights: ~1e-5 apart; scoring a 0.5 row at 0.7 would move each log-prob by ~0.5.
        assert torch.allclose(scored[keep], b.sampled_logp[keep], atol=1e-3)


# -- the on-policy check is exact under the sampler's own cut, and catches a stale sampler at any lr ---------------
from erl_lite.core.update import PolicyUpdater  # noqa: E402
from erl_lite.metric_names import GAP_MAX_KEYS, GAP_MEAN_KEYS, GAP_STALE, GAP_TOKENS  # noqa: E402

#: Sampler and update in fp32 on the same weights agree to ~1e-5 a token (another summation order); the exact check
#: allows 1e-3. A cut the update ignored moves a token by -log(kept mass): 0.1 and more at these settings.
EXACT = 1e-3
CUTS = {
    "top_k=5": dict(top_k=5),
    "top_p=0.8": dict(top_p=0.8),
    "top_k=20,top_p=0.9": dict(top_k=20, top_p=0.9),
    "T=1.3,top_p=0.5": dict(temperature=1.3, top_p=0.5),
    "none": {},
}


def _rollout_rows(gen, tok, cfg, n=4):
    """First attempts and reflections drawn by ``gen`` as the phases draw them (each role's own settings)."""
    prompts = [tok("hi there", add_special_tokens=False).input_ids, [7, 8, 9, 10]] * (n // 2)
    rows = []
    for role, params in (
        ("first", SamplingParams(10, cfg.temperature, cfg.top_p, cfg.top_k)),
        ("reflection", SamplingParams(10, cfg.reflection_temperature, cfg.reflection_top_p, 0)),
    ):
        outs = gen.generate(prompts, params)
        rows += [
            TrainSample(role, p, o, [1] * len(o), 1.0, "t", None if role == "first" else params.temperature, list(lp))
            for p, o, lp in zip(prompts, outs, gen.last_logprobs)
            if o
        ]
    getattr(gen, "flush", lambda: None)()
    return rows


def _update(model, tok, cfg, rows, lr=0.0):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    return PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(rows)


@pytest.mark.parametrize("backend", ["generate", "continuous"])
@pytest.mark.parametrize("cut", sorted(CUTS))
def test_the_gap_is_zero_on_policy_whatever_the_cut(backend, cut):
    from erl_lite.models import load_policy

    tok = tiny_tokenizer()
    model, tok = load_policy(tiny_model(tok, seed=1), tok, peft="lora")
    cfg = ERLConfig(beta=0.0, reflection_top_p=0.7, **CUTS[cut])
    gen = HFGenerator(model, tok) if backend == "generate" else ContinuousGenerator(model, tok, cache_tokens=4096)
    torch.manual_seed(0)
    m = _update(model, tok, cfg, _rollout_rows(gen, tok, cfg))
    assert m[GAP_TOKENS] > 20 and m[GAP_STALE] == 0.0
    for role in ("first", "reflection"):
        assert m[GAP_MAX_KEYS[role]] < EXACT, (role, m[GAP_MEAN_KEYS[role]], m[GAP_MAX_KEYS[role]])


def test_a_repetition_penalty_the_update_does_not_apply_opens_the_gap():
    # A penalty outside ERLConfig (as a checkpoint's once leaked in) at a mild 1.3 on a flat model: the tokens it
    # touched move by ~0.01 nats (0.008 measured with the old check's 0.05 tolerance, which missed it).
    class Leaky(HFGenerator):
        def sampling_config(self, params):
            config = super().sampling_config(params)
            config.repetition_penalty = 1.3
            return config

    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=1)
    cfg = ERLConfig(beta=0.0)
    torch.manual_seed(0)
    m = _update(model, tok, cfg, _rollout_rows(Leaky(model, tok), tok, cfg, n=8))
    assert m[GAP_MAX_KEYS["first"]] > 10 * EXACT
    from erl_lite.diagnostics.checks import CHECKS_BY_NAME, RunFacts

    assert CHECKS_BY_NAME["off_policy"].finding([{"step": 1, **m.to_metrics()}], RunFacts()) is not None


class _Unsynced(HFGenerator):
    """A sampler holding its own copy of the weights, taken when it was built and never refreshed (a vLLM engine
    whose sync failed): like vLLM's, it reports the policy's version counters at the time it copied them."""

    def __init__(self, policy, tok):
        import copy

        from erl_lite.engine.policy import weight_versions

        super().__init__(copy.deepcopy(policy), tok)
        self.policy, self.copied = policy, weight_versions(policy)

    def generate(self, prompts, params):
        from erl_lite.engine.policy import note_sampled

        out = super().generate(prompts, params)
        note_sampled(self.policy, self.copied)
        return out


@pytest.mark.parametrize("lr", [1e-4, 1e-6, 1e-9])
def test_a_sampler_one_optimizer_step_behind_is_caught_at_any_learning_rate(lr):
    # The sampler drew with the weights before the last step: at lr 1e-9 the log-probs cannot tell (the gap is
    # ~1e-8), the weights' version counters can; the off_policy check fires on that step alone.
    from erl_lite.diagnostics.checks import CHECKS_BY_NAME, RunFacts
    from erl_lite.models import load_policy

    tok = tiny_tokenizer()
    model, tok = load_policy(tiny_model(tok, seed=1), tok, peft="lora")
    cfg = ERLConfig(beta=0.0)
    torch.manual_seed(0)
    stale = _Unsynced(model, tok)
    assert _update(model, tok, cfg, _rollout_rows(HFGenerator(model, tok), tok, cfg), lr=lr)[GAP_STALE] == 0.0
    m = _update(model, tok, cfg, _rollout_rows(stale, tok, cfg))  # drawn with the weights before that step
    assert m[GAP_STALE] == 1.0
    assert CHECKS_BY_NAME["off_policy"].finding([{"step": 2, **m.to_metrics()}], RunFacts()) is not None
    fresh = _rollout_rows(HFGenerator(model, tok), tok, cfg)
    assert _update(model, tok, cfg, fresh)[GAP_STALE] == 0.0  # sampled from the weights it scores: not stale


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (5, 1.0), (0, 0.8), (20, 0.9), (3, 0.3), (1, 1.0)])
def test_the_update_cuts_as_transformers_samplers_cut(top_k, top_p):
    # truncated_logprobs against transformers' own warpers (temperature, then top-k, then top-p), token by token,
    # on peaked and flat random logits; each kept token's log-prob equal to float32 rounding, each cut one -inf.
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from erl_lite.engine.logprobs import truncated_logprobs

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 100, generator=gen) * torch.tensor([0.3, 3.0]).repeat(32)[:, None]
    scores = TemperatureLogitsWarper(0.7)(None, logits.clone())
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1:
        scores = TopPLogitsWarper(top_p)(None, scores)
    want = torch.log_softmax(scores, -1)
    for token in range(0, 100, 7):
        ids = torch.full((64,), token)
        got = truncated_logprobs(logits, ids, 0.7, top_k, top_p)
        assert torch.equal(torch.isinf(got), torch.isinf(want[:, token]))
        kept = torch.isfinite(got)
        assert torch.allclose(got[kept], want[kept, token], atol=1e-5)
