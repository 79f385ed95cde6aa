"""A tiny, offline, random chat model for tests, notebooks and CPU demos: a character-level tokenizer and a
two-layer decoder in each family the presets load (``FAMILIES``), since bugs hide in their differences."""

from __future__ import annotations

import os
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

PAD, BOS, EOS, IM_START, IM_END, UNK = "<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>", "<|unk|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, IM_START, IM_END, UNK]

# Printable ASCII plus newline and tab ("\r", "\x0b", "\x0c" left out): prose has one token per character.
CHARACTERS = ["\n", "\t"] + [chr(c) for c in range(32, 127)]

# Qwen2 puts a bias on q/k/v; Qwen3 normalises each head's queries and keys; Llama has neither.
_CONFIGS = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}

# Every tiny variant tests should cover: (family, tie_embeddings).
FAMILIES = (("llama", False), ("qwen2", False), ("qwen3", False), ("qwen2", True))

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tiny_tokenizer(chat_template: bool = True) -> PreTrainedTokenizerFast:
    """Build a character-level fast tokenizer with ChatML special tokens, fully offline.

    Ids 0-5 are :data:`SPECIAL_TOKENS`, then one per character; ``decode(encode(x)) == x`` for printable
    ASCII. ``chat_template=False``: no template and ``<|eos|>`` as eos (a base model)."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Single characters; "[\s\S]" also matches newline (unlike ".").
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIAL_TOKENS)

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=IM_END if chat_template else EOS,
        unk_token=UNK,
        additional_special_tokens=[IM_START, IM_END] if chat_template else [],
        clean_up_tokenization_spaces=False,  # keep " ." and " 's" exactly as written
        model_max_length=4096,
    )
    tokenizer.chat_template = CHATML_TEMPLATE if chat_template else None
    return tokenizer


def tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    intermediate_size: int = 128,
    family: str = "llama",
    tie_embeddings: bool = False,
) -> PreTrainedModel:
    """Build a randomly initialised causal LM whose vocabulary matches ``tokenizer``.

    ~0.1M parameters by default; linear input widths are multiples of 64 (bitsandbytes' 4-bit block),
    so it also loads in 4-bit NF4 on CPU. ``family``: "llama", "qwen2" or "qwen3"."""
    if family not in _CONFIGS:
        raise ValueError(f"family must be one of {sorted(_CONFIGS)}, got {family!r}")
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})")
    config = _CONFIGS[family](
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        head_dim=hidden_size // num_heads,  # Qwen3's default (128) would ignore hidden_size
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=tie_embeddings,
    )
    # fork_rng leaves the caller's global RNG stream untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
        _randomise_biases_and_norms(model)
    model.config.erl_lite_from_scratch = True  # random weights: no pretrained rate applies (models.pretrained)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=_eos_ids(tokenizer)
    )
    return model.eval()


def _randomise_biases_and_norms(model: torch.nn.Module) -> None:
    """Move biases off 0 and q/k norm gains off 1, so a path dropping a Qwen bias or q/k norm shows."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.5)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                param.uniform_(0.5, 1.5)


def _eos_ids(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    """End-of-generation ids: a chat model stops at ``<|im_end|>`` *or* ``<|eos|>`` (like Qwen)."""
    plain_eos = tokenizer.convert_tokens_to_ids(EOS)
    return [tokenizer.eos_token_id] + ([plain_eos] if plain_eos != tokenizer.eos_token_id else [])


def save_tiny_model(
    path: str | os.PathLike,
    chat_template: bool = True,
    seed: int = 0,
    family: str = "llama",
    tie_embeddings: bool = False,
) -> str:
    """Write a tiny model (as :func:`tiny_model`) and its tokenizer to ``path``; it loads like a hub checkpoint."""
    path = os.fspath(path)
    tokenizer = tiny_tokenizer(chat_template=chat_template)
    model = tiny_model(tokenizer, seed=seed, family=family, tie_embeddings=tie_embeddings)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


#: Environment variable naming a folder with the Qwen3 tokenizer files (overrides the search).
QWEN3_TOKENIZER_ENV = "ERL_LITE_QWEN3_TOKENIZER"


def find_qwen3_tokenizer() -> str | None:
    """The offline Qwen3 tokenizer's folder (``$ERL_LITE_QWEN3_TOKENIZER`` or ``shared/qwen3_tokenizer``), or None."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = [
        os.environ.get(QWEN3_TOKENIZER_ENV, ""),
        os.path.join(repo, "..", "shared", "qwen3_tokenizer"),
        os.path.join(repo, "shared", "qwen3_tokenizer"),
    ]
    for folder in candidates:
        if folder and all(os.path.isfile(os.path.join(folder, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
            return os.path.normpath(folder)
    if os.environ.get(QWEN3_TOKENIZER_ENV):
        raise FileNotFoundError(
            f"${QWEN3_TOKENIZER_ENV}={os.environ[QWEN3_TOKENIZER_ENV]!r} holds no "
            "tokenizer.json + tokenizer_config.json"
        )
    return None


def qwen3_tokenizer(folder: str | os.PathLike | None = None) -> PreTrainedTokenizerFast:
    """The real Qwen3 tokenizer and chat template, offline, from ``folder`` or :func:`find_qwen3_tokenizer`."""
    import json

    folder = os.fspath(folder) if folder is not None else find_qwen3_tokenizer()
    if folder is None:
        raise FileNotFoundError(
            f"no Qwen3 tokenizer folder: set ${QWEN3_TOKENIZER_ENV} or place shared/qwen3_tokenizer next to the "
            "repository"
        )
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    tok = PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(folder, "tokenizer.json"),
        eos_token=cfg["eos_token"],
        pad_token=cfg["pad_token"],
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = cfg["chat_template"]
    return tok


class CountingTokenizer:
    """``tokenizer``, counting its tokenizing calls and the characters they read (bounded-input tests, benchmarks)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.calls, self.chars = tokenizer, 0, 0

    def __call__(self, text: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self.chars += len(text)
        return self.tokenizer(text, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)
