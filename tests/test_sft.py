"""The internalization set as SFT data: export (no rulebook, original prompt, r2 ≥ τ), TRL's
SFTTrainer accepting it, and a warm start on the tiny model."""

from __future__ import annotations

import math
import re

import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.core.prompts import REFLECTION_REQUEST
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.models import load_policy
from erl_lite.run.sft import internalization_dataset, internalization_rows, tokenize_row, warm_start
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import CHATML_TEMPLATE, tiny_model

SECRETS = {"t0": "apple", "t1": "berry", "t2": "cherry", "t3": "date"}


def reply(prompt: str) -> str:
    """First attempts fail on every task; second attempts need two guesses on t0 (multi-turn),
    one on t1, and fail on t2 (so τ filters them); t3 is solved at once (never retried)."""
    task = re.findall(r"task (t\d+)", prompt)[-1]
    if REFLECTION_REQUEST in prompt:
        return f"<prompt>RULEBOOK: the word is {SECRETS[task]}</prompt>"
    if "RULEBOOK" in prompt:
        if task == "t2" or (task == "t0" and "Wrong guess" not in prompt):
            return "nope"
        return SECRETS[task]
    return SECRETS[task] if task == "t3" else "FIRST nope"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from conftest import GuessEnv

    from erl_lite.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    env = GuessEnv(max_turns=2, n=4)
    model, tok = load_policy(tiny_model(tok), tok, peft="lora")
    out = str(tmp_path_factory.mktemp("run"))
    args = ERLConfig.preset(
        "cpu", max_steps=1, num_tasks_per_step=4, num_generations=1, eval_steps=0, progress_bar=False, output_dir=out
    )
    trainer = ERLTrainer(model=model, processing_class=tok, args=args, env=env, generator=ScriptedGenerator(tok, reply))
    trainer.train()
    return trainer, env, tok


def test_rows_are_successful_second_attempts_under_the_initial_prompt(run):
    trainer, env, tok = run
    rows = internalization_rows(trainer)
    assert sorted(r["task_id"] for r in rows) == ["t0", "t1"]  # t2's r2 = 0 < τ; t3 never retried
    for r in rows:
        assert r["prompt"][0] == {"role": "system", "content": env.system_prompt}
        assert r["prompt"][-1]["role"] == "user" and "Guess the word" in r["prompt"][-1]["content"]
        assert r["completion"][-1] == {"role": "assistant", "content": SECRETS[r["task_id"]]}
        assert "RULEBOOK" not in str(r) and r["reward"] == 1.0
    t0 = next(r for r in rows if r["task_id"] == "t0")
    assert [m["role"] for m in t0["completion"]] == ["assistant", "user", "assistant"]
    # the same rows from every source the docs name
    out = trainer.args.output_dir
    assert internalization_rows(out, threshold=1.0) == rows
    assert internalization_rows(trainer.history, threshold=1.0) == rows
    assert internalization_rows(trainer.last_outcome.retries, threshold=1.0) == rows
    assert internalization_rows(trainer, threshold=0.0) != rows  # τ is honoured: t2 comes in
    assert internalization_rows(out) == rows  # a run folder carries its τ (training_args.json)
    with pytest.raises(ValueError, match="threshold"):
        internalization_rows(trainer.history)


def test_tokenized_rows_train_replies_and_their_end_of_turn_only(run):
    _, _, tok = run
    t0 = next(r for r in internalization_rows(run[0]) if r["task_id"] == "t0")
    out = tokenize_row(t0, tok)
    ids, mask = out["input_ids"], out["assistant_masks"]
    rendered = tok.apply_chat_template(t0["prompt"] + t0["completion"], tokenize=False)
    assert tok.decode(ids) == rendered.removesuffix("\n")  # the template's text, once
    trained = tok.decode([t for t, m in zip(ids, mask) if m])
    assert trained == "nope<|im_end|>apple<|im_end|>"  # each reply ends its turn; glue untrained
    assert mask[-1] == 1 and ids[-1] == tok.eos_token_id


def test_sft_trainer_accepts_the_exported_dataset(run):
    """TRL's own path on the exported rows: with a generation-marked copy of the tiny ChatML
    template and ``assistant_only_loss``, TRL trains exactly the tokens tokenize_row trains."""
    from trl import SFTConfig, SFTTrainer

    trainer, _, tok = run
    data = internalization_dataset(trainer)
    tok2 = _copy_tokenizer(tok)
    tok2.chat_template = CHATML_TEMPLATE.replace(
        "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}",
        "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}{% generation %}"
        "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
        "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{% endif %}",
    )
    sft = SFTTrainer(
        model=tiny_model(tok2),
        processing_class=tok2,
        train_dataset=data,
        args=SFTConfig(output_dir="unused", report_to="none", assistant_only_loss=True, max_steps=1, bf16=False),
    )
    for row, prepared in zip(data, sft.train_dataset):
        trained = [t for t in prepared["labels"] if t != -100]
        ours = tokenize_row(row, tok)
        assert trained == [t for t, m in zip(ours["input_ids"], ours["assistant_masks"]) if m]


def test_warm_start_trains_the_tiny_model_on_the_set(run):
    from peft import LoraConfig

    trainer, _, tok = run
    base = tiny_model(tok, seed=3)
    before = {n: p.detach().clone() for n, p in base.named_parameters()}
    sft = warm_start(
        base,
        tok,
        trainer,
        peft_config=LoraConfig(r=4, target_modules="all-linear"),
        max_steps=3,
        learning_rate=1e-2,
        per_device_train_batch_size=2,
        use_cpu=True,
    )
    losses = [e["loss"] for e in sft.state.log_history if "loss" in e]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    lora = {n: p for n, p in sft.model.named_parameters() if "lora_B" in n}
    assert lora and any(p.abs().sum() > 0 for p in lora.values())  # B starts at zero
    merged = sft.model.merge_and_unload()
    changed = [n for n, p in merged.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "the warm start left every weight as it was"


def test_nothing_to_export_is_an_error(run):
    with pytest.raises(ValueError, match="no successful second attempt"):
        internalization_dataset(run[0], threshold=2.0)
    with pytest.raises(TypeError, match="cannot read retries"):
        internalization_rows([1, 2], threshold=1.0)


def _copy_tokenizer(tok):
    import copy

    return copy.deepcopy(tok)


def test_warm_start_into_a_folder_of_the_users_files_writes_nothing_there(run, tmp_path):
    """SFT is a writing command too: with its defaults (no checkpoints, no reporting) its output_dir stays as it
    was, byte for byte, whatever it held (tests/test_run_ownership.py's rule for the other commands)."""
    from peft import LoraConfig
    from test_run_ownership import SHAPES, snapshot

    trainer, _, tok = run
    for shape in ("user-notes", "shards"):
        out = tmp_path / shape
        SHAPES[shape](out)
        target = snapshot(tmp_path)
        warm_start(
            tiny_model(tok, seed=3),
            tok,
            trainer,
            peft_config=LoraConfig(r=4, target_modules="all-linear"),
            max_steps=1,
            per_device_train_batch_size=2,
            output_dir=str(out),
            use_cpu=True,
        )
        assert snapshot(tmp_path) == target, shape
    # Negative control: told to save checkpoints (TRL's own writer), it does write there, and the check sees it.
    saving = tmp_path / "saving"
    SHAPES["user-notes"](saving)
    target = snapshot(saving)
    warm_start(
        tiny_model(tok, seed=3),
        tok,
        trainer,
        max_steps=1,
        per_device_train_batch_size=2,
        output_dir=str(saving),
        use_cpu=True,
        save_strategy="steps",
        save_steps=1,
    )
    assert snapshot(saving) != target
