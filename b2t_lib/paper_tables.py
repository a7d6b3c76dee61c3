"""The paper's result tables as data (Tables 1-5, 8, 9), so that notebooks and reports print the
paper's numbers beside ours without retyping them.

A table is sections (``"6L-6L"``, ``"18L-18L"``, ...) of rows ``method -> values``; ``None``
stands for the paper's "Training failed". Method keys are the variant names of
:mod:`b2t_lib.variants` (``post_ln``, ``pre_ln``, ``b2t``, ...).

Our rows come from the runs' ``result.json`` records, for every task (the metric keys of each
task's evaluation):

=====================  =========  ==============================================  =============
task                   tables     metrics read                                    sections
=====================  =========  ==============================================  =============
``mt``                 1, 2, 8    ``bleu`` {test set: BLEU}, ``bleu_avg``          ``6L-6L``
``summarization``      3, 9       ``rouge1``, ``rouge2``, ``rougeL``              ``6L-6L``
``lm``                 4          ``valid_ppl``, ``test_ppl``                     ``6L``
``asr``                5          ``wer`` {dev_clean, dev_other, test_clean,      ``12L-6L``
                                  test_other: WER}
=====================  =========  ==============================================  =============

* :func:`row_from_result` builds one row, :func:`collect_results` a whole ``{section: {variant:
  row}}`` from run folders (``collect_mt_results`` is the MT case), :func:`result_files` the
  ``result.json`` files of the ``table`` command's arguments (folders, files, globs);
* nothing is passed over silently: an argument that yields no ``result.json``, a file that is not
  a run record, a record without metrics and a metric that is not a number are each warned about
  in one line naming the file (and field); the table is printed all the same;
* :func:`render_table` lays out the paper's table with our rows below the paper's. A run that
  stalled or diverged (:mod:`b2t_lib.train.failure`) prints as the paper prints it, "Training
  failed", with a footnote marker; the footnotes under the table say which kind of failure and its
  numbers.
"""

from __future__ import annotations

import glob
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import decode_error
from .variants import VARIANTS

NEWSTEST = ["2010", "2011", "2012", "2013", "2014", "2015", "2016", "Average"]


@dataclass(frozen=True)
class PaperTable:
    number: int
    title: str
    columns: list[str]
    sections: dict[str, dict[str, list[float] | None]]
    higher_is_better: bool = True

    def value(self, section: str, method: str, column: str) -> float | None:
        row = self.sections[section][method]
        return None if row is None else row[self.columns.index(column)]


_T1 = PaperTable(
    1,
    "BLEU scores of each method on WMT newstest2010-2016 and their averages",
    NEWSTEST,
    {
        "6L-6L": {
            "post_ln": [24.27, 22.06, 22.43, 26.11, 27.13, 29.70, 34.40, 26.59],
            "pre_ln": [24.03, 21.77, 22.08, 25.63, 26.27, 29.07, 33.84, 26.10],
            "dlcl": [23.94, 22.00, 22.24, 26.11, 27.37, 29.71, 34.26, 26.52],
            "admin": [24.32, 21.79, 22.17, 26.26, 27.14, 29.61, 34.12, 26.49],
            "tfixup": [24.09, 21.98, 22.04, 25.96, 26.92, 29.45, 34.56, 26.43],
            "realformer": [24.18, 22.02, 22.17, 26.02, 26.98, 29.36, 34.15, 26.41],
            "deepnet": [24.08, 21.76, 22.09, 25.90, 26.85, 29.62, 34.39, 26.38],
            "b2t": [24.12, 21.93, 22.29, 26.31, 26.84, 29.48, 34.73, 26.53],
        },
        "18L-18L": {
            "post_ln": None,
            "pre_ln": [24.07, 21.98, 22.40, 26.28, 27.36, 29.74, 34.16, 26.57],
            "dlcl": [24.20, 22.51, 22.83, 26.59, 27.97, 30.24, 33.98, 26.90],
            "admin": [24.56, 22.17, 22.62, 26.48, 27.99, 30.35, 33.88, 26.86],
            "tfixup": [24.45, 22.29, 22.76, 26.57, 27.71, 30.13, 34.69, 26.94],
            "realformer": [24.32, 22.42, 22.68, 26.59, 28.58, 30.36, 33.71, 26.95],
            "deepnet": [24.70, 22.40, 22.92, 26.85, 28.21, 30.60, 34.25, 27.13],
            "b2t": [24.62, 22.51, 22.86, 26.74, 28.48, 30.99, 34.93, 27.30],
        },
    },
)

_T2 = PaperTable(
    2,
    "BLEU scores on WMT newstest2010-2016 in the 100L-100L configuration",
    NEWSTEST,
    {
        "100L-100L": {
            "post_ln": None,
            "pre_ln": [24.81, 22.67, 23.15, 26.98, 28.42, 30.50, 34.53, 27.29],
            "b2t": [25.26, 23.27, 23.72, 27.50, 29.33, 31.57, 35.37, 28.00],
        },
    },
)

_T3 = PaperTable(
    3,
    "F1 ROUGE-1, 2 and L on headline generation (Rush et al. 2015)",
    ["R-1", "R-2", "R-L"],
    {
        "6L-6L": {
            "post_ln": [38.57, 19.37, 35.79],
            "pre_ln": [38.27, 19.29, 35.39],
            "dlcl": [38.13, 18.49, 35.00],
            "admin": [37.96, 18.93, 35.05],
            "tfixup": [38.11, 19.13, 35.32],
            "realformer": [38.30, 19.32, 35.46],
            "deepnet": [38.27, 18.89, 35.34],
            "b2t": [38.43, 19.37, 35.72],
        },
        "18L-18L": {
            "post_ln": None,
            "pre_ln": [38.97, 19.94, 35.99],
            "dlcl": [38.25, 19.44, 35.57],
            "admin": [39.10, 20.08, 36.30],
            "tfixup": [39.15, 19.97, 36.34],
            "realformer": [39.22, 20.12, 36.49],
            "deepnet": [39.27, 19.97, 36.41],
            "b2t": [39.61, 20.28, 36.66],
        },
    },
)

_T4 = PaperTable(
    4,
    "Perplexities on WikiText-103",
    ["Valid", "Test"],
    {
        "6L": {"post_ln": [20.24, 21.22], "pre_ln": [20.98, 21.93], "b2t": [20.50, 21.47]},
        "16L": {"post_ln": None, "pre_ln": [18.53, 19.24], "b2t": [18.38, 19.20]},
    },
    higher_is_better=False,
)

_T5 = PaperTable(
    5,
    "Word error rates on LibriSpeech",
    ["Dev clean", "Dev other", "Test clean", "Test other"],
    {
        "6L-6L": {
            "post_ln": [3.78, 8.76, 4.19, 8.74],
            "pre_ln": [3.89, 9.69, 4.22, 9.65],
            "b2t": [3.69, 8.97, 3.86, 8.94],
        },
        "12L-6L": {"post_ln": None, "pre_ln": [3.21, 7.91, 3.49, 8.22], "b2t": [3.26, 7.74, 3.48, 7.68]},
    },
    higher_is_better=False,
)

# Note: the paper's Table 8 gives B2T 18L-18L as 27.33 on average, Table 1 as 27.30; both kept as printed.
_T8 = PaperTable(
    8,
    "BLEU of B2T with and without LayerNorm on WMT newstest2010-2016",
    NEWSTEST,
    {
        "6L-6L": {
            "b2t": [24.12, 21.93, 22.29, 26.31, 26.84, 29.48, 34.73, 26.53],
            "b2t_no_ln": [24.17, 22.07, 22.24, 25.83, 26.96, 29.70, 34.42, 26.48],
        },
        "18L-18L": {
            "b2t": [24.75, 22.88, 23.09, 27.12, 28.82, 30.99, 33.64, 27.33],
            "b2t_no_ln": [24.47, 22.37, 22.58, 27.04, 28.34, 30.49, 34.38, 27.10],
        },
    },
)

_T9 = PaperTable(
    9,
    "ROUGE of B2T with and without LayerNorm on headline generation",
    ["R-1", "R-2", "R-L"],
    {
        "6L-6L": {"b2t": [38.43, 19.37, 35.72], "b2t_no_ln": [38.63, 19.75, 35.77]},
        "18L-18L": {"b2t": [39.61, 20.28, 36.66], "b2t_no_ln": [39.29, 20.01, 36.48]},
    },
)

# The authors' trained B2T 18L-18L model, SacreBLEU on newstest2010-2016 and the average, as the official repository's
# README (takase/b2t_connection) reports it: the revision of 2023-05-18 trains with dropout 0.5, clip-norm 0.1, word
# dropout 0.1 and the N^-1/2 weight rescaling (the "official18" recipe); the June-2022 revision's model
# (b2t_layer18_ave10.pt) scores exactly the paper's Table 1 row.
AUTHORS_README_18L: dict[str, list[float]] = {
    "README 2023-05, B2T 18L-18L": [25.27, 22.67, 23.49, 27.25, 28.25, 30.60, 35.09, 27.52],
}

PAPER_TABLES: dict[int, PaperTable] = {t.number: t for t in (_T1, _T2, _T3, _T4, _T5, _T8, _T9)}

# Table 7 (and A.2): GPUs and hours for one model in the paper (NVIDIA P100; 100L-100L on V100).
PAPER_COMPUTE = {
    ("mt", "6L-6L"): (128, 5),
    ("mt", "18L-18L"): (128, 13),
    ("mt", "100L-100L"): (24, 120),
    ("summarization", "6L-6L"): (64, 4),
    ("summarization", "18L-18L"): (144, 17),
    ("lm", "6L"): (128, 4),
    ("lm", "16L"): (192, 7),
    ("asr", "6L-6L"): (32, 22),
    ("asr", "12L-6L"): (32, 34),
}


def method_label(method: str) -> str:
    """A table row's label: the variant's one label (:attr:`b2t_lib.variants.Variant.title`)."""
    variant = VARIANTS.get(method)
    return variant.title if variant is not None else method


def paper_table(number: int) -> PaperTable:
    if number not in PAPER_TABLES:
        raise KeyError(f"the paper has no result table {number} here; tables: {sorted(PAPER_TABLES)}")
    return PAPER_TABLES[number]


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, (int, float)) and math.isfinite(value) else str(value)


# ---------------------------------------------------------------------- our rows, from result.json
TABLE_TASKS = {1: "mt", 2: "mt", 8: "mt", 3: "summarization", 9: "summarization", 4: "lm", 5: "asr"}
ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")  # Tables 3 and 9, R-L
LM_KEYS = ("valid_ppl", "test_ppl")  # Table 4: Valid, Test
ASR_SPLITS = ("dev_clean", "dev_other", "test_clean", "test_other")  # Table 5's columns, in order


@dataclass(frozen=True)
class FailedRun:
    """Our row of a run that failed to train: printed "Training failed", with ``note`` as its footnote.

    ``kind`` is ``"stalled"`` or ``"diverged"`` (None when unknown, e.g. a hand-written row).
    """

    kind: str | None = None
    note: str | None = None


def _is_failed(row) -> bool:
    return isinstance(row, FailedRun) or row == "failed"


def section_of(result: dict) -> str:
    """The table section of a run: ``"18L-18L"`` (encoder-decoder tasks), ``"16L"`` (the LM)."""
    cfg = _config(result)
    if _task_of(result) == "lm" or not cfg.get("encoder_layers"):
        return f"{cfg.get('decoder_layers')}L"
    return f"{cfg.get('encoder_layers')}L-{cfg.get('decoder_layers')}L"


def _config(result: dict) -> dict:
    config = result.get("config")
    return config if isinstance(config, dict) else {}


def _named_task(result: dict) -> str | None:
    """The task a record names (None for a record that names none, read as MT)."""
    return result.get("task") or _config(result).get("task")


def _task_of(result: dict) -> str:
    return _named_task(result) or "mt"


def row_from_result(result: dict, task: str | None = None) -> list | dict | FailedRun:
    """Our row of one ``result.json`` record in its task's paper table (``task`` defaults to the
    record's), or a :class:`FailedRun` for a run that stalled or diverged.

    * MT (Tables 1, 2, 8): test sets named ``newstestYYYY`` fill their year's column and
      ``bleu_avg`` the Average; a single unnamed test set (the synthetic task) fills only the Average.
    * Summarization (3, 9): ``rouge1``, ``rouge2``, ``rougeL``.  LM (4): ``valid_ppl``, ``test_ppl``.
    * ASR (5): a dict ``{column: WER}``: LibriSpeech's four splits fill Table 5's columns, any other
      split (the synthetic corpus' ``test``) becomes a column of its own.
    Missing metrics (a run not evaluated yet) are None, printed "-".
    """
    from .train.failure import failure_note, is_failed

    if is_failed(result.get("status")):
        return FailedRun(result["status"], failure_note(result))
    task = task or _task_of(result)
    metrics = result.get("metrics", {})
    if task == "mt":
        row: list = [None] * len(NEWSTEST)
        for split, score in (metrics.get("bleu") or {}).items():
            year = next((y for y in NEWSTEST[:-1] if y in split), None)
            if year is not None:
                row[NEWSTEST.index(year)] = score
        row[-1] = metrics.get("bleu_avg")
        return row
    if task == "summarization":
        return [metrics.get(k) for k in ROUGE_KEYS]
    if task == "lm":
        return [metrics.get(k) for k in LM_KEYS]
    if task == "asr":
        columns = dict(zip(ASR_SPLITS, paper_table(5).columns))
        wer = metrics.get("wer") or {}
        return {columns.get(split, split): value for split, value in wer.items()}
    raise ValueError(f"no paper table for task {task!r}; tasks: {sorted(set(TABLE_TASKS.values()))}")


Warn = Callable[[str], None]  # receives one warning line (without the "warning: " prefix)
_RETRAIN = "remove it or train the run again"


def _log_warning(text: str) -> None:
    """The default of ``warn``: the library's logger, shown where logging is configured (``python -m b2t_lib``
    passes its own ``warn``, which prints to stderr)."""
    logging.getLogger(__name__).warning("warning: %s", text)


def _warning(what: str, where: str | Path, todo: str) -> str:
    """A warning line in the error style: ``what (where): todo``."""
    return f"{what} ({where}): {todo}"


def _result_file(path: Path) -> Path | None:
    """The record of ``path``: a run folder's ``result.json``, or ``path`` itself when it is a ``.json`` file."""
    if path.is_dir():
        path = path / "result.json"
    return path if path.is_file() and path.suffix == ".json" else None


def result_files(patterns, warn: Warn | None = None) -> list[Path]:
    """The ``result.json`` files that ``patterns`` name: run folders, ``.json`` files or globs of them.

    Files a glob matches that are not ``.json`` (``runs/*`` also matches logs) are passed over. Everything
    else that yields no record is warned about, so a table without some of our rows always says why: a
    pattern that matches nothing (a typo), a folder without ``result.json`` (a run not finished yet, or not
    a run folder), a file named on its own that is not ``.json``.
    """
    warn = warn or _log_warning
    found: list[Path] = []
    for pattern in map(str, patterns):
        is_glob = glob.escape(pattern) != pattern
        matches = (glob.glob(pattern) or [pattern]) if is_glob else [pattern]  # or a name holding [ ] * ?
        if not (matches and Path(matches[0]).exists()):
            warn(_warning("nothing matches this path", pattern, "check it (a run folder, its result.json, a glob)"))
            continue
        for match in map(Path, matches):
            file = _result_file(match)
            if file is not None:
                found.append(file)
            elif match.is_dir():
                warn(_warning("no result.json here", match, "the run has not finished, or this is not a run folder"))
            elif not is_glob:
                warn(_warning("not a result.json file", match, "name a run folder or its result.json"))
    return found


def _read_records(paths, warn: Warn) -> list[tuple[Path, dict]]:
    """``(file, record)`` of every readable run record in ``paths`` (see :func:`read_results`)."""
    found = []
    for path in paths:
        path = _result_file(Path(path))
        if path is None:
            continue
        data = path.read_bytes()
        try:
            record = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as err:
            error = decode_error(path, data, err)
            warn(_warning(f"not a run record: {error.what}; skipped", error.where, _RETRAIN))
            continue
        except json.JSONDecodeError as err:
            warn(_warning(f"not a run record: not JSON ({err.msg}); skipped", f"{path}:{err.lineno}", _RETRAIN))
            continue
        if not isinstance(record, dict):
            warn(_warning(f"not a run record: a JSON {type(record).__name__}; skipped", path, _RETRAIN))
            continue
        found.append((path, record))
    return found


def read_results(paths, warn: Warn | None = None) -> list[dict]:
    """The ``result.json`` records of ``paths``: run folders (their ``result.json``) or ``.json`` files.
    Missing ones and other files (a glob such as ``runs/*`` also matches logs) are skipped; a file that is
    not JSON, or JSON but not a record, is skipped with a warning naming it (``warn``, default: logged)."""
    return [record for _, record in _read_records(paths, warn or _log_warning)]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numeric_metrics(path: Path, task: str, metrics: dict, warn: Warn) -> dict:
    """``metrics`` with every value the task's table reads that is not a number left out (its cell stays
    empty), each one warned about by file and field."""
    keys = {"mt": ("bleu", "bleu_avg"), "summarization": ROUGE_KEYS, "lm": LM_KEYS, "asr": ("wer",)}.get(task, ())
    fields = {}  # field name -> value; the per-test-set scores of BLEU and WER as "bleu.<test set>"
    for key in keys:
        value = metrics.get(key)
        if key in ("bleu", "wer") and isinstance(value, dict):
            fields.update({f"{key}.{split}": v for split, v in value.items()})
        elif value is not None:
            fields[key] = value
    clean = {key: (dict(value) if isinstance(value, dict) else value) for key, value in metrics.items()}
    for field, value in fields.items():
        if _is_number(value):
            continue
        todo = f"evaluate the run again (`python -m b2t_lib evaluate --save-dir {path.parent}`)"
        warn(_warning(f"metric {field} is {value!r}, not a number; its cell is left empty", path, todo))
        key, _, split = field.partition(".")
        if split:
            del clean[key][split]
        else:
            del clean[key]
    return clean


def _checked_row(path: Path, result: dict, warn: Warn):
    """Our row of the record ``result`` read from ``path``, or None (warned about) when it cannot be one:
    no metrics for a run that did not fail, or no variant."""
    from .train.failure import is_failed

    failed = is_failed(result.get("status"))
    metrics = result.get("metrics")
    if not failed and (not isinstance(metrics, dict) or not metrics):
        todo = f"evaluate the run (`python -m b2t_lib evaluate --save-dir {path.parent}`) or train it to the end"
        warn(_warning("a run record without metrics; skipped", path, todo))
        return None
    if not isinstance(result.get("variant", _config(result).get("variant")), str):
        warn(_warning("a run record that names no variant; skipped", path, _RETRAIN))
        return None
    if failed:
        return row_from_result(result)
    task = _task_of(result)
    return row_from_result({**result, "metrics": _numeric_metrics(path, task, metrics, warn)}, task)


def collect_results(
    paths, table: int | None = None, task: str | None = None, warn: Warn | None = None
) -> dict[str, dict[str, object]]:
    """``{section: {variant: row}}`` of the runs in ``paths`` (folders or ``result.json`` files; missing
    ones are skipped) that belong to ``task``, or to the task of paper ``table`` (all runs if neither).
    A record that cannot be a row (no metrics, no variant, not a record) is skipped and a metric that is
    not a number left empty, each with a warning naming the file (``warn``, default: logged)."""
    warn = warn or _log_warning
    if table is not None:
        paper_table(table)  # an unknown table number is a KeyError naming the known ones
        task = TABLE_TASKS[table]
    ours: dict[str, dict[str, object]] = {}
    for path, result in _read_records(paths, warn):
        if task is not None and _named_task(result) not in (None, task):
            continue  # another task's run
        row = _checked_row(path, result, warn)
        if row is None or (task is not None and _task_of(result) != task):
            continue
        variant = result.get("variant", _config(result).get("variant"))
        ours.setdefault(section_of(result), {})[variant] = row
    return ours


def logs_by_section(paths) -> tuple[dict[str, dict[str, list[dict]]], dict[str, dict[str, str]]]:
    """The training logs of the runs in ``paths`` (run folders), laid out as the tables are: ``logs[section][variant]``
    (a run's ``log.jsonl`` entries) and ``status[section][variant]``, sections by depth and variants in the
    registry's order, for :func:`b2t_lib.plots.training.plot_run_curves`. Folders without a record are skipped, as
    :func:`read_results` skips them."""
    from .train.records import read_log

    found = [
        (section_of(record), record.get("variant", _config(record).get("variant")), file.parent, record)
        for file, record in _read_records(paths, _log_warning)  # an unreadable record is warned about, skipped
    ]
    order = list(VARIANTS)
    found.sort(key=lambda f: (int(f[0].split("L")[0]), order.index(f[1]) if f[1] in order else len(order)))
    logs: dict[str, dict[str, list[dict]]] = {}
    status: dict[str, dict[str, str]] = {}
    for section, variant, path, record in found:
        logs.setdefault(section, {})[variant] = read_log(path)
        status.setdefault(section, {})[variant] = record.get("status")
    return logs, status


def collect_mt_results(paths) -> dict[str, dict[str, list | FailedRun]]:
    """``{section: {variant: row}}`` of the MT runs in ``paths`` (see :func:`collect_results`)."""
    return collect_results(paths, task="mt")


# ---------------------------------------------------------------------- the layout
def _cells(row, columns: list[str], width: int) -> str:
    """A row's value cells: a list in the table's columns, or a dict ``{column: value}``."""
    values = [row.get(c) for c in columns] if isinstance(row, dict) else list(row)
    return "".join(f"{_fmt(v):>{width}}" for v in values)


def render_table(number: int, ours: dict[str, dict[str, object]] | None = None, ours_label: str = "ours") -> str:
    """Plain-text layout of paper table ``number``; ``ours[section][method]`` adds our row below
    the paper's: a list of values in the table's columns, a dict ``{column: value}`` (a column the
    paper does not have is added at the right), a :class:`FailedRun` or ``"failed"`` ("Training
    failed"), or None for not run. Sections or methods only in ``ours`` are appended. A failed run
    with a note gets a footnote marker (``*``, ``**``, ...) and its footnote under the table."""
    table = paper_table(number)
    ours = ours or {}
    columns = list(table.columns)
    for rows in ours.values():
        for row in rows.values():
            if isinstance(row, dict):
                columns += [c for c in row if c not in columns]
    width = max(8, max(len(c) for c in columns) + 1)
    head = f"{'Method':<28}" + "".join(f"{c:>{width}}" for c in columns)
    lines = [f"Table {table.number}: {table.title}", head, "-" * len(head)]
    notes: dict[str, str] = {}  # footnote text -> its marker
    for section in list(table.sections) + [s for s in ours if s not in table.sections]:
        lines.append(f"Enc-Dec: {section}" if "-" in section else f"Dec: {section}")
        paper_rows = table.sections.get(section, {})
        our_rows = ours.get(section, {})
        for method in list(paper_rows) + [m for m in our_rows if m not in paper_rows]:
            label = method_label(method)
            if method in paper_rows:
                row = paper_rows[method]
                cells = "  Training failed" if row is None else _cells(row, columns, width)
                lines.append(f"  {label + ' (paper)':<26}{cells}")
            if method in our_rows and our_rows[method] is not None:
                row = our_rows[method]
                if _is_failed(row):
                    note = row.note if isinstance(row, FailedRun) else None
                    if note is not None and note not in notes:
                        notes[note] = "*" * (len(notes) + 1)
                    cells = "  Training failed" + (notes[note] if note is not None else "")
                else:
                    cells = _cells(row, columns, width)
                lines.append(f"  {label + f' ({ours_label})':<26}{cells}")
    if notes:
        lines.append("")
        lines += [f"{marker} {note}" for note, marker in notes.items()]
    return "\n".join(lines)
