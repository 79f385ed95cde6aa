"""Finishing a run (erl_lite.teach.results): a kept folder, before/after, a reloaded adapter that plays."""

from __future__ import annotations

import json

import pytest
import torch

from erl_lite.embedded import demo_config, demo_trainer, demo_world, load_embedded
from erl_lite.models import describe_policy, load_policy, trainable_parameters
from erl_lite.run.export import NOTE_FILE
from erl_lite.teach.results import (
    BeforeAfter,
    PlayedEpisode,
    play_episode,
    reload_and_play,
    results_folder,
    save_adapter,
    train_and_evaluate,
)


def test_results_folder_prefers_a_mounted_drive(tmp_path, monkeypatch):
    drive, work = tmp_path / "MyDrive", tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert results_folder("erl/run1", drive=drive) == work / "erl" / "run1"  # not mounted: local
    assert (work / "erl" / "run1").is_dir()
    drive.mkdir()
    assert results_folder("erl/run1", drive=drive) == drive / "erl" / "run1"
    for bad in ("", "/abs/path", "../outside"):
        with pytest.raises(ValueError, match="relative folder name"):
            results_folder(bad, drive=drive)


def test_train_evaluate_save_reload_and_play(tmp_path, monkeypatch):
    pushed = []
    monkeypatch.setattr(
        "erl_lite.run.export.push_to_hub",
        lambda folder, repo, private=True: pushed.append((folder, repo)) or f"hub/{repo}",
    )
    trainer = demo_trainer(seed=0, eval_tasks=2, max_steps=1, num_tasks_per_step=2, eval_steps=0)
    held_out = trainer.env.test_tasks(2)
    history, result = train_and_evaluate(trainer, held_out, num_generations=1)
    assert trainer.step == 1 and len(history.of_kind("train")) == 1
    assert result.task_ids == [t.task_id for t in held_out]
    assert not set(result.task_ids) & {t.task_id for t in trainer.train_tasks}  # held out
    assert result.before["eval/num_episodes"] == result.after["eval/num_episodes"] == 2
    assert "eval/success" in result.table()

    saved = save_adapter(trainer.model, trainer.tokenizer, tmp_path / "adapter", evaluation=result)
    assert pushed == [] and saved.hub_url is None and saved.base_quantization == "none"
    note = json.loads((tmp_path / "adapter" / NOTE_FILE).read_text())
    assert note["base_quantization"] == "none" and note["evaluation"]["after"] == result.after

    # The reloaded adapter is the trained one, and plays exactly as the live policy does.
    model, tok = load_policy(saved.path, device="cpu")
    trained = trainable_parameters(trainer.model)
    reloaded = trainable_parameters(model)
    assert trained.keys() == reloaded.keys() and all(torch.equal(trained[k], reloaded[k]) for k in trained)
    torch.manual_seed(5)
    live = play_episode(trainer.model, trainer.tokenizer, trainer.env, held_out[0], trainer.args)
    torch.manual_seed(5)
    again = play_episode(model, tok, trainer.env, held_out[0], trainer.args)
    assert [t.reply for t in again.turns] == [t.reply for t in live.turns] and again.reward == live.reward

    _, _, episode = reload_and_play(saved.path, trainer.env, held_out[0], trainer.args, device="cpu")
    assert isinstance(episode, PlayedEpisode) and 1 <= len(episode.turns) <= trainer.env.max_turns
    text = str(episode)
    assert "--- turn 1 ---" in text and episode.turns[0].reply in text and episode.feedback in text
    assert held_out[0].task_id in episode._repr_html_()

    pushed_saved = save_adapter(trainer.model, trainer.tokenizer, tmp_path / "pushed", push_to_hub="me/run")
    assert pushed == [(pushed_saved.path, "me/run")] and pushed_saved.hub_url == "hub/me/run"


def test_a_second_pass_into_a_kept_folder_resumes_or_starts_afresh_as_asked(tmp_path):
    """Notebook 08 run twice into its kept folder: resuming trains on from the saved step (the
    "before" is the untrained model again); a fresh run there is refused unless told to overwrite."""
    from erl_lite.run.checkpoint import CheckpointError

    def trainer(**kw):
        settings = dict(
            max_steps=2, num_tasks_per_step=2, eval_steps=0, save_steps=1, output_dir=str(tmp_path / "kept")
        )
        return demo_trainer(seed=0, eval_tasks=2, **{**settings, **kw})

    first = trainer()
    held_out = first.env.test_tasks(2)
    _, done = train_and_evaluate(first, held_out, num_generations=1)
    with pytest.raises(CheckpointError, match="already holds another run"):
        train_and_evaluate(trainer(), held_out, num_generations=1)
    again = trainer(max_steps=3)
    history, result = train_and_evaluate(again, held_out, num_generations=1, resume_from_checkpoint=True)
    assert [r["step"] for r in history.of_kind("train")] == [1, 2, 3]
    assert (done.start_step, done.end_step, result.start_step, result.end_step) == (0, 2, 2, 3)
    assert result.before == done.before  # a new trainer starts from the untrained adapter
    # A third pass, resuming the finished run: nothing trains, and the record says so (notebook 08 prints it).
    _, idle = train_and_evaluate(trainer(max_steps=3), held_out, num_generations=1, resume_from_checkpoint=True)
    assert (idle.start_step, idle.end_step) == (3, 3)
    fresh = trainer(overwrite_output_dir=True)
    history, _ = train_and_evaluate(fresh, held_out, num_generations=1)
    assert [r["step"] for r in history.of_kind("train")] == [1, 2]


def test_a_qlora_adapter_reloads_in_4bit(tmp_path):
    model, tok = load_embedded(quantization="4bit", lora_r=4)
    saved = save_adapter(model, tok, tmp_path / "adapter")
    assert saved.base_quantization == "4bit"
    reloaded, _, episode = reload_and_play(saved.path, demo_world(0), config=demo_config(), device="cpu")
    assert "4-bit NF4" in describe_policy(reloaded) and episode.turns


def test_save_adapter_refuses_a_model_without_adapter(tmp_path):
    model, tok = load_embedded(peft="none")
    with pytest.raises(ValueError, match="LoRA policy"):
        save_adapter(model, tok, tmp_path)


def test_before_after_table_skips_counts():
    table = BeforeAfter(
        {"eval/reward": 0.5, "eval/num_episodes": 4.0}, {"eval/reward": 1.0, "eval/num_episodes": 4.0}, ["a", "b"], 2
    ).table()
    assert "+0.50" in table and "num_episodes" not in table
