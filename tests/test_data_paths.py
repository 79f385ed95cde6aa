"""train_dataset as a JSONL/CSV path, a save_to_disk folder, a dataset name (offline only),
a list or a datasets.Dataset; plain and conversational prompts; clear errors."""

from __future__ import annotations

import csv
import json

import datasets
import pytest

from erl_lite.config import ERLConfig
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.integrations.data_sources import load_rows
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

ROWS = [{"prompt": "Say 1.", "answer": "1"}, {"prompt": "Say 2.", "answer": "2"}]
CHAT = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say 3."}], "answer": "3"}]


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """No test may reach the hub: datasets runs offline, with a private cache."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_csv_folder_list_and_dataset_give_the_same_rows(tmp_path):
    jsonl = write_jsonl(tmp_path / "d.jsonl", ROWS)
    with open(tmp_path / "d.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["prompt", "answer"])
        w.writeheader()
        w.writerows(ROWS)
    folder = tmp_path / "saved"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(folder))
    assert load_rows(str(jsonl)) == ROWS
    assert load_rows(jsonl) == ROWS  # a PathLike too
    # CSV: datasets infers types as for a TRL user (the digit column becomes integers)
    assert [r["prompt"] for r in load_rows(str(tmp_path / "d.csv"))] == ["Say 1.", "Say 2."]
    assert load_rows(str(folder)) == ROWS
    assert load_rows(datasets.Dataset.from_list(ROWS)) == ROWS
    assert load_rows(ROWS) == ROWS


def test_conversational_prompts_from_a_jsonl_file(tmp_path):
    path = write_jsonl(tmp_path / "chat.jsonl", CHAT)
    assert load_rows(str(path)) == CHAT


def test_dataset_dict_gives_train_then_test_or_validation(tmp_path):
    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS), "validation": datasets.Dataset.from_list(ROWS[:1])}
    )
    assert load_rows(dd, "train") == ROWS
    assert load_rows(dd, "eval") == ROWS[:1]
    with pytest.raises(ValueError, match=r"splits \['train'\].*test or validation"):
        load_rows(datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)}), "eval")


def test_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset file not found: .*missing.jsonl"):
        load_rows(str(tmp_path / "missing.jsonl"))
    odd = tmp_path / "rows.xml"
    odd.write_text("<rows/>")
    with pytest.raises(ValueError, match=r"unknown dataset file format '.xml' .*rows.xml"):
        load_rows(str(odd))
    with pytest.raises(ValueError, match="dataset 'nobody/no-such-dataset' is not available: HF_DATASETS_OFFLINE"):
        load_rows("nobody/no-such-dataset")
    with pytest.raises(TypeError, match="not one dict"):
        load_rows(ROWS[0])
    with pytest.raises(TypeError, match="cannot read rows from int"):
        load_rows(3)


def test_a_cached_dataset_name_loads_offline(tmp_path, monkeypatch):
    """A name is read from the local cache when offline: a local dataset folder stands in for it."""
    data = tmp_path / "my_rows"
    data.mkdir()
    write_jsonl(data / "train.jsonl", ROWS)
    monkeypatch.chdir(tmp_path)
    assert load_rows("my_rows") == ROWS


def test_trainer_reads_a_jsonl_path_with_conversational_prompts(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", ROWS + CHAT)
    tok = tiny_tokenizer()

    def reward(prompts, completions, answer, **kw):
        texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
        return [float(a in t) for t, a in zip(texts, answer)]

    args = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=3,
        num_generations=2,
        eval_steps=0,
        max_completion_length=6,
        max_reflection_length=6,
        progress_bar=False,
    )
    trainer = ERLTrainer(
        tiny_model(tok),
        reward,
        args,
        str(path),
        processing_class=tok,
        generator=ScriptedGenerator(tok, lambda p: "1 2 3"),
    )
    assert [t.prompt for t in trainer.train_tasks] == [r["prompt"] for r in ROWS + CHAT]
    assert trainer.env.initial_system_prompt(trainer.train_tasks[2]) == "Be brief."
    record = trainer.training_step()
    assert record.metrics["reward/first"] == 1.0
