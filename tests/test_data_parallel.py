"""Preparation on several processes writes exactly what one process writes.

The translation pipeline segments (BPE) and binarizes large splits on worker processes, chunk by chunk, and writes
the results in corpus order; the files must be byte for byte those of the one-process path, which every stored
result was prepared with.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import b2t_lib.data.parallel as parallel
import b2t_lib.data.translation as translation
from b2t_lib.data.indexed import RaggedAppender, RaggedArray, write_ragged
from b2t_lib.data.synthetic import generate_synthetic_pairs

ROOT = Path(__file__).resolve().parents[1]


def _square_all(chunk: list[int]) -> list[int]:
    return [x * x for x in chunk]


def test_map_chunks_returns_every_chunk_in_order_on_workers():
    items = list(range(1003))
    serial = list(parallel.map_chunks(_square_all, items, workers=1, chunk_size=10))
    forked = list(parallel.map_chunks(_square_all, items, workers=2, chunk_size=10, start_method="fork"))
    assert forked == serial
    assert [x for chunk in serial for x in chunk] == [x * x for x in items]
    assert [len(chunk) for chunk in serial] == [10] * 100 + [3]


def test_appending_chunks_writes_the_files_write_ragged_writes(tmp_path):
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 40000, int(n)).astype(np.uint16) for n in rng.integers(0, 30, 500)]
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    write_ragged(lambda: iter(rows), lengths, tmp_path / "a.npy", tmp_path / "a.offsets.npy", np.dtype(np.uint16))
    with RaggedAppender(tmp_path / "b.npy", tmp_path / "b.offsets.npy", np.uint16) as appender:
        for start in range(0, len(rows), 64):
            chunk = rows[start : start + 64]
            appender.extend([len(r) for r in chunk], np.concatenate(chunk))
    for name in ("{}.npy", "{}.offsets.npy"):
        assert (tmp_path / name.format("a")).read_bytes() == (tmp_path / name.format("b")).read_bytes()
    assert RaggedArray(tmp_path / "b.npy", tmp_path / "b.offsets.npy")[7].tolist() == rows[7].tolist()
    with pytest.raises(ValueError, match="rows of"):
        with RaggedAppender(tmp_path / "c.npy", tmp_path / "c.offsets.npy", np.uint16) as appender:
            appender.extend([2, 2], np.zeros(3, dtype=np.uint16))


def _write_corpus(folder: Path) -> None:
    folder.mkdir()
    for split, (n, seed) in {"train": (400, 0), "valid": (120, 1), "test": (60, 2)}.items():
        pairs = generate_synthetic_pairs(n, seed=seed)
        for side, lang in enumerate(("en", "de")):
            lines = [pair[side] for pair in pairs]
            lines[3] = lines[3].replace(" ", "  ") + " ü"  # odd spacing and a non-ASCII character
            (folder / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_parallel_preparation_is_byte_identical_to_one_process(tmp_path, monkeypatch, caplog):
    _write_corpus(tmp_path / "raw")
    options = dict(src_lang="en", tgt_lang="de", bpe_vocab_size=300)
    translation.prepare_translation_data(tmp_path / "raw", tmp_path / "one", workers=1, **options)

    # Every split large enough for workers; 'fork' only to keep the test fast (the pipeline uses 'spawn').
    monkeypatch.setattr(translation, "PARALLEL_MIN_PAIRS", 100)
    forked = functools.partial(parallel.map_chunks, chunk_size=50, start_method="fork")
    monkeypatch.setattr(translation, "map_chunks", forked)
    caplog.set_level("INFO", logger="b2t_lib.data")
    translation.prepare_translation_data(tmp_path / "raw", tmp_path / "two", workers=2, **options)

    one = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    two = sorted(p.relative_to(tmp_path / "two") for p in (tmp_path / "two").rglob("*") if p.is_file())
    assert one == two and len(one) > 20
    for name in one:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    # The workers did the work (their CPU time is counted once the step closed them), and the runner said so.
    done = {m[1]: float(m[2]) for m in (re.fullmatch(r"step (\S+): done in .* ([\d.]+) s in workers\)", r.message)
                                        for r in caplog.records) if m}  # fmt: skip
    assert {"tokenize-train", "bpe-apply-train", "binarize-train", "bpe-apply-valid"} <= set(done)
    assert done["bpe-learn"] == 0.0  # the learner runs in this process


def test_preparation_probe_runs_and_projects(tmp_path):
    """The benchmark's projection at a toy size: every step timed, the learner probed, a finite total."""
    import subprocess

    command = [sys.executable, ROOT / "benchmarks" / "bench_prepare.py", "--pairs", "300", "--workers", "1",
               "--types", "3000", "--target-types", "3000", "--merges", "300"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    for step in ("tokenize-train", "bpe-apply-train", "dictionary", "binarize-train", "learning merges"):
        assert step in done.stdout
    total = re.search(r"total (\d+) s = ([\d.]+) min", done.stdout)
    assert total and float(total[1]) > 0
