"""The TRL-named settings: each one changes what its docstring says it does."""

from __future__ import annotations

import math

import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

ROWS = [{"prompt": f"Say {i}.", "answer": str(i)} for i in range(4)]


def reward(prompts, completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def rlvr_trainer(**overrides) -> ERLTrainer:
    tok = tiny_tokenizer()
    replies = iter(["0 1 2 3", "no"] * 1000)  # the two samples of a task differ: a gradient
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


# --- lr_scheduler_type / warmup -------------------------------------------------------------------
def _lr_per_optimizer_step(trainer: ERLTrainer) -> list[float]:
    """The learning rate each optimizer step of a training run used."""
    seen, step = [], trainer.optimizer.step

    def spy(*a, **kw):
        seen.append(trainer.optimizer.param_groups[0]["lr"])
        return step(*a, **kw)

    trainer.optimizer.step = spy
    trainer.train()
    return seen


@pytest.mark.filterwarnings(r"ignore:Seems like `optimizer.step\(\)` has been overridden")
@pytest.mark.parametrize("kind", ["constant", "linear", "cosine", "constant_with_warmup"])
def test_lr_schedule_over_optimizer_steps(kind):
    lr, total, warm = 1e-2, 3 * 2, 2  # 3 iterations × 2 optimizer steps; warm-up ceil(0.25·6) = 2
    warmup = {} if kind == "constant" else {"warmup_ratio": 0.25}
    trainer = rlvr_trainer(max_steps=3, steps_per_generation=2, learning_rate=lr, lr_scheduler_type=kind, **warmup)
    seen = _lr_per_optimizer_step(trainer)
    assert len(seen) == total
    ramp = [lr * s / warm for s in range(warm)]
    expected = {
        "constant": [lr] * total,
        "constant_with_warmup": ramp + [lr] * (total - warm),
        "linear": ramp + [lr * (total - s) / (total - warm) for s in range(warm, total)],
        "cosine": ramp + [lr * 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm))) for s in range(warm, total)],
    }[kind]
    assert seen == pytest.approx(expected, abs=1e-12)
    # the history's lr is the schedule's value after the iteration's last step
    assert trainer.history.of_kind("train")[-1]["lr"] == pytest.approx(trainer.scheduler.get_last_lr()[0])


def test_warmup_steps_and_bad_schedules():
    assert ERLConfig(warmup_steps=3, lr_scheduler_type="linear").num_warmup_steps(10) == 3
    assert ERLConfig(warmup_steps=0.5, lr_scheduler_type="linear").num_warmup_steps(10) == 5  # transformers 5
    with pytest.raises(ValueError, match="constant_with_warmup"):
        ERLConfig(warmup_ratio=0.1)  # constant has no warm-up
    with pytest.raises(ValueError, match="not both"):
        ERLConfig(lr_scheduler_type="linear", warmup_ratio=0.1, warmup_steps=2)
    with pytest.raises(ValueError, match="lr_scheduler_type"):
        ERLConfig(lr_scheduler_type="polynomial")
    with pytest.raises(ValueError, match="warmup_ratio"):
        ERLConfig(lr_scheduler_type="linear", warmup_ratio=1.5)


# --- scale_rewards ----------------------------------------------------------------------------------
def test_scale_rewards_none_and_batch_in_grouped_advantages():
    from erl_lite.core.advantages import grouped_advantages

    rewards, keys = [1.0, 0.0, 0.0, 0.5, 0.5, 1.0], ["a", "a", "a", "b", "b", "b"]
    mean_a, mean_b = 1 / 3, 2 / 3
    centred = [1 - mean_a, -mean_a, -mean_a, 0.5 - mean_b, 0.5 - mean_b, 1 - mean_b]
    assert grouped_advantages(rewards, keys, scale="none") == pytest.approx(centred)
    batch_std = float(torch.tensor(rewards).std())  # unbiased, over the whole batch
    assert grouped_advantages(rewards, keys, scale="batch") == pytest.approx([c / (batch_std + 1e-6) for c in centred])
    group_std = [float(torch.tensor(rewards[:3]).std())] * 3 + [float(torch.tensor(rewards[3:]).std())] * 3
    assert grouped_advantages(rewards, keys) == pytest.approx([c / (s + 1e-6) for c, s in zip(centred, group_std)])


def test_scale_rewards_reaches_the_rl_batch():
    """assign_advantages (the trainer's path) scales each role as the config says."""
    from erl_lite.core.phases import assign_advantages
    from erl_lite.records import Attempt

    def attempt(task, reward):
        return Attempt(
            task_id=task,
            index=0,
            role="first",
            system_prompt="",
            messages=[],
            prompt_ids=[1],
            completion_ids=[2],
            completion_mask=[1],
            reward=reward,
            success=False,
            feedback="",
            trace="",
            num_turns=1,
        )

    rewards = [1.0, 0.0, 0.0, 0.2, 0.6, 0.4]
    first = [attempt(t, r) for t, r in zip("aaabbb", rewards)]
    adv = {
        scale: [s.advantage for s in assign_advantages(ERLConfig(mode="rlvr", scale_rewards=scale), first, [])]
        for scale in ("group", "batch", "none")
    }
    assert adv["none"] == pytest.approx([2 / 3, -1 / 3, -1 / 3, -0.2, 0.2, 0.0])
    std = float(torch.tensor(rewards).std())
    assert adv["batch"] == pytest.approx([a / (std + 1e-6) for a in adv["none"]])
    assert adv["group"][3:] == pytest.approx([-1.0, 1.0, 0.0], abs=1e-5)  # std of (0.2, 0.6, 0.4) = 0.2
    assert (
        ERLConfig(scale_rewards=False).scale_rewards == "none"
        and ERLConfig(scale_rewards=True).scale_rewards == "group"
    )
    with pytest.raises(ValueError, match="scale_rewards"):
        ERLConfig(scale_rewards="task")


# --- importance_sampling_level / loss_type reach the update ----------------------------------------
def test_update_passes_importance_sampling_level_and_loss_type(monkeypatch):
    import erl_lite.core.update as update

    seen, real = [], update.policy_objective

    def spy(*a, **kw):
        seen.append((kw["importance_sampling_level"], kw["loss_type"]))
        return real(*a, **kw)

    monkeypatch.setattr(update, "policy_objective", spy)
    rlvr_trainer(importance_sampling_level="sequence", loss_type="grpo", steps_per_generation=2).train()
    assert seen and set(seen) == {("sequence", "seq_mean")}


# --- generation_kwargs ------------------------------------------------------------------------------
def test_generation_kwargs_reach_model_generate():
    """The one key taken (cache_implementation) reaches every generate call's config; penalties are refused."""
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    calls, real = [], model.generate

    def spy(*a, **kw):
        calls.append(kw)
        return real(*a, **kw)

    model.generate = spy
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=1,
        num_generations=2,
        max_completion_length=4,
        max_reflection_length=4,
        eval_steps=0,
        progress_bar=False,
        reward_threshold=2.0,
        generation_kwargs={"cache_implementation": "static"},
    )  # τ = 2: reflections sample too
    trainer = ERLTrainer(model=model, processing_class=tok, args=args, reward_funcs=reward, train_dataset=ROWS)
    trainer.train()
    assert len(calls) >= 3  # first attempts, reflections, second attempts
    assert all(kw["generation_config"].cache_implementation == "static" for kw in calls)
    assert {kw["generation_config"].max_new_tokens for kw in calls} == {4}  # the sampler's own settings stay
    for key in ("min_p", "repetition_penalty"):
        with pytest.raises(ValueError, match=key):
            ERLConfig(generation_kwargs={key: 0.5})
    with pytest.raises(ValueError, match="temperature"):
        ERLConfig(generation_kwargs={"temperature": 0.1})
    with pytest.raises(ValueError, match="generation_kwargs must be a dict"):
        ERLConfig(generation_kwargs=["min_p"])


# --- lora_* -------------------------------------------------------------------------------------------
def test_lora_fields_shape_the_adapter_of_a_model_loaded_by_path(tmp_path):
    from peft import LoraConfig

    from erl_lite.testing import save_tiny_model

    path = save_tiny_model(str(tmp_path / "tiny"))
    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        eval_steps=0,
        progress_bar=False,
        lora_r=4,
        lora_alpha=8,
        lora_dropout=0.1,
        lora_target_modules=["q_proj", "v_proj"],
    )
    trainer = ERLTrainer(model=path, args=args, reward_funcs=reward, train_dataset=ROWS)
    cfg = trainer.model.peft_config["default"]
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout, set(cfg.target_modules)) == (4, 8, 0.1, {"q_proj", "v_proj"})
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in trainer.model.named_parameters() if "lora_A" in n}
    assert adapted == {"q_proj", "v_proj"}
    # an explicit peft_config wins over the fields
    trainer = ERLTrainer(
        model=path,
        args=args,
        reward_funcs=reward,
        train_dataset=ROWS,
        peft_config=LoraConfig(r=2, lora_alpha=4, target_modules=["k_proj"]),
    )
    assert trainer.model.peft_config["default"].r == 2
    with pytest.raises(ValueError, match="lora_r"):
        ERLConfig(lora_r=0)


# --- chat_template_kwargs -----------------------------------------------------------------------------
@pytest.mark.skipif(
    __import__("erl_lite.testing", fromlist=["x"]).find_qwen3_tokenizer() is None,
    reason="shared/qwen3_tokenizer not found",
)
def test_enable_thinking_false_reaches_the_qwen3_template_everywhere(guess_env):
    """Every prompt the sampler sees — first attempts, the glue of their second turn, reflections,
    second attempts — ends with the empty think block Qwen3 adds when thinking is off."""
    from erl_lite.core.memory import ReflectionMemory
    from erl_lite.core.phases import PhaseContext, erl_step
    from erl_lite.core.prompts import REFLECTION_REQUEST
    from erl_lite.run.sft import tokenize_row
    from erl_lite.testing import qwen3_tokenizer

    tok = qwen3_tokenizer()
    off = "<|im_start|>assistant\n<think>\n\n</think>\n\n"

    def prompts_seen(**cfg):
        reply = lambda prompt: "<prompt>RULEBOOK: guess</prompt>" if REFLECTION_REQUEST in prompt else "nope"
        gen = ScriptedGenerator(tok, reply)
        ctx = PhaseContext(gen, tok, guess_env, ERLConfig.preset("cpu", num_generations=2, **cfg))
        out = erl_step(ctx, guess_env.train_tasks(2), ReflectionMemory())
        return gen.prompts_seen, out

    seen, out = prompts_seen(chat_template_kwargs={"enable_thinking": False})
    assert (
        out.reflections and out.second_attempts and max(a.num_turns for a in out.first_attempts) == 2
    )  # every path ran
    assert all(p.endswith(off) for p in seen), [p[-60:] for p in seen if not p.endswith(off)]
    plain, _ = prompts_seen()
    assert not any(off in p for p in plain)  # thinking on (the default): no empty block
    row = {"prompt": [{"role": "user", "content": "hi"}], "completion": [{"role": "assistant", "content": "yo"}]}
    assert off in tok.decode(tokenize_row(row, tok, {"enable_thinking": False})["input_ids"])
    with pytest.raises(ValueError, match="chat_template_kwargs must be a dict"):
        ERLConfig(chat_template_kwargs="enable_thinking=False")


# --- command line and checkpoints ------------------------------------------------------------------
def test_new_fields_have_working_flags():
    import argparse

    from erl_lite.cli.config_args import add_config_arguments, given_fields

    p = argparse.ArgumentParser()
    add_config_arguments(p)
    given = given_fields(
        p.parse_args(
            [
                "--chat-template-kwargs",
                "{enable_thinking: false}",
                "--generation_kwargs",
                '{"cache_implementation": "static"}',
                "--lora-target-modules",
                "[q_proj, v_proj]",
                "--lora-r",
                "8",
                "--lora_alpha",
                "16",
                "--lora-dropout",
                "0.1",
                "--lr-scheduler-type",
                "cosine",
                "--warmup-ratio",
                "0.1",
                "--scale-rewards",
                "none",
                "--importance-sampling-level",
                "sequence",
                "--loss-type",
                "dapo",
            ]
        )
    )
    cfg = ERLConfig(**given)
    assert cfg.chat_template_kwargs == {"enable_thinking": False} and cfg.generation_kwargs == {
        "cache_implementation": "static"
    }
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules) == (8, 16, 0.1, ["q_proj", "v_proj"])
    assert (
        cfg.lr_scheduler_type,
        cfg.warmup_ratio,
        cfg.scale_rewards,
        cfg.importance_sampling_level,
        cfg.loss_type,
    ) == ("cosine", 0.1, "none", "sequence", "token_mean")
    with pytest.raises(SystemExit):
        p.parse_args(["--scale-rewards", "task"])


def test_new_fields_change_a_run_on_resume_and_old_checkpoints_still_resume():
    from erl_lite.run.identity import run_differences

    saved = {"config": {"mode": "erl", "loss_type": "seq_sum"}, "model": {}}  # written before the new fields
    same = {
        "config": {
            "mode": "erl",
            "loss_type": "seq_sum",
            "scale_rewards": "group",
            "chat_template_kwargs": {},
            "lr_scheduler_type": "constant",
        },
        "model": {},
    }
    assert run_differences(saved, same) == []
    changed = {
        "config": {**same["config"], "scale_rewards": "none", "chat_template_kwargs": {"enable_thinking": False}},
        "model": {},
    }
    assert [line.split(":")[0] for line in run_differences(saved, changed)] == ["chat_template_kwargs", "scale_rewards"]
