"""ERLConfig.optim: each choice builds its optimizer, trains, and survives a checkpoint."""

from __future__ import annotations

import warnings

import bitsandbytes as bnb
import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.models import trainable_parameters
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

ROWS = [{"prompt": f"Say {i}.", "answer": str(i)} for i in range(4)]
CLASSES = {
    "adamw_torch": torch.optim.AdamW,
    "adamw_8bit": bnb.optim.AdamW8bit,
    "paged_adamw_8bit": bnb.optim.PagedAdamW8bit,
}


def reward(prompts, completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def trainer_for(optim: str, **overrides) -> ERLTrainer:
    tok = tiny_tokenizer()
    replies = iter(["0 1 2 3", "no"] * 100)  # the two samples of a task differ: a gradient
    args = ERLConfig.preset(
        "cpu",
        **{
            "mode": "rlvr",
            "max_steps": 1,
            "num_tasks_per_step": 2,
            "num_generations": 2,
            "max_completion_length": 6,
            "eval_steps": 0,
            "progress_bar": False,
            "optim": optim,
            **overrides,
        },
    )
    return ERLTrainer(
        model=tiny_model(tok),
        processing_class=tok,
        args=args,
        reward_funcs=reward,
        train_dataset=ROWS,
        generator=ScriptedGenerator(tok, lambda prompt: next(replies)),
    )


@pytest.mark.parametrize("optim", sorted(CLASSES))
def test_each_optim_builds_its_class_and_trains_on_cpu(optim):
    trainer = trainer_for(optim)
    assert type(trainer.optimizer) is CLASSES[optim]
    group = trainer.optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"]) == (2e-3, 0.01)
    before = trainable_parameters(trainer.model)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Paged optimizers are not supported on CPU")  # bitsandbytes 0.50
        trainer.train()
    after = trainable_parameters(trainer.model)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    states = [s for s in trainer.optimizer.state.values() if s]
    if optim == "adamw_torch":
        assert all(s["exp_avg"].dtype == torch.float32 for s in states)
    else:  # 8-bit moments for tensors of 4096+ values (the embedding here), fp32 below that
        assert any(s["state1"].dtype == torch.uint8 for s in states)


def test_an_8bit_optimizer_resumes_from_a_checkpoint(tmp_path):
    trainer = trainer_for("adamw_8bit", output_dir=str(tmp_path))
    trainer.train()
    resumed = trainer_for("adamw_8bit", output_dir=str(tmp_path), max_steps=2)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.step == 2 and type(resumed.optimizer) is bnb.optim.AdamW8bit


def test_unknown_optim_is_named():
    with pytest.raises(ValueError, match="optim.*adamw_8bit"):
        ERLConfig(optim="adafactor")


def test_gpu_preset_pages_its_optimizer():
    assert ERLConfig.preset("gpu").optim == "paged_adamw_8bit"
    assert ERLConfig().optim == "adamw_torch" and ERLConfig.preset("cpu").optim == "adamw_torch"


def test_the_schedule_warms_up_then_decays_over_every_optimizer_step():
    from erl_lite.run.args import build_scheduler

    args = ERLConfig(max_steps=2, steps_per_generation=2, lr_scheduler_type="linear", learning_rate=1.0, warmup_steps=1)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    sched, rates = build_scheduler(opt, args), []
    for _ in range(4):  # 2 steps x 2 optimizer steps each
        rates.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert rates == pytest.approx([0.0, 1.0, 2 / 3, 1 / 3], rel=1e-12)
