r"""Chapter 07's exercises: ROUGE-N F1 of one headline against its reference, and the corpus score of Table 3.

7.1: :math:`m_n = \sum_g \min(c_h(g), c_r(g))`, :math:`P_n = m_n / \#\text{n-grams}(h)`,
:math:`R_n = m_n / \#\text{n-grams}(r)`, :math:`F_n = 2 P_n R_n / (P_n + R_n)`.
7.2: :math:`\text{R-N} = \frac{100}{|D|} \sum_{(h, r) \in D} F_N(h, r)` (Tables 3 and 9).
"""

from __future__ import annotations

from collections import Counter

import torch

from ..metrics import corpus_rouge, rouge_per_example
from ._core import Wrong, as_tensor, call, diagnose, exercise, number, seeded

WORDS = ("police", "say", "man", "killed", "in", "attack", "on", "the", "city", "us", "talks", "new")


def headline_pairs(count: int = 8, seed: int = 71) -> list[tuple[str, str]]:
    """Lower-case headlines of 3-9 words from a small vocabulary, so that words and bigrams repeat."""
    generator = seeded(seed)

    def headline() -> str:
        length = int(torch.randint(3, 10, (), generator=generator))
        return " ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (length,), generator=generator))

    pairs = [(headline(), headline()) for _ in range(count)]
    pairs.append(("the man the man the man", "the man killed the city"))  # repeated n-grams: clipping matters
    pairs.append(("police say", "talks on new us city"))  # nothing in common: F1 = 0
    return pairs


def ngrams(text: str, n: int) -> Counter:
    words = text.split()
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _f1(matches: float, hyp_count: float, ref_count: float) -> float:
    precision, recall = matches / max(hyp_count, 1), matches / max(ref_count, 1)
    return 0.0 if matches == 0 else 2 * precision * recall / (precision + recall)


def rouge_variants(hypothesis: str, reference: str, n: int) -> dict[str, float]:
    """The right F1 and the usual wrong answers for one pair."""
    hyp, ref = ngrams(hypothesis, n), ngrams(reference, n)
    clipped = sum(min(c, ref[g]) for g, c in hyp.items())
    unclipped = sum(c for g, c in hyp.items() if g in ref)
    unique = len(set(hyp) & set(ref))
    h, r = sum(hyp.values()), sum(ref.values())
    return {
        "precision": clipped / max(h, 1),
        "recall": clipped / max(r, 1),
        "unclipped": _f1(unclipped, h, r),
        "unique": _f1(unique, len(hyp), len(ref)),
        "word_count": _f1(clipped, len(hypothesis.split()), len(reference.split())),
    }


ROUGE_MESSAGES = {
    "precision": "that is the precision (matches / n-grams of the hypothesis): ROUGE-N here is the F1 of P and R",
    "recall": "that is the recall (matches / n-grams of the reference): ROUGE-N here is the F1 of P and R",
    "unclipped": (
        "a repeated n-gram of the hypothesis matches at most as often as it occurs in the reference: "
        "m_n = sum_g min(c_h(g), c_r(g))"
    ),
    "unique": "n-grams are counted with their repeats (a Counter), not as sets",
    "word_count": "a text of L words has L - n + 1 n-grams, not L: divide by the n-gram counts",
}


@exercise("7.1", "ROUGE-N F1 of one headline")
def check_rouge_n(fn) -> str:
    """``fn(hypothesis, reference, n)`` returns ROUGE-N's F1 in [0, 1] for two lower-case, space-separated
    headlines (``rouge-score``'s value, b2t_lib/metrics.py)."""
    pairs = headline_pairs()
    hypotheses, references = [h for h, _ in pairs], [r for _, r in pairs]
    library = rouge_per_example(hypotheses, references)
    for n, key in ((1, "rouge1"), (2, "rouge2")):
        got = []
        for hypothesis, reference in pairs:
            value = as_tensor(call(fn, hypothesis, reference, n, what="your function"), "your F1")
            if value.numel() != 1:
                raise Wrong(f"your F1 must be one number, got shape {tuple(value.shape)}")
            got.append(value.reshape(()))
        got = torch.stack(got)
        expected = torch.tensor(library[key], dtype=torch.float64)
        variants = [rouge_variants(h, r, n) for h, r in pairs]
        mistakes = [(100 * expected, "ROUGE-N of one pair is a fraction in [0, 1]; Table 3's x 100 is for the corpus")]
        mistakes += [(number([v[k] for v in variants]), m) for k, m in ROUGE_MESSAGES.items()]
        diagnose(got, expected, mistakes, f"your ROUGE-{n} F1 of {len(pairs)} pairs", rtol=1e-6, atol=1e-9)
    return "matches rouge-score's ROUGE-1 and ROUGE-2 F1 on headlines with repeated words"


def corpus_mistakes(hypotheses, references, n):
    """Pooled (micro) F1, and the mean without the factor 100."""
    pooled = [0.0, 0.0, 0.0]  # matches, hypothesis n-grams, reference n-grams
    for h, r in zip(hypotheses, references):
        hyp, ref = ngrams(h, n), ngrams(r, n)
        pooled[0] += sum(min(c, ref[g]) for g, c in hyp.items())
        pooled[1] += sum(hyp.values())
        pooled[2] += sum(ref.values())
    mean = sum(rouge_per_example(hypotheses, references)[f"rouge{n}"]) / len(hypotheses)
    yield (
        number(100 * _f1(*pooled)),
        "you pooled the n-gram counts of the whole test set: the paper's R-N is the mean of the per-example F1",
    )
    yield number(mean), "Table 3 reports the mean F1 times 100"


@exercise("7.2", "the corpus ROUGE-N of Table 3")
def check_corpus_rouge(fn) -> str:
    """``fn(hypotheses, references, n)`` returns the test set's R-N as Table 3 reports it: 100 times the mean of
    the per-example F1 (:func:`b2t_lib.metrics.corpus_rouge`)."""
    for seed, count in ((72, 12), (73, 5)):
        pairs = headline_pairs(count, seed)
        hypotheses, references = [h for h, _ in pairs], [r for _, r in pairs]
        scores = corpus_rouge(hypotheses, references)
        for n in (1, 2):
            value = as_tensor(call(fn, list(hypotheses), list(references), n, what="your function"), "your R-N")
            if value.numel() != 1:
                raise Wrong(f"your R-{n} must be one number, got shape {tuple(value.shape)}")
            diagnose(
                value.reshape(()),
                number(scores[f"rouge{n}"]),
                corpus_mistakes(hypotheses, references, n),
                f"your R-{n} of {len(pairs)} headlines",
                rtol=1e-6,
            )
    return "matches corpus_rouge, the R-1 and R-2 columns of Table 3"
