r"""Word-level language-modeling data: WikiText-103 (or any tokenized corpus) as memory-mapped token streams.

Input: a folder with ``train.txt``, ``valid.txt``, ``test.txt`` of whitespace-tokenized text (for
WikiText-103 :func:`download_wikitext103` writes them from the Hugging Face Hub). Steps, each
restartable like the translation pipeline (:mod:`b2t_lib.data.steps`):

1. ``dictionary``: fairseq's dictionary (``<s>=0 <pad>=1 </s>=2 <unk>=3``, then words by descending
   training count, ties alphabetical, padded to a multiple of 8) from **train only**. The order
   matters: the adaptive input and softmax cut the id range into frequency bands.
   ``min_count`` maps rarer training words to ``<unk>`` (WikiText-103 is already mapped: 0).
2. ``binarize-<split>``: every line becomes its tokens plus the end-of-line symbol ``</s>``, blank
   lines included (a lone ``</s>``), as fairseq and Transformer-XL do. The ids of a split are
   one long stream :math:`x_1 \dots x_L` (``<split>.npy``; ``<split>.offsets.npy`` marks where
   each line starts, :class:`~b2t_lib.data.indexed.RaggedArray`).
3. ``manifest.json``, last: parameters, counts, the unigram baseline, checksums of every file.

The **unigram baseline** is the validation (and test) stream's cross entropy under the training
unigram distribution with add-one smoothing over the :math:`V` entries of the dictionary,

.. math:: H = -\frac{1}{L}\sum_{t=1}^{L} \log_2 \frac{n(x_t) + 1}{N + V}, \qquad \mathrm{PPL} = 2^H

(:math:`n(w)` = training count of id :math:`w`, :math:`N` = training tokens, ``</s>`` included):
a language model that does not beat it has learned nothing beyond word frequencies.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Iterator

import numpy as np

from ..special_tokens import EOS, SPECIAL_TOKENS, UNK

from .dictionary import Dictionary
from .indexed import RaggedArray, token_dtype, write_ragged
from .inputs import InputError, MissingInputError, read_lines
from .steps import (
    MANIFEST,
    DataFormat,
    Preparation,
    StepRunner,
    clear_digest_cache,
    describe_file,
    file_digest,
    read_json,
)
from .unigram import unigram_cross_entropy, unigram_record  # noqa: F401  (the one computation, re-exported)

log = logging.getLogger("b2t_lib.data")

FORMAT = "b2t-lm-v1"
LM_DATA = DataFormat(
    FORMAT,
    "language-modeling data set",
    "Run data_scripts/prepare_wikitext103.py, or prepare_synthetic_lm()/prepare_lm_data(),",
)
PIPELINE_VERSION = 1  # bump when a step's output changes, so older data is rebuilt
SPLITS = ("train", "valid", "test")
WIKITEXT103 = ("Salesforce/wikitext", "wikitext-103-v1")
HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
WIKITEXT103_ROWS = {"train": 1_801_350, "valid": 3_760, "test": 4_358}
# Merity et al.'s vocabulary size: distinct training words (``<unk>`` included) plus the
# end-of-line symbol. With fairseq's 4 specials and padding to a multiple of 8: 267,744 ids.
WIKITEXT103_VOCAB = 267_735
FORBIDDEN_WORDS = tuple(s for s in SPECIAL_TOKENS if s != "<unk>")  # <s> <pad> </s> in the text


def wikitext103_sizes() -> dict:
    """What a WikiText-103 download must hold: ``{"rows": {split: rows}, "vocab": Merity et al.'s count}``, the
    release's (or, under the rehearsal, its miniature copy's: :func:`b2t_lib.presets.source_sizes`)."""
    from ..presets import source_sizes

    return source_sizes("wikitext103", {"rows": dict(WIKITEXT103_ROWS), "vocab": WIKITEXT103_VOCAB})


# ---------------------------------------------------------------------- the Hub
def download_wikitext103(
    raw_dir: str | Path,
    *,
    dataset: str = WIKITEXT103[0],
    config: str | None = WIKITEXT103[1],
    data_files: dict[str, list[str]] | None = None,
    cache_dir: str | None = None,
    check_rows: bool = True,
    expected_rows: dict[str, int] | None = None,
) -> Path:
    """Write ``raw_dir/{train,valid,test}.txt`` from WikiText-103 on the Hub, one line per row.

    Each row's whitespace tokens are written space-separated (a blank row ``""`` stays a blank
    line). ``dataset="parquet", config=None, data_files={"train": [...], "validation": [...],
    "test": [...]}`` reads local parquet files with the Hub's layout instead (an offline copy, or a
    test). The row counts are checked against ``expected_rows`` (default: WikiText-103's,
    :func:`wikitext103_sizes`) unless ``check_rows=False``.
    """
    raw_dir = Path(raw_dir)
    if check_rows and expected_rows is None:
        expected_rows = wikitext103_sizes()["rows"]
    if not check_rows:
        expected_rows = None
    runner = StepRunner(raw_dir, raw_dir / ".steps")
    for split, hub_split in HUB_SPLITS.items():

        def build(outs: list[Path], split: str = split, hub_split: str = hub_split) -> None:
            from datasets import load_dataset

            rows = load_dataset(dataset, config, data_files=data_files, split=hub_split, cache_dir=cache_dir)
            if "text" not in rows.column_names:
                raise InputError(
                    f"{dataset} {config} split {hub_split} has columns {rows.column_names}",
                    todo="give a data set with a 'text' column (one row per line)",
                )
            n = 0
            with open(outs[0], "w", encoding="utf-8", newline="\n") as f:
                for chunk in rows.iter(batch_size=10_000):
                    for text in chunk["text"]:
                        f.write(" ".join(text.split()) + "\n")
                        n += 1
            log.info("%s: %d rows", split, n)
            if expected_rows is not None and n != expected_rows[split]:
                raise InputError(
                    f"{dataset} {config} {hub_split} has {n:,} rows, expected {expected_rows[split]:,}: "
                    f"the Hub copy changed",
                    todo="pass --no-checks to accept it",
                )

        params = {
            "dataset": dataset,
            "config": config,
            "split": hub_split,
            "data_files": {k: [str(Path(p).resolve()) for p in v] for k, v in (data_files or {}).items()},
        }
        runner.run(f"download-{split}", params, [], [raw_dir / f"{split}.txt"], build)
    return raw_dir


# ---------------------------------------------------------------------- preparation
def _read_lines(path: Path) -> Iterator[str]:
    """The lines of a text file (:func:`.inputs.read_lines`: UTF-8, split on \\n only, BOM removed)."""
    return read_lines(path)


def _check_raw_files(raw_dir: Path) -> dict[str, Path]:
    if not raw_dir.is_dir():
        raise MissingInputError(f"raw data folder {raw_dir} does not exist", todo="give the folder of the text files")
    raw = {s: raw_dir / f"{s}.txt" for s in SPLITS}
    for split, path in raw.items():
        if not path.is_file():
            raise MissingInputError(
                f"{path} is missing",
                todo=f"a language-modeling corpus needs train.txt, valid.txt and test.txt in {raw_dir} "
                f"(whitespace-tokenized text, one line per line)",
            )
        if path.stat().st_size == 0:
            raise InputError(f"{path} is empty", todo=f"the {split} split needs at least one line of text")
    return raw


def check_text_files(raw: dict[str, Path]) -> None:
    """Read every raw file once before anything is built: a byte that is not UTF-8 is named with its file,
    line and column, and a special symbol used as a training word with its line."""
    for split, path in raw.items():
        for lineno, line in enumerate(_read_lines(path), start=1):
            bad = [w for w in line.split() if w in FORBIDDEN_WORDS] if split == "train" else []
            if bad:
                raise InputError(
                    f"the word {bad[0]!r} is one of the dictionary's special symbols ({', '.join(FORBIDDEN_WORDS)})",
                    where=f"{path}:{lineno}",
                    todo="remove or rename it in the text",
                )


def _count_words(train: Path) -> Counter:
    counts: Counter = Counter()
    for lineno, line in enumerate(_read_lines(train), start=1):
        words = line.split()
        counts.update(words)
        bad = [w for w in words if w in FORBIDDEN_WORDS]
        if bad:
            raise InputError(
                f"the word {bad[0]!r} is one of the dictionary's special symbols ({', '.join(FORBIDDEN_WORDS)})",
                where=f"{train}:{lineno}",
                todo="remove or rename it in the text",
            )
    return counts


def _build_dictionary(train: Path, outs: list[Path], min_count: int, padding_factor: int) -> None:
    counts = _count_words(train)
    dictionary = Dictionary.build(counts, threshold=min_count, padding_factor=padding_factor)
    dropped = {w: c for w, c in counts.items() if w not in dictionary}
    stats = {
        "word_types": len(counts),  # distinct training words, <unk> included
        "kept_types": sum(1 for w in counts if w in dictionary),
        "train_words": sum(counts.values()),
        "train_unk": counts.get("<unk>", 0) + sum(dropped.values()),  # training words that become <unk>
    }
    dictionary.save(outs[0])
    outs[1].write_text(json.dumps(stats, indent=1, sort_keys=True), encoding="utf-8")


def _binarize(path: Path, dictionary: Dictionary, outs: list[Path], *, unk_allowed: bool) -> None:
    lengths = np.array([len(line.split()) + 1 for line in _read_lines(path)], dtype=np.int64)  # + </s>
    indices = dictionary.indices

    def rows() -> Iterator[list[int]]:
        for lineno, line in enumerate(_read_lines(path), start=1):
            ids = [indices.get(w, UNK) for w in line.split()]
            if not unk_allowed and UNK in ids:
                word = next(w for w, i in zip(line.split(), ids) if i == UNK)
                raise InputError(
                    f"the word {word!r} is not in the training vocabulary, and the training data has no <unk> "
                    f"to map it to",
                    where=f"{path}:{lineno}",
                    todo="map rare words to <unk> in every split (as WikiText does), or prepare with --min-count N "
                    "so that training has <unk>",
                )
            yield ids + [EOS]

    write_ragged(rows, lengths, outs[0], outs[1], token_dtype(len(dictionary)))


def split_files(out_dir: Path, split: str) -> list[Path]:
    """The two files of a split: the id stream and the line offsets."""
    return [out_dir / f"{split}.npy", out_dir / f"{split}.offsets.npy"]


def check_vocabulary_size(vocab: dict, expected: int | None, source: str) -> None:
    """``vocab['word_types'] + 1`` (the end-of-line symbol) must equal ``expected`` (None: no check)."""
    merity = vocab["word_types"] + 1
    msg = (
        f"{source}: {vocab['word_types']:,} distinct training words (<unk> included) + end-of-line = "
        f"{merity:,} (Merity et al.'s count)"
    )
    if expected is not None and merity != expected:
        raise InputError(
            f"{msg}, expected {expected:,}: the corpus is not the one expected",
            todo="pass --no-checks (or expected_vocab=None) to accept it",
        )
    log.info(msg)


def prepare_lm_data(
    raw_dir: str | Path,
    out_dir: str | Path,
    *,
    min_count: int = 0,
    padding_factor: int = 8,
    expected_vocab: int | None = None,
) -> Path:
    """Run this module's pipeline on ``raw_dir/{train,valid,test}.txt``; return ``out_dir``.

    ``min_count`` maps training words seen fewer times to ``<unk>``. ``expected_vocab`` checks
    Merity et al.'s count (distinct training words + 1; WikiText-103: 267,735). A valid or test
    word outside the vocabulary becomes ``<unk>`` if training has ``<unk>``, and is an error
    otherwise. Re-running with the same arguments and files returns at once; after an
    interruption or damage only what is needed is redone.
    """
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    if min_count < 0:
        raise ValueError(f"min_count must be >= 0, got {min_count}")
    clear_digest_cache()
    raw = _check_raw_files(raw_dir)
    p = dict(
        min_count=min_count,
        padding_factor=padding_factor,
        pipeline_version=PIPELINE_VERSION,
        raw_digests={f"{s}.txt": file_digest(path) for s, path in raw.items()},
    )
    with LM_DATA.build(out_dir, p, check_inputs=lambda: check_text_files(raw)) as runner:
        if runner is not None:
            _build(runner, p, raw, expected_vocab)
            return out_dir
    check_vocabulary_size(read_json(out_dir / MANIFEST)["vocabulary"], expected_vocab, str(raw["train"]))
    return out_dir


def _build(runner: Preparation, p: dict, raw: dict[str, Path], expected_vocab: int | None) -> None:
    """The steps of :func:`prepare_lm_data`, under ``runner.root`` (beside the data set's folder)."""
    out_dir, min_count, padding_factor = runner.root, p["min_count"], p["padding_factor"]
    dict_path, vocab_path = out_dir / "dict.txt", out_dir / "work" / "vocabulary.json"
    runner.run(
        "dictionary",
        {k: p[k] for k in ("min_count", "padding_factor", "pipeline_version")},
        [raw["train"]],
        [dict_path, vocab_path],
        lambda outs: _build_dictionary(raw["train"], outs, min_count, padding_factor),
    )
    vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    check_vocabulary_size(vocab, expected_vocab, str(raw["train"]))
    dictionary = Dictionary.load(dict_path)
    for split in SPLITS:
        unk_allowed = split == "train" or vocab["train_unk"] > 0
        runner.run(
            f"binarize-{split}",
            {"unk_allowed": unk_allowed},
            [dict_path, raw[split]],
            split_files(out_dir, split),
            lambda outs, split=split, ok=unk_allowed: _binarize(raw[split], dictionary, outs, unk_allowed=ok),
        )
    runner.commit(_manifest(out_dir, p, dictionary, vocab))
    log.info("steps run: %s; skipped: %s", runner.ran or "none", runner.skipped or "none")


def _manifest(out_dir: Path, p: dict, dictionary: Dictionary, vocab: dict) -> dict:
    files = [out_dir / "dict.txt"]
    streams, stats = {}, {}
    for split in SPLITS:
        paths = split_files(out_dir, split)
        files += paths
        lines = RaggedArray(paths[0], paths[1])
        streams[split] = lines.data
        n_unk = int(np.count_nonzero(np.asarray(lines.data) == UNK))
        stats[split] = {
            "lines": len(lines),
            "tokens": int(len(lines.data)),
            "unk": n_unk,
            "unk_rate": round(n_unk / max(len(lines.data), 1), 6),
        }
    unigram = {}
    for split in ("valid", "test"):
        unigram[split] = unigram_record(unigram_cross_entropy(streams["train"], streams[split], len(dictionary)))
    manifest = {
        "format": FORMAT,
        "params": p,
        "splits": list(SPLITS),
        "vocab_size": len(dictionary),  # model output size: specials + words + padding
        "vocabulary": vocab,  # word_types, kept_types, train_words, train_unk
        "stats": stats,
        "unigram": unigram,
        "files": {str(f.relative_to(out_dir)): describe_file(f) for f in files},
    }
    log.info(
        "vocabulary %d ids; unigram baseline on valid: %.3f bits/token (ppl %.1f)",
        len(dictionary),
        unigram["valid"]["bits_per_token"],
        unigram["valid"]["ppl"],
    )
    return manifest  # committed last: its presence means "ready"
