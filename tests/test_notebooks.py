"""The course as a learner runs it: every numbered notebook, headless, top to bottom.

COURSE_PROFILE=fast picks the small model and small budgets; no cell is skipped. Notebooks are
authored as jupytext py:percent files paired with .ipynb files stored without outputs; after
editing a .py run `.venv/bin/jupytext --sync notebooks/*.py` to refresh its .ipynb.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
COURSE = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if int(p.name[:2]) <= 10)
ALL = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT_S = 1800  # generous: a busy 2-core machine can be 3-4x slower than an idle one
SYNC = "run `.venv/bin/jupytext --sync notebooks/*.py` (and keep outputs out of the .ipynb)"


def test_the_course_has_notebooks_00_to_10_then_the_second_seed():
    assert [p.name[:2] for p in COURSE] == [f"{i:02d}" for i in range(11)]
    assert [p.name[:2] for p in ALL if p not in COURSE] == ["11", "12", "13", "14"]


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs_and_matches_its_py_pair(path):
    notebook = nbformat.read(path, as_version=4)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name} cell {index} has outputs; {SYNC}"
            assert cell.execution_count is None, f"{path.name} cell {index} has an execution count; {SYNC}"
    pair = path.with_suffix(".py")
    assert pair.exists(), f"{path.name} has no py:percent pair; {SYNC}"
    paired = jupytext.read(pair)
    ours = [(c.cell_type, c.source.strip()) for c in notebook.cells]
    theirs = [(c.cell_type, c.source.strip()) for c in paired.cells]
    assert ours == theirs, f"{path.name} and {pair.name} differ; {SYNC}"


@pytest.fixture(scope="module", autouse=True)
def fresh_course_state(tmp_path_factory):
    """Notebooks hand results on (05's rollout, 09's checkpoint): each test run starts with an
    empty runs folder of its own, so neither an earlier run nor the learner's state is read."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COURSE_RUNS", str(tmp_path_factory.mktemp("runs")))
        yield


def _execute(path: Path) -> tuple[nbformat.NotebookNode, float]:
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    started = time.perf_counter()
    client.execute()
    return notebook, time.perf_counter() - started


def _text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "data" in output:
            parts.append(str(output["data"].get("text/plain", "")))
    return "".join(parts)


@pytest.mark.slow
@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_notebook_executes_headless_in_the_fast_profile(path, monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "fast")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2"))
    notebook, seconds = _execute(path)
    print(f"{path.name}: {seconds:.1f} s")
    solutions = [cell for cell in notebook.cells if "solution" in cell.get("metadata", {}).get("tags", [])]
    assert solutions, f"{path.name} has no solution cell: every notebook ends with checked exercises"
    for cell in solutions:
        text = _text(cell)
        assert "correct" in text.splitlines(), f"{path.name}: a solution cell did not print 'correct':\n{cell.source}\n{text}"
        assert "not yet" not in text, f"{path.name}: a solution cell's checker failed:\n{cell.source}\n{text}"
