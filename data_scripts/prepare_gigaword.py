#!/usr/bin/env python
"""Prepare Gigaword headline generation as in the paper (Section 6.2.1), or your own article/headline pairs.

    # full data (3.8M pairs, 32K joint BPE merges, the 1,951-pair test set), needs the Hugging Face Hub
    python data_scripts/prepare_gigaword.py --out-dir data/gigaword
    # a 500K-pair random subset of the training pairs for the 'small' scale (test set unchanged)
    python data_scripts/prepare_gigaword.py --out-dir data/gigaword_small --max-pairs 500000
    # offline, with ggw_data.zip copied from a networked machine
    python data_scripts/prepare_gigaword.py --zip /path/to/ggw_data.zip --out-dir data/gigaword
    # your own pairs: DIR/{train,valid,<test>}.{article,headline}, one example per line
    python data_scripts/prepare_gigaword.py --from-files DIR --out-dir data/my_headlines

A thin command line over :mod:`b2t_lib.data`; see data_scripts/README.md for every step.
Re-running skips finished steps and rebuilds damaged or partial outputs; bad input files are
reported (file and line) before anything is written.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from b2t_lib.errors import ArgumentParser, run_command  # noqa: E402

from b2t_lib.data import download_gigaword, prepare_summarization_data  # noqa: E402
from b2t_lib.data.steps import parameter_defaults  # noqa: E402

DEFAULTS = parameter_defaults(prepare_summarization_data)  # every default below is the function's


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("data/gigaword"),
        help="where the prepared data set goes (default: %(default)s)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--from-files",
        type=Path,
        default=None,
        metavar="DIR",
        help="skip the download; DIR holds train.article/train.headline, valid.*, and one or "
        "more test splits <name>.article/<name>.headline, one example per line, aligned "
        "by line number",
    )
    source.add_argument(
        "--zip",
        type=Path,
        default=None,
        metavar="PATH",
        help="use this copy of Harvard/gigaword's data/ggw_data.zip instead of downloading it",
    )
    parser.add_argument(
        "--raw-dir",
        type=Path,
        default=None,
        help="where the extracted Gigaword text goes (default: OUT_DIR/raw; not used with --from-files)",
    )
    parser.add_argument(
        "--no-normalize",
        action="store_true",
        help="with --from-files: the text is already tokenized and normalized (like Gigaword), "
        "only split it on whitespace. Default: normalize raw text as Rush et al. did "
        "(Penn Treebank tokenization, lower case, every digit -> #)",
    )
    parser.add_argument(
        "--max-pairs",
        type=int,
        default=None,
        help="keep a seeded random subset of this many training pairs (valid and test unchanged)",
    )
    bpe = parser.add_mutually_exclusive_group()
    bpe.add_argument(
        "--bpe-merges",
        type=int,
        default=None,
        help=f"number of joint BPE merges for article and headline (default: {DEFAULTS['bpe_merges']}, the paper)",
    )
    bpe.add_argument(
        "--bpe-vocab-size", type=int, default=None, help="number of BPE symbols instead (alphabet + merges)"
    )
    parser.add_argument(
        "--max-len",
        type=int,
        default=DEFAULTS["max_len"],
        help="drop training pairs whose article or headline has more tokens than this "
        "(default: keep all; Rush et al. kept Gigaword training articles under 100 words)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULTS["seed"], help="seed of the --max-pairs subset (default: %(default)s)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="tokenizer processes for --from-files normalization (default: all cores)",
    )
    parser.add_argument("--cache-dir", default=None, help="Hugging Face Hub cache folder for the download")
    args = parser.parse_args(argv)
    if args.bpe_merges is None and args.bpe_vocab_size is None:
        args.bpe_merges = DEFAULTS["bpe_merges"]
    if args.max_pairs is not None and args.max_pairs <= 0:
        parser.error("--max-pairs must be positive")
    if args.max_len is not None and args.max_len <= 0:
        parser.error("--max-len must be positive")
    if args.no_normalize and args.from_files is None:
        parser.error("--no-normalize applies to --from-files (the Gigaword release is normalized already)")
    if args.from_files is not None and args.raw_dir is not None:
        parser.error("--raw-dir is where the download goes; with --from-files the files are read in place")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("b2t_lib.data").setLevel(logging.INFO)
    common = dict(
        bpe_merges=args.bpe_merges,
        bpe_vocab_size=args.bpe_vocab_size,
        max_pairs=args.max_pairs,
        seed=args.seed,
        max_len=args.max_len,
        workers=args.workers,
    )
    if args.from_files is not None:
        out = prepare_summarization_data(
            args.from_files, args.out_dir, tokenizer="none" if args.no_normalize else "rush", **common
        )
    else:
        raw_dir = download_gigaword(args.raw_dir or args.out_dir / "raw", zip_path=args.zip, cache_dir=args.cache_dir)
        # Our own extraction, checked against the release's counts: no second file check.
        out = prepare_summarization_data(raw_dir, args.out_dir, tokenizer="none", check_files=False, **common)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
