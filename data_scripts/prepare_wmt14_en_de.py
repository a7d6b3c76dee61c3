#!/usr/bin/env python
"""Prepare WMT'14 English->German as in the paper (Section 6.1.1), or any local parallel corpus.

    # full data (4.5M pairs, 32K joint BPE merges, newstest2010-2016), needs the Hugging Face Hub
    python data_scripts/prepare_wmt14_en_de.py --out-dir data/wmt14_en_de
    # a 1M-pair random subset for the 'small' scale
    python data_scripts/prepare_wmt14_en_de.py --out-dir data/wmt14_en_de_1m --max-pairs 1000000
    # offline: plain-text files train/valid/<test>.{en,de}, same processing
    python data_scripts/prepare_wmt14_en_de.py --from-files /path/to/raw --out-dir data/my_corpus

A thin command line over :mod:`b2t_lib.data`; see data_scripts/README.md for every step.
Re-running skips finished steps and rebuilds damaged or partial outputs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from b2t_lib.errors import ArgumentParser, UserError, run_command  # noqa: E402

from b2t_lib.data import prepare_wmt14_en_de  # noqa: E402
from b2t_lib.data.steps import parameter_defaults  # noqa: E402

DEFAULTS = parameter_defaults(prepare_wmt14_en_de)  # every default below is the function's


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("data/wmt14_en_de"),
        help="where the prepared data set goes (default: %(default)s)",
    )
    parser.add_argument(
        "--raw-dir", type=Path, default=None, help="where downloaded raw text goes (default: OUT_DIR/raw)"
    )
    parser.add_argument(
        "--from-files",
        type=Path,
        default=None,
        metavar="DIR",
        help="skip the download; DIR holds train/valid/<test>.{SRC,TGT}, one sentence per line",
    )
    parser.add_argument("--src-lang", default=DEFAULTS["src_lang"], help="source language (default: %(default)s)")
    parser.add_argument("--tgt-lang", default=DEFAULTS["tgt_lang"], help="target language (default: %(default)s)")
    parser.add_argument(
        "--max-pairs",
        type=int,
        default=None,
        help="keep a seeded random subset of this many training pairs (before cleaning)",
    )
    bpe = parser.add_mutually_exclusive_group()
    bpe.add_argument(
        "--bpe-merges",
        type=int,
        default=None,
        help=f"number of BPE merges (default: {DEFAULTS['bpe_merges']}, the paper)",
    )
    bpe.add_argument(
        "--bpe-vocab-size", type=int, default=None, help="number of BPE symbols instead (alphabet + merges)"
    )
    parser.add_argument(
        "--max-len",
        type=int,
        default=DEFAULTS["max_len"],
        help="cleaning: max tokens per training sentence (default: %(default)s)",
    )
    parser.add_argument(
        "--max-ratio",
        type=float,
        default=DEFAULTS["max_ratio"],
        help="cleaning: max length ratio of a training pair (default: %(default)s)",
    )
    parser.add_argument(
        "--aggressive-dash-splits",
        action="store_true",
        help="Moses -a: split hyphens into @-@ (fairseq's recipe; Google's data, used by the paper, did not)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULTS["seed"], help="seed of the --max-pairs subset (default: %(default)s)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes for tokenization, BPE segmentation and binarization (default: all cores)",
    )
    parser.add_argument("--cache-dir", default=None, help="Hugging Face datasets cache folder")
    args = parser.parse_args(argv)
    if args.bpe_merges is None and args.bpe_vocab_size is None:
        args.bpe_merges = DEFAULTS["bpe_merges"]
    if args.max_pairs is not None and args.max_pairs <= 0:
        parser.error("--max-pairs must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("b2t_lib.data").setLevel(logging.INFO)
    if args.from_files is None and (args.src_lang, args.tgt_lang) != ("en", "de"):
        raise UserError("the WMT'14 download is English-German", todo="use --from-files for other pairs")
    # The same function the translation task calls when its small/full data is missing.
    out = prepare_wmt14_en_de(
        args.out_dir,
        raw_dir=args.raw_dir,
        from_files=args.from_files,
        src_lang=args.src_lang,
        tgt_lang=args.tgt_lang,
        bpe_vocab_size=args.bpe_vocab_size,
        bpe_merges=args.bpe_merges,
        max_pairs=args.max_pairs,
        seed=args.seed,
        max_len=args.max_len,
        max_ratio=args.max_ratio,
        aggressive_dash_splits=args.aggressive_dash_splits,
        workers=args.workers,
        cache_dir=args.cache_dir,
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
