#!/usr/bin/env python
"""Prepare WikiText-103 for word-level language modeling (Table 4), or any tokenized corpus.

    # the benchmark from the Hugging Face Hub (Salesforce/wikitext, config wikitext-103-v1)
    python data_scripts/prepare_wikitext103.py --out-dir data/wikitext103
    # offline, from the Hub's parquet files copied by hand (train-*.parquet, validation-*.parquet, test-*.parquet)
    python data_scripts/prepare_wikitext103.py --parquet-dir /path/to/wikitext-103-v1 --out-dir data/wikitext103
    # any corpus: DIR/{train,valid,test}.txt, whitespace-tokenized, one line per line
    python data_scripts/prepare_wikitext103.py --from-files DIR --out-dir data/my_lm [--min-count 3]

Every line becomes its tokens plus an end-of-line symbol (blank lines included); the vocabulary
comes from the training split only, ordered by frequency (fairseq's dictionary); each split
becomes one memory-mapped stream of ids. A thin command line over b2t_lib.data.lm; see
data_scripts/README.md. Re-running skips finished steps and rebuilds damaged or partial outputs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from b2t_lib.errors import ArgumentParser, UserError, run_command  # noqa: E402

from b2t_lib.data.lm import (
    HUB_SPLITS,
    WIKITEXT103_ROWS,
    WIKITEXT103_VOCAB,  # noqa: E402
    download_wikitext103,
    prepare_lm_data,
    wikitext103_sizes,
)
from b2t_lib.data.steps import parameter_defaults, read_json  # noqa: E402

DEFAULTS = {**parameter_defaults(download_wikitext103), **parameter_defaults(prepare_lm_data)}  # the functions'


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("data/wikitext103"),
        help="where the prepared data set goes (default: %(default)s)",
    )
    parser.add_argument(
        "--raw-dir",
        type=Path,
        default=None,
        help="where the text written from the Hub or parquet files goes (default: OUT_DIR/raw)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--from-files",
        type=Path,
        default=None,
        metavar="DIR",
        help="read DIR/train.txt, DIR/valid.txt, DIR/test.txt (whitespace-tokenized text) "
        "instead of WikiText-103; the WikiText-103 size checks are off",
    )
    source.add_argument(
        "--parquet-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="read local parquet files with the Hub's layout (a 'text' column; files "
        "train-*.parquet, validation-*.parquet, test-*.parquet) instead of the Hub",
    )
    parser.add_argument("--dataset", default=DEFAULTS["dataset"], help="Hub dataset id (default: %(default)s)")
    parser.add_argument(
        "--config",
        default=DEFAULTS["config"],
        help="Hub config (default: %(default)s, the tokenized <unk>-mapped benchmark)",
    )
    parser.add_argument(
        "--min-count",
        type=int,
        default=DEFAULTS["min_count"],
        metavar="N",
        help="map training words seen fewer than N times to <unk> (default: %(default)s, keep all: "
        "WikiText-103 is already mapped); valid/test words outside the vocabulary become "
        "<unk> when training has <unk>, and are an error otherwise",
    )
    parser.add_argument(
        "--padding-factor",
        type=int,
        default=DEFAULTS["padding_factor"],
        help="pad the dictionary size to a multiple of this (fairseq-preprocess: %(default)s)",
    )
    parser.add_argument(
        "--expected-vocab",
        type=int,
        default=None,
        metavar="N",
        help="check that the distinct training words plus the end-of-line symbol number N "
        f"(default: {WIKITEXT103_VOCAB:,} for WikiText-103, no check with --from-files; 0: no check)",
    )
    parser.add_argument(
        "--no-checks",
        action="store_true",
        help=f"skip the WikiText-103 size checks (rows per split "
        f"{', '.join(f'{n:,}' for n in WIKITEXT103_ROWS.values())}; vocabulary "
        f"{WIKITEXT103_VOCAB:,}), e.g. for a modified copy",
    )
    parser.add_argument("--cache-dir", default=None, help="Hugging Face datasets cache folder")
    args = parser.parse_args(argv)
    if args.min_count < 0:
        parser.error("--min-count must be >= 0")
    if args.parquet_dir is not None and not args.parquet_dir.is_dir():
        parser.error(f"--parquet-dir {args.parquet_dir} is not a folder")
    return args


def parquet_files(folder: Path) -> dict[str, list[str]]:
    """``{'train': [...], 'validation': [...], 'test': [...]}`` from the Hub's file names in ``folder``."""
    files = {}
    for hub_split in HUB_SPLITS.values():
        found = sorted(str(p) for p in folder.glob(f"{hub_split}-*.parquet"))
        if not found:
            raise UserError(
                f"{folder} has no {hub_split}-*.parquet file",
                todo=f"use the Hub's names, e.g. {hub_split}-00000-of-00001.parquet",
            )
        files[hub_split] = found
    return files


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("b2t_lib.data").setLevel(logging.INFO)
    checks = not args.no_checks and args.from_files is None  # the WikiText-103 sizes
    if args.no_checks or args.expected_vocab == 0:
        expected_vocab = None
    elif args.expected_vocab is not None:
        expected_vocab = args.expected_vocab
    else:
        expected_vocab = wikitext103_sizes()["vocab"] if checks else None
    if args.from_files is not None:
        raw_dir = args.from_files
    else:
        raw_dir = args.raw_dir or args.out_dir / "raw"
        if args.parquet_dir is not None:
            download_wikitext103(
                raw_dir,
                dataset="parquet",
                config=None,
                cache_dir=args.cache_dir,
                data_files=parquet_files(args.parquet_dir),
                check_rows=checks,
            )
        else:
            download_wikitext103(
                raw_dir, dataset=args.dataset, config=args.config, cache_dir=args.cache_dir, check_rows=checks
            )
    out = prepare_lm_data(
        raw_dir,
        args.out_dir,
        min_count=args.min_count,
        padding_factor=args.padding_factor,
        expected_vocab=expected_vocab,
    )
    manifest = read_json(out / "manifest.json")
    vocab = manifest["vocabulary"]
    print(
        f"vocabulary: {vocab['word_types']:,} distinct training words (<unk> included) + end-of-line = "
        f"{vocab['word_types'] + 1:,}; dictionary {manifest['vocab_size']:,} ids (4 specials, padding to a "
        f"multiple of {args.padding_factor})"
    )
    for split, stats in manifest["stats"].items():
        print(f"{split}: {stats['lines']:,} lines, {stats['tokens']:,} tokens, <unk> rate {stats['unk_rate']:.4f}")
    unigram = manifest["unigram"]["valid"]
    print(f"unigram baseline on valid: {unigram['bits_per_token']:.3f} bits/token (perplexity {unigram['ppl']:.1f})")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
