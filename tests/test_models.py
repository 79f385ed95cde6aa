"""Policy loading (plain / LoRA / 4-bit QLoRA), the KL reference, and the offline tiny model."""

from __future__ import annotations

import bitsandbytes as bnb
import pytest
import torch
from conftest import assert_close_rel
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from peft import LoraConfig, PeftModel
from transformers import AutoTokenizer

from erl_lite.engine.policy import eos_token_ids, reference_context
from erl_lite.models import count_parameters, describe_policy, load_policy, trainable_parameters
from erl_lite.testing import FAMILIES, save_tiny_model, tiny_model, tiny_tokenizer

torch.set_num_threads(1)
PRINTABLE = "".join(chr(c) for c in range(32, 127)) + "\n\t"
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    return save_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture(scope="module")
def chat_tok():
    return tiny_tokenizer()


def _batch(tokenizer, texts=("The cat sat.", "A longer second line\nwith a newline")):
    return tokenizer(list(texts), return_tensors="pt", padding=True)


def _is_lora(name: str) -> bool:
    return "lora_" in name


def _perturb_lora_b(model, seed: int = 0, scale: float = 0.5) -> None:
    """LoRA B starts at zero (adapter = identity); give it values so the adapter matters."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(scale * torch.randn(p.shape, generator=gen))


def _logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits  # (batch, seq, vocab)


# ---------------------------------------------------------------------------- tiny tokenizer


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=PRINTABLE, max_size=200))
def test_tokenizer_round_trips_printable_ascii(chat_tok, text):
    # A special token's text is one id: hypothesis also draws the package's own string constants ('<|eos|>').
    assume(not any(special in text for special in chat_tok.get_added_vocab()))
    ids = chat_tok(text)["input_ids"]
    assert len(ids) == len(text)  # character level, no BOS
    assert chat_tok.decode(ids) == text


def test_chat_template_renders_chatml_once(chat_tok):
    rendered = chat_tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    )
    assert rendered.count("<|im_start|>system") == 1
    ids = chat_tok.apply_chat_template(CONVERSATION, tokenize=True, add_generation_prompt=True)["input_ids"]
    assert ids == chat_tok(rendered)["input_ids"]  # special tokens are single ids, nothing added
    assert ids.count(chat_tok.convert_tokens_to_ids("<|im_start|>")) == 3
    assert chat_tok.eos_token == "<|im_end|>" and chat_tok.pad_token == "<|pad|>"


def test_plain_tokenizer_has_no_template_and_saves(tmp_path):
    tok = tiny_tokenizer(chat_template=False)
    assert tok.chat_template is None and tok.eos_token == "<|eos|>"
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.chat_template is None and loaded.eos_token == "<|eos|>"
    assert loaded.decode(loaded("round\ttrip ~!")["input_ids"]) == "round\ttrip ~!"


def test_tiny_model_matches_tokenizer_and_seed(chat_tok):
    a, b, c = tiny_model(chat_tok, seed=0), tiny_model(chat_tok, seed=0), tiny_model(chat_tok, seed=1)
    assert a.config.vocab_size == len(chat_tok)
    assert a.config.max_position_embeddings >= 4096
    assert a.config.pad_token_id == chat_tok.pad_token_id
    assert a.generation_config.pad_token_id == chat_tok.pad_token_id
    assert torch.equal(a.lm_head.weight, b.lm_head.weight)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


# ---------------------------------------------------------------------------- load_policy


def test_load_plain(tiny_dir):
    model, tok = load_policy(tiny_dir, peft="none", device="cpu")
    assert not isinstance(model, PeftModel)
    trainable, total = count_parameters(model)
    assert trainable == total > 0
    assert tok.padding_side == "left" and tok.pad_token == "<|pad|>"
    assert tok.decode(tok("same text back")["input_ids"]) == "same text back"
    assert model.dtype == torch.float32
    assert "no adapter" in describe_policy(model)
    half, _ = load_policy(tiny_dir, peft="none", dtype="bfloat16", device="cpu")
    assert half.dtype == torch.bfloat16


def test_load_lora_trains_only_adapter(tiny_dir):
    model, tok = load_policy(tiny_dir, lora_r=4, device="cpu")
    assert isinstance(model, PeftModel)
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert names and all(_is_lora(n) for n in names)
    # "all-linear" reaches attention and MLP projections, not the output head.
    assert any("q_proj" in n for n in names) and any("down_proj" in n for n in names)
    assert not any("lm_head" in n for n in names)
    _assert_backward_reaches_lora_only(model, tok)
    assert "LoRA r=4" in describe_policy(model)


def test_load_qlora_4bit(tiny_dir):
    model, tok = load_policy(tiny_dir, quantization="4bit", lora_r=4, device="cpu")
    assert isinstance(model, PeftModel)
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(layers) == 2 * 7  # every projection of both decoder layers; lm_head stays dense
    assert all(layer.compute_dtype == torch.float32 for layer in layers)  # CPU computes in fp32
    frozen = [n for n, p in model.named_parameters() if not _is_lora(n)]
    assert frozen and not any(p.requires_grad for n, p in model.named_parameters() if not _is_lora(n))
    assert all(p.requires_grad for n, p in model.named_parameters() if _is_lora(n))
    _assert_backward_reaches_lora_only(model, tok)
    # Packed 4-bit weights count at their logical size: same total as the unquantized LoRA model.
    lora_model, _ = load_policy(tiny_dir, lora_r=4, device="cpu")
    assert count_parameters(model) == count_parameters(lora_model)
    assert "4-bit NF4" in describe_policy(model)


def _assert_backward_reaches_lora_only(model, tok) -> None:
    _perturb_lora_b(model, scale=0.1)  # with B = 0 the gradient on A is exactly zero
    model.train()
    batch = _batch(tok)
    model(**batch, labels=batch["input_ids"]).loss.backward()
    for name, p in model.named_parameters():
        if _is_lora(name):
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None, name
    model.zero_grad()


@pytest.mark.parametrize("quantization", ["none", "4bit"])
def test_gradient_checkpointing_backward(tiny_dir, quantization):
    model, tok = load_policy(tiny_dir, quantization=quantization, lora_r=4, gradient_checkpointing=True, device="cpu")
    assert model.get_base_model().is_activation_checkpointing
    before = trainable_parameters(model)
    _assert_backward_reaches_lora_only(model, tok)
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    after = trainable_parameters(model)
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_reference_context_is_the_base_model(tiny_dir):
    base, tok = load_policy(tiny_dir, peft="none", device="cpu")
    policy, _ = load_policy(tiny_dir, lora_r=4, device="cpu")
    batch = _batch(tok)
    base_logits = _logits(base, batch)
    # Relative to the logits: B = 0 adds an exact zero, so only float32 rounding (~1e-7) may differ.
    assert_close_rel(_logits(policy, batch), base_logits, 1e-6)  # B = 0 at start

    _perturb_lora_b(policy)
    adapter_logits = _logits(policy, batch)
    # The perturbed adapter moves the logits by far more than rounding: 1e-3 of their scale.
    assert float((adapter_logits - base_logits).abs().max()) > 1e-3 * float(base_logits.abs().max())
    with reference_context(policy) as ref:
        assert_close_rel(_logits(ref, batch), base_logits, 1e-6)  # adapter off: the base forward
    assert torch.equal(_logits(policy, batch), adapter_logits)  # adapter back on after exit


def test_reference_context_without_adapter(tiny_dir):
    base, _ = load_policy(tiny_dir, peft="none", device="cpu")
    with pytest.raises(ValueError, match="adapter"):
        with reference_context(base):
            pass
    frozen = tiny_model(tiny_tokenizer(), seed=3)
    with reference_context(base, reference=frozen) as ref:
        assert ref is frozen


def test_load_saved_adapter_and_built_model(tiny_dir, tmp_path, chat_tok):
    policy, tok = load_policy(tiny_dir, lora_r=4, device="cpu")
    _perturb_lora_b(policy)
    policy.save_pretrained(tmp_path / "adapter")
    reloaded, _ = load_policy(tmp_path / "adapter", device="cpu")
    assert isinstance(reloaded, PeftModel)
    assert "on down_proj,gate_proj,k_proj,o_proj,q_proj,up_proj,v_proj |" in describe_policy(reloaded)
    assert any(p.requires_grad for p in reloaded.parameters())
    batch = _batch(tok)
    assert_close_rel(_logits(reloaded, batch), _logits(policy, batch), 1e-6)  # the same weights, float32 rounding

    wrapped, tok2 = load_policy(tiny_model(chat_tok), chat_tok, lora_r=2)
    assert isinstance(wrapped, PeftModel) and tok2.padding_side == "left"
    custom, _ = load_policy(tiny_model(chat_tok), chat_tok, peft=LoraConfig(r=3, target_modules=["q_proj"]))
    assert {n.split(".")[-4] for n, p in custom.named_parameters() if p.requires_grad} == {"q_proj"}


def test_pad_token_falls_back_to_eos(chat_tok):
    tok = tiny_tokenizer()
    tok.pad_token = None
    _, tok = load_policy(tiny_model(chat_tok), tok, peft="none")
    assert tok.pad_token == tok.eos_token == "<|im_end|>"


def test_eos_token_ids(chat_tok):
    model = tiny_model(chat_tok)
    ids = eos_token_ids(model, chat_tok)
    assert ids[0] == chat_tok.convert_tokens_to_ids("<|im_end|>")
    assert chat_tok.convert_tokens_to_ids("<|eos|>") in ids and len(ids) == len(set(ids))
    plain = tiny_tokenizer(chat_template=False)
    assert eos_token_ids(tiny_model(plain), plain) == [plain.convert_tokens_to_ids("<|eos|>")]


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"quantization": "8bit"}, "quantization"),
        ({"peft": "prefix"}, "peft"),
        ({"lora_r": 0}, "lora_r"),
        ({"lora_alpha": -1}, "lora_alpha"),
        ({"lora_dropout": 1.5}, "lora_dropout"),
        ({"dtype": "float7"}, "dtype"),
        ({"device": "toaster"}, "device"),
        *([] if torch.cuda.is_available() else [({"device": "cuda"}, "device")]),
        ({"gradient_checkpointing": "yes"}, "gradient_checkpointing"),
    ],
)
def test_bad_arguments_name_the_argument(tiny_dir, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        load_policy(tiny_dir, **kwargs)


def test_built_model_cannot_be_quantized_here(chat_tok):
    with pytest.raises(ValueError, match="quantization"):
        load_policy(tiny_model(chat_tok), chat_tok, quantization="4bit")
    with pytest.raises(ValueError, match="tokenizer"):
        load_policy(tiny_model(chat_tok))
    with pytest.raises(ValueError, match="model"):
        load_policy(12345)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("family", "tied"), FAMILIES)
def test_qlora_on_cuda(tmp_path, family, tied):
    path = save_tiny_model(tmp_path, family=family, tie_embeddings=tied)
    model, tok = load_policy(path, quantization="4bit", lora_r=4, gradient_checkpointing=True)
    layer = next(m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit))
    assert layer.weight.device.type == "cuda"
    expected = torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    assert layer.compute_dtype == expected
    # peft keeps adapter weights in fp32 over a half-precision base, so the optimizer state is fp32.
    assert all(p.dtype == torch.float32 for n, p in model.named_parameters() if _is_lora(n))
    batch = _batch(tok).to("cuda")
    model.train()
    model(**batch, labels=batch["input_ids"]).loss.backward()
    lora_grads = [p.grad for n, p in model.named_parameters() if _is_lora(n)]
    assert any(g is not None and g.abs().sum() > 0 for g in lora_grads)
    with torch.no_grad(), reference_context(model) as ref:
        assert torch.isfinite(ref(**batch).logits).all()


# --- one home for the dtype names -----------------------------------------------------------------
def test_the_dtype_names_live_in_models_and_export_uses_them():
    import erl_lite.config.trl_fields as trl_fields
    import erl_lite.integrations.distributed as distributed
    import erl_lite.models as models
    import erl_lite.run.export as export

    assert not hasattr(export, "_DTYPES") and not hasattr(models, "_DTYPES"), "a private copy of the dtype names"
    assert set(models.DTYPES) == {"float32", "bfloat16", "float16"}
    assert "DTYPE_HINT" in vars(trl_fields) and "_DTYPE" not in vars(trl_fields)
    assert "trl_fields import DTYPE_HINT" in open(distributed.__file__).read()


@pytest.mark.parametrize(
    "dtype, expected",
    [
        ("float32", torch.float32),
        ("bfloat16", torch.bfloat16),
        ("float16", torch.float16),
        (torch.float64, torch.float64),
        ("auto", None),
    ],
)
def test_named_dtype(dtype, expected):
    from erl_lite.models import named_dtype

    assert named_dtype(dtype) is expected


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8", torch.int8, 16, None])
def test_a_bad_dtype_is_refused_alike_by_loading_and_merging(dtype):
    from erl_lite.models import _resolve_dtype
    from erl_lite.run.export import _merge_dtype

    with pytest.raises(ValueError, match="dtype must be") as loading:
        _resolve_dtype(dtype, None)
    with pytest.raises(ValueError, match="dtype must be") as merging:
        _merge_dtype(dtype, "unused", False)
    assert str(loading.value) == str(merging.value)
