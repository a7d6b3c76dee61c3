"""Download WMT'14 En-De training data and newstest2010-2016 as plain text (needs the network).

Sources (docs/data.md §1a, §1b), all parquet on the Hugging Face Hub, read with ``datasets``:

* train: ``wmt/wmt14`` config ``de-en`` split ``train`` (4,508,785 pairs: Europarl v7,
  CommonCrawl, News Commentary v9; raw, untokenized);
* newstest2013 (also the validation set, as in the paper) = ``wmt/wmt14`` ``validation``;
  newstest2014 = ``wmt/wmt14`` ``test`` (the *full* 3,003-line set, as fairseq/Vaswani);
  newstest2015/2016 = ``wmt/wmt16`` ``validation``/``test``;
  newstest2010-2012 = ``lighteval/sacrebleu_manual`` configs ``wmt10_en-de`` ... (built from
  sacrebleu; its ``wmt14_en-de`` is probably the *filtered* 2,737-line set, hence last choice).

Every test set is checked against its known line count and the next source is tried on a
mismatch; the last resort is sacrebleu's own download from statmt.org (``wmt14/full`` for 2014).
Files written: ``train.{en,de}``, ``valid.{en,de}``, ``newstest20XX.{en,de}`` in ``raw_dir``,
each atomically and recorded like every other pipeline step, so a re-run skips them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

from .inputs import InputError, SourceError
from .steps import StepRunner

log = logging.getLogger("b2t_lib.data")

NEWSTEST_LINES = {2010: 2489, 2011: 3003, 2012: 3003, 2013: 3000, 2014: 3003, 2015: 2169, 2016: 2999}
LIGHTEVAL = "lighteval/sacrebleu_manual"
# Candidate sources per year, in order of preference: (hub id, config, split).
NEWSTEST_SOURCES = {
    2010: [(LIGHTEVAL, "wmt10_en-de", "test")],
    2011: [(LIGHTEVAL, "wmt11_en-de", "test")],
    2012: [(LIGHTEVAL, "wmt12_en-de", "test")],
    2013: [("wmt/wmt14", "de-en", "validation"), (LIGHTEVAL, "wmt13_en-de", "test")],
    2014: [("wmt/wmt14", "de-en", "test"), (LIGHTEVAL, "wmt14_en-de", "test")],
    2015: [("wmt/wmt16", "de-en", "validation"), (LIGHTEVAL, "wmt15_en-de", "test")],
    2016: [("wmt/wmt16", "de-en", "test"), (LIGHTEVAL, "wmt16_en-de", "test")],
}
SACREBLEU_NAMES = {2014: "wmt14/full"}  # other years: f"wmt{yy}"
TRAIN_MIN_PAIRS = 4_000_000  # wmt/wmt14 de-en train has 4,508,785


def wmt14_sizes() -> dict:
    """What a download must find: ``{"train_min_pairs", "newstest_lines": {year: lines}}``, the release's
    sizes (or, under the rehearsal, those of its miniature copy: :func:`b2t_lib.presets.source_sizes`)."""
    from ..presets import source_sizes

    return source_sizes("wmt14_en_de", {"train_min_pairs": TRAIN_MIN_PAIRS, "newstest_lines": dict(NEWSTEST_LINES)})


def _pairs(dataset, batch_size: int = 10_000) -> Iterator[tuple[str, str]]:
    """(en, de) pairs from a ``datasets`` split with a ``translation`` column or flat columns."""
    for batch in dataset.iter(batch_size=batch_size):
        if "translation" in batch:
            for row in batch["translation"]:
                yield row["en"], row["de"]
        else:
            yield from zip(batch["en"], batch["de"])


def _write_pairs(pairs, en_path: Path, de_path: Path) -> int:
    n = 0
    with (
        open(en_path, "w", encoding="utf-8", newline="\n") as en,
        open(de_path, "w", encoding="utf-8", newline="\n") as de,
    ):
        for src, tgt in pairs:
            # One sentence per line: inner line breaks would shift every following line.
            en.write(" ".join(src.split("\n")) + "\n")
            de.write(" ".join(tgt.split("\n")) + "\n")
            n += 1
    return n


def _newstest_pairs(year: int, cache_dir: str | None, expected: int) -> list[tuple[str, str]]:
    from datasets import load_dataset

    problems = []
    for repo, config, split in NEWSTEST_SOURCES[year]:
        try:
            pairs = list(_pairs(load_dataset(repo, config, split=split, cache_dir=cache_dir)))
        except Exception as error:  # network, missing config, changed schema: try the next source
            problems.append(f"{repo}/{config}/{split}: {type(error).__name__}: {error}")
            continue
        if len(pairs) == expected:
            log.info("newstest%d: %d lines from %s/%s/%s", year, len(pairs), repo, config, split)
            return pairs
        problems.append(f"{repo}/{config}/{split}: {len(pairs)} lines, expected {expected}")
    try:  # last resort: sacrebleu downloads the official files from statmt.org
        from sacrebleu.utils import get_reference_files, get_source_file

        name = SACREBLEU_NAMES.get(year, f"wmt{year % 100}")
        with open(get_source_file(name, "en-de"), encoding="utf-8") as f:
            en = f.read().rstrip("\n").split("\n")
        with open(get_reference_files(name, "en-de")[0], encoding="utf-8") as f:
            de = f.read().rstrip("\n").split("\n")
        if len(en) == len(de) == expected:
            return list(zip(en, de))
        problems.append(f"sacrebleu {name}: {len(en)}/{len(de)} lines, expected {expected}")
    except Exception as error:
        problems.append(f"sacrebleu: {type(error).__name__}: {error}")
    raise SourceError(
        f"could not get newstest{year} with {expected} lines:\n  "
        + "\n  ".join(problems)
        + "\nOn a machine without Hub access, put the files in a folder and use --from-files."
    )


def download_wmt14_en_de(
    raw_dir: str | Path, *, cache_dir: str | None = None, years: tuple[int, ...] = tuple(NEWSTEST_LINES)
) -> Path:
    """Write the raw WMT'14 En-De files into ``raw_dir`` (about 1.4 GB; 0.8 GB download)."""
    raw_dir = Path(raw_dir)
    runner = StepRunner(raw_dir, raw_dir / ".steps")
    sizes = wmt14_sizes()

    def build_train(outs: list[Path]) -> None:
        from datasets import load_dataset

        train = load_dataset("wmt/wmt14", "de-en", split="train", cache_dir=cache_dir)
        n = _write_pairs(_pairs(train), outs[0], outs[1])
        log.info("train: %d pairs", n)
        if n < sizes["train_min_pairs"]:
            raise SourceError(
                f"wmt/wmt14 de-en train has {n:,} pairs, expected at least "
                f"{sizes['train_min_pairs']:,} (the release has 4,508,785); the Hub copy changed"
            )

    runner.run(
        "download-train",
        {"source": "wmt/wmt14 de-en train"},
        [],
        [raw_dir / "train.en", raw_dir / "train.de"],
        build_train,
    )
    for year in years:
        name, lines = f"newstest{year}", sizes["newstest_lines"][year]
        runner.run(
            f"download-{name}",
            {"lines": lines},
            [],
            [raw_dir / f"{name}.en", raw_dir / f"{name}.de"],
            lambda outs, year=year, lines=lines: _write_pairs(
                _newstest_pairs(year, cache_dir, lines), outs[0], outs[1]
            ),
        )
    # The paper validates on newstest2013 (Figure 6): the 'valid' split is a copy of it.
    runner.run(
        "copy-valid",
        {},
        [raw_dir / "newstest2013.en", raw_dir / "newstest2013.de"],
        [raw_dir / "valid.en", raw_dir / "valid.de"],
        lambda outs: [
            out.write_bytes((raw_dir / f"newstest2013.{lang}").read_bytes()) for out, lang in zip(outs, ("en", "de"))
        ],
    )
    return raw_dir


def prepare_wmt14_en_de(
    out_dir: str | Path,
    *,
    raw_dir: str | Path | None = None,
    from_files: str | Path | None = None,
    max_pairs: int | None = None,
    bpe_merges: int | None = 32000,
    bpe_vocab_size: int | None = None,
    max_len: int = 80,
    max_ratio: float = 1.5,
    aggressive_dash_splits: bool = False,
    seed: int = 0,
    workers: int | None = None,
    cache_dir: str | None = None,
    src_lang: str = "en",
    tgt_lang: str = "de",
) -> Path:
    """Download (unless ``from_files``) and prepare WMT'14 En-De as the paper does: what
    ``data_scripts/prepare_wmt14_en_de.py`` runs and what the translation task runs when its small or
    full data is missing. ``max_pairs`` keeps a seeded random subset of the training pairs (the small
    scale); the raw download goes to ``raw_dir`` (default ``out_dir/raw``). Restartable step by step."""
    from .translation import prepare_translation_data

    out_dir = Path(out_dir)
    if from_files is not None:
        source = Path(from_files)
    else:
        if (src_lang, tgt_lang) != ("en", "de"):
            raise InputError("the WMT'14 download is English-German", todo="use from_files for other pairs")
        source = download_wmt14_en_de(raw_dir or out_dir / "raw", cache_dir=cache_dir)
    if bpe_vocab_size is not None:
        bpe_merges = None
    return prepare_translation_data(
        source,
        out_dir,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        bpe_vocab_size=bpe_vocab_size,
        bpe_merges=bpe_merges,
        max_pairs=max_pairs,
        seed=seed,
        max_len=max_len,
        max_ratio=max_ratio,
        aggressive_dash_splits=aggressive_dash_splits,
        workers=workers,
    )
