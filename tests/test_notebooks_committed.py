"""Guard: every committed notebook holds its outputs and execution counts, so nbval compares something.

A stripped notebook passes ``pytest --nbval`` without comparing anything; a cell with outputs but no
execution count fails nbval with "Unrun reference cell has outputs". Both are caught here first.
"""

import json
import re
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
    errors = [
        o
        for c in code_cells
        for o in c.get("outputs", [])
        if o.get("output_type") == "error" and "NBVAL_RAISES_EXCEPTION" not in "".join(c["source"])
    ]
    assert not errors, f"{path.name} stores error output(s)"


# --- nbval markers -------------------------------------------------------------------------------------------------
# nbval 0.11 (nbval/plugin.py, find_comment_markers) reads a marker from a line that, stripped, starts with "#" and,
# with every leading "#" and the surrounding blanks removed, *equals* a key of its `comment_markers`. A marker with
# an explanation on the same line, or at the end of a code line, is silently ignored: the cell is then compared
# (or run) as if it had no marker.
NBVAL_MARKERS = {"NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP", "NBVAL_RAISES_EXCEPTION", "NBVAL_CHECK_OUTPUT"}


def unrecognised_markers(source: str) -> list[str]:
    """Lines with a comment that looks like a marker (``NBVAL``, or ``nbval_`` in any case) but is not one nbval
    recognises. The plain word "nbval" in prose is not a marker."""
    bad = []
    for line in source.splitlines():
        if "#" not in line or not ("NBVAL" in line or "nbval_" in line.lower()):
            continue
        stripped = line.strip()
        if not (stripped.startswith("#") and stripped.lstrip("#").strip() in NBVAL_MARKERS):
            bad.append(line)
    return bad


def test_our_marker_set_is_nbvals():
    from nbval.plugin import comment_markers

    assert {k for k in comment_markers if "NBVAL" in k} == NBVAL_MARKERS, (
        "nbval's markers changed: update NBVAL_MARKERS and unrecognised_markers to its new rule"
    )


@pytest.mark.parametrize(
    "line",
    [
        "# NBVAL_IGNORE_OUTPUT",
        "#NBVAL_SKIP",
        "## NBVAL_RAISES_EXCEPTION",
        "   # NBVAL_CHECK_OUTPUT  ",
        "# NBVAL_IGNORE_OUTPUT  (what it shows depends on your runs)",
        "x = f()  # NBVAL_SKIP",
        "# nbval_skip",
        "# NBVAL_IGNORE_OUTPUTS",
        "# NBVAL_IGNORE_OUTPUT: timings",
        "# NBVAL IGNORE OUTPUT",
    ],
)
def test_the_marker_rule_agrees_with_nbval(line):
    from nbval.plugin import find_comment_markers

    recognised_by_nbval = bool(list(find_comment_markers(line)))
    assert (not unrecognised_markers(line)) == recognised_by_nbval, line


def test_prose_that_names_nbval_is_not_a_marker():
    assert not unrecognised_markers("# the output depends on your runs, so nbval does not compare it")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_nbval_marker_is_one_nbval_recognises(path):
    notebook = json.loads(path.read_text())
    bad = [
        (index, line.strip())
        for index, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "code"
        for line in unrecognised_markers("".join(cell["source"]))
    ]
    assert not bad, (
        f"{path.name}: nbval ignores these marker comments (cell index, line): {bad}. A marker must be "
        "the whole comment line, e.g. `# NBVAL_IGNORE_OUTPUT`; put the explanation on the next line"
    )


# --- the prose of the task chapters and the chapters after them ----------------------------------------------------
# A markdown cell says one thing: at most 200 words (aim for 150). Plumbing (the runs folder's environment variable,
# nbval's markers, the tracker's issue numbers) belongs in docs/, not in what a learner reads.
TASK_CHAPTERS = [p for p in NOTEBOOKS if p.name[:2] in ("06", "07", "08", "09", "10", "11", "12")]
PLUMBING = re.compile(r"B2T_RUNS|NBVAL|\bissues? #?\d+", re.IGNORECASE)


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def test_the_prose_rules_catch_what_they_are_meant_to():
    assert PLUMBING.search("runs go to $B2T_RUNS") and PLUMBING.search(f"as issue {42} asked")
    assert PLUMBING.search("the # NBVAL_IGNORE_OUTPUT marker") and not PLUMBING.search("the 18L runs, Table 1")


@pytest.mark.parametrize("path", TASK_CHAPTERS, ids=lambda p: p.name)
def test_task_chapter_markdown_is_short_and_free_of_plumbing(path):
    assert len(TASK_CHAPTERS) == 7
    long = {i: len(text.split()) for i, text in markdown_cells(path) if len(text.split()) > 200}
    assert not long, f"{path.name}: markdown cells over 200 words (cell: words): {long}"
    plumbing = {i: PLUMBING.findall(text) for i, text in markdown_cells(path) if PLUMBING.search(text)}
    assert not plumbing, f"{path.name}: plumbing in the prose (cell: what): {plumbing}; move it to docs/"


# --- the course map ------------------------------------------------------------------------------------------------
def test_the_course_maps_stored_table_lists_the_chapters_on_disk():
    """Chapter 00 builds its table of chapters from the other notebooks' headings and summaries when it runs, and
    nbval compares the stored table. A chapter retitled without re-executing chapter 00 fails only there, after the
    whole notebook pass; this finds it in a second (fix: re-execute 00, `make notebooks` or nbconvert)."""
    course_map = next(p for p in NOTEBOOKS if p.name.startswith("00_"))
    cells = json.loads(course_map.read_text(encoding="utf-8"))["cells"]
    table_cell = next(c for c in cells if c["cell_type"] == "code" and "def chapter_row" in "".join(c["source"]))
    markdown = next(o for o in table_cell["outputs"] if "text/markdown" in o.get("data", {}))
    stored = "".join(markdown["data"]["text/markdown"])
    source = "".join(table_cell["source"])
    namespace: dict = {}
    exec(source[: source.index("\n\nchapters = ")], namespace)  # the cell's chapter_row, as it runs in notebooks/
    for path in NOTEBOOKS:
        number, title, summary = namespace["chapter_row"](path)
        row = f"| {number} | **{title}** | {summary} |"
        assert row in stored, f"{course_map.name}'s stored table is out of date for {path.name}: re-execute chapter 00"
    stored_rows = [line for line in stored.splitlines() if re.match(r"\| \d\d \|", line)]
    assert len(stored_rows) == len(NOTEBOOKS), f"{course_map.name}'s stored table lists other chapters than notebooks/"
