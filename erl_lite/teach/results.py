"""Finish a run: measure it (:func:`train_and_evaluate`), keep it (:func:`results_folder`,
:func:`save_adapter`), and watch the trained policy play (:func:`reload_and_play`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from erl_lite.config.checks import AUTO
from erl_lite.records import Attempt, Task

#: Where Colab mounts Google Drive (``google.colab.drive.mount("/content/drive")``).
DRIVE = Path("/content/drive/MyDrive")


def results_folder(name: str = "erl_lite_results", drive: str | os.PathLike | None = DRIVE) -> Path:
    """Create and return ``<drive>/<name>`` when ``drive`` is mounted (a Colab disk vanishes), else ``./<name>``."""
    if not name or os.path.isabs(name) or ".." in Path(name).parts:
        raise ValueError(f"name must be a relative folder name like 'erl_lite/run1', got {name!r}")
    root = Path(drive) if drive is not None and Path(drive).is_dir() else Path.cwd()
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder.resolve()


@dataclass
class BeforeAfter:
    """First-attempt evaluation (:meth:`ERLTrainer.evaluate` metrics) on the same held-out tasks before and after."""

    before: dict[str, float]
    after: dict[str, float]
    task_ids: list[str]
    num_generations: int
    start_step: int = 0  # where training began: 0, or the checkpoint a resume continued
    end_step: int = 0  # where it ended: end_step - start_step steps trained between the two evaluations

    def table(self) -> str:
        """A plain-text table, one metric per line.

        Example:
            >>> print(BeforeAfter({"eval/success": 0.25}, {"eval/success": 0.75}, ["t0", "t1"], 2).table())
            metric             before   after  change   (2 held-out tasks x 2)
            eval/success         0.25    0.75   +0.50
        """
        lines = [
            f"{'metric':<16} {'before':>8} {'after':>7} {'change':>7}   "
            f"({len(self.task_ids)} held-out tasks x {self.num_generations})"
        ]
        for key in self.before:
            if key in self.after and not key.endswith("num_episodes"):
                b, a = self.before[key], self.after[key]
                lines.append(f"{key:<16} {b:>8.2f} {a:>7.2f} {a - b:>+7.2f}")
        return "\n".join(lines)

    __str__ = table

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def train_and_evaluate(
    trainer: Any,
    tasks: list[Task] | None = None,
    num_generations: int | None = None,
    resume_from_checkpoint: str | bool | None = None,
) -> tuple[Any, BeforeAfter]:
    """Evaluate on held-out ``tasks``, ``trainer.train()`` (it reseeds first), evaluate again; ``(history, result)``.
    A resume of a finished run trains no step (``result.end_step == result.start_step``)."""
    tasks = trainer.eval_tasks if tasks is None else list(tasks)
    if not tasks:
        raise ValueError("no held-out tasks: pass tasks= or give the trainer an eval_dataset")
    n, trained = num_generations or trainer.args.eval_num_generations, []
    before = trainer.evaluate(tasks, n)
    trainer.add_callback(lambda _, record: trained.append(record.step))  # the steps this call trains
    history = trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    after = trainer.evaluate(tasks, n)
    start = trained[0] - 1 if trained else trainer.step  # a resume of a finished run trains none
    return history, BeforeAfter(
        before=before,
        after=after,
        task_ids=[t.task_id for t in tasks],
        num_generations=n,
        start_step=start,
        end_step=trainer.step,
    )


@dataclass
class SavedAdapter:
    """An adapter written by :func:`save_adapter` (``base_quantization``: how training loaded the base)."""

    path: str
    base_model: str
    base_quantization: str
    hub_url: str | None = None


def save_adapter(
    model: Any,
    tokenizer: Any,
    folder: str | os.PathLike,
    *,
    evaluation: BeforeAfter | None = None,
    push_to_hub: str | None = None,
    private: bool = True,
) -> SavedAdapter:
    """Save a LoRA policy's adapter and tokenizer (unless None) to ``folder``; optionally push it to the hub. Beside
    peft's files, :data:`erl_lite.run.layout.NOTE_FILE` records the base, whether it was 4-bit, ``evaluation``."""
    from erl_lite.run import export
    from erl_lite.run.layout import write_adapter

    path = os.fspath(folder)
    note = write_adapter(model, tokenizer, path, evaluation.to_dict() if evaluation is not None else None)
    url = export.push_to_hub(path, push_to_hub, private=private) if push_to_hub else None
    return SavedAdapter(
        path=path, base_model=note["base_model"], base_quantization=note["base_quantization"], hub_url=url
    )


@dataclass
class Turn:
    """One model turn: what the policy saw last and what it replied."""

    number: int
    observation: str
    reply: str


@dataclass
class PlayedEpisode:
    """One episode played by a policy, for reading turn by turn (text when printed, HTML in a notebook)."""

    task_id: str
    system_prompt: str
    turns: list[Turn]
    reward: float
    success: bool
    feedback: str
    attempt: Attempt = field(repr=False)

    @classmethod
    def from_attempt(cls, attempt: Attempt) -> PlayedEpisode:
        """Pair each reply with the user message before it."""
        turns, seen = [], ""
        for message in attempt.messages:
            if message["role"] == "user":
                seen = message["content"]
            elif message["role"] == "assistant":
                turns.append(Turn(len(turns) + 1, seen, message["content"]))
        return cls(
            attempt.task_id, attempt.system_prompt, turns, attempt.reward, attempt.success, attempt.feedback, attempt
        )

    def text(self) -> str:
        verdict = "succeeded" if self.success else "failed"
        n = len(self.turns)
        lines = [
            f"task {self.task_id} · reward {self.reward:.2f} · {verdict} · {n} turn{'s' * (n != 1)}",
            f"system: {self.system_prompt}",
        ]
        for turn in self.turns:
            lines += [f"--- turn {turn.number} ---", turn.observation, f"reply: {turn.reply}"]
        return "\n".join(lines + ["--- outcome ---", self.feedback])

    __str__ = text

    def _repr_html_(self) -> str:
        from erl_lite.viz._style import COLORS
        from erl_lite.viz.pairs import _attempt_html  # the same view as the attempt-pair browser

        return _attempt_html(f"Task {self.task_id}", self.attempt.to_dict(), COLORS["first"])


def play_episode(model: Any, tokenizer: Any, env: Any, task: Task | None = None, config: Any = None) -> PlayedEpisode:
    """Play one first attempt of ``task`` (default: the first test task) as evaluation does (no memory)."""
    from erl_lite.config import ERLConfig
    from erl_lite.core.phases import PhaseContext, attempt_first
    from erl_lite.engine.generation import HFGenerator

    task = task if task is not None else env.test_tasks(1)[0]
    ctx = PhaseContext(
        generator=HFGenerator(model, tokenizer), tokenizer=tokenizer, env=env, config=config or ERLConfig()
    )
    (attempt,) = attempt_first(ctx, [task], 1, params=ctx.eval_params())
    return PlayedEpisode.from_attempt(attempt)


def reload_and_play(
    adapter_dir: str | os.PathLike,
    env: Any,
    task: Task | None = None,
    config: Any = None,
    *,
    quantization: str = "auto",
    device: str | None = None,
) -> tuple[Any, Any, PlayedEpisode]:
    """Load a saved adapter (``"auto"``: quantized as in training) and play one episode; ``(model, tok, episode)``."""
    from erl_lite.models import load_policy
    from erl_lite.run.export import describe_adapter

    if quantization == AUTO:
        quantization = describe_adapter(adapter_dir).quantization
    model, tokenizer = load_policy(os.fspath(adapter_dir), quantization=quantization, device=device)
    return model, tokenizer, play_episode(model, tokenizer, env, task, config)
