r"""ROUGE for headline generation (the paper's Tables 3 and 9), with Google's ``rouge-score``.

For a hypothesis :math:`h` and its reference :math:`r`, ROUGE-N counts the clipped n-gram
matches :math:`m_n = \sum_g \min(c_h(g), c_r(g))` over the n-grams :math:`g`,

.. math:: P_n = \frac{m_n}{\#\text{n-grams}(h)}, \qquad R_n = \frac{m_n}{\#\text{n-grams}(r)},
          \qquad F_n = \frac{2 P_n R_n}{P_n + R_n},

and ROUGE-L does the same with the length of the longest common subsequence in place of
:math:`m_n` (and the lengths of :math:`h` and :math:`r` as denominators). The corpus score the
paper reports is the F1 averaged over the test examples, times 100:

.. math:: \text{R-N} = \frac{100}{|D|} \sum_{(h, r) \in D} F_N(h, r).

Tokens are what ``rouge-score`` makes of the text: lower-cased, every run of characters other
than ``a-z0-9`` replaced by a space. So punctuation and Gigaword's ``#`` digit placeholders
(``#.##``) vanish, and ``-lrb-`` counts as ``lrb``. The ROUGE-1.5.5 perl script tokenizes the
same way (see data_scripts/README.md for the comparison); ``use_stemmer=True`` applies the Porter
stemmer to tokens longer than 3 characters, like the perl script's ``-m``.
"""
from __future__ import annotations

from typing import Sequence

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def rouge_per_example(hypotheses: Sequence[str], references: Sequence[str], *,
                      use_stemmer: bool = False) -> dict[str, list[float]]:
    """F1 of ROUGE-1, ROUGE-2 and ROUGE-L for each (hypothesis, reference) pair, in [0, 1]."""
    from rouge_score import rouge_scorer

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; "
                         f"they must be aligned one to one")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    scores: dict[str, list[float]] = {name: [] for name in ROUGE_TYPES}
    for hypothesis, reference in zip(hypotheses, references):
        result = scorer.score(reference, hypothesis)          # rouge-score takes (target, prediction)
        for name in ROUGE_TYPES:
            scores[name].append(result[name].fmeasure)
    return scores


def corpus_rouge(hypotheses: Sequence[str], references: Sequence[str], *,
                 use_stemmer: bool = False) -> dict[str, float]:
    """``{'rouge1': R-1, 'rouge2': R-2, 'rougeL': R-L}``: mean per-example F1 times 100 (Table 3)."""
    if len(hypotheses) == 0:
        raise ValueError("no hypotheses to score")
    scores = rouge_per_example(hypotheses, references, use_stemmer=use_stemmer)
    return {name: 100.0 * sum(values) / len(values) for name, values in scores.items()}
