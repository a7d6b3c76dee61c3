"""Guard: every committed notebook holds its outputs and execution counts, so nbval compares something.

A stripped notebook passes ``pytest --nbval`` without comparing anything; a cell with outputs but no
execution count fails nbval with "Unrun reference cell has outputs". Both are caught here first.
"""
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_course_has_notebooks():
    assert NOTEBOOKS, "no notebooks found under notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_executed(path):
    notebook = json.loads(path.read_text())
    assert notebook["metadata"].get("kernelspec", {}).get("name") == "python3", "kernelspec must be python3"
    code_cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code_cells, f"{path.name} has no code cells"
    skipped = [c for c in code_cells if "NBVAL_SKIP" in "".join(c["source"])]
    run_cells = [c for c in code_cells if c not in skipped]
    unrun = [i for i, c in enumerate(run_cells) if c.get("execution_count") is None]
    assert not unrun, f"{path.name}: {len(unrun)} code cell(s) were never executed; run `make notebooks`"
    assert any(c.get("outputs") for c in run_cells), f"{path.name} is committed without outputs"
    with_outputs_unnumbered = [c for c in code_cells if c.get("outputs") and c.get("execution_count") is None]
    assert not with_outputs_unnumbered, f"{path.name}: outputs without execution counts (nbval fails them)"
    errors = [o for c in code_cells for o in c.get("outputs", []) if o.get("output_type") == "error"
              and "NBVAL_RAISES_EXCEPTION" not in "".join(c["source"])]
    assert not errors, f"{path.name} stores error output(s)"
