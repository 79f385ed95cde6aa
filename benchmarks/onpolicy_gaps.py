"""The on-policy check on the tiny model: the mean |sampler's log-prob - the update's| per token, the stale-weights
flag and the off_policy check's verdict, on policy (plain, top-k, top-p, both), with a repetition penalty left in the
sampler, and with a sampler one optimizer step behind (lr 1e-4, 1e-6). fp32, CPU, ~1 minute::

    OMP_NUM_THREADS=1 python benchmarks/onpolicy_gaps.py

Runs against an older erl_lite (PYTHONPATH=<its folder>) too: keys it lacks print as '-'.
"""

import copy
import sys

import torch

from erl_lite.config import ERLConfig
from erl_lite.core.update import PolicyUpdater
from erl_lite.diagnostics.checks import CHECKS_BY_NAME, RunFacts
from erl_lite.engine.generation import HFGenerator, SamplingParams
from erl_lite.models import load_policy
from erl_lite.records import TrainSample
from erl_lite.testing import tiny_model, tiny_tokenizer

print(sys.modules["erl_lite"].__file__)


def rows_of(gen, tok, cfg, n=8):
    prompts = [tok("hi there", add_special_tokens=False).input_ids, [7, 8, 9, 10]] * (n // 2)
    rows = []
    for role, p in (
        ("first", SamplingParams(10, cfg.temperature, cfg.top_p, cfg.top_k)),
        ("reflection", SamplingParams(10, cfg.reflection_temperature, cfg.reflection_top_p, 0)),
    ):
        outs = gen.generate(prompts, p)
        rows += [
            TrainSample(role, q, o, [1] * len(o), 1.0, "t", None if role == "first" else p.temperature, list(lp))
            for q, o, lp in zip(prompts, outs, gen.last_logprobs)
            if o
        ]
    return rows


def update(model, tok, cfg, rows, lr=0.0):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    return PolicyUpdater(model, opt, None, cfg, tok.pad_token_id).update(rows).to_metrics()


def report(name, m, cfg):
    fired = CHECKS_BY_NAME["off_policy"].judge([{"step": 1, **m}], RunFacts.of(cfg))
    print(
        f"{name:34s} gap_mean first {m['onpolicy/gap_mean/first']:.2e} "
        f"reflection {m['onpolicy/gap_mean/reflection']:.2e}"
        f"  stale {m.get('onpolicy/stale_weights', '-')}  fired: {bool(fired)}"
    )


class Leaky(HFGenerator):
    def sampling_config(self, params):
        c = super().sampling_config(params)
        c.repetition_penalty = 1.3
        return c


for name, kw in [
    ("plain", {}),
    ("top_k=5", dict(top_k=5)),
    ("top_p=0.8", dict(top_p=0.8)),
    ("top_k=20,top_p=0.9", dict(top_k=20, top_p=0.9)),
]:
    tok = tiny_tokenizer()
    model, tok = load_policy(tiny_model(tok, seed=1), tok, peft="lora")
    cfg = ERLConfig(beta=0.0, **kw)
    torch.manual_seed(0)
    report(f"on-policy {name}", update(model, tok, cfg, rows_of(HFGenerator(model, tok), tok, cfg)), cfg)
tok = tiny_tokenizer()
model = tiny_model(tok, seed=1)
cfg = ERLConfig(beta=0.0)
torch.manual_seed(0)
report("repetition_penalty=1.3 leaked", update(model, tok, cfg, rows_of(Leaky(model, tok), tok, cfg)), cfg)
for lr in (1e-4, 1e-6):
    tok = tiny_tokenizer()
    model, tok = load_policy(tiny_model(tok, seed=1), tok, peft="lora")
    cfg = ERLConfig(beta=0.0)
    torch.manual_seed(0)
    with torch.no_grad():  # LoRA B at 0: move it so a step changes the policy
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.3)
    frozen = copy.deepcopy(model)
    try:
        from erl_lite.engine.policy import note_sampled, weight_versions

        copied = weight_versions(model)
    except ImportError:
        note_sampled = None
    update(model, tok, cfg, rows_of(HFGenerator(model, tok), tok, cfg), lr=lr)  # one step
    stale_rows = rows_of(HFGenerator(frozen, tok), tok, cfg)
    if note_sampled:
        note_sampled(model, copied)
    report(f"one step stale, lr {lr:g}", update(model, tok, cfg, stale_rows), cfg)
