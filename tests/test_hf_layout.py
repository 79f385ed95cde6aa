"""What a run saves is Hugging Face's layout: PEFT, AutoTokenizer and TrainerState read it.

One short LoRA run on a tiny model saved to disk (so its adapter records a real
``base_model_name_or_path``) is trained once per module; tests read or damage private copies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_run_faults import rerecord

from erl_lite.config import ERLConfig
from erl_lite.models import load_policy, trainable_parameters
from erl_lite.run import checkpoint
from erl_lite.run.checkpoint import CheckpointError
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import save_tiny_model

ROWS = [{"prompt": f"Add {i} and {i}.", "answer": str(2 * i)} for i in range(6)]
ARGS = dict(
    max_steps=2,
    num_tasks_per_step=2,
    num_generations=2,
    max_completion_length=8,
    max_reflection_length=12,
    max_reflection_prompt_length=700,
    eval_steps=0,
    progress_bar=False,
    learning_rate=1e-2,
    beta=0.0,
    per_device_train_batch_size=8,
    save_steps=1,
    seed=7,
)


def vowel_reward(prompts, completions, **kw):
    return [sum(ch in "aeiou" for ch in c) % 3 / 2 for c in completions]


def make_trainer(base_dir, out, peft="lora", **overrides) -> ERLTrainer:
    torch.manual_seed(0)  # LoRA's A matrices come from the global generator
    model, tok = load_policy(base_dir, peft=peft, lora_r=2, device="cpu")
    args = ERLConfig.preset("cpu", **{**ARGS, "output_dir": str(out), **overrides})
    return ERLTrainer(model=model, processing_class=tok, args=args, reward_funcs=vowel_reward, train_dataset=ROWS)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = save_tiny_model(tmp_path_factory.mktemp("base"))
    out = tmp_path_factory.mktemp("run")
    trainer = make_trainer(base, out)
    trainer.train()
    return SimpleNamespace(
        base=base,
        dir=out,
        trainer=trainer,
        params={k: v.clone() for k, v in trainable_parameters(trainer.model).items()},
    )


@pytest.fixture
def copy(run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(run.dir, dst)
    return dst


FOLDERS = ["checkpoint-1", "checkpoint-2", "."]  # "." is output_dir itself: the final model


# --- 1. PEFT reads a checkpoint, and so does AutoPeftModelForCausalLM ---------------------------
@pytest.mark.slow
@pytest.mark.parametrize("folder", FOLDERS)
def test_peft_loads_a_checkpoint_folder(run, folder):
    from peft import AutoPeftModelForCausalLM, PeftModel
    from transformers import AutoModelForCausalLM

    path = os.path.join(run.dir, folder)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run.base), path)
    auto = AutoPeftModelForCausalLM.from_pretrained(path)
    if folder != "checkpoint-1":  # the last step's weights, by name
        loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
        for name, value in run.params.items():
            assert torch.equal(loaded[name], value), name
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), auto.state_dict().values()))


# --- 2. the tokenizer is saved next to it ------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("folder", FOLDERS)
def test_auto_tokenizer_loads_a_checkpoint_folder(run, folder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.join(run.dir, folder))
    text = "Add 2 and 2."
    assert tok(text).input_ids == run.trainer.tokenizer(text).input_ids
    assert tok.chat_template == run.trainer.tokenizer.chat_template


# --- 3. trainer_state.json is transformers' TrainerState ---------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("step", [1, 2])
def test_trainer_state_is_transformers_schema(run, step):
    from transformers import TrainerState

    state = TrainerState.load_from_json(os.path.join(run.dir, f"checkpoint-{step}", "trainer_state.json"))
    assert state.global_step == step and state.max_steps == 2 and state.save_steps == 1
    train = [r for r in state.log_history if "reward/first" in r]
    assert [r["step"] for r in train] == list(range(1, step + 1))
    assert train == [{k: v for k, v in r.items()} for r in run.trainer.history.of_kind("train")[:step]]
    erl = json.loads((run.dir / f"checkpoint-{step}" / "erl_state.json").read_text())
    assert erl["step"] == step and erl["format"] == checkpoint.FORMAT and "config" in erl


# --- 1b. resume reads the adapter through PEFT, with the same refusals --------------------------
def _poison(tensors):
    name = sorted(tensors)[0]
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    return name


def _drop(tensors):
    name = sorted(tensors)[-1]
    del tensors[name]
    return name


def _extra(tensors):
    tensors["base_model.model.model.layers.0.mlp.up_proj.lora_Z.weight"] = torch.zeros(2, 2)
    return "lora_Z"


def _reshape(tensors):
    name = sorted(tensors)[1]
    tensors[name] = tensors[name][:1].contiguous()
    return name


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage,words", [(_poison, "NaN or inf"), (_drop, "missing"), (_extra, "not in this model"), (_reshape, "shape")]
)
def test_resume_refuses_a_damaged_adapter_naming_the_tensor(run, copy, damage, words):
    path = copy / "checkpoint-2" / "adapter_model.safetensors"
    tensors = load_file(path)
    name = damage(tensors)
    save_file(tensors, path)
    rerecord(path)  # the manifest agrees: the tensors themselves are refused
    trainer = make_trainer(run.base, copy, max_steps=3)
    with pytest.raises(CheckpointError, match=re.escape(name)) as caught:
        trainer.train(resume_from_checkpoint=str(copy / "checkpoint-2"))
    assert words in str(caught.value) and "adapter_model.safetensors" in str(caught.value)


@pytest.mark.slow
def test_resume_restores_the_adapter_exactly(run, copy):
    trainer = make_trainer(run.base, copy, max_steps=2)
    trainer.train(resume_from_checkpoint=str(copy / "checkpoint-2"))
    for name, value in trainable_parameters(trainer.model).items():
        assert torch.equal(value, run.params[name]), name


# --- 7. an old (format 2) checkpoint is refused, naming what it lacks ----------------------------
def _to_old_layout(folder, trainer):
    """Rewrite a checkpoint as format 2 wrote it: trainable.safetensors by parameter name,
    the adapter in adapter/, and erl_lite's own trainer_state.json."""
    erl = json.loads((folder / "erl_state.json").read_text())
    from peft.utils import load_peft_weights, set_peft_model_state_dict

    set_peft_model_state_dict(trainer.model, load_peft_weights(str(folder), device="cpu"))
    save_file(
        {k: v.contiguous() for k, v in trainable_parameters(trainer.model).items()}, folder / "trainable.safetensors"
    )
    os.makedirs(folder / "adapter")
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        os.replace(folder / name, folder / "adapter" / name)
    for name in os.listdir(folder):
        if name.startswith(("tokenizer", "special_tokens", "chat_template", "erl_lite.json", "README")):
            os.remove(folder / name)
    files = sorted(
        [
            "trainable.safetensors",
            "optimizer.pt",
            "scheduler.pt",
            "rng.json",
            "memory.json",
            "history.jsonl",
            "samples.jsonl",
        ]
    )
    (folder / "trainer_state.json").write_text(
        json.dumps(
            {
                "format": 2,
                "step": erl["step"],
                "files": files,
                "config": erl["config"],
                "model": erl["model"],
                **({"tokenizer": erl["tokenizer"]} if "tokenizer" in erl else {}),
                **({"env": erl["env"]} if "env" in erl else {}),
            }
        )
    )
    os.remove(folder / "erl_state.json")
    os.remove(folder / "manifest.json")  # format 2 had none


@pytest.mark.slow
def test_a_format_2_checkpoint_is_refused_by_resume_and_by_read(run, copy):
    """Format 2 was written by development versions before the first release; resume names the missing record
    (not a crash, not a silent fresh start)."""
    scratch = make_trainer(run.base, copy / "scratch")
    _to_old_layout(copy / "checkpoint-2", scratch)
    with pytest.raises(checkpoint.CheckpointError, match=r"checkpoint-2/erl_state.json is missing"):
        checkpoint.read_checkpoint(str(copy / "checkpoint-2"))
    shutil.rmtree(copy / "checkpoint-1")
    with pytest.raises(checkpoint.CheckpointError, match=r"checkpoint-2/erl_state.json is missing"):
        make_trainer(run.base, copy, max_steps=3).train(resume_from_checkpoint=str(copy / "checkpoint-2"))


# --- 4. save_model and push_to_hub (only when asked) ---------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("where", ["given", "output_dir"])
def test_save_model_writes_adapter_tokenizer_and_config(run, tmp_path, where):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoTokenizer

    folder = tmp_path / "saved"
    if where == "given":
        assert run.trainer.save_model(str(folder)) == str(folder)
    else:
        run.trainer.args.output_dir, old = str(folder), run.trainer.args.output_dir
        try:
            run.trainer.save_model()
        finally:
            run.trainer.args.output_dir = old
    AutoPeftModelForCausalLM.from_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(folder))
    assert json.loads((folder / "training_args.json").read_text())["max_steps"] == 2


@pytest.mark.slow
def test_push_to_hub_saves_then_uploads_only_when_asked(run, copy, monkeypatch):
    pushed = []
    monkeypatch.setattr(
        "erl_lite.run.export.push_to_hub",
        lambda folder, repo, **kw: pushed.append((folder, repo, kw)) or f"https://hf.co/{repo}",
    )
    trainer = make_trainer(run.base, copy / "fresh")
    trainer.train()
    assert pushed == []  # push_to_hub=False: nothing leaves the machine
    with pytest.raises(ValueError, match="hub_model_id"):
        trainer.push_to_hub()
    trainer.args.hub_model_id = "me/erl-run"
    assert trainer.push_to_hub(token="t") == "https://hf.co/me/erl-run"
    assert pushed[-1][:2] == (str(copy / "fresh"), "me/erl-run") and pushed[-1][2]["token"] == "t"
    pushed.clear()
    trainer = make_trainer(run.base, copy / "pushed", push_to_hub=True, hub_model_id="me/erl-run")
    trainer.train()
    assert [p[:2] for p in pushed] == [(str(copy / "pushed"), "me/erl-run")]


@pytest.mark.parametrize(
    "given, words",
    [
        ({"push_to_hub": True}, "hub_model_id"),
        ({"push_to_hub": "yes"}, "push_to_hub"),
        ({"hub_model_id": "no-owner"}, "user-or-org/name"),
    ],
)
def test_hub_settings_are_checked_when_the_config_is_built(given, words):
    with pytest.raises(ValueError, match=words):
        ERLConfig(**given)


# --- where a run goes when no output_dir is given ------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [lambda: ERLConfig(), lambda: ERLConfig.preset("cpu"), lambda: ERLConfig.preset("gpu")],
    ids=["ERLConfig", "cpu", "gpu"],
)
def test_the_default_output_dir_is_transformers_trainer_output(make):
    from transformers import TrainingArguments

    assert make().output_dir == TrainingArguments(output_dir=None).output_dir == "trainer_output"


@pytest.mark.slow
def test_a_run_without_output_dir_saves_in_trainer_output_and_none_saves_nothing(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = {k: v for k, v in ARGS.items() if k != "save_steps"}
    torch.manual_seed(0)
    model, tok = load_policy(run.base, peft="lora", lora_r=2, device="cpu")
    ERLTrainer(
        model=model,
        processing_class=tok,
        args=ERLConfig.preset("cpu", **{**args, "max_steps": 1}),
        reward_funcs=vowel_reward,
        train_dataset=ROWS,
    ).train()
    assert {"adapter_config.json", "checkpoint-1", "history.jsonl"} <= set(os.listdir(tmp_path / "trainer_output"))
    shutil.rmtree(tmp_path / "trainer_output")
    ERLTrainer(
        model=model,
        processing_class=tok,
        args=ERLConfig.preset("cpu", **{**args, "max_steps": 1}, output_dir=None),
        reward_funcs=vowel_reward,
        train_dataset=ROWS,
    ).train()
    assert os.listdir(tmp_path) == []  # None: kept in memory, no file written
