"""The assignments tier: assignments/*.ipynb built with ``otter assign`` and graded as an instructor grades them.

Every master is built into a student notebook (public tests) and an autograder (hidden tests too); then graded, with
``otter run`` (its results.json read: it exits 0 on failing tests) or ``otter.api.grade_submission``: the solutions
(full marks), the untouched student notebook (zero, no crash), and one submission per common mistake the exercises'
checks know, which loses exactly its question's points and shows that check's hint in the public and the hidden
tests alike. The student notebooks and their tests carry no line of a solution.

Runs only when selected (``python -m pytest -q -m assignments tests/test_assignments.py``; ``.ci/run`` does so as
its own tier after installing the ``assignments`` extra) and skipped without otter-grader.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import shutil
import subprocess
from collections.abc import Callable

import pytest

from erl_lite.teach.exercises import GATE_MISTAKES

ROOT = pathlib.Path(__file__).resolve().parent.parent
MASTERS = {path.stem: path for path in sorted((ROOT / "assignments").glob("*.ipynb"))}


def _otter_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("otter") is None


pytestmark = [
    pytest.mark.assignments,
    pytest.mark.skipif(_otter_missing(), reason="otter-grader is not installed (pip install -e '.[assignments]')"),
]


@pytest.fixture(autouse=True)
def only_when_selected(request):
    """Only a run that names the marker (``-m assignments``) builds and grades: the tier takes minutes."""
    if "assignments" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the assignments tier: run with -m assignments (.ci/run does)")


def _gate(rule: str) -> str:
    return f"def gate(rewards, threshold):\n    return [{rule}]\n"


def _rate(rule: str) -> str:
    return f"def gate_rate(rewards, threshold):\n    return {rule}\n"


_STD = "math.sqrt(sum((r - m) ** 2 for r in g) / ({n}))"
_ADV = (
    "import math\n\ndef advantages(g):\n    if len(g) == 1:\n        return [{single}]\n    m = sum(g) / len(g)\n"
    "    return [{expr} for r in g]\n"
)
_GROUPED = (
    "import math\n\ndef reflection_advantages(r2, task_ids):\n    def adv(g):\n        if len(g) == 1:\n"
    "            return [{single}]\n        m = sum(g) / len(g)\n        return [{expr} for r in g]\n"
    "    groups = {{}}\n    for i, t in enumerate({keys}):\n        groups.setdefault(t, []).append(i)\n"
    "    out = [0.0] * len(r2)\n    for idx in groups.values():\n"
    "        for i, a in zip(idx, adv([r2[i] for i in idx])):\n            out[i] = a\n    return out\n"
)
_RIGHT = f"(r - m) / ({_STD.format(n='len(g) - 1')} + 1e-6)"
_MEMORY = "def memory_after(rulebooks, r2, threshold):\n    held = []\n{body}    return held\n"
_LOSS = (
    "def clipped_loss(ratio, advantage, epsilon_low, epsilon_high, dual_clip):\n"
    "    clipped = min(max(ratio, 1 - {low}), 1 + {high})\n    loss = {loss}\n"
    "    if advantage < 0 and dual_clip is not None{dual}:\n        loss = min(loss, -advantage * dual_clip)\n"
    "    return {sign}loss\n"
)
_WEIGHTS = "def internalization_weights(r2, mode):\n    return {rule}\n"
_PESSIMISTIC = "-min(ratio * advantage, clipped * advantage)"

#: Per question of each assignment: (a wrong submission of its function, the hint its check gives). The gate's
#: hints are the checks' own table (GATE_MISTAKES); the others are quoted from the checks' messages.
MISTAKES: dict[str, dict[str, list[tuple[str, str]]]] = {
    "01_gate_and_advantages": {
        "q1_gate": [
            (_gate(rule), next(hint for _, hint in GATE_MISTAKES if hint.startswith(start)))
            for rule, start in [
                ("i for i, r in enumerate(rewards) if r >= threshold", "you picked the successes"),
                ("i for i, r in enumerate(rewards) if r <= threshold", "the gate is strict"),
                ("i for i, r in enumerate(rewards) if r == 0", "partial credit is not success"),
                ("i + 1 for i, r in enumerate(rewards) if r < threshold", "positions start at 0"),
                ("i for i, r in enumerate(rewards) if r < 1.0", "τ is a parameter"),
            ]
        ],
        "q2_gate_rate": [
            (_rate("sum(r < threshold for r in rewards)"), "that is the number of gated attempts"),
            (_rate("sum(r >= threshold for r in rewards) / len(rewards)"), "that is the success rate"),
            (_rate("sum(r <= threshold for r in rewards) / len(rewards)"), "the gate is strict (r1 < τ)"),
            (_rate("sum(r == 0 for r in rewards) / len(rewards)"), "partial credit is not success"),
            (_rate("100 * sum(r < threshold for r in rewards) / len(rewards)"), "not a percentage"),
        ],
        "q3_advantages": [
            (_ADV.format(single="g[0]", expr=f"(r - m) / ({_STD.format(n='len(g)')} + 1e-6)"), "unbiased standard"),
            (_ADV.format(single="g[0]", expr="r - m"), "you subtracted the mean; now divide"),
            (_ADV.format(single="g[0]", expr=f"-{_RIGHT}"), "the sign is flipped"),
            (_ADV.format(single="0.0", expr=_RIGHT), "a group of one has no baseline"),
        ],
    },
    "02_reflection_and_memory": {
        "q1_reflection_advantages": [
            (_GROUPED.format(single="r2[0]", expr=_RIGHT, keys="[0] * len(r2)"), "you normalised over the whole batch"),
            (_GROUPED.format(single="0.0", expr=_RIGHT, keys="task_ids"), "a key that occurs once is a group of one"),
            (
                _GROUPED.format(single="g[0]", expr=f"(r - m) / ({_STD.format(n='len(g)')} + 1e-6)", keys="task_ids"),
                "inside each group use the unbiased standard deviation",
            ),
            (_GROUPED.format(single="g[0]", expr="r - m", keys="task_ids"), "you subtracted each group's mean"),
        ],
        "q2_memory": [
            (
                _MEMORY.format(body="    held = [b for b, r in zip(rulebooks, r2) if r >= threshold]\n"),
                "the paper's memory has one slot",
            ),
            (_MEMORY.format(body="    held = list(rulebooks[-1:])\n"), "a rulebook is stored only when its second"),
            (
                _MEMORY.format(body="    held = [b for b, r in zip(rulebooks, r2) if r >= threshold][:1]\n"),
                "the *last* successful rulebook wins",
            ),
            (
                _MEMORY.format(body="    held = [b for b, r in zip(rulebooks, r2) if r > threshold][-1:]\n"),
                "store one when r2 ≥ τ",
            ),
        ],
    },
    "03_the_update": {
        "q1_clipped_loss": [
            (
                _LOSS.format(low="epsilon_low", high="epsilon_high", loss=_PESSIMISTIC, dual=" and False", sign=""),
                "the dual clip caps the loss",
            ),
            (
                _LOSS.format(low="epsilon_low", high="epsilon_high", loss="-ratio * advantage", dual="", sign=""),
                "that is the unclipped surrogate",
            ),
            (
                _LOSS.format(low="epsilon_low", high="epsilon_high", loss=_PESSIMISTIC, dual="", sign="-"),
                "the sign: the loss is the *negative* objective",
            ),
            (
                _LOSS.format(low="epsilon_low", high="epsilon_high", loss="-clipped * advantage", dual="", sign=""),
                "clipping only ever removes an incentive",
            ),
            (
                _LOSS.format(low="epsilon_low", high="epsilon_low", loss=_PESSIMISTIC, dual="", sign=""),
                "clip-higher: the upper bound is 1 + ε_high",
            ),
            (
                _LOSS.format(low="epsilon_high", high="epsilon_high", loss=_PESSIMISTIC, dual="", sign=""),
                "the clip is asymmetric",
            ),
        ],
        "q2_internalization_weights": [
            (_WEIGHTS.format(rule="[1.0 if r > 0 else 0.0 for r in r2]"), "that is the 'nll' rule"),
            (_WEIGHTS.format(rule="[max(r, 0.0) for r in r2]"), "that is the 'raft' rule"),
            (
                _WEIGHTS.format(rule="list(r2) if mode == 'raft' else [1.0 if r > 0 else 0.0 for r in r2]"),
                "a failed second attempt is not pushed *down*",
            ),
            (
                "import statistics\n\ndef internalization_weights(r2, mode):\n    m, s = statistics.mean(r2), "
                "statistics.stdev(r2)\n    return [(r - m) / (s + 1e-6) for r in r2]\n",
                "internalization has no group baseline",
            ),
            (_WEIGHTS.format(rule="[1.0] * len(r2)"), "only successful second attempts are internalized"),
        ],
    },
}


#: The commands assignments/README.md gives an instructor, run here as written (from a folder that holds
#: ``assignments/``): build one assignment; grade one submission into a folder of results.
BUILD = "otter assign assignments/{name}.ipynb dist/assignments/{name}"
GRADE = "otter run -a dist/assignments/{name}/autograder/{name}-autograder_*.zip -o {results} {submission}"


def _shell(command: str, cwd: pathlib.Path) -> None:
    subprocess.run(["bash", "-c", command], check=True, cwd=cwd, capture_output=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Callable[[str], pathlib.Path]:
    """An assignment's output folder, built once by README's command in a fresh folder that holds a copy of
    assignments/ (otter assign writes relative to the master's real folder: a link would build into this checkout)."""
    here = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "assignments", here / "assignments")

    @functools.cache
    def build(name: str) -> pathlib.Path:
        _shell(BUILD.format(name=name), here)
        return here / "dist" / "assignments" / name

    return build


@pytest.fixture(autouse=True)
def this_checkout(monkeypatch):
    """The kernels that grade import this checkout's erl_lite (the checks), as the tests here do."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def _autograder_zip(out: pathlib.Path) -> pathlib.Path:
    (zipped,) = (out / "autograder").glob("*.zip")
    return zipped


def _otter_run(out: pathlib.Path, submission: pathlib.Path, results: pathlib.Path) -> dict[str, float]:
    """Each question's score by README's grading command; its exit status says nothing of them: read results.json."""
    results.mkdir()
    _shell(GRADE.format(name=out.name, results=results, submission=submission), out.parents[2])
    tests = json.loads((results / "results.json").read_text())["tests"]
    return {t["name"]: t["score"] for t in tests if "score" in t}


def _questions(master: pathlib.Path) -> dict[str, float]:
    """Each question's points, as its master states them (``name`` and ``points`` of its BEGIN QUESTION cell)."""
    cells = json.loads(master.read_text())["cells"]
    heads = ["".join(c["source"]) for c in cells if "".join(c["source"]).startswith("# BEGIN QUESTION")]
    return {re.search(r"name: (\S+)", h)[1]: float(re.search(r"points: (\S+)", h)[1]) for h in heads}


def test_every_topic_has_an_assignment_and_every_question_its_mistakes():
    assert set(MASTERS) == set(MISTAKES)
    for name, master in MASTERS.items():
        assert set(_questions(master)) == set(MISTAKES[name]), name
        stated = re.findall(r"_Points: (\d+)\._", master.read_text())  # each prompt tells the student its points
        assert [float(p) for p in stated] == list(_questions(master).values()), name


def test_the_instructors_page_gives_the_commands_run_here():
    page = (ROOT / "assignments" / "README.md").read_text()
    for name in MASTERS:
        assert BUILD.format(name=name) in page, name
    assert GRADE.format(name=min(MASTERS), results="grades/alice", submission="alice.ipynb") in page


@pytest.mark.parametrize("name", sorted(MASTERS))
def test_solutions_score_full_marks_and_the_untouched_student_notebook_zero(name, built, tmp_path):
    stated, out = _questions(MASTERS[name]), built(name)
    assert _otter_run(out, out / "autograder" / f"{name}.ipynb", tmp_path / "solved") == stated
    untouched = _otter_run(out, out / "student" / f"{name}.ipynb", tmp_path / "untouched")
    assert untouched == dict.fromkeys(stated, 0)


@pytest.mark.parametrize("name, question", [(n, q) for n in sorted(MISTAKES) for q in MISTAKES[n]])
def test_each_common_mistake_loses_its_questions_points_with_its_hint(name, question, built, tmp_path):
    """One submission per mistake: the solutions with this question's function replaced by the mistaken one."""
    from otter.api import grade_submission

    out, stated, mistakes = built(name), _questions(MASTERS[name]), MISTAKES[name][question]
    solved = json.loads((out / "autograder" / f"{name}.ipynb").read_text())
    function = re.search(r"def (\w+)\(", mistakes[0][0])[1]
    sources = ["".join(c["source"]) if c["cell_type"] == "code" else "" for c in solved["cells"]]
    (at,) = [i for i, text in enumerate(sources) if f"def {function}(" in text]
    for source, hint in mistakes:
        submission = json.loads(json.dumps(solved))
        submission["cells"][at]["source"] = source
        path = tmp_path / f"{name}.ipynb"
        path.write_text(json.dumps(submission))
        graded = grade_submission(str(path), str(_autograder_zip(out)), quiet=True)
        scores = {q: graded.get_result(q).score for q in stated}
        assert scores == dict(stated, **{question: 0}), f"{question}, the mistake:\n{source}"
        messages = [r.message for r in graded.get_result(question).test_case_results]
        assert len(messages) == 2 and all(hint in m for m in messages), (hint, messages)


@pytest.mark.parametrize("name", sorted(MASTERS))
def test_the_student_version_carries_no_solution(name, built):
    master = json.loads(MASTERS[name].read_text())
    solutions = [
        line.strip()
        for cell in master["cells"]
        for block in re.findall(r"# BEGIN SOLUTION\n(.*?)# END SOLUTION", "".join(cell["source"]), re.S)
        for line in block.splitlines()
        if line.strip()
    ]
    assert len(solutions) >= len(MISTAKES[name])
    student = built(name) / "student"
    handed_out = {p.name: _text(p) for p in sorted(student.rglob("*")) if p.is_file()}
    assert f"{name}.ipynb" in handed_out and len(handed_out) == 1 + len(MISTAKES[name])  # the notebook, its tests
    leaked = [line for line in solutions if any(line in text for text in handed_out.values())]
    assert not leaked, f"{name}: the student version holds solution lines {leaked}"
    # the control: the autograder's notebook holds them all
    autograder = _text(built(name) / "autograder" / f"{name}.ipynb")
    assert all(line in autograder for line in solutions)


def _text(path: pathlib.Path) -> str:
    """A file's text; a notebook's as its cells' sources and its metadata, as a reader sees them (not JSON-escaped)."""
    if path.suffix != ".ipynb":
        return path.read_text()
    nb = json.loads(path.read_text())
    return "\n".join(["".join(c["source"]) for c in nb["cells"]] + [json.dumps(nb["metadata"], ensure_ascii=False)])


@pytest.mark.parametrize("name", sorted(MASTERS))
def test_a_student_runs_the_public_checks_in_a_kernel_started_in_the_notebooks_folder(name, built, tmp_path):
    """As JupyterLab runs a handed-out notebook (and Colab from /content): its kernel starts in the folder that holds
    the notebook and ``tests/``; the untouched notebook runs to the end and every check shows a hint, a solved one
    passes every check."""
    import nbformat
    from nbclient import NotebookClient

    student = tmp_path / "student"
    shutil.copytree(built(name) / "student", student)
    outputs = {}
    for kind, source in [
        ("untouched", student / f"{name}.ipynb"),
        ("solved", built(name) / "autograder" / f"{name}.ipynb"),
    ]:
        nb = nbformat.read(source, as_version=4)
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(student)}}).execute()
        checks = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("grader.check(")]
        assert len(checks) == len(_questions(MASTERS[name]))
        outputs[kind] = ["".join(o.get("data", {}).get("text/plain", "") for o in c.outputs) for c in checks]
    assert all("Hint:" in text and "passed!" not in text for text in outputs["untouched"]), outputs["untouched"]
    assert all(text.endswith("All test cases passed!") for text in outputs["solved"]), outputs["solved"]
