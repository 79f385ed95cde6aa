"""Integration: real training steps on CPU with the tiny random model (LoRA and 4-bit QLoRA)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.metrics import METRIC_GLOSSARY, is_measurement
from erl_lite.models import load_policy, trainable_parameters
from erl_lite.run.checkpoint import CheckpointError
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import save_tiny_model, tiny_model, tiny_tokenizer

ROWS = [{"prompt": f"Add {i} and {i}.", "answer": str(2 * i)} for i in range(6)]

STEP_KEYS = [k for k in METRIC_GLOSSARY if not k.startswith("eval/")]


def digit_reward(prompts, completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def digit_feedback(prompts, completions, answer, **kw):
    return [f"expected {a}" for a in answer]


def small_args(**kw):
    base = dict(
        max_steps=2,
        num_tasks_per_step=2,
        num_generations=2,
        max_completion_length=8,
        max_reflection_length=12,
        max_reflection_prompt_length=700,
        eval_steps=0,
        progress_bar=False,
        learning_rate=1e-2,
        beta=0.01,
        per_device_train_batch_size=8,
    )
    return ERLConfig.preset("cpu", **{**base, **kw})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(str(tmp_path_factory.mktemp("tiny")))


@pytest.mark.slow
@pytest.mark.parametrize("quantization", ["none", "4bit"])
def test_real_steps_change_weights_and_log_every_metric(model_dir, quantization):
    model, tok = load_policy(model_dir, quantization=quantization, peft="lora", device="cpu")
    before = trainable_parameters(model)
    args = small_args(steps_per_generation=2, memory_type="fifo", internalization_mode="nll")
    trainer = ERLTrainer(
        model=model,
        processing_class=tok,
        args=args,
        reward_funcs=digit_reward,
        feedback_func=digit_feedback,
        train_dataset=ROWS,
        eval_dataset=ROWS[:2],
    )
    history = trainer.train()
    after = trainable_parameters(model)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    last = history.of_kind("train")[-1]
    assert set(STEP_KEYS) <= set(last), set(STEP_KEYS) - set(last)
    assert last["optim/steps"] == 2 and last["samples/first"] == 4
    assert trainer.evaluate()["eval/num_episodes"] == 2 * args.eval_num_generations


@pytest.mark.slow
@pytest.mark.parametrize(
    "changes",
    [
        dict(mode="rlvr", num_generations=4),
        dict(mode="erl_simple"),
        dict(use_memory=False),
        dict(use_reflection=False),
        dict(use_internalization=False),
        dict(train_first=False, train_reflection=False),
    ],
    ids=["rlvr", "erl_simple", "no_memory", "no_reflection", "no_internalization", "second_only"],
)
def test_modes_and_ablations_run(changes):
    tok = tiny_tokenizer()
    model, tok = load_policy(tiny_model(tok), tok, peft="lora")
    trainer = ERLTrainer(
        model=model,
        processing_class=tok,
        args=small_args(max_steps=1, **changes),
        reward_funcs=digit_reward,
        train_dataset=ROWS,
    )
    rec = trainer.train().of_kind("train")[-1]
    if changes.get("mode") == "rlvr":
        assert rec["samples/second"] == 0 and rec["gate/rate"] is None and rec["samples/first"] == 8
    if changes.get("use_reflection") is False:
        assert rec["samples/reflection"] == 0 and rec["tokens/reflection"] == 0


@pytest.mark.slow
def test_memory_fills_and_eval_never_writes_it(tok):
    """A scripted policy that fails first, reflects in tags, and succeeds second."""

    def reply(prompt):
        if "<prompt> and </prompt>" in prompt:
            return "<prompt>Answer with the sum.</prompt>"
        return "the answer" if "Answer with the sum." not in prompt else "0 2 4 6 8 10"

    model, tok = load_policy(tiny_model(tok), tok, peft="lora")
    args = small_args(max_steps=1, max_completion_length=20, max_reflection_length=60)
    trainer = ERLTrainer(
        model=model,
        processing_class=tok,
        args=args,
        reward_funcs=digit_reward,
        train_dataset=ROWS,
        eval_dataset=ROWS[:2],
        generator=ScriptedGenerator(tok, reply),
    )
    rec = trainer.train().of_kind("train")[-1]
    assert rec["gate/rate"] == 1.0 and rec["success/second"] == 1.0 and rec["memory/size"] == 1.0
    assert trainer.memory.entries == ["Answer with the sum."]
    state = trainer.memory.state_dict()
    seen = len(trainer.generator.prompts_seen)
    trainer.evaluate()
    assert trainer.memory.state_dict() == state
    assert not any("Answer with the sum." in p for p in trainer.generator.prompts_seen[seen:])


@pytest.mark.slow
def test_resume_equals_uninterrupted_run(tmp_path):
    def run(out, steps, resume=False):
        tok = tiny_tokenizer()
        torch.manual_seed(0)  # LoRA's A matrices are drawn from the global generator
        model, tok = load_policy(tiny_model(tok, seed=3), tok, peft="lora")
        args = small_args(max_steps=steps, output_dir=str(out), save_steps=2, seed=7)
        trainer = ERLTrainer(
            model=model, processing_class=tok, args=args, reward_funcs=digit_reward, train_dataset=ROWS
        )
        return trainer.train(resume_from_checkpoint=resume)

    full = run(tmp_path / "full", 4)
    run(tmp_path / "split", 2)
    resumed = run(tmp_path / "split", 4, resume=True)
    drop = lambda r: {k: v for k, v in r.items() if not is_measurement(k)}
    assert [drop(r) for r in full.records] == [drop(r) for r in resumed.records]
    assert len(resumed.of_kind("train")) == 4  # and the same health-check events as the whole run
    lines = (tmp_path / "split" / "history.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines if json.loads(x)["kind"] == "train"] == [1, 2, 3, 4]
    ck = tmp_path / "split" / "checkpoint-4"
    assert {
        "adapter_model.safetensors",
        "adapter_config.json",
        "optimizer.pt",
        "rng.json",
        "memory.json",
        "history.jsonl",
        "trainer_state.json",
        "erl_state.json",
    } <= set(os.listdir(ck))


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint(tmp_path, tok):
    calls = {"n": 0}

    def reply(prompt):
        calls["n"] += 1
        if calls["n"] > 16:  # well into step 2 (a step makes 12 calls: 4 first, 4 reflections, 4 second)
            raise KeyboardInterrupt
        return "x"

    model, tok = load_policy(tiny_model(tok), tok, peft="lora")
    trainer = ERLTrainer(
        model=model,
        processing_class=tok,
        args=small_args(max_steps=5, output_dir=str(tmp_path)),
        reward_funcs=digit_reward,
        train_dataset=ROWS,
        generator=ScriptedGenerator(tok, reply),
    )
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert os.path.isdir(tmp_path / "checkpoint-1")
    assert json.loads((tmp_path / "checkpoint-1" / "trainer_state.json").read_text())["global_step"] == 1


def test_bad_trainer_arguments(tok):
    model = tiny_model(tok)
    with pytest.raises(ValueError, match="exactly one"):
        ERLTrainer(model=model, processing_class=tok, args=small_args(), train_dataset=ROWS)
    with pytest.raises(ValueError, match="prompt"):
        ERLTrainer(
            model=model,
            processing_class=tok,
            args=small_args(),
            reward_funcs=digit_reward,
            train_dataset=[{"question": "x"}],
        )
    with pytest.raises(ValueError, match="processing_class"):
        ERLTrainer(model=model, args=small_args(), reward_funcs=digit_reward, train_dataset=ROWS)


def test_evaluate_can_record_itself_in_the_history():
    tok = tiny_tokenizer()
    args = small_args(max_steps=1, beta=0.0)
    trainer = ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        reward_funcs=digit_reward,
        train_dataset=ROWS,
        eval_dataset=ROWS[:2],
    )
    trainer.evaluate()
    assert trainer.history.of_kind("eval") == []  # by default evaluate() only returns its numbers
    before = trainer.evaluate(log=True)
    trainer.train()
    after = trainer.evaluate(log=True)
    steps, values = trainer.history.series("eval/success", kind="eval")
    assert steps == [0, 1] and values == [before["eval/success"], after["eval/success"]]


@pytest.mark.parametrize("folder", ["given", "default"])
def test_an_evaluation_logged_before_train_is_part_of_the_run_not_another_run(tmp_path, folder):
    """evaluate(log=True) before train() writes the run's history; train() then continues that
    run in the same folder (it is not "another run"), and a second trainer there is refused."""
    tok = tiny_tokenizer()
    out = {"output_dir": str(tmp_path / "run")} if folder == "given" else {}
    args = small_args(max_steps=1, beta=0.0, **out)
    make = lambda: ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        reward_funcs=digit_reward,
        train_dataset=ROWS,
        eval_dataset=ROWS[:2],
    )
    trainer = make()
    trainer.evaluate(log=True)
    trainer.train()
    lines = [json.loads(x) for x in open(os.path.join(args.output_dir, "history.jsonl"))]
    assert [(r["kind"], r["step"]) for r in lines][:2] == [("eval", 0), ("train", 1)]
    with pytest.raises(CheckpointError, match="already holds another run"):
        make().evaluate(log=True)
