r"""WMT'14 preparation: where the time goes, per step, and what the full corpus would take on more cores.

Two probes, both on text generated here (no corpus can be downloaded on the machines this runs on):

1. **The pipeline** (``prepare_translation_data``, every step as ``data_scripts/prepare_wmt14_en_de.py`` runs it:
   Moses tokenization and cleaning, joint BPE, segmentation, dictionary, binarization) on ``--pairs`` synthetic
   sentence pairs of WMT's length (26 words a side on average, Zipf-distributed words, capitals, numbers and
   punctuation for the tokenizer to split). For each step it records the wall time, the CPU time of the main
   process and the CPU time of its worker processes.
2. **The BPE learner** (``learn_bpe_from_counts``, 32,000 merges) on word counts of ``--types`` word types, the
   counts Zipf-distributed with WMT'14's number of tokens (both sides: about 250M).

The projection to WMT'14 (``--target-pairs`` 4,508,785 pairs, ``--target-cores``) takes each step's CPU time per
pair from probe 1: the main process's part runs on one core whatever the number of cores, the workers' part
divides among the other cores, so a step takes ``max(main, workers / (cores - 1))`` per pair times the pairs, plus
the workers' start (measured). The learner's time comes from probe 2 at ``--target-types`` (the word types of
WMT'14 after Moses tokenization are not known here: docs/data.md §6 gives the time at other counts). Usage::

    python benchmarks/bench_prepare.py                                   # 100,000 pairs, 200K/500K/1M types
    python benchmarks/bench_prepare.py --pairs 20000 --types 100000      # a quick look
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import platform
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from b2t_lib.data.bpe import learn_bpe_from_counts
from b2t_lib.data.parallel import default_workers
from b2t_lib.data import translation
from b2t_lib.errors import ArgumentParser, UserError, run_command

WMT14_PAIRS = 4_508_785  # wmt/wmt14 de-en train
WMT14_TOKENS = 250_000_000  # both sides after Moses tokenization, about 27 tokens a sentence
# Word types of both sides after Moses tokenization, the number the projection uses (docs/data.md §2b).
WMT14_TYPES = 1_000_000
LETTERS = list("etaoinshrdlcumwfgypbvkjxqz") + ["ä", "ö", "ü", "ß"]
PUNCTUATION = [".", ",", ";", ":", "!", "?", '"', "(", ")", "-", "'s", "%"]


def vocabulary(size: int, seed: int = 0) -> list[str]:
    """``size`` distinct words, most frequent first: letters from a fixed random first-order Markov chain (so some
    letter pairs are far more common than others, as in a language), lengths growing with the rank (frequent
    words are short: 4 letters on average at rank 10, 10 at rank 1,000,000)."""
    rng = np.random.default_rng(seed)
    k = len(LETTERS)
    transitions = np.cumsum(rng.dirichlet(np.full(k, 0.3), size=k), axis=1)  # (k, k), cumulative per row
    words: dict[str, None] = {}
    first = 0
    while len(words) < size:
        n = int((size - len(words)) * 1.2) + 100
        ranks = np.arange(first, first + n)
        first += n
        lengths = np.clip(np.round(rng.gamma(4.0, (2.5 + 1.25 * np.log10(ranks + 1)) / 4.0)), 1, 30).astype(int)
        letters = np.empty((n, int(lengths.max())), dtype=np.int64)
        letters[:, 0] = rng.integers(0, k, n)
        for t in range(1, letters.shape[1]):  # one position of every word at a time
            u = rng.random(n)
            letters[:, t] = np.minimum((transitions[letters[:, t - 1]] < u[:, None]).sum(axis=1), k - 1)
        for row, length in zip(letters, lengths):
            words.setdefault("".join(LETTERS[i] for i in row[:length]))
            if len(words) == size:
                break
    return list(words)


def synthetic_corpus(folder: Path, pairs: int, seed: int = 0) -> None:
    """train/valid/test files of ``pairs`` (train) and 3,000 (valid, test) raw pairs, en and de."""
    rng = np.random.default_rng(seed)
    vocab = vocabulary(min(2_000_000, 20 * pairs), seed)  # more words than the corpus can draw

    def sentences(n: int, lengths: np.ndarray) -> list[str]:
        ranks = np.minimum(rng.zipf(1.25, int(lengths.sum())) - 1, len(vocab) - 1)
        marks = rng.random(int(lengths.sum()))
        lines, start = [], 0
        for n_words in lengths:
            words = []
            for r, m in zip(ranks[start : start + n_words], marks[start : start + n_words]):
                w = vocab[int(r)]
                if m < 0.08:
                    w = w.capitalize()
                elif m < 0.10:
                    w = f"{int(r) % 1000}.{int(m * 100)}"
                elif m < 0.18:
                    w += PUNCTUATION[int(m * 1000) % len(PUNCTUATION)]
                words.append(w)
            start += n_words
            lines.append(words[0].capitalize() + " " + " ".join(words[1:]) + ".")
        return lines

    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", pairs), ("valid", 3000), ("test", 3000)):
        lengths = np.clip(rng.poisson(23, n), 3, 70)  # words of the English side; German: within +-25 % of it
        other = np.clip(np.round(lengths * rng.uniform(0.8, 1.25, n)), 3, 70).astype(int)
        for lang, n_words in (("en", lengths), ("de", other)):
            (folder / f"{split}.{lang}").write_text("\n".join(sentences(n, n_words)) + "\n", encoding="utf-8")


class StepTimes(logging.Handler):
    """Collects the runner's "step NAME: done in W s (CPU C s here, K s in workers)" lines."""

    PATTERN = re.compile(r"step (\S+): done in ([\d.]+) s \(CPU ([\d.]+) s here, ([\d.]+) s in workers\)")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.steps: dict[str, tuple[float, float, float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        match = self.PATTERN.fullmatch(record.getMessage())
        if match:
            self.steps[match[1]] = tuple(float(x) for x in match.groups()[1:])


def zipf_counts(types: int, tokens: int) -> dict[str, int]:
    r"""``types`` words with counts :math:`\max(1, \mathrm{round}(T^s / r^s))`, the exponent :math:`s` chosen so
    that the counts add up to about ``tokens`` (the rarest words then occur once, as a corpus's do)."""
    ranks = np.arange(1, types + 1, dtype=np.float64)

    def total(s: float) -> float:
        return float(np.maximum(1.0, np.round((types / ranks) ** s)).sum())

    low, high = 1.0, 3.0
    for _ in range(40):  # bisection on s: total() grows with s
        mid = (low + high) / 2
        low, high = (mid, high) if total(mid) < tokens else (low, mid)
    counts = np.maximum(1, np.round((types / ranks) ** low)).astype(np.int64)
    return dict(zip(vocabulary(types), counts.tolist()))


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100_000, help="synthetic training pairs (default 100000)")
    parser.add_argument("--workers", type=int, default=default_workers(), help="worker processes (default: cores)")
    parser.add_argument("--types", type=int, nargs="*", default=[200_000, 500_000, 1_000_000], help="learner probe")
    parser.add_argument("--merges", type=int, default=32000, help="BPE merges (the paper's 32000)")
    parser.add_argument("--target-pairs", type=int, default=WMT14_PAIRS, help="pairs of the projection")
    parser.add_argument("--target-cores", type=int, default=16, help="cores of the projection")
    parser.add_argument("--target-types", type=int, default=WMT14_TYPES, help="word types of the projection")
    args = parser.parse_args()
    if args.target_types not in args.types:
        raise UserError(f"--target-types {args.target_types} is not among --types", todo="add it to --types")

    print(
        f"# {datetime.date.today()}  {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}; {args.pairs} synthetic pairs, {args.workers} workers"
    )
    translation.PARALLEL_MIN_PAIRS = args.pairs // 2  # the training split on the workers, valid/test not
    handler = StepTimes()
    logger = logging.getLogger("b2t_lib.data")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="bench_prepare_") as scratch:
        scratch = Path(scratch)
        start = time.perf_counter()
        synthetic_corpus(scratch / "raw", args.pairs)
        print(f"# corpus generated in {time.perf_counter() - start:.0f} s")
        start = time.perf_counter()
        translation.prepare_translation_data(
            scratch / "raw", scratch / "data", src_lang="en", tgt_lang="de", bpe_merges=args.merges,
            workers=args.workers,
        )  # fmt: skip
        total_wall = time.perf_counter() - start
        # The learning step counts the training words first (one core): timed again here, to project it apart
        # from the merges (whose cost depends on the word types, probe 2).
        start, cpu = time.perf_counter(), time.process_time()
        counts: Counter = Counter()
        for path in sorted((scratch / "data" / "work" / "tok").glob("train.*")):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    counts.update(line.split())
        counting = time.process_time() - cpu
        print(f"# {len(counts):,} word types in the synthetic training text; counting them: {counting:.2f} s")

    # Steps of the training split scale with the corpus; valid/test (3,000 pairs each) do not.
    print("\nstep                 wall s   main CPU s  workers CPU s   main us/pair  workers us/pair")
    scale = {}
    for name, (wall, main_cpu, workers_cpu) in handler.steps.items():
        per_pair = (main_cpu / args.pairs * 1e6, workers_cpu / args.pairs * 1e6)
        print(f"{name:18s} {wall:9.2f} {main_cpu:11.2f} {workers_cpu:14.2f} {per_pair[0]:14.1f} {per_pair[1]:16.1f}")
        if name.endswith("-train") or name == "dictionary":
            scale[name] = per_pair
    scale["bpe-learn counting"] = (counting / args.pairs * 1e6, 0.0)
    print(f"{'all (with manifest)':18s} {total_wall:9.2f}")

    print(f"\nBPE learner, {args.merges} merges, counts adding up to {WMT14_TOKENS:,} tokens:")
    learner = {}
    for types in args.types:
        counts = zipf_counts(types, WMT14_TOKENS)
        start = time.perf_counter()
        learned = learn_bpe_from_counts(counts, merges=args.merges)
        learner[types] = time.perf_counter() - start
        print(f"  {types:>9,} types: {learner[types]:7.1f} s ({len(learned)} merges)")

    # Projection: parallel steps take max(main, workers / (cores - 1)) per pair; worker start measured as the wall time
    # beyond both parts (at most a few seconds a pool); learning runs on one core.
    cores, pairs = args.target_cores, args.target_pairs
    print(f"\nprojected WMT'14 ({pairs:,} pairs, {args.target_types:,} types) on {cores} cores:")
    total = 0.0
    for name, (main_us, workers_us) in scale.items():
        seconds = max(main_us, workers_us / (cores - 1)) * 1e-6 * pairs
        wall, main_cpu, workers_cpu = handler.steps.get(name, (0.0, 0.0, 0.0))
        overhead = max(0.0, wall - main_cpu - workers_cpu / max(args.workers, 1)) if workers_cpu else 0.0
        seconds += overhead
        total += seconds
        print(f"  {name:18s} {seconds:8.0f} s   (main {main_us * 1e-6 * pairs:6.0f} s, workers "
              f"{workers_us * 1e-6 * pairs / (cores - 1):6.0f} s per core, start {overhead:.0f} s)")  # fmt: skip
    learn = learner[args.target_types]
    total += learn
    print(f"  {'learning merges':18s} {learn:8.0f} s   (probe 2, one core)")
    fixed = sum(wall for name, (wall, _, _) in handler.steps.items() if name not in scale)
    print(f"  total {total:.0f} s = {total / 60:.1f} min (target: at most 15 min)")
    print(f"  not included: valid/test steps and the manifest, which do not grow with the corpus ({fixed:.0f} s here)")
    if not math.isfinite(total):
        raise UserError("the projection is not finite; a step was not timed")


if __name__ == "__main__":
    raise SystemExit(run_command(main))
