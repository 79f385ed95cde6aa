"""Loaders for the ERL paper's exact task sets, shipped in ``erl_lite/data/paper_tasks/`` (MIT licence
there): FrozenLake maps and Sokoban levels (100 test / 10,000 train), 1,024 HotpotQA questions.

Departures from the paper: FrozenLake maps rebuilt from the release's ``(seed, size, p)``; HotpotQA without Wikipedia.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from erl_lite.records import Task, task_count

_FILES = {(game, split): f"{game}_{split}.jsonl" for game in ("frozenlake", "sokoban") for split in ("train", "test")}
_FILES[("hotpotqa", "test")] = "hotpotqa_eval_questions.jsonl"


@lru_cache(maxsize=None)
def _rows(filename: str) -> tuple[dict, ...]:
    text = resources.files("erl_lite").joinpath("data", "paper_tasks", filename).read_text("utf-8")
    return tuple(json.loads(line) for line in text.splitlines() if line.strip())


def paper_rows(game: str, split: str) -> list[dict]:
    """The raw JSON rows of one shipped file (copies; safe to modify)."""
    try:
        filename = _FILES[(game, split)]
    except KeyError:
        raise ValueError(f"no paper task file for game={game!r}, split={split!r}; have {sorted(_FILES)}")
    return [dict(row) for row in _rows(filename)]


def paper_game_tasks(game: str, split: str, n: int | None = None) -> list[Task]:
    """The first ``n`` (all when None) paper tasks of a grid game (``"frozenlake"``, ``"sokoban"``)."""
    rows = paper_rows(game, split)[: task_count(n)]
    return [Task(task_id=f"{game}/paper-{split}/{row['index']}", data={**row, "split": split}) for row in rows]


def hotpotqa_paper_questions(n: int | None = None) -> list[Task]:
    """The paper's 1,024 HotpotQA evaluation questions, without paragraphs (a ``retriever`` can research them)."""
    rows = paper_rows("hotpotqa", "test")[: task_count(n)]
    return [Task(task_id=f"hotpotqa/paper-eval/{i}", data={**row, "split": "test"}) for i, row in enumerate(rows)]
