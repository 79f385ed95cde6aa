"""The published quick starts of TRL's GRPOTrainer and of the erl-trainer package, run on the
tiny model with only the import line and the README's documented renames changed
("Coming from TRL or erl-trainer").

What else differs, and only to stay offline and fast: the model is the tiny model saved to a
folder (a local path in place of a hub name), the dataset is a small local list in place of
``load_dataset(...)``, and budget arguments are added to the config (marked ``# budget``).
"""

from __future__ import annotations

import pytest

from erl_lite.testing import save_tiny_model

ERL_METRICS = ("reward/first", "reward/second", "gate/rate", "memory/size", "loss/total")
PROMPTS = [
    {"prompt": "Summarize: the cat sat on the mat all day."},
    {"prompt": "Summarize: rain fell on the town until noon."},
]


@pytest.fixture(scope="module")
def model_name(tmp_path_factory):
    return save_tiny_model(str(tmp_path_factory.mktemp("tiny")))


def test_trl_grpo_quick_start(model_name, tmp_path):
    # was: from trl import GRPOConfig, GRPOTrainer
    from erl_lite import ERLConfig, ERLTrainer

    dataset = PROMPTS  # was: load_dataset("trl-lib/tldr", split="train")

    def reward_len(completions, **kwargs):
        return [-abs(20 - len(completion)) for completion in completions]

    training_args = ERLConfig(
        output_dir=str(tmp_path),  # was: GRPOConfig(output_dir=...)
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=2,  # budget
        max_completion_length=8,
        max_reflection_length=8,
        progress_bar=False,
    )  # budget
    trainer = ERLTrainer(model=model_name, reward_funcs=reward_len, args=training_args, train_dataset=dataset)
    trainer.train()

    record = trainer.history.of_kind("train")[-1]
    assert all(record.get(k) is not None for k in ERL_METRICS), record
    assert record["gate/rate"] == 1.0  # every reward is ≤ 0 < τ = 1: every attempt is retried
    assert (tmp_path / "history.jsonl").exists()


def test_erl_trainer_quick_start(model_name, tmp_path):
    # was: from erl import ERLConfig, ERLTrainer
    from peft import LoraConfig

    from erl_lite import ERLConfig, ERLTrainer

    dataset = PROMPTS  # was: load_dataset("your_dataset", split="train")

    def reward_func(prompts, completions, **kwargs):
        return [float("mat" in c or "noon" in c) for c in completions]

    def feedback_func(prompts, completions, **kwargs):
        return [f"{len(c)} characters; name the place." for c in completions]

    config = ERLConfig(
        output_dir=str(tmp_path),
        num_train_epochs=3,
        learning_rate=1e-6,
        per_device_train_batch_size=4,
        num_generations=4,
        # ERL-specific params
        reward_threshold=1.0,
        memory_type="fifo",  # documented: erl-trainer's memory is a FIFO queue
        memory_size=50,
        memory_top_k=3,
        internalization_coef=1.0,
        num_tasks_per_step=2,
        max_completion_length=8,
        max_reflection_length=8,
        progress_bar=False,  # budget
    )
    lora_config = LoraConfig(r=64, lora_alpha=64, target_modules="all-linear")
    trainer = ERLTrainer(
        model=model_name,
        reward_funcs=reward_func,
        feedback_func=feedback_func,
        args=config,
        train_dataset=dataset,
        peft_config=lora_config,
    )
    trainer.train()

    records = trainer.history.of_kind("train")
    assert trainer.args.max_steps == 3 and len(records) == 3  # 3 epochs × 2 rows / 2 tasks per step
    assert all(r.get(k) is not None for r in records for k in ERL_METRICS)
    assert trainer.memory.kind == "fifo" and trainer.model.peft_config["default"].r == 64


def test_num_train_epochs_gives_way_to_max_steps(model_name):
    from erl_lite import ERLConfig, ERLTrainer

    def reward(completions, **kw):
        return [0.0] * len(completions)

    def steps(**cfg):
        args = ERLConfig(num_tasks_per_step=2, progress_bar=False, **cfg)
        return ERLTrainer(model=model_name, reward_funcs=reward, args=args, train_dataset=PROMPTS * 3).args.max_steps

    assert steps(num_train_epochs=1) == 3 and steps(num_train_epochs=0.5) == 2  # ceil(0.5 × 6 / 2)
    assert steps(num_train_epochs=3, max_steps=1) == 1  # max_steps wins, as in TRL
    assert ERLConfig().max_steps == 100 and ERLConfig(num_train_epochs=2).max_steps is None
    assert ERLConfig.preset("cpu", num_train_epochs=2).max_steps is None  # epochs replace the preset's length
    assert ERLConfig.preset("cpu", num_train_epochs=2, max_steps=4).max_steps == 4
    with pytest.raises(ValueError, match="num_train_epochs"):
        ERLConfig(num_train_epochs=0)
