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

Steps 1, 3 and 5 of a split of at least :data:`PARALLEL_MIN_PAIRS` pairs run on ``workers`` processes
(:mod:`.parallel`: chunks of lines out, results back in corpus order, so the files are byte for byte those of
one process); steps 2 and 4 count words on one core. ``benchmarks/bench_prepare.py`` times every step.
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
from .indexed import RaggedAppender, RaggedArray, token_dtype
from .inputs import InputError, MissingInputError, read_lines
from .parallel import default_workers, map_chunks
from .steps import DataFormat, Preparation, clear_digest_cache, describe_file, file_digest
from .text import TOKENIZERS, clean_raw_line, keep_pair, tokenize_line
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


_TOKENIZE: dict = {}  # a worker's tokenization settings (set by _set_tokenize)


def _set_tokenize(settings: dict) -> None:
    global _TOKENIZE
    _TOKENIZE = settings


def _tokenize_chunk(pairs: list[tuple[str, str]]) -> tuple[int, list[str]]:
    """Raw (source, target) lines -> (pairs kept, the text of the four output files for them).

    Each pair is cleaned of inner line breaks and tokenized; training pairs outside the cleaning limits are
    dropped. The outputs: tokens of each side, then the reference text of each side (the raw lines for Moses,
    whose output is detokenized and scored against them; the tokenized lines otherwise)."""
    t = _TOKENIZE
    blocks: list[list[str]] = [[], [], [], []]
    for raw_s, raw_t in pairs:
        raw_s, raw_t = clean_raw_line(raw_s), clean_raw_line(raw_t)
        tok_s = tokenize_line(raw_s, t["src_lang"], t["tokenizer"], aggressive_dash_splits=t["aggressive"])
        tok_t = tokenize_line(raw_t, t["tgt_lang"], t["tokenizer"], aggressive_dash_splits=t["aggressive"])
        if t["is_train"] and not keep_pair(
            len(tok_s.split()), len(tok_t.split()), min_len=t["min_len"], max_len=t["max_len"], max_ratio=t["max_ratio"]
        ):
            continue
        text_s, text_t = (raw_s, raw_t) if t["tokenizer"] == "moses" else (tok_s, tok_t)
        for block, line in zip(blocks, (tok_s, tok_t, text_s, text_t)):
            block.append(line + "\n")
    return len(blocks[0]), ["".join(block) for block in blocks]


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
        for i, pair in enumerate(zip(_read_lines(raw[0]), _read_lines(raw[1]))):
            if keep is None or keep[i]:
                yield pair

    n_lines = int(keep.sum()) if keep is not None else n_src
    tokenizer = p["tokenizer"]
    workers = p["workers"] if n_lines >= PARALLEL_MIN_PAIRS and tokenizer != "none" else 1
    settings = dict(
        src_lang=p["src_lang"],
        tgt_lang=p["tgt_lang"],
        tokenizer=tokenizer,
        aggressive=p["aggressive_dash_splits"],
        is_train=is_train,
        min_len=p["min_len"],
        max_len=p["max_len"],
        max_ratio=p["max_ratio"],
    )
    files = [open(o, "w", encoding="utf-8", newline="\n") for o in outs]
    kept = 0
    try:
        for n_kept, blocks in map_chunks(
            _tokenize_chunk, raw_pairs(), workers=workers, initializer=_set_tokenize, initargs=(settings,)
        ):
            kept += n_kept
            for f, block in zip(files, blocks):
                f.write(block)
    finally:
        for f in files:
            f.close()
    log.info("tokenized %s: %d pairs, kept %d", raw[0].stem, n_lines, kept)
    if kept == 0:
        raise InputError(
            f"no sentence pair of {raw[0].stem} survived the cleaning",
            where=raw[0].parent,
            todo="check the files and the cleaning limits (--max-len, --max-ratio)",
        )


_BPE: BPE | None = None  # a worker's merges (set by _load_bpe)
_DICTIONARY: Dictionary | None = None  # a worker's dictionary (set by _load_dictionary)


def _load_bpe(codes: str) -> None:
    global _BPE
    _BPE = BPE.from_file(codes)


def _segment_chunk(lines: list[str]) -> str:
    """Tokenized lines -> their segmentation, as the text of the output file (a newline after each line)."""
    return "".join(_BPE.apply(line) + "\n" for line in lines)


def _load_dictionary(path: str) -> None:
    global _DICTIONARY
    _DICTIONARY = Dictionary.load(path)


def _encode_chunk(pairs: list[tuple[str, str]]) -> tuple[list[int], np.ndarray, list[int], bytes]:
    """(segmented line, reference line) pairs -> the id rows (+EOS) and the UTF-8 rows, each as (lengths, flat)."""
    ids: list[int] = []
    id_lengths, text_lengths, text = [], [], []
    for segmented, reference in pairs:
        row = _DICTIONARY.encode_line(segmented)
        row.append(EOS)
        ids.extend(row)
        id_lengths.append(len(row))
        encoded = reference.rstrip("\n").encode("utf-8")
        text.append(encoded)
        text_lengths.append(len(encoded))
    return id_lengths, np.asarray(ids, dtype=token_dtype(len(_DICTIONARY))), text_lengths, b"".join(text)


def _split_workers(path: Path, workers: int) -> int:
    """``workers`` for a split of at least :data:`PARALLEL_MIN_PAIRS` lines, else 1 (this process)."""
    return workers if workers > 1 and _count_lines(path) >= PARALLEL_MIN_PAIRS else 1


def _apply_bpe(codes: Path, tok_file: Path, out: Path, workers: int) -> None:
    """Segment every line of ``tok_file`` into ``out``, chunks of lines on ``workers`` processes, in order."""
    segmented = map_chunks(
        _segment_chunk, _read_lines(tok_file), workers=workers, initializer=_load_bpe, initargs=(str(codes),)
    )
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for block in segmented:
            f.write(block)


def _binarize(dictionary_path: Path, bpe_file: Path, text_file: Path, outs: list[Path], workers: int) -> None:
    """Ids (+EOS) of the segmented lines and the UTF-8 bytes of the reference lines, as two ragged arrays."""
    dtype = token_dtype(len(Dictionary.load(dictionary_path)))
    encoded = map_chunks(
        _encode_chunk,
        zip(_read_lines(bpe_file), _read_lines(text_file)),
        workers=workers,
        initializer=_load_dictionary,
        initargs=(str(dictionary_path),),
    )
    with RaggedAppender(outs[0], outs[1], dtype) as ids, RaggedAppender(outs[2], outs[3], np.uint8) as text:
        for id_lengths, flat_ids, text_lengths, flat_text in encoded:
            ids.extend(id_lengths, flat_ids)
            text.extend(text_lengths, flat_text)


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
            for tok_file, out in zip(tok[s], outs):
                _apply_bpe(codes, tok_file, out, _split_workers(tok_file, run_p["workers"]))

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
                workers = _split_workers(seg[s][i], run_p["workers"])
                _binarize(dict_path, seg[s][i], text[s][i], tmps[4 * i : 4 * i + 4], workers)

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
