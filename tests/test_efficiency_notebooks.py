"""Notebooks 11+ (efficiency, budget-forced evaluation, mismatch), headless in the fast profile.

Same scheme as tests/test_notebooks.py (which executes 00-10): py:percent pairs stored without
outputs, every cell run top to bottom, and each solution cell must print "correct".
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest

nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
OURS = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if 11 <= int(p.name[:2]) <= 13)


def test_the_efficiency_notebooks_exist():
    assert [p.name[:2] for p in OURS] == ["11", "12", "13"]


def _outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "data" in output:
            parts.append(str(output["data"].get("text/plain", "")))
    return "".join(parts)


@pytest.mark.slow
@pytest.mark.parametrize("path", OURS, ids=lambda p: p.stem)
def test_notebook_executes_headless_in_the_fast_profile(path, monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "fast")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2"))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=1800, kernel_name="python3", allow_errors=False,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    started = time.perf_counter()
    client.execute()
    print(f"{path.name}: {time.perf_counter() - started:.1f} s")
    solutions = [c for c in notebook.cells if "solution" in c.get("metadata", {}).get("tags", [])]
    assert solutions, f"{path.name} has no solution cell"
    for cell in solutions:
        text = _outputs_text(cell)
        assert "correct" in text.splitlines(), f"{path.name}: a solution cell did not print 'correct':\n{text}"
        assert "not yet" not in text, f"{path.name}: a solution checker failed:\n{text}"
