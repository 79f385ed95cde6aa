"""The synthetic corpus the embedded tiny model is trained on (build time only).

:func:`generate_corpus` rolls the :class:`~embedded.teacher.Teacher` (``scripts/embedded/teacher.py``)
through erl_lite's own phases (:func:`erl_lite.core.phases.erl_step`) with a
:class:`~erl_lite.engine.generation.ScriptedGenerator` in place of the model, on demo worlds with
varied letters, so the training text is byte-identical to what the trainer will later show the
model: chat template, glue between turns, the reflection request and the second attempt's
system prompt. ``scripts/build_embedded_model.py`` tokenizes and trains on it. It lives beside the
build script, outside the installed package: nothing that runs at demo time needs it.

Departures from the paper: the paper starts from instruction-tuned LLMs; this corpus exists
only because no small pretrained chat model ships offline.

Example:
    >>> from erl_lite.testing import tiny_tokenizer
    >>> examples = generate_corpus(tiny_tokenizer(), runs=1, tasks_per_run=4, seed=0)
    >>> sorted({e.role for e in examples}) <= ["first", "reflection", "second"]
    True
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from embedded.teacher import Teacher, TeacherSkill
from erl_lite.config import ERLConfig
from erl_lite.core.memory import ReflectionMemory
from erl_lite.core.phases import PhaseContext, erl_step
from erl_lite.embedded.demo import demo_config
from erl_lite.embedded.rulebooks import rulebook
from erl_lite.embedded.world import LETTER_POOL, make_world
from erl_lite.engine.generation import ScriptedGenerator


@dataclass
class CorpusExample:
    """One supervised sequence: a context and the tokens after it (loss where the mask is 1)."""

    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    run: int

    @property
    def length(self) -> int:
        """Tokens in the whole sequence."""
        return len(self.prompt_ids) + len(self.completion_ids)


def corpus_config(**overrides: Any) -> ERLConfig:
    """The phase settings the corpus is rolled out with: the demo's (so the corpus shows the
    model the budgets it will meet), with G = 2.

    Example:
        >>> cfg = corpus_config()
        >>> cfg.num_generations, cfg.max_completion_length == demo_config().max_completion_length
        (2, True)
    """
    return demo_config(**{"num_generations": 2, **overrides})


def generate_corpus(
    tokenizer: Any,
    runs: int,
    tasks_per_run: int,
    seed: int = 0,
    skill: TeacherSkill | None = None,
    batch_tasks: int = 8,
    config: ERLConfig | None = None,
    set_memory: tuple[float, float, float] = (0.35, 0.1, 0.4),
    **world: Any,
) -> list[CorpusExample]:
    """Roll the teacher through ERL steps on ``runs`` worlds and keep every role's tokens.

        Run ``r`` uses the ``r``-th (hole, second hole, frozen) letter triple (cycling through the
        60 distinct worlds of :data:`LETTER_POOL`, so every letter is a hole as often as the others),
        its own map seed, and memory on for three runs in four (so reflections see remembered
        rulebooks as their base instructions most of the time, and learn to build on them, and
        the initial prompt otherwise). One run in eight has no reflection: its second attempts get
        the first attempt's trace and feedback instead of a rulebook, as in the paper's ablation. In a run with
    memory, before each step after the first,
        memory is set by hand with the chances ``set_memory`` = (one hole, the ice, both holes);
        otherwise it keeps what the run stored. A one-hole rulebook (what one earlier failure
        teaches) makes reflections that must write the hole the trace reveals and keep the
        remembered one; a rulebook calling the ice a hole (a lucky success can store a wrong one)
        is dropped once a trace walks on the ice safely; a rulebook naming both holes, in either
        order, makes reflections that write the trace's hole first and must not write it twice.

        Args:
            tokenizer: renders and tokenizes exactly as the trainer will.
            runs, tasks_per_run: how many worlds, and training maps from each.
            seed: seeds the teacher and the map splits.
            skill: the teacher's noise levels.
            batch_tasks: tasks per ERL step (memory is updated between steps).
            config: phase settings (default :func:`corpus_config`).
            set_memory: chances per step that memory is set to one hole, the ice, both holes (see above).
            world: :class:`~erl_lite.embedded.world.DemoLake` arguments (``sizes``, ``frozen_prob``,
                ``keep_easy``, ...).
    """
    worlds = [(h, h2, f) for h in LETTER_POOL for h2 in LETTER_POOL for f in LETTER_POOL if h < h2 and f not in (h, h2)]
    random.Random(seed).shuffle(worlds)
    teacher = Teacher(seed, skill)
    rng = random.Random(seed + 1)
    examples: list[CorpusExample] = []
    for r in range(runs):
        letters = worlds[r % len(worlds)]
        env = make_world(*letters, seed=1_000_003 * (seed + 1) + r, n_train=tasks_per_run, n_test=8, **world)
        # One run in eight retries without a rulebook (the "w/o reflection" ablation's prompts), with no memory.
        plain = r % 8 == 6
        cfg = (config or corpus_config()).replace(use_memory=(r % 4 != 3) and not plain, use_reflection=not plain)
        ctx = PhaseContext(ScriptedGenerator(tokenizer, teacher), tokenizer, env, cfg)
        memory = ReflectionMemory()
        tasks = env.train_tasks(tasks_per_run)
        for i in range(0, len(tasks), batch_tasks):
            u = rng.random()
            if cfg.use_memory and i and u < sum(set_memory):
                one, ice, _ = set_memory
                remembered = (
                    [rng.choice(letters[:2])]
                    if u < one
                    else [letters[2]]
                    if u < one + ice
                    else rng.sample(letters[:2], 2)
                )
                memory.maybe_store(rulebook(remembered), 1.0, 1.0)
            out = erl_step(ctx, tasks[i : i + batch_tasks], memory if cfg.use_memory else None)
            examples += [
                CorpusExample(a.role, a.prompt_ids, a.completion_ids, a.completion_mask, r)
                for a in out.first_attempts + out.second_attempts
            ]
            examples += [
                CorpusExample("reflection", x.prompt_ids, x.completion_ids, [1] * len(x.completion_ids), r)
                for x in out.reflections
            ]
    return examples
