#!/usr/bin/env python
"""Prepare LibriSpeech for speech recognition as fairseq S2T does (Table 5), or any transcribed audio.

    # all of LibriSpeech: 960 h of training audio + dev/test clean/other, streamed from the Hub
    python data_scripts/prepare_librispeech.py --out-dir data/librispeech
    # the 'small' scale: train-clean-100 only (100 h) with every dev and test set
    python data_scripts/prepare_librispeech.py --out-dir data/librispeech_100h \\
        --splits train.clean.100 validation.clean validation.other test.clean test.other
    # offline: DIR/train.tsv, DIR/valid.tsv, DIR/<test>.tsv with columns 'audio' (path relative to DIR) and 'text'
    python data_scripts/prepare_librispeech.py --from-files DIR --out-dir data/my_speech --vocab-size 500

Features: mono, 16 kHz, 80-dim Kaldi fbank (25 ms / 10 ms), stored as float16; utterance CMVN
when loading. Filter: fewer than 5 frames, training utterances over 3000 frames, empty
transcripts (counted in manifest.json). Vocabulary: SentencePiece unigram on the lower-cased
training transcripts. A thin command line over b2t_lib.data.speech; see data_scripts/README.md.
Re-running skips finished steps and rebuilds damaged or partial outputs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from b2t_lib.errors import ArgumentParser, run_command  # noqa: E402

from b2t_lib.data.speech import prepare_librispeech, prepare_speech_from_files  # noqa: E402
from b2t_lib.data.speech_sources import HUB_SPLITS, SMALL_HUB_SPLITS  # noqa: E402
from b2t_lib.data.steps import parameter_defaults  # noqa: E402

DEFAULTS = parameter_defaults(prepare_librispeech)  # every default below is the function's


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("data/librispeech"),
        help="where the prepared data set goes (default: %(default)s)",
    )
    parser.add_argument(
        "--from-files",
        type=Path,
        default=None,
        metavar="DIR",
        help="read local audio instead of the Hub: DIR/train.tsv, DIR/valid.tsv and one or more "
        "DIR/<test>.tsv, each with a header naming the tab-separated columns 'audio' (a path "
        "relative to DIR; WAV, FLAC, OGG or any format libsndfile reads, any sample rate, "
        "mono or stereo) and 'text'",
    )
    parser.add_argument(
        "--splits",
        nargs="+",
        default=list(DEFAULTS["splits"]),
        choices=list(HUB_SPLITS),
        metavar="SPLIT",
        help=f"Hub splits to prepare, one or more of: {' '.join(HUB_SPLITS)} (default: all). "
        "The training splits become the "
        "'train' split; validation.clean/other -> dev_clean/dev_other, test.clean/other -> "
        f"test_clean/test_other. The small scale uses: {' '.join(SMALL_HUB_SPLITS)}",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=DEFAULTS["vocab_size"],
        help="SentencePiece unigram pieces, specials included (default: %(default)s, fairseq S2T); "
        "a small corpus needs fewer, and the error message says the largest it supports",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes that decode audio and compute features (default: all cores)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULTS["seed"], help="SentencePiece training seed (default: %(default)s)"
    )
    parser.add_argument(
        "--min-frames",
        type=int,
        default=DEFAULTS["min_frames"],
        help="drop utterances with fewer frames, in every split (default: %(default)s)",
    )
    parser.add_argument(
        "--max-train-frames",
        type=int,
        default=DEFAULTS["max_train_frames"],
        help="drop training utterances with more frames (10 ms each; default: %(default)s)",
    )
    parser.add_argument("--dataset", default=DEFAULTS["dataset"], help="Hub dataset id (default: %(default)s)")
    parser.add_argument("--config", default=DEFAULTS["config"], help="Hub dataset config (default: %(default)s)")
    parser.add_argument("--revision", default=None, help="Hub revision (commit) to pin (default: the latest)")
    parser.add_argument("--cache-dir", default=None, help="Hugging Face datasets cache folder")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("vocab_size", "workers", "min_frames", "max_train_frames"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("b2t_lib.data").setLevel(logging.INFO)
    common = dict(
        vocab_size=args.vocab_size,
        seed=args.seed,
        workers=args.workers,
        min_frames=args.min_frames,
        max_train_frames=args.max_train_frames,
    )
    if args.from_files is not None:
        out = prepare_speech_from_files(args.from_files, args.out_dir, **common)
    else:
        out = prepare_librispeech(
            args.out_dir,
            splits=args.splits,
            dataset=args.dataset,
            config=args.config,
            revision=args.revision,
            cache_dir=args.cache_dir,
            **common,
        )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
