"""How a long remembered rulebook costs a reflection request: tokenizer calls, characters tokenized and
seconds for one ``reflection_messages`` call at ``max_tokens=2048``, with the real Qwen3 tokenizer.

    OMP_NUM_THREADS=1 python benchmarks/memory_entry.py
"""

import time
import warnings

from erl_lite.core.prompts import reflection_messages
from erl_lite.testing import find_qwen3_tokenizer, qwen3_tokenizer


class CountingTokenizer:
    """The tokenizer, counting its calls and the characters it is given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls, self.chars = tokenizer, 0, 0

    def __call__(self, text, **kwargs):
        self.calls += 1
        self.chars += len(text)
        return self.tokenizer(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def main() -> None:
    if find_qwen3_tokenizer() is None:
        raise SystemExit("no Qwen3 tokenizer folder: see erl_lite.testing.find_qwen3_tokenizer")
    warnings.simplefilter("ignore")
    for size in (10_000, 1_000_000):
        tok = CountingTokenizer(qwen3_tokenizer())
        start = time.perf_counter()
        _, ids = reflection_messages(task_text="Say 1.", base_prompt="rule " * (size // 5), trace="x", reward=0.0,
                                     feedback="wrong", tokenizer=tok, max_tokens=2048)
        print(f"memory entry of {size:,} chars: {tok.calls} tokenizer calls, {tok.chars:,} chars tokenized, "
              f"{time.perf_counter() - start:.2f} s, {len(ids)} ids")


if __name__ == "__main__":
    main()
