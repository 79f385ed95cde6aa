"""TRL's and transformers' names keep their meaning: the same value of a shared field does the same thing.

``max_grad_norm``: transformers' Trainer clips only when it is above 0 (``if args.max_grad_norm > 0``), so 0 means
"no clipping"; ``torch.nn.utils.clip_grad_norm_(params, 0)`` would instead zero every gradient.
"""

from __future__ import annotations

import pytest
import torch
from test_run_faults import make_trainer

from erl_lite import ERLConfig


def lora_b_after(steps: int, **overrides) -> dict[str, torch.Tensor]:
    trainer = make_trainer(None, max_steps=steps, weight_decay=0.0, **overrides)
    trainer.train()
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}


@pytest.mark.slow
def test_max_grad_norm_zero_or_none_means_no_clipping_as_in_transformers():
    unclipped = lora_b_after(2, max_grad_norm=1e30)  # a bound no gradient reaches
    assert max(float(b.abs().max()) for b in unclipped.values()) > 1e-4  # LoRA B starts at 0 and moved
    for off in (0, 0.0, None):
        got = lora_b_after(2, max_grad_norm=off)
        for name, want in unclipped.items():  # the same update bit for bit: clip_grad_norm_ scales by 1.0
            assert torch.equal(got[name], want), (off, name)
    # Negative control: a bound near 0 is a near-zero gradient, and B barely leaves 0 (what 0 used to do).
    starved = lora_b_after(2, max_grad_norm=1e-12)
    assert max(float(b.abs().max()) for b in starved.values()) < 1e-3 * max(
        float(b.abs().max()) for b in unclipped.values()
    )


def test_max_grad_norm_below_zero_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"ERLConfig.max_grad_norm must be >= 0 \(0 or None: no clipping\)"):
        ERLConfig(max_grad_norm=-1)


# Values at or below 0 that a numeric field takes on purpose (each documented on the field); any other is refused
# when the config is built, naming the field.
MEANINGFUL = {
    ("seed", 0),
    ("top_k", 0),  # no top-k filter, as in generate
    ("eval_top_k", 0),
    ("reward_threshold", -1),  # rewards may be negative
    ("reward_threshold", 0),
    ("internalization_coef", 0),  # no internalization loss
    ("learning_rate", 0),
    ("warmup_ratio", 0),
    ("warmup_steps", 0),
    ("weight_decay", 0),
    ("max_grad_norm", 0),  # no clipping
    ("beta", 0),  # no KL term
    ("eval_steps", 0),  # never
    ("save_steps", 0),  # only at the end
    ("lora_dropout", 0),
}


def _numeric_fields() -> list[str]:
    import dataclasses

    default = ERLConfig()
    return [
        f.name
        for f in dataclasses.fields(ERLConfig)
        if not isinstance(getattr(default, f.name), bool) and ("int" in str(f.type) or "float" in str(f.type))
    ]


@pytest.mark.parametrize("value", [-1, 0])
def test_every_numeric_field_takes_zero_or_below_only_where_that_means_something(value):
    accepted = []
    for name in _numeric_fields():
        try:
            ERLConfig(**{name: value})
        except ValueError as e:
            assert f"ERLConfig.{name}" in str(e) or f"{name}=" in str(e), (name, str(e))
        else:
            accepted.append(name)
    assert {(n, value) for n in accepted} <= MEANINGFUL, sorted(set(accepted) - {n for n, _ in MEANINGFUL})
    assert "logprob_chunk_size" in _numeric_fields()  # the audit reaches the field the issue named


def test_push_to_hub_without_output_dir_is_refused_when_the_config_is_built():
    with pytest.raises(ValueError, match=r"ERLConfig.push_to_hub=True uploads output_dir, which is not set"):
        ERLConfig(push_to_hub=True, hub_model_id="user/name", output_dir=None)
    ERLConfig(push_to_hub=True, hub_model_id="user/name", output_dir="out")  # the setting it needs
