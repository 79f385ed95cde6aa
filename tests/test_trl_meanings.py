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
