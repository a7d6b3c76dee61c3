"""From plain-text parallel files to a binarized, memory-mapped translation data set.

Input: a folder of raw text files, one sentence per line, aligned by line number::

    train.{src,tgt}   valid.{src,tgt}   <test-name>.{src,tgt} (one or more test sets)

The same pipeline prepares headline generation data (article -> headline, :mod:`.summarization`):
there ``tokenizer`` is ``"none"`` (already tokenized Gigaword) or ``"rush"`` (raw text, Rush et
al. normalization) instead of ``"moses"``, the length-ratio filter is off, and the stored
reference text is the tokenized text the ROUGE scorer sees (see step 1).

Steps (each restartable, see :mod:`b2t_lib.data.steps`; intermediate files under ``work/``):

1. ``tokenize-<split>``: Moses punctuation normalization + tokenization (:mod:`.text`; or the
   tokenizer named by ``tokenizer``). For ``train`` also: an optional seeded random subset of
   ``max_pairs`` pairs, then ``clean-corpus-n`` (1-80 tokens a side, length ratio at most 1.5).
   The raw lines that survive are kept next to the tokens, aligned, so references stay raw (with
   a tokenizer other than Moses the tokenized lines are kept instead: there is no detokenizer, and
   the scorer compares tokenized text).
2. ``bpe-learn``: one *joint* BPE on the source and target training text (:mod:`.bpe`).
3. ``bpe-apply-<split>``: segment every split with those merges.
4. ``dictionary``: fairseq's joined dictionary over both sides of the segmented training text.
5. ``binarize-<split>``: ids (+EOS) and raw text into memory-mapped arrays (:mod:`.indexed`).
6. ``manifest.json``, written last: parameters, statistics, the validation unigram baseline
   (:mod:`.unigram`, the bar of the "Training failed" rule) and the size and checksum of every
   file the loader reads. No manifest (or a mismatching one) means "not ready".
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Iterator

import numpy as np

from ..special_tokens import EOS, UNK

from .bpe import BPE, learn_bpe, load_codes, save_codes
from .dictionary import Dictionary
from .indexed import RaggedArray, token_dtype, write_ragged
from .inputs import InputError, MissingInputError, read_lines
from .steps import DataFormat, Preparation, clear_digest_cache, describe_file, file_digest
from .text import TOKENIZERS, clean_raw_line, default_workers, keep_pair, tokenize_pairs
from .unigram import unigram_cross_entropy, unigram_record

log = logging.getLogger("b2t_lib.data")

FORMAT = "b2t-translation-v1"
TRANSLATION_DATA = DataFormat(
    FORMAT,
    "data set",
    "Run data_scripts/prepare_wmt14_en_de.py or data_scripts/prepare_gigaword.py, or "
    "prepare_synthetic_mt()/prepare_synthetic_summarization(),",
)
# Bump when a step's algorithm changes its output, so data prepared by older code is rebuilt.
PIPELINE_VERSION = 2  # 2: own deterministic BPE learner (1 used HF tokenizers)
PARALLEL_MIN_PAIRS = 100_000  # below this, starting worker processes costs more than it saves


# Options added after MT data had been prepared, with the values MT uses. They enter the
# manifest and the step records only when they differ from these, so data prepared before they
# existed (and MT data prepared now) keeps exactly the same records and is not rebuilt.
_MT_DEFAULTS = {"tokenizer": "moses"}


def find_splits(raw_dir: Path, src_lang: str, tgt_lang: str) -> list[str]:
    """``['train', 'valid', <test names sorted>]`` from the files present in ``raw_dir``."""
    if not raw_dir.is_dir():
        raise MissingInputError(f"raw data folder {raw_dir} does not exist", todo="give the folder of the text files")
    names = {p.name[: -len(src_lang) - 1] for p in raw_dir.glob(f"*.{src_lang}")}
    paired = {n for n in names if (raw_dir / f"{n}.{tgt_lang}").is_file()}
    for required in ("train", "valid"):
        if required not in paired:
            raise MissingInputError(
                f"{raw_dir} has no {required} split (found pairs: {', '.join(sorted(paired)) or 'none'})",
                todo=f"add {required}.{src_lang} and {required}.{tgt_lang}, one sentence per line",
            )
    tests = sorted(paired - {"train", "valid"})
    if not tests:
        raise MissingInputError(
            f"{raw_dir} has no test set", todo=f"add e.g. test.{src_lang} and test.{tgt_lang}, one sentence per line"
        )
    return ["train", "valid", *tests]


def check_parallel_files(raw: dict[str, list[Path]]) -> None:
    """Read every raw file once before anything is built: each must be UTF-8 (else the file, line and column
    are named), hold at least one line, and the two sides of a split must have the same number of lines."""
    for split, paths in raw.items():
        counts = []
        for path in paths:
            n = sum(1 for _ in read_lines(path))
            if n == 0:
                raise InputError(f"{path} is empty", todo=f"the {split} split needs at least one sentence per file")
            counts.append(n)
        if counts[0] != counts[1]:
            raise InputError(
                f"{paths[0]} has {counts[0]} lines but {paths[1]} has {counts[1]} "
                f"(line {min(counts) + 1} of the longer one has no partner)",
                todo="parallel files must be aligned line by line",
            )


def _read_lines(path: Path) -> Iterator[str]:
    """The lines of a text file without their newline (:func:`.inputs.read_lines`: UTF-8, BOM removed)."""
    return read_lines(path)


def _write_lines(path: Path, lines) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def _count_lines(path: Path) -> int:
    """Lines as :func:`_read_lines` yields them: a last line without a newline counts too."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


class _Lines:
    """Re-iterable lines of several files (BPE learning reads them twice)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __iter__(self) -> Iterator[str]:
        for path in self.paths:
            yield from _read_lines(path)


def _tokenize_split(raw: list[Path], outs: list[Path], *, is_train: bool, p: dict) -> None:
    n_src, n_tgt = _count_lines(raw[0]), _count_lines(raw[1])
    if n_src != n_tgt:
        raise InputError(
            f"{raw[0]} has {n_src} lines but {raw[1]} has {n_tgt}", todo="parallel files must be aligned line by line"
        )
    keep = None
    if is_train and p["max_pairs"] is not None and p["max_pairs"] < n_src:
        rng = np.random.default_rng(p["seed"])
        keep = np.zeros(n_src, dtype=bool)
        keep[rng.choice(n_src, size=p["max_pairs"], replace=False)] = True

    def raw_pairs() -> Iterator[tuple[str, str]]:
        for i, (s, t) in enumerate(zip(_read_lines(raw[0]), _read_lines(raw[1]))):
            if keep is None or keep[i]:
                yield clean_raw_line(s), clean_raw_line(t)

    n_lines = int(keep.sum()) if keep is not None else n_src
    tokenizer = p["tokenizer"]
    workers = p["workers"] if n_lines >= PARALLEL_MIN_PAIRS and tokenizer != "none" else 1
    tokenized = tokenize_pairs(
        raw_pairs(),
        p["src_lang"],
        p["tgt_lang"],
        tokenizer=tokenizer,
        aggressive_dash_splits=p["aggressive_dash_splits"],
        workers=workers,
    )
    files = [open(o, "w", encoding="utf-8", newline="\n") for o in outs]
    kept = total = 0
    try:
        for (raw_s, raw_t), (tok_s, tok_t) in zip(raw_pairs(), tokenized):
            total += 1
            if is_train and not keep_pair(
                len(tok_s.split()),
                len(tok_t.split()),
                min_len=p["min_len"],
                max_len=p["max_len"],
                max_ratio=p["max_ratio"],
            ):
                continue
            kept += 1
            # References: the raw lines for Moses (detokenized output is scored against them),
            # the tokenized lines otherwise (the scorer compares the tokenized text).
            text_s, text_t = (raw_s, raw_t) if tokenizer == "moses" else (tok_s, tok_t)
            for f, line in zip(files, (tok_s, tok_t, text_s, text_t)):
                f.write(line + "\n")
    finally:
        for f in files:
            f.close()
    log.info("tokenized %s: %d pairs, kept %d", raw[0].stem, total, kept)
    if kept == 0:
        raise InputError(
            f"no sentence pair of {raw[0].stem} survived the cleaning",
            where=raw[0].parent,
            todo="check the files and the cleaning limits (--max-len, --max-ratio)",
        )


def _binarize(dictionary: Dictionary, bpe_file: Path, text_file: Path, outs: list[Path]) -> None:
    dtype = token_dtype(len(dictionary))
    n_tokens = np.array([len(line.split()) + 1 for line in _read_lines(bpe_file)], dtype=np.int64)
    write_ragged(
        lambda: (dictionary.encode_line(line) + [EOS] for line in _read_lines(bpe_file)),
        n_tokens,
        outs[0],
        outs[1],
        dtype,
    )
    n_bytes = np.array([len(line.rstrip("\n").encode("utf-8")) for line in _read_lines(text_file)], dtype=np.int64)
    write_ragged(
        lambda: (line.rstrip("\n").encode("utf-8") for line in _read_lines(text_file)),
        n_bytes,
        outs[2],
        outs[3],
        np.dtype(np.uint8),
    )


def split_files(out_dir: Path, split: str, lang: str) -> list[Path]:
    """The four files the loader reads for one side of a split: ids, offsets, raw text, offsets."""
    stem = out_dir / f"{split}.{lang}"
    return [Path(f"{stem}.npy"), Path(f"{stem}.offsets.npy"), Path(f"{stem}.raw.npy"), Path(f"{stem}.raw.offsets.npy")]


def prepare_translation_data(
    raw_dir: str | Path,
    out_dir: str | Path,
    *,
    src_lang: str,
    tgt_lang: str,
    bpe_vocab_size: int | None = None,
    max_pairs: int | None = None,
    bpe_merges: int | None = None,
    bpe_min_frequency: int = 2,
    seed: int = 0,
    min_len: int = 1,
    max_len: int | None = 80,
    max_ratio: float | None = 1.5,
    aggressive_dash_splits: bool = False,
    padding_factor: int = 8,
    workers: int | None = None,
    tokenizer: str = "moses",
    splits: list[str] | None = None,
) -> Path:
    """Run the pipeline of this module; return ``out_dir`` (ready for :func:`load_translation_split`).

    ``bpe_vocab_size`` is the number of BPE symbols (alphabet + merges); ``bpe_merges`` instead
    fixes the number of merges (the paper: 32000). Give exactly one. ``max_pairs`` keeps a seeded
    random subset of the training pairs (before cleaning); ``min_len``/``max_len``/``max_ratio``
    clean the training pairs (``None``: no limit). ``tokenizer`` is ``"moses"`` (MT),
    ``"none"`` (already tokenized text) or ``"rush"`` (:func:`.text.rush_normalize`); the dataset's
    ``encode``/``decode`` follow it. ``splits`` (``['train', 'valid', <tests>]``) defaults to
    every pair of files in ``raw_dir``. Re-running with the same arguments and raw files returns
    at once; after an interruption or damage it redoes only what is needed.
    """
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    if (bpe_vocab_size is None) == (bpe_merges is None):
        raise ValueError(
            "give exactly one of bpe_vocab_size (e.g. 800 for the synthetic task) or "
            "bpe_merges (32000 for WMT, as in the paper)"
        )
    if src_lang == tgt_lang:
        raise InputError(f"source and target language are both {src_lang!r}", todo="give two different languages")
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; known: {', '.join(TOKENIZERS)}")
    clear_digest_cache()
    if splits is None:
        splits = find_splits(raw_dir, src_lang, tgt_lang)
    elif splits[:2] != ["train", "valid"] or len(splits) < 3 or len(set(splits)) != len(splits):
        raise ValueError(f"splits must be ['train', 'valid', <one or more test sets>], got {splits}")
    langs = (src_lang, tgt_lang)
    raw = {s: [raw_dir / f"{s}.{lang}" for lang in langs] for s in splits}
    p = dict(
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        bpe_vocab_size=bpe_vocab_size,
        bpe_merges=bpe_merges,
        bpe_min_frequency=bpe_min_frequency,
        max_pairs=max_pairs,
        seed=seed,
        min_len=min_len,
        max_len=max_len,
        max_ratio=max_ratio,
        aggressive_dash_splits=aggressive_dash_splits,
        padding_factor=padding_factor,
        splits=splits,
        pipeline_version=PIPELINE_VERSION,
        raw_digests={f"{s}.{lang}": file_digest(path) for s in splits for lang, path in zip(langs, raw[s])},
    )
    p.update({k: v for k, v in dict(tokenizer=tokenizer).items() if v != _MT_DEFAULTS[k]})
    with TRANSLATION_DATA.build(out_dir, p, check_inputs=lambda: check_parallel_files(raw)) as runner:
        if runner is not None:
            _build(runner, p, raw, splits, langs, workers, tokenizer)
    return out_dir


def _build(runner: Preparation, p: dict, raw: dict, splits: list[str], langs: tuple, workers, tokenizer: str) -> None:
    """The steps of :func:`prepare_translation_data`, under ``runner.root`` (beside the data set's folder)."""
    root = runner.root
    bpe_vocab_size, bpe_merges, bpe_min_frequency = p["bpe_vocab_size"], p["bpe_merges"], p["bpe_min_frequency"]
    padding_factor = p["padding_factor"]
    step_params = {k: v for k, v in p.items() if k not in ("raw_digests", "splits")}
    run_p = dict(step_params, workers=workers or default_workers(), tokenizer=tokenizer)
    work = root / "work"
    tok = {s: [work / "tok" / f"{s}.{lang}" for lang in langs] for s in splits}
    text = {s: [work / "text" / f"{s}.{lang}" for lang in langs] for s in splits}
    seg = {s: [work / "bpe" / f"{s}.{lang}" for lang in langs] for s in splits}
    codes, dict_path = root / "bpe.codes", root / "dict.txt"

    token_keys = ("src_lang", "tgt_lang", "aggressive_dash_splits")
    token_keys += tuple(k for k in _MT_DEFAULTS if k in step_params)  # only when not MT's default
    for s in splits:
        keys = token_keys + (("max_pairs", "seed", "min_len", "max_len", "max_ratio") if s == "train" else ())
        runner.run(
            f"tokenize-{s}",
            {k: step_params[k] for k in keys},
            raw[s],
            tok[s] + text[s],
            lambda outs, s=s: _tokenize_split(raw[s], outs, is_train=s == "train", p=run_p),
        )

    def build_codes(outs: list[Path]) -> None:
        merges = learn_bpe(
            _Lines(tok["train"]), vocab_size=bpe_vocab_size, merges=bpe_merges, min_frequency=bpe_min_frequency
        )
        log.info("learned %d BPE merges", len(merges))
        save_codes(merges, outs[0])

    bpe_keys = ("bpe_vocab_size", "bpe_merges", "bpe_min_frequency", "pipeline_version")
    runner.run("bpe-learn", {k: step_params[k] for k in bpe_keys}, tok["train"], [codes], build_codes)

    for s in splits:

        def apply_bpe(outs: list[Path], s: str = s) -> None:
            bpe = BPE.from_file(codes)
            for src_file, out in zip(tok[s], outs):
                _write_lines(out, (bpe.apply(line) for line in _read_lines(src_file)))

        runner.run(f"bpe-apply-{s}", {}, [codes, *tok[s]], seg[s], apply_bpe)

    def build_dictionary(outs: list[Path]) -> None:
        counts: Counter = Counter()
        for line in _Lines(seg["train"]):
            counts.update(line.split())
        Dictionary.build(counts, padding_factor=padding_factor).save(outs[0])

    runner.run("dictionary", {"padding_factor": padding_factor}, seg["train"], [dict_path], build_dictionary)
    dictionary = Dictionary.load(dict_path)

    for s in splits:
        outs = [f for lang in langs for f in split_files(root, s, lang)]

        def binarize(tmps: list[Path], s: str = s) -> None:
            for i in range(2):
                _binarize(dictionary, seg[s][i], text[s][i], tmps[4 * i : 4 * i + 4])

        runner.run(f"binarize-{s}", {}, [dict_path, *seg[s], *text[s]], outs, binarize)

    runner.commit(_manifest(root, p, splits, dictionary, codes, tokenizer))
    log.info("steps run: %s; skipped: %s", runner.ran or "none", runner.skipped or "none")


def _manifest(out_dir: Path, p: dict, splits: list[str], dictionary: Dictionary, codes: Path, tokenizer: str) -> dict:
    files = [out_dir / "dict.txt", codes]
    stats, targets = {}, {}
    for s in splits:
        entry = {}
        for side, lang in (("src", p["src_lang"]), ("tgt", p["tgt_lang"])):
            paths = split_files(out_dir, s, lang)
            files += paths
            ids = RaggedArray(paths[0], paths[1])
            entry["sentences"] = len(ids)
            entry[f"{side}_tokens"] = int(ids.sizes.sum())
            entry[f"{side}_unk"] = int(np.count_nonzero(np.asarray(ids.data) == UNK))
            if side == "tgt" and s in ("train", "valid"):
                targets[s] = ids.data  # every target id, EOS included
        stats[s] = entry
    # Not a preparation parameter: data prepared before it existed stays valid (and is not rebuilt);
    # b2t_lib.data.unigram computes it on first use and caches it next to this manifest.
    bits = unigram_cross_entropy(targets["train"], targets["valid"], len(dictionary))
    manifest = {
        "format": FORMAT,
        "params": p,
        "src_lang": p["src_lang"],
        "tgt_lang": p["tgt_lang"],
        "splits": splits,
        "test_splits": splits[2:],
        # How the loader encodes raw text and decodes model output (Moses-detokenized or not),
        # and what the stored references are: raw lines (moses) or the tokenized text.
        "tokenizer": tokenizer,
        "references": "raw" if tokenizer == "moses" else "tokenized",
        "vocab_size": len(dictionary),
        "bpe_merges_learned": len(load_codes(codes)),
        "stats": stats,
        "unigram": {"valid": unigram_record(bits)},  # the "Training failed" bar (b2t_lib.train.failure)
        "files": {str(f.relative_to(out_dir)): describe_file(f) for f in files},
    }
    log.info("unigram baseline on valid: %.3f bits/token", bits)
    return manifest  # committed last: its presence means "ready"
