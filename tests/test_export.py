"""Exporting an adapter: the merged model computes what the adapter model computes.

Tolerance. Both sides run in float32 on the CPU from the same weights; they differ only in
the order of the arithmetic (``W x + s·B(A x)`` against ``(W + s·BA) x``), which moves
log-probs by float32 rounding: measured at 2e-6-2e-5 of the adapter's own effect on them (the
largest change it makes to a log-prob, ~0.8-1.0 here), with and without AVX2/AVX-512 kernels
(``ATEN_CPU_CAPABILITY=default``), and once 2e-4 in absolute terms. ``REL = 1e-3`` of that
effect sits above all of these, and one to two orders of magnitude below what a wrong merge
does: merging a QLoRA adapter into the *full-precision* weights instead of the dequantised NF4
ones is off by 0.03-0.1 (asserted below, so the 4-bit check can fail).
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, TrainerState

from erl_lite.cli import main
from erl_lite.core.memory import ReflectionMemory
from erl_lite.history import History
from erl_lite.models import load_policy
from erl_lite.run.checkpoint import save_checkpoint
from erl_lite.run.export import NOTE_FILE, describe_adapter, export_merged, push_to_hub
from erl_lite.run.identity import run_identity
from erl_lite.testing import FAMILIES, save_tiny_model

REL = 1e-3  # of the adapter's effect on the log-probs (see the module docstring)
TEXT = "<|im_start|>user\nThe lake: A D C B. Which way?<|im_end|>\n<|im_start|>assistant\n```Left```"


def make_adapter(tmp_path, family="llama", tie=False, quantization="none"):
    """A tiny base and a saved LoRA adapter on it whose B weights are non-zero (a fresh adapter
    is the identity, and would make every merge look right)."""
    base = save_tiny_model(tmp_path / "base", family=family, tie_embeddings=tie)
    torch.manual_seed(0)  # LoRA A comes from the global generator: the same adapter whatever ran before
    policy, tok = load_policy(base, quantization=quantization, lora_r=4, device="cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    adapter = tmp_path / "adapter"
    policy.save_pretrained(adapter)
    return base, str(adapter), tok


def logprobs(model, tok) -> torch.Tensor:
    """(1, L, V) log-probs of every vocabulary entry at every position of TEXT."""
    ids = tok(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        return torch.log_softmax(model.eval()(input_ids=ids).logits.float(), dim=-1)


def assert_same_function(got, want, base, tok) -> None:
    """``got`` equals ``want`` (log-probs of the adapter model) to REL of the adapter's effect."""
    effect = float((logprobs(AutoModelForCausalLM.from_pretrained(base), tok) - want).abs().max())
    assert effect > 0.1  # the adapter does change the model, so a merge that drops it would show
    off = float((got - want).abs().max())
    assert off <= REL * effect, f"merged model off by {off:.2e}, adapter effect {effect:.2f}"


def adapter_logprobs(adapter, tok, quantization) -> torch.Tensor:
    model, _ = load_policy(adapter, quantization=quantization, device="cpu")
    return logprobs(model, tok)


@pytest.mark.parametrize("quantization", ["none", "4bit"])
@pytest.mark.parametrize("family,tie", FAMILIES, ids=[f"{f}{'-tied' if t else ''}" for f, t in FAMILIES])
def test_merged_model_computes_what_the_adapter_model_computes(tmp_path, family, tie, quantization):
    base, adapter, tok = make_adapter(tmp_path, family, tie, quantization)
    result = export_merged(adapter, tmp_path / "merged", quantization=quantization)
    assert "model.safetensors" in result.files and "tokenizer.json" in result.files
    merged = AutoModelForCausalLM.from_pretrained(result.out_dir)  # plain transformers, no peft
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert getattr(merged.config, "quantization_config", None) is None
    want = adapter_logprobs(adapter, tok, quantization)
    got = logprobs(merged, tok)
    assert_same_function(got, want, base, tok)


def test_a_qlora_adapter_merged_into_full_precision_weights_would_be_caught(tmp_path):
    """The reason the 4-bit route dequantises: the trained function is dequant(Q(W)) + BA."""
    base, adapter, tok = make_adapter(tmp_path, quantization="4bit")
    want = adapter_logprobs(adapter, tok, "4bit")
    wrong = export_merged(adapter, tmp_path / "wrong", quantization="none")
    with pytest.raises(AssertionError, match="merged model off by"):
        assert_same_function(logprobs(AutoModelForCausalLM.from_pretrained(wrong.out_dir), tok), want, base, tok)


def test_quantization_is_read_from_the_note(tmp_path):
    _, adapter, _ = make_adapter(tmp_path)
    assert describe_adapter(adapter).quantization == "none"
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 1}))  # another trainer's file
    assert describe_adapter(adapter).quantization_source.startswith("default")
    note = tmp_path / "adapter" / NOTE_FILE
    note.write_text(json.dumps({"base_quantization": "4bit"}))
    info = describe_adapter(adapter)
    assert (info.quantization, info.quantization_source) == ("4bit", str(note))
    note.write_text(json.dumps({"base_quantization": "none"}))
    assert describe_adapter(adapter).quantization == "none"
    assert describe_adapter(adapter, quantization="4bit").quantization == "4bit"
    note.write_text(json.dumps({"base_quantization": "8bit"}))
    with pytest.raises(ValueError, match="base_quantization"):
        describe_adapter(adapter)


def test_bad_input_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        describe_adapter(tmp_path)
    _, adapter, _ = make_adapter(tmp_path)
    with pytest.raises(ValueError, match="quantization"):
        describe_adapter(adapter, quantization="8bit")
    with pytest.raises(ValueError, match="dtype"):
        export_merged(adapter, tmp_path / "out", dtype="int8")
    with pytest.raises(ValueError, match="adapter folder"):
        export_merged(adapter, adapter)
    with pytest.raises(ValueError, match="repo_id"):
        push_to_hub(adapter, "no-owner")
    with pytest.raises(FileNotFoundError, match="nothing to push"):
        push_to_hub(tmp_path / "missing", "me/model")


def test_cli_export_of_a_checkpoint_merges_and_pushes_only_when_asked(tmp_path, monkeypatch, capsys):
    """A trainer checkpoint folder; that its base was 4-bit is read from the note the checkpoint holds."""
    base, adapter, tok = make_adapter(tmp_path, family="qwen2", quantization="4bit")
    model, _ = load_policy(adapter, quantization="4bit", device="cpu")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    folder = save_checkpoint(
        str(tmp_path / "run"),
        3,
        model,
        optimizer,
        None,
        ReflectionMemory(),
        History(),
        run_identity({"load_in_4bit": True}, model),
        TrainerState(global_step=3),
    )
    adapter = folder  # the adapter sits at the checkpoint's root (PEFT's layout)
    pushed = []
    monkeypatch.setattr(
        "erl_lite.run.export.push_to_hub",
        lambda folder, repo, private=True: pushed.append((folder, repo, private)) or "url",
    )
    out = tmp_path / "merged"
    assert main(["export", "--adapter", adapter, "--out", str(out), "--dtype", "float32"]) == 0
    assert pushed == [] and "4bit base" in capsys.readouterr().out
    got = logprobs(AutoModelForCausalLM.from_pretrained(out), tok)
    assert_same_function(got, adapter_logprobs(adapter, tok, "4bit"), base, tok)
    assert main(["export", "--adapter", adapter, "--out", str(tmp_path / "again"), "--push-to-hub", "me/tiny"]) == 0
    assert pushed == [(str(tmp_path / "again"), "me/tiny", True)]
    with pytest.raises(SystemExit):
        main(["export", "--out", str(out)])  # --adapter is required
