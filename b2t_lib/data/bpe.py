"""Byte-pair encoding (Sennrich et al., 2016) in the ``subword-nmt`` format.

BPE starts from characters and repeatedly merges the most frequent adjacent pair of symbols in
the training words (counted with word frequency). After :math:`K` merges the symbol inventory is
the alphabet plus :math:`K` new symbols; the paper uses :math:`K = 32000` merges learned on the
concatenated English and German training text (a *joint* vocabulary of about 37K pieces).

Words end with the marker ``</w>`` on their last character (``low`` -> ``l o w</w>``), so a piece
that ends a word differs from the same letters inside a word. On output, every piece that does
*not* end a word gets the continuation marker ``@@`` (``lowest`` -> ``low@@ est``), the format of
``subword-nmt`` and of the paper's data; :func:`remove_bpe` undoes it.

Both learning (:func:`learn_bpe`, a heap over pair counts with incremental updates) and applying
(:class:`BPE`, with a per-word cache) are written out here with ``subword-nmt``'s semantics; ties
between equally frequent pairs are broken by the pair itself, so the merges are the same on
every machine (HF ``tokenizers`` breaks ties by hash order and differs from run to run). The
codes file is ``subword-nmt``'s (``#version: 0.2``).

The one difference from ``subword-nmt`` (0.3.8, ``learn_bpe.py``) is which of two equally frequent pairs is
merged first. It takes the *larger* pair (``max(stats, key=lambda x: (stats[x], x))``); the course takes the
*smaller* one by default, the rule every data set it prepares was built with (the synthetic pairs of the tiny
scale among them, so the stored notebook outputs rest on it). ``ties="larger"`` gives ``subword-nmt``'s merges
exactly (``tests/test_bpe_subword_nmt.py`` compares them on a corpus with many ties). Both rules pick a pair of
the highest count, so they differ only in the order of equally frequent merges and, through it, in which pairs
a later merge sees.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

END_OF_WORD = "</w>"
CONTINUATION = "@@"
CODES_HEADER = "#version: 0.2"


def _merge_word(word: tuple[str, ...], first: str, second: str) -> tuple[str, ...]:
    """Replace every adjacent (first, second) in ``word`` by their concatenation, left to right."""
    out, i = [], 0
    while i < len(word):
        if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
            out.append(first + second)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


class _LargerFirst(tuple):
    """A pair that sorts before the pairs smaller than it: the heap then pops the larger of equal counts."""

    __slots__ = ()

    def __lt__(self, other: tuple) -> bool:
        return tuple.__gt__(self, other)


def learn_bpe(
    lines: Iterable[str],
    *,
    vocab_size: int | None = None,
    merges: int | None = None,
    min_frequency: int = 2,
    ties: str = "smaller",
) -> list[tuple[str, str]]:
    r"""Learn BPE merges from whitespace-tokenized ``lines`` (source and target together).

    Give exactly one of ``merges`` (the paper's 32000) or ``vocab_size``, the number of BPE
    symbols: the initial alphabet (characters, with and without ``</w>``) plus the merges.
    Each step merges the pair with the highest count

    .. math:: (a, b)^\ast = \arg\max_{(a,b)} \sum_{w} \mathrm{freq}(w)\,\#_{(a,b)}(w),

    ties broken by the smaller pair (so the result is the same on every machine; ``ties="larger"``: by the
    larger one, as ``subword-nmt`` does), and stops early when the best pair is seen fewer than
    ``min_frequency`` times (``subword-nmt``: 2).
    """
    counts: Counter = Counter()
    for line in lines:
        counts.update(line.split())
    return learn_bpe_from_counts(counts, vocab_size=vocab_size, merges=merges, min_frequency=min_frequency, ties=ties)


def learn_bpe_from_counts(
    counts: dict[str, int],
    *,
    vocab_size: int | None = None,
    merges: int | None = None,
    min_frequency: int = 2,
    ties: str = "smaller",
) -> list[tuple[str, str]]:
    """:func:`learn_bpe` from the word counts of the text (word -> occurrences)."""
    if (vocab_size is None) == (merges is None):
        raise ValueError("give exactly one of vocab_size (alphabet + merges) or merges (e.g. 32000)")
    if ties not in ("smaller", "larger"):
        raise ValueError(f"ties={ties!r}: give 'smaller' (the course's data) or 'larger' (subword-nmt's rule)")
    key = tuple if ties == "smaller" else _LargerFirst  # the heap's order among pairs of equal count
    words = [tuple(w[:-1]) + (w[-1] + END_OF_WORD,) for w in sorted(counts)]
    freqs = [counts[w] for w in sorted(counts)]
    if merges is None:
        merges = max(vocab_size - len({s for w in words for s in w}), 0)

    stats: Counter = Counter()  # pair -> weighted count
    where: dict[tuple[str, str], set[int]] = defaultdict(set)  # pair -> words that may contain it
    for i, (word, freq) in enumerate(zip(words, freqs)):
        for pair in zip(word, word[1:]):
            stats[pair] += freq
            where[pair].add(i)
    # Max-heap by (count desc, then the tie rule's pair order) with lazy updates: an entry may record a count
    # that is too high (the pair lost occurrences); it is re-pushed with the true count when popped.
    heap = [(-count, key(pair)) for pair, count in stats.items()]
    heapq.heapify(heap)
    learned: list[tuple[str, str]] = []
    while heap and len(learned) < merges:
        recorded, pair = heapq.heappop(heap)
        pair = tuple(pair)
        count = stats.get(pair, 0)
        if -recorded != count:
            if count > 0:
                heapq.heappush(heap, (-count, key(pair)))
            continue
        if count < min_frequency:
            break
        learned.append(pair)
        first, second = pair
        delta: Counter = Counter()
        for i in sorted(where.pop(pair)):
            word, freq = words[i], freqs[i]
            if pair not in zip(word, word[1:]):
                continue
            merged = _merge_word(word, first, second)
            for p in zip(word, word[1:]):
                delta[p] -= freq
            for p in zip(merged, merged[1:]):
                delta[p] += freq
                where[p].add(i)
            words[i] = merged
        for p, change in delta.items():
            stats[p] += change
            if stats[p] <= 0:
                del stats[p]
            elif change > 0:  # a count that grew needs a fresh heap entry
                heapq.heappush(heap, (-stats[p], key(p)))
    return learned


def save_codes(merges: list[tuple[str, str]], path: str | Path) -> None:
    Path(path).write_text(CODES_HEADER + "\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")


def load_codes(path: str | Path) -> list[tuple[str, str]]:
    merges = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), start=1):
        if not line or (lineno == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ValueError(f"{path}:{lineno}: a BPE merge is two symbols separated by a space, got {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


class BPE:
    """Applies learned merges to tokenized text (``subword-nmt``'s ``apply_bpe``)."""

    def __init__(self, merges: list[tuple[str, str]]) -> None:
        # Earlier merges have priority: rank = position in the learned sequence.
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.never = len(merges)
        self.cache: dict[str, str] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> "BPE":
        return cls(load_codes(path))

    def segment_word(self, word: str) -> list[str]:
        """Split one token into pieces, ``@@`` on all but the last (``lowest`` -> ``low@@ est``)."""
        symbols = list(word[:-1]) + [word[-1] + END_OF_WORD]
        while len(symbols) > 1:
            # The adjacent pair that was learned first is merged next, everywhere in the word.
            pairs = set(zip(symbols, symbols[1:]))
            best = min(pairs, key=lambda pair: self.ranks.get(pair, self.never))
            if best not in self.ranks:
                break
            symbols = list(_merge_word(tuple(symbols), *best))
        pieces = [s + CONTINUATION for s in symbols[:-1]]
        last = symbols[-1]
        pieces.append(last[: -len(END_OF_WORD)] if last.endswith(END_OF_WORD) else last + CONTINUATION)
        return pieces

    def apply(self, line: str) -> str:
        """Segment every whitespace-separated token of a tokenized line."""
        out = []
        for token in line.split():
            segmented = self.cache.get(token)
            if segmented is None:
                segmented = self.cache[token] = " ".join(self.segment_word(token))
            out.append(segmented)
        return " ".join(out)


def remove_bpe(text: str) -> str:
    """Undo the segmentation: ``low@@ est`` -> ``lowest`` (fairseq's ``--remove-bpe``)."""
    return (text + " ").replace(CONTINUATION + " ", "").rstrip()
