"""How a long remembered rulebook costs a reflection request: tokenizer calls, characters tokenized and
seconds for one ``reflection_messages`` call at ``max_tokens=2048``, with the real Qwen3 tokenizer.

    OMP_NUM_THREADS=1 python benchmarks/memory_entry.py
"""

import time
import warnings

from erl_lite.core.prompts import reflection_messages
from erl_lite.testing import CountingTokenizer, find_qwen3_tokenizer, qwen3_tokenizer


def main() -> None:
    if find_qwen3_tokenizer() is None:
        raise SystemExit("no Qwen3 tokenizer folder: see erl_lite.testing.find_qwen3_tokenizer")
    warnings.simplefilter("ignore")
    for size in (10_000, 1_000_000):
        tok = CountingTokenizer(qwen3_tokenizer())
        start = time.perf_counter()
        _, ids = reflection_messages(
            task_text="Say 1.",
            base_prompt="rule " * (size // 5),
            trace="x",
            reward=0.0,
            feedback="wrong",
            tokenizer=tok,
            max_tokens=2048,
        )
        print(
            f"memory entry of {size:,} chars: {tok.calls} tokenizer calls, {tok.chars:,} chars tokenized, "
            f"{time.perf_counter() - start:.2f} s, {len(ids)} ids"
        )


if __name__ == "__main__":
    main()
