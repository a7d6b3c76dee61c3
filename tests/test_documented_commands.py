"""The documented small/full commands run as written: every shell block of ``README.md``, ``data_scripts/README.md``
and ``docs/*.md`` that names ``small``, ``full``, ``torchrun`` or a data script.

``make rehearse`` runs them (``B2T_REHEARSAL=1``: small and full on this CPU, sizes shrunk, the Hub read from the
miniature sources), in document order, in a fresh copy of the repository under ``build/docs_commands/`` whose
``data/`` is the rehearsal's (so data sets the notebooks prepared are reused, new ones are prepared). The files a
reader brings (their own corpus, a copied ``ggw_data.zip``) are staged first, under the names the documents
give them. A run that passed is recorded with a digest of the repository; when nothing changed since, the
commands are not run again (a second ``make rehearse`` trains nothing). Outside the rehearsal only the
extraction is checked.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from b2t_lib.scale import REHEARSAL_GPUS, rehearsal

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(?:bash|sh|shell)\n(.*?)^```", re.M | re.S)
SCALE_OR_SCRIPT = re.compile(r"\b(small|full|torchrun)\b|data_scripts/")
DATA_SCRIPTS = ("prepare_wmt14_en_de.py", "prepare_gigaword.py", "prepare_wikitext103.py", "prepare_librispeech.py")
SKIPPED = ("data", "data-bin", "runs", "build", ".venv", ".git", "__pycache__", ".pytest_cache")
NPROC = re.compile(r"(\btorchrun\s+--nproc_per_node)(=|\s+)(\d+)\b")


@dataclass
class Block:
    path: str  # relative to the repository
    line: int  # the line of the opening fence
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def documented_blocks(root: Path = ROOT) -> list[Block]:
    """The shell blocks that name small, full, torchrun or a data script, in document order."""
    blocks = []
    for doc in [root / "README.md", root / "data_scripts" / "README.md", *sorted((root / "docs").glob("*.md"))]:
        if not doc.is_file():
            continue
        text = doc.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            if SCALE_OR_SCRIPT.search(match.group(1)):
                blocks.append(Block(str(doc.relative_to(root)), text[: match.start()].count("\n") + 1, match.group(1)))
    return blocks


def on_the_stand_ins(text: str) -> str:
    """A block as the rehearsal runs it: every ``torchrun --nproc_per_node N`` over the rehearsal's stand-in GPUs
    (``REHEARSAL_GPUS`` CPU processes, what the notebooks' runs at full get), whatever N the document gives for a
    machine with GPUs. Eight processes on two cores would rehearse nothing more: the same command, its options and
    files, only four times the imports and processes (measured: 41 CPU-s instead of 10 for one 18L-18L run)."""
    return NPROC.sub(lambda m: f"{m.group(1)}{m.group(2)}{REHEARSAL_GPUS}", text)


def test_the_documented_commands_are_found_and_parse():
    blocks = documented_blocks()
    text = "\n".join(b.text for b in blocks)
    for script in DATA_SCRIPTS:  # every data script is documented by a command that runs
        assert f"data_scripts/{script}" in text, script
    for needle in ("--scale small", "--scale full", "torchrun --nproc_per_node"):
        assert needle in text, needle
    for block in blocks:  # shell syntax, and no placeholder a reader must fill in
        check = subprocess.run(["bash", "-n"], input=block.text, text=True, capture_output=True)
        assert check.returncode == 0, f"{block}: {check.stderr}"
        assert not re.search(r"/path/to|\bDIR\b|\[--", block.text), f"{block} has a placeholder"
    # the rehearsal runs every documented torchrun over its stand-in GPUs, and changes nothing else in a block
    for block in blocks:
        rehearsed = on_the_stand_ins(block.text)
        assert NPROC.sub("", rehearsed) == NPROC.sub("", block.text), block
        assert all(m.group(3) == str(REHEARSAL_GPUS) for m in NPROC.finditer(rehearsed)), block
    assert on_the_stand_ins("torchrun --nproc_per_node 8 -m b2t_lib train") == (
        f"torchrun --nproc_per_node {REHEARSAL_GPUS} -m b2t_lib train"
    )
    assert on_the_stand_ins("torchrun --nproc_per_node=16 -m x") == f"torchrun --nproc_per_node={REHEARSAL_GPUS} -m x"


# ---------------------------------------------------------------------------------------------- the reader's files
def stage_reader_files(where: Path) -> None:
    """The files the documents assume a reader has, under the names they give them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import soundfile as sf
    from huggingface_hub import hf_hub_download

    from b2t_lib.data.gigaword import HUB_FILE, HUB_REPO
    from b2t_lib.data.miniature import _pseudo_words, wikitext_rows
    from b2t_lib.data.synthetic_headlines import generate_headline_pairs
    from b2t_lib.data.synthetic_lm import generate_synthetic_lm_text
    from b2t_lib.data.synthetic_speech import synthesize
    from b2t_lib.presets import REHEARSAL_SOURCES

    # a copy of ggw_data.zip from a networked machine's cache
    shutil.copy(hf_hub_download(HUB_REPO, HUB_FILE, repo_type="dataset"), where / "ggw_data.zip")
    # headline pairs of one's own (raw text), and extra pairs to append to Gigaword's training split
    seen: set[str] = set()
    (where / "my_headlines").mkdir()
    for split, n in (("test", 20), ("valid", 20), ("train", 200)):
        pairs = generate_headline_pairs(n, seed=11, skip=seen)
        for side, index in (("article", 0), ("headline", 1)):
            text = "".join(p[index].capitalize() + "\n" for p in pairs)
            (where / "my_headlines" / f"{split}.{side}").write_text(text, encoding="utf-8")
    for side, index in (("article", 0), ("headline", 1)):
        text = "".join(p[index].capitalize() + "\n" for p in generate_headline_pairs(50, seed=12, skip=seen))
        (where / f"extra.{side}").write_text(text, encoding="utf-8")
    # WikiText-103's parquet files copied by hand (the Hub's names), and a tokenized corpus of one's own
    (where / "wikitext-103-v1").mkdir()
    for split, rows in wikitext_rows(REHEARSAL_SOURCES["wikitext103"]).items():
        pq.write_table(pa.table({"text": rows}), where / "wikitext-103-v1" / f"{split}-00000-of-00001.parquet")
    (where / "my_lm").mkdir()
    for split, lines in generate_synthetic_lm_text(
        train_tokens=20_000, valid_tokens=2000, test_tokens=2000, seed=3
    ).items():
        (where / "my_lm" / f"{split}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    # transcribed audio of one's own: WAV files and tab-separated lists
    rng = random.Random(5)
    lexicon = _pseudo_words(rng, 3000)
    for split, n in (("train", 100), ("valid", 10), ("test", 10)):
        (where / "my_speech" / split).mkdir(parents=True)
        lines = ["audio\ttext"]
        for i in range(n):
            words = [rng.choice(lexicon) for _ in range(30)]
            sf.write(
                where / "my_speech" / split / f"{i:03d}.wav",
                synthesize(words[:3], np.random.default_rng(i)),
                16000,
                subtype="PCM_16",
            )
            lines.append(f"{split}/{i:03d}.wav\t{' '.join(words)}")
        (where / "my_speech" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------- the rehearsal
def tree_digest(root: Path) -> str:
    """A digest of the repository's files (code, documents, notebooks), not of data, runs or builds."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not (set(rel.parts) & set(SKIPPED)):
            digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@pytest.mark.slow
@pytest.mark.skipif(not rehearsal(), reason="runs under the rehearsal (make rehearse): B2T_REHEARSAL=1")
def test_the_documented_small_and_full_commands_run():
    stamp = ROOT / "build" / "docs_commands.passed"
    digest = tree_digest(ROOT)
    if stamp.is_file() and stamp.read_text() == digest:
        pytest.skip(f"nothing changed since the documented commands last passed ({stamp})")
    work = ROOT / "build" / "docs_commands"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(*SKIPPED))
    (ROOT / "data").mkdir(exist_ok=True)
    (work / "data").symlink_to(ROOT / "data")  # the rehearsal's data sets, shared with its notebooks
    stage_reader_files(work)
    env = {k: v for k, v in os.environ.items() if k not in ("B2T_SCALE", "B2T_RUNS", "B2T_FIGURE_DIR")}
    env.update(PYTHONPATH=str(work), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    for block in documented_blocks(work):
        started = time.time()
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", on_the_stand_ins(block.text)],
            cwd=work,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        print(f"{block}: exit {done.returncode} in {time.time() - started:.0f} s", flush=True)
        tail = "\n".join(done.stdout.splitlines()[-60:])
        assert done.returncode == 0, f"{block} failed (exit {done.returncode}):\n{block.text}\n--- output:\n{tail}"
    stamp.write_text(digest)
