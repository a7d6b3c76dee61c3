"""The BPE learner against ``subword-nmt`` 0.3.8 (PyPI), the tool behind the paper's data, as an oracle.

The two differ in one rule only, which of two equally frequent pairs is merged first (``b2t_lib/data/bpe.py``'s
docstring says why the course keeps its own): with ``ties="larger"`` the merges are ``subword-nmt``'s exactly, and
with the default the first merge that differs is a tie that the two rules break the other way round."""

import io
import random
from collections import Counter

import pytest

from b2t_lib.data.bpe import END_OF_WORD, _merge_word, learn_bpe

learn_subword_nmt = pytest.importorskip("subword_nmt.learn_bpe").learn_bpe


def subword_nmt_merges(lines: list[str], merges: int) -> list[tuple[str, str]]:
    codes = io.StringIO()
    learn_subword_nmt(io.StringIO("\n".join(lines) + "\n"), codes, merges, min_frequency=2)
    header, *rows = codes.getvalue().splitlines()
    assert header == "#version: 0.2"
    return [tuple(row.split(" ")) for row in rows]


def corpus_with_ties(seed: int) -> list[str]:
    """Few letters, short words, small counts: many pairs share a count at every step."""
    rng = random.Random(seed)
    letters = "abcdef"[: 3 + seed % 4]
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 7))) for _ in range(400)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(300)]


def pair_counts(lines: list[str], merges: list[tuple[str, str]]) -> Counter:
    """How often each adjacent pair occurs (weighted by word frequency) after ``merges`` were applied."""
    words = Counter(word for line in lines for word in line.split())
    counts: Counter = Counter()
    for word, freq in words.items():
        symbols = tuple(word[:-1]) + (word[-1] + END_OF_WORD,)
        for first, second in merges:
            symbols = _merge_word(symbols, first, second)
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += freq
    return counts


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("merges", [50, 400])
def test_with_subword_nmts_tie_rule_the_merges_are_subword_nmts(seed, merges):
    lines = corpus_with_ties(seed)
    assert learn_bpe(lines, merges=merges, ties="larger") == subword_nmt_merges(lines, merges)


@pytest.mark.parametrize("seed", range(6))
def test_the_default_differs_from_subword_nmt_only_where_two_pairs_tie(seed):
    lines = corpus_with_ties(seed)
    ours, theirs = learn_bpe(lines, merges=400), subword_nmt_merges(lines, 400)
    step = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)  # a corpus with ties: they part somewhere
    counts = pair_counts(lines, ours[:step])  # the same merges so far
    best = max(counts.values())
    assert counts[ours[step]] == counts[theirs[step]] == best, "both take a pair of the highest count"
    assert ours[step] == min(p for p, c in counts.items() if c == best)  # the course: the smallest of the tied
    assert theirs[step] == max(p for p, c in counts.items() if c == best)  # subword-nmt: the largest


def test_an_unknown_tie_rule_is_refused():
    with pytest.raises(ValueError, match="ties='hash'"):
        learn_bpe(["a b"], merges=1, ties="hash")
