"""Bad inputs through every command-line entry point, each run as a user runs it: in a fresh process.

Every case of :data:`CASES` is one command line (``python -m b2t_lib <command> ...``, ``python
data_scripts/prepare_*.py ...``) given one mistake. For each the same properties are asserted:

* exit code 2, and stderr is exactly one non-empty line that starts with ``error:``;
* no ``Traceback`` anywhere in stdout or stderr;
* nothing on disk changed: every file's bytes under the case's folder and under the shared data sets are
  the same afterwards (files a case names in ``may_create`` aside).

A *warning case* (``warning=True``, the ``table`` command) is the same with exit code 0 and one line that
starts with ``warning:``. The shared data sets (a prepared MT and LM set, a trained run, raw corpora of the
four data scripts) are made once per module; a case copies what it breaks into its own folder. With
``BAD_INPUTS_OUT=<folder>`` set, every case's command line, exit code and output are kept there (to read or grep).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest
import torch

from b2t_lib.cli import main as cli_main
from b2t_lib.data import prepare_synthetic_mt
from b2t_lib.data.synthetic import write_raw_pairs
from b2t_lib.data.synthetic_headlines import headline_splits
from b2t_lib.data.synthetic_lm import prepare_synthetic_lm
from b2t_lib.data.synthetic_speech import write_synthetic_speech
from b2t_lib.paper_tables import FailedRun, collect_results, result_files
from conftest import ROOT, data_script

B2T = (sys.executable, "-m", "b2t_lib")
TIMEOUT_S = 180  # a case that starts training by mistake stops here instead of hanging the suite
# the smallest run the trainer accepts: bad inputs must be refused before any of it matters
TINY_RUN = (
    "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--encoder-layers", "1", "--decoder-layers", "1",
    "--max-tokens", "256", "--threads", "1", "--no-progress-bar", "--device", "cpu", "--max-update", "2",
)  # fmt: skip


def script(name: str) -> tuple[str, ...]:
    return (sys.executable, str(ROOT / "data_scripts" / f"{name}.py"))


# ---------------------------------------------------------------------- the shared data sets
@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> SimpleNamespace:
    """Good inputs, made once: prepared MT and LM data sets, a trained MT run with two numbered checkpoints,
    the raw files of each data script's ``--from-files`` and a data set prepared from the MT ones."""
    root = tmp_path_factory.mktemp("shared")
    mt = prepare_synthetic_mt(root / "mt", n_train=200, n_valid=20, n_test=20, bpe_vocab_size=300, workers=1)
    lm = prepare_synthetic_lm(root / "lm", train_tokens=3000, valid_tokens=300, test_tokens=300)
    headlines = write_raw_pairs(
        root / "headlines",
        "headline-pairs",
        {},
        ("article", "headline"),
        lambda: headline_splits(n_train=120, n_valid=10, n_test=10, seed=0),
    )
    speech = write_synthetic_speech(root / "speech", n_train=8, n_valid=2, n_test=2)
    wmt_good = root / "wmt_good"
    args = ["--from-files", str(mt / "raw"), "--out-dir", str(wmt_good), "--bpe-vocab-size", "300", "--workers", "1"]
    assert data_script("prepare_wmt14_en_de").main(args) == 0
    run = root / "run"
    train = ["train", "--data", str(mt), "--save-dir", str(run), *TINY_RUN, "--save-interval", "1"]
    assert cli_main([*train, "--no-eval-at-end"]) == 0
    return SimpleNamespace(
        root=root,
        mt=mt,
        lm=lm,
        run=run,
        wmt_raw=mt / "raw",
        wmt_good=wmt_good,
        lm_raw=lm / "raw",
        headlines=headlines,
        speech=speech,
    )


# ---------------------------------------------------------------------- the harness
@dataclass(frozen=True)
class Case:
    """One command line with one mistake: ``argv(folder, shared)`` after ``setup(folder, shared)``."""

    name: str
    argv: Callable[[Path, SimpleNamespace], list[str]]
    setup: Callable[[Path, SimpleNamespace], None] = lambda folder, shared: None
    warning: bool = False  # a warning case: exit 0 and one `warning:` line
    may_create: tuple[str, ...] = ()  # glob patterns (relative to the case folder) of files the command may write
    env: dict = field(default_factory=dict)
    pipe: str | None = None  # a shell command that reads stdout and may close it early (`head -1`)
    check: Callable[[Path, SimpleNamespace, str, str], None] | None = None  # more assertions on stdout, stderr
    skip: Callable[[], str | None] = lambda: None  # the reason to skip here, or None
    make: bool = False  # a make target: make adds its own last line `make: *** [...] Error 2`


def snapshot(*roots: Path) -> dict[Path, bytes]:
    """Every file's bytes under ``roots``."""
    return {p: p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def case_env(folder: Path, extra: dict | None = None) -> dict:
    """The environment of a case's command: tiny scale, its own runs folder, nothing downloaded."""
    # as a user's shell has it: no B2T_ settings, and not inside another make (which would print `make[1]:`)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("B2T_") and k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")
    }
    env.update(PYTHONPATH=str(ROOT), B2T_SCALE="tiny", B2T_RUNS=str(folder / "runs"), TQDM_DISABLE="1")
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.update(extra or {})
    return env


def run_case(case: Case, folder: Path, shared: SimpleNamespace) -> subprocess.CompletedProcess:
    argv = [str(a) for a in case.argv(folder, shared)]
    env = case_env(folder, case.env)
    if case.pipe:  # the exit code of the command, not of the reader
        argv = ["bash", "-c", f'"$@" | {case.pipe}; exit "${{PIPESTATUS[0]}}"', "bash", *argv]
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def _make_writable(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)


# ---------------------------------------------------------------------- the cases' pieces
def train(*options: str, data: Callable[[Path, SimpleNamespace], object] = lambda f, s: s.mt, save_dir="run"):
    """``argv`` of a ``train`` case: the tiny run on ``data`` into ``folder/save_dir``, plus ``options``."""
    return lambda f, s: [*B2T, "train", "--data", data(f, s), "--save-dir", f / save_dir, *TINY_RUN, *options]


def write(relative: str, content: bytes | str) -> Callable[[Path, SimpleNamespace], None]:
    def setup(folder: Path, shared: SimpleNamespace) -> None:
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))

    return setup


def steps(*setups: Callable[[Path, SimpleNamespace], None]) -> Callable[[Path, SimpleNamespace], None]:
    def setup(folder: Path, shared: SimpleNamespace) -> None:
        for one in setups:
            one(folder, shared)

    return setup


def copy(source: str, to: str) -> Callable[[Path, SimpleNamespace], None]:
    """Copy the shared ``source`` (an attribute of :func:`shared`) to ``folder/to``."""
    return lambda folder, shared: shutil.copytree(getattr(shared, source), folder / to)


def not_utf8(relative: str, line: int = 2) -> Callable[[Path, SimpleNamespace], None]:
    """Put a Latin-1 byte (0xe9, "é") into line ``line`` of ``folder/relative``."""

    def setup(folder: Path, shared: SimpleNamespace) -> None:
        path = folder / relative
        lines = path.read_bytes().split(b"\n")
        lines[line - 1] = b"caf\xe9 " + lines[line - 1]
        path.write_bytes(b"\n".join(lines))

    return setup


def drop_last_line(relative: str) -> Callable[[Path, SimpleNamespace], None]:
    def setup(folder: Path, shared: SimpleNamespace) -> None:
        path = folder / relative
        path.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")

    return setup


def remove(*relatives: str) -> Callable[[Path, SimpleNamespace], None]:
    def setup(folder: Path, shared: SimpleNamespace) -> None:
        for relative in relatives:
            (folder / relative).unlink()

    return setup


def append_row(relative: str, row: str) -> Callable[[Path, SimpleNamespace], None]:
    """Add ``row`` to the TSV ``folder/relative``; ``{up}`` in it stands for the ``../`` that lead from the
    TSV's folder up to the root folder."""

    def setup(folder: Path, shared: SimpleNamespace) -> None:
        path = folder / relative
        up = "../" * len(path.parent.resolve().parts[1:])
        path.write_text(path.read_text(encoding="utf-8") + row.format(up=up) + "\n", encoding="utf-8")

    return setup


def read_only(relative: str) -> Callable[[Path, SimpleNamespace], None]:
    def setup(folder: Path, shared: SimpleNamespace) -> None:
        (folder / relative).mkdir()
        (folder / relative).chmod(0o555)

    return setup


def wmt(raw="raw", out="out"):
    return lambda f, s: [
        *script("prepare_wmt14_en_de"),
        "--from-files",
        f / raw,
        "--out-dir",
        f / out,
        "--bpe-vocab-size",
        "300",
        "--workers",
        "1",
    ]


def wikitext(raw="raw", out="out"):
    return lambda f, s: [*script("prepare_wikitext103"), "--from-files", f / raw, "--out-dir", f / out]


def librispeech(raw="raw", out="out"):
    return lambda f, s: [
        *script("prepare_librispeech"),
        "--from-files",
        f / raw,
        "--out-dir",
        f / out,
        "--vocab-size",
        "20",
        "--workers",
        "1",
    ]


def gigaword(raw="raw", out="out"):
    return lambda f, s: [
        *script("prepare_gigaword"),
        "--from-files",
        f / raw,
        "--out-dir",
        f / out,
        "--bpe-vocab-size",
        "300",
        "--workers",
        "1",
    ]


def table(*paths: str, number: int = 1):
    return lambda f, s: [*B2T, "table", "--table", str(number), *[str(f / p) for p in paths]]


def record(metrics: dict | None = None, **fields) -> str:
    """A ``result.json`` of a 6L language-model run (Table 4)."""
    values = dict(status="completed", task="lm", variant="b2t", config=dict(task="lm", decoder_layers=6))
    values.update(fields)
    if metrics is not None:
        values["metrics"] = metrics
    return json.dumps(values)


def as_root() -> str | None:
    return "root may write into a read-only folder" if os.geteuid() == 0 else None


def with_gpu() -> str | None:
    return "this machine has a CUDA GPU" if torch.cuda.is_available() else None


def no_out_dir_advice(folder: Path, shared: SimpleNamespace, stdout: str, stderr: str) -> None:
    """The message must not advise preparing another task's data over the folder the user named."""
    assert f"--out-dir {shared.mt}" not in stderr, stderr


def empty_ppl_cell(folder: Path, shared: SimpleNamespace, stdout: str, stderr: str) -> None:
    (ours,) = [line for line in stdout.splitlines() if line.startswith("  B2T connection (ours)")]
    assert ours.split()[-2:] == ["-", "31.00"], ours
    assert "valid_ppl" in stderr and "result.json" in stderr


def names_the_file(folder: Path, shared: SimpleNamespace, stdout: str, stderr: str) -> None:
    assert str(folder / "run" / "result.json") in stderr, stderr
    assert "Table 1" in stdout  # the table is printed all the same


def names_the_pattern(pattern: str):
    def check(folder: Path, shared: SimpleNamespace, stdout: str, stderr: str) -> None:
        assert str(folder / pattern) in stderr, stderr
        assert "Table 1" in stdout

    return check


def no_make() -> str | None:
    if shutil.which("make") is None or not (ROOT / ".venv" / "bin" / "python").exists():
        return "needs make and the repository's .venv"
    return None


def make(target: str):
    """``make <target>`` in the repository (its .venv taken as set up), its outputs in the case folder."""
    return lambda f, s: ["make", "--no-print-directory", "-C", ROOT, "-o", ".venv/.installed", target,
                         f"COURSE_OUT={f / 'build'}"]  # fmt: skip


def trains_one_update(data: str):
    """A check: the data set ``folder/data`` still trains (one update, then the test set is decoded)."""

    def check(folder: Path, shared: SimpleNamespace, stdout: str, stderr: str) -> None:
        argv = [*B2T, "train", "--data", str(folder / data), "--save-dir", str(folder / "after"), *TINY_RUN]
        argv[argv.index("--max-update") + 1] = "1"
        done = subprocess.run(argv, cwd=folder, env=case_env(folder), capture_output=True, text=True, timeout=TIMEOUT_S)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["metrics"]["num_updates"] == 1, done.stdout

    return check


CASES = [
    # ------------------------------------------------------------------ train
    Case("train-unknown-option", train("--no-such-option")),
    Case("train-max-update-abc", train("--max-update", "abc")),
    Case("train-save-dir-is-a-file", train(save_dir="afile"), setup=write("afile", "a file\n")),
    Case("train-save-dir-read-only", train(save_dir="ro/run"), setup=read_only("ro"), skip=as_root),
    Case(
        "train-over-a-run-without-resume",
        train(),
        setup=steps(write("run/result.json", record({"valid_ppl": 30.0})), write("run/log.jsonl", '{"update": 1}\n')),
    ),
    Case("train-data-without-manifest", train(data=lambda f, s: f / "data"), setup=write("data/notes.txt", "x\n")),
    Case("train-mt-on-lm-data", train("--task", "mt", data=lambda f, s: s.lm)),
    Case("train-summarization-on-mt-data", train("--task", "summarization"), check=no_out_dir_advice),
    Case(
        "train-resume-random-checkpoint",
        train("--resume"),
        setup=write("run/checkpoint_last.pt", bytes(range(256)) * 8),
    ),
    # ------------------------------------------------------------------ evaluate
    Case(
        "evaluate-average-last-0",
        lambda f, s: [*B2T, "evaluate", "--save-dir", f / "run", "--average-last", "0"],
        setup=copy("run", "run"),
    ),
    Case(
        "evaluate-average-last-negative",
        lambda f, s: [*B2T, "evaluate", "--save-dir", f / "run", "--average-last", "-1"],
        setup=copy("run", "run"),
    ),
    Case(
        "evaluate-folder-without-run",
        lambda f, s: [*B2T, "evaluate", "--save-dir", f / "notes"],
        setup=write("notes/notes.txt", "x\n"),
    ),
    # ------------------------------------------------------------------ preset, the scale
    Case("preset-unknown-task", lambda f, s: [*B2T, "preset", "--task", "no_such_task"]),
    Case("preset-into-head-1", lambda f, s: [*B2T, "preset", "--task", "mt"], pipe="head -1"),
    # the reader is gone before the first write: the broken pipe is certain, not a race with `head`
    Case("preset-into-a-closed-pipe", lambda f, s: [*B2T, "preset", "--task", "mt"], pipe="head -n 0"),
    Case("scale-bogus-preset", lambda f, s: [*B2T, "preset", "--task", "mt"], env={"B2T_SCALE": "bogus"}),
    Case(  # the scale check that `make course` runs first
        "scale-bogus-check",
        lambda f, s: [sys.executable, "-c", "import b2t_lib.scale as s; raise SystemExit(s.main())"],
        env={"B2T_SCALE": "bogus"},
    ),
    Case("scale-bogus-make-course", make("course"), env={"B2T_SCALE": "bogus"}, make=True, skip=no_make),
    Case("gpu-check-without-gpu", lambda f, s: [sys.executable, ROOT / "benchmarks" / "gpu_check.py"], skip=with_gpu),
    Case("make-gpu-check-without-gpu", make("gpu-check"), make=True, skip=lambda: with_gpu() or no_make()),
    Case("miniature-without-folder", lambda f, s: [sys.executable, "-m", "b2t_lib.data.miniature"]),
    Case(
        "bench-train-step-cuda-without-gpu",
        lambda f, s: [sys.executable, ROOT / "benchmarks" / "bench_train_step.py", "--device", "cuda"],
        skip=with_gpu,
    ),  # fmt: skip
    Case(
        "bench-train-step-floor-on-cuda",
        lambda f, s: [sys.executable, ROOT / "benchmarks" / "bench_train_step.py", "--device", "cuda", "--floor"],
    ),  # fmt: skip
    Case(
        "bench-lm-adaptive-unknown-option",
        lambda f, s: [sys.executable, ROOT / "benchmarks" / "bench_lm_adaptive.py", "--no-such-option"],
    ),  # fmt: skip
    # ------------------------------------------------------------------ table
    Case("table-unknown-table", table("run", number=6), setup=write("run/result.json", record({"valid_ppl": 3.0}))),
    Case(
        "table-result-holding-a-list",
        table("run"),
        setup=write("run/result.json", "[]"),
        warning=True,
        check=names_the_file,
    ),
    Case(
        "table-result-not-json",
        table("run"),
        setup=write("run/result.json", '{"status": '),
        warning=True,
        check=names_the_file,
    ),
    Case(
        "table-result-without-metrics",
        table("run"),
        setup=write("run/result.json", '{"status": "completed"}'),
        warning=True,
        check=names_the_file,
    ),
    Case(
        "table-metric-not-a-number",
        table("run", number=4),
        setup=write("run/result.json", record({"valid_ppl": "abc", "test_ppl": 31.0})),
        warning=True,
        check=empty_ppl_cell,
    ),
    Case("table-glob-matching-nothing", table("runs/*"), warning=True, check=names_the_pattern("runs/*")),
    Case(
        "table-folder-without-result",
        table("run"),
        setup=write("run/log.jsonl", '{"update": 1}\n'),
        warning=True,
        check=names_the_pattern("run"),
    ),
    # ------------------------------------------------------------------ data scripts
    Case("wmt-not-utf8", wmt(), setup=steps(copy("wmt_raw", "raw"), not_utf8("raw/train.en"))),
    Case("wmt-misaligned", wmt(), setup=steps(copy("wmt_raw", "raw"), drop_last_line("raw/train.de"))),
    Case("wmt-missing-test", wmt(), setup=steps(copy("wmt_raw", "raw"), remove("raw/test.en", "raw/test.de"))),
    Case(
        "wmt-over-a-good-data-set",
        wmt(),
        setup=steps(copy("wmt_good", "out"), copy("wmt_raw", "raw"), drop_last_line("raw/valid.de")),
        check=trains_one_update("out"),
    ),
    Case("wikitext-not-utf8", wikitext(), setup=steps(copy("lm_raw", "raw"), not_utf8("raw/train.txt", line=3))),
    Case(
        "librispeech-audio-path-outside",
        librispeech(),
        setup=steps(copy("speech", "raw"), append_row("raw/train.tsv", "{up}etc/passwd\tHELLO")),
    ),
    Case(
        "librispeech-audio-path-absolute",
        librispeech(),
        setup=steps(copy("speech", "raw"), append_row("raw/train.tsv", "/etc/passwd\tHELLO")),
    ),
    Case("gigaword-not-utf8", gigaword(), setup=steps(copy("headlines", "raw"), not_utf8("raw/train.article"))),
]


@pytest.mark.slow  # about 40 command lines, each a fresh Python process that imports torch
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_ends_in_one_line_and_changes_nothing(case: Case, shared, tmp_path):
    reason = case.skip()
    if reason:
        pytest.skip(reason)
    folder = tmp_path / "case"
    folder.mkdir()
    case.setup(folder, shared)
    before = snapshot(folder, shared.root)
    try:
        done = run_case(case, folder, shared)
    finally:
        _make_writable(folder)  # a read-only folder of the case must not stop pytest's cleanup
    output = done.stdout + done.stderr
    if os.environ.get("BAD_INPUTS_OUT"):  # keep every case's output to read (or grep) afterwards
        kept = Path(os.environ["BAD_INPUTS_OUT"]) / f"{case.name}.txt"
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(f"$ {' '.join(map(str, done.args))}\nexit {done.returncode}\n{output}", encoding="utf-8")
    assert "Traceback" not in output, output
    lines = done.stderr.splitlines()
    if case.make:  # make's own report of the failed recipe comes last
        assert len(lines) >= 1 and lines[-1].startswith("make: *** "), done.stderr
        lines = lines[:-1]
    if case.pipe:
        assert done.returncode in (0, 141), output
        assert "BrokenPipeError" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    elif case.warning:
        assert done.returncode == 0, output
        assert len(lines) == 1 and lines[0].startswith("warning:") and lines[0] != "warning:", done.stderr
    else:
        assert done.returncode == 2, output
        assert len(lines) == 1 and lines[0].startswith("error:") and lines[0].strip() != "error:", done.stderr
    after = snapshot(folder, shared.root)
    changed = sorted(str(p) for p in before if after.get(p) != before[p])
    created = sorted(
        str(p)
        for p in after
        if p not in before
        and not (folder in p.parents and any(p.relative_to(folder).match(g) for g in case.may_create))
    )
    assert not changed and not created, f"changed: {changed}; created: {created}"
    if case.check is not None:
        case.check(folder, shared, done.stdout, done.stderr)


# ---------------------------------------------------------------------- the table's warnings, in this process
def test_result_files_name_every_path_that_yields_no_record(tmp_path):
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "result.json").write_text(record({"valid_ppl": 3.0}))
    (tmp_path / "done" / "train.log").write_text("a log")  # a glob such as runs/*/* matches logs too
    (tmp_path / "running").mkdir()  # a run without result.json yet
    warnings: list[str] = []
    found = result_files([str(tmp_path / "done"), str(tmp_path / "done" / "*")], warnings.append)
    assert found == [tmp_path / "done" / "result.json"] * 2 and warnings == []
    named = {"running": "no result.json here", "nothing*": "nothing matches", "missing": "nothing matches"}
    named["done/train.log"] = "not a result.json file"
    for path, message in named.items():
        warnings = []
        assert result_files([str(tmp_path / path)], warnings.append) == []
        assert len(warnings) == 1 and warnings[0].startswith(message) and str(tmp_path / path) in warnings[0]
    warnings = []
    assert result_files([str(tmp_path / "*")], warnings.append) == [tmp_path / "done" / "result.json"]
    assert len(warnings) == 1 and str(tmp_path / "running") in warnings[0]  # each folder of a glob is named


def test_records_that_cannot_be_rows_are_named_and_skipped(tmp_path):
    files = {
        "good": record({"valid_ppl": 30.0, "test_ppl": 31.0}, variant="pre_ln").encode(),
        "list": b"[]",
        "broken": b'{"status": ',
        "latin1": b'{"status": "caf\xe9"}',
        "unevaluated": b'{"status": "completed"}',
        "no_variant": json.dumps({"status": "completed", "metrics": {"valid_ppl": 3.0}}).encode(),
        "text_metric": record({"valid_ppl": "abc", "test_ppl": 31.0}).encode(),
    }
    for name, data in files.items():
        (tmp_path / f"{name}.json").write_bytes(data)
    warnings: list[str] = []
    ours = collect_results([tmp_path / f"{name}.json" for name in files], table=4, warn=warnings.append)
    assert ours == {"6L": {"pre_ln": [30.0, 31.0], "b2t": [None, 31.0]}}  # the text metric's cell is empty
    assert len(warnings) == len(files) - 1  # one line for each bad file
    for name, line in zip(list(files)[1:], warnings):
        assert f"{name}.json" in line and "\n" not in line, line
    assert "not a run record" in warnings[0] and "not JSON" in warnings[1] and "not UTF-8" in warnings[2]
    assert "without metrics" in warnings[3] and "names no variant" in warnings[4]
    assert "metric valid_ppl is 'abc'" in warnings[5]


def test_text_in_a_test_set_score_empties_that_cell_only(tmp_path):
    mt = {"status": "completed", "task": "mt", "variant": "b2t", "config": {"encoder_layers": 6, "decoder_layers": 6}}
    mt["metrics"] = {"bleu": {"newstest2014": "n/a", "newstest2013": 26.0}, "bleu_avg": 26.5}
    (tmp_path / "result.json").write_text(json.dumps(mt))
    warnings: list[str] = []
    (row,) = collect_results([tmp_path], table=1, warn=warnings.append)["6L-6L"].values()
    assert row[3:5] == [26.0, None] and row[-1] == 26.5
    assert len(warnings) == 1 and "bleu.newstest2014" in warnings[0]


def test_a_failed_run_needs_no_metrics(tmp_path):
    failed = json.loads(record(status="diverged"))
    (tmp_path / "result.json").write_text(json.dumps(failed))
    warnings: list[str] = []
    ours = collect_results([tmp_path], table=4, warn=warnings.append)
    assert isinstance(ours["6L"]["b2t"], FailedRun) and warnings == []
