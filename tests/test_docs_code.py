"""Every ```python block in README.md and docs/*.md runs, on the embedded model, offline.

A block runs in its page's namespace, after the blocks above it on that page and after the page's
:data:`CONTEXT` (the names its prose assumes: a ``trainer``, an ``env``, a ``ctx``...), so a snippet that
passes the wrong thing fails here. A block that needs what CI does not have is marked in the page, on the line
just above it, as ``<!-- not run: <reason naming the GPU or the hub> -->``; the mark is checked, not trusted.
"""

import os
import re
from pathlib import Path

import pytest
from test_docs_links import PAGES, ROOT  # the pages the docs' tests read

NOT_RUN = re.compile(r"<!-- not run: (.+?) -->")

# The embedded set-up the snippets' free names come from: one training step of two demo tasks, so there are
# samples to export and a trainer to evaluate.
EMBEDDED = """
from erl_lite import ERLConfig, ERLTrainer
from erl_lite.teach import setup
model, tokenizer, env, args = setup("demo", 0, max_steps=1, num_tasks_per_step=2, eval_steps=0, output_dir=None,
                                    progress_bar=False)
trainer = ERLTrainer(model=model, args=args, env=env, processing_class=tokenizer)
"""
#: Per page, what runs before its first block.
CONTEXT = {
    "docs/DATA.md": EMBEDDED,
    "docs/RUNS.md": EMBEDDED,
    "docs/TRL.md": EMBEDDED
    + """
from peft import LoraConfig
from erl_lite.embedded import load_embedded
trainer.train()
model, tokenizer = load_embedded(peft="none")
""",
    "docs/TRAINING.md": EMBEDDED
    + """
from erl_lite.engine.generation import HFGenerator
from erl_lite.core.memory import ReflectionMemory
from erl_lite.core.phases import PhaseContext
ctx = PhaseContext(HFGenerator(model, tokenizer), tokenizer, env, args)
tasks, memory = env.train_tasks(4), ReflectionMemory()
""",
}


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, the reason it is not run or None) of each ```python block of ``page``."""
    lines, found, i = page.read_text(encoding="utf-8").splitlines(), [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            mark = NOT_RUN.search(lines[i - 1]) if i else None
            found.append((i + 1, "\n".join(lines[i + 1 : end]), mark.group(1) if mark else None))
            i = end
        i += 1
    return found


PAGES_WITH_CODE = [p for p in PAGES if blocks(p)]


def test_every_page_with_code_is_found_and_the_block_reader_reads_a_mark(tmp_path):
    assert {p.name for p in PAGES_WITH_CODE} >= {"README.md", "TRAINING.md"}
    page = tmp_path / "x.md"
    page.write_text("a\n<!-- not run: needs a GPU -->\n```python\nx = 1\n```\n```python\ny = 2\n```\n")
    assert blocks(page) == [(3, "x = 1", "needs a GPU"), (6, "y = 2", None)]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[str(p.relative_to(ROOT)) for p in PAGES_WITH_CODE])
def test_the_python_blocks_of_a_page_run(page, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # what a snippet writes (a results folder, a run) stays in tmp_path
    name = str(page.relative_to(ROOT))
    namespace: dict = {"__name__": "__docs__"}
    exec(compile(CONTEXT.get(name, ""), f"{name} (context)", "exec"), namespace)
    ran = 0
    for line, code, reason in blocks(page):
        if reason is not None:
            assert re.search(r"GPU|CUDA|hub", reason), f"{name}:{line}: a block is not run only for a GPU or the hub"
            continue
        try:
            exec(compile(code, f"{name}:{line}", "exec"), namespace)
        except Exception as err:
            raise AssertionError(f"{name}:{line}: the ```python block fails: {type(err).__name__}: {err}") from err
        ran += 1
    assert ran or name == "README.md", f"{name}: every block is marked not run"
    assert not os.path.exists(ROOT / "erl_lite_results"), "a snippet wrote into the repository"
