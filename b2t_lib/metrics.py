r"""The three test metrics of the paper's tables, in one place: BLEU (translation, Tables 1, 2 and 8), ROUGE
(headlines, Tables 3 and 9) and WER (speech recognition, Table 5). Perplexity, the language model's metric, is
the exponent of the loss (:mod:`b2t_lib.train.lm_task`).

**BLEU** is SacreBLEU's corpus BLEU (its default settings): case-sensitive, on detokenized output against the raw
references, as the paper measures it (Section 6.1.3; docs/methods.md §1.8).

**ROUGE**, with Google's ``rouge-score``. For a hypothesis :math:`h` and its reference :math:`r`, ROUGE-N counts
the clipped n-gram matches :math:`m_n = \sum_g \min(c_h(g), c_r(g))` over the n-grams :math:`g`,

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

**WER**, computed by ``jiwer``. Over a whole test set (corpus level, not an average of sentence WERs), with the
word-level Levenshtein alignment of every hypothesis to its reference,

.. math:: \mathrm{WER} = 100 \cdot \frac{S + D + I}{N}

where :math:`S, D, I` are the substituted, deleted and inserted words summed over all sentences and
:math:`N` is the number of reference words. It can exceed 100 (many insertions). Words are compared
lower-cased and split on whitespace, as fairseq S2T scores LibriSpeech (its transcripts are
lower-cased before the vocabulary is built; SentencePiece decoding gives lower-case text).
"""

from __future__ import annotations

from typing import Sequence


# ---------------------------------------------------------------- BLEU
def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Case-sensitive SacreBLEU of detokenized ``hypotheses`` against ``references`` (one each), rounded to 0.01."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; they must be aligned one to one"
        )
    return round(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score, 2)


# ---------------------------------------------------------------- ROUGE
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def rouge_per_example(
    hypotheses: Sequence[str], references: Sequence[str], *, use_stemmer: bool = False
) -> dict[str, list[float]]:
    """F1 of ROUGE-1, ROUGE-2 and ROUGE-L for each (hypothesis, reference) pair, in [0, 1]."""
    from rouge_score import rouge_scorer

    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; they must be aligned one to one"
        )
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    scores: dict[str, list[float]] = {name: [] for name in ROUGE_TYPES}
    for hypothesis, reference in zip(hypotheses, references):
        result = scorer.score(reference, hypothesis)  # rouge-score takes (target, prediction)
        for name in ROUGE_TYPES:
            scores[name].append(result[name].fmeasure)
    return scores


def corpus_rouge(
    hypotheses: Sequence[str], references: Sequence[str], *, use_stemmer: bool = False
) -> dict[str, float]:
    """``{'rouge1': R-1, 'rouge2': R-2, 'rougeL': R-L}``: mean per-example F1 times 100 (Table 3)."""
    if len(hypotheses) == 0:
        raise ValueError("no hypotheses to score")
    scores = rouge_per_example(hypotheses, references, use_stemmer=use_stemmer)
    return {name: 100.0 * sum(values) / len(values) for name, values in scores.items()}


# ---------------------------------------------------------------- WER
def normalize_words(text: str) -> str:
    """Lower-case and collapse whitespace: the form in which words are compared."""
    return " ".join(text.lower().split())


def wer_counts(references: Sequence[str], hypotheses: Sequence[str]) -> dict:
    """Corpus-level WER (percent) and its parts: ``wer``, ``substitutions``, ``deletions``,
    ``insertions``, ``hits``, ``reference_words``, ``sentences``."""
    references, hypotheses = list(references), list(hypotheses)
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses; they must be aligned")
    if not references:
        raise ValueError("cannot score an empty test set")
    references = [normalize_words(r) for r in references]
    hypotheses = [normalize_words(h) for h in hypotheses]
    n_words = sum(len(r.split()) for r in references)
    if n_words == 0:
        raise ValueError("every reference is empty, so the WER is undefined")
    import jiwer

    out = jiwer.process_words(references, hypotheses)
    errors = out.substitutions + out.deletions + out.insertions
    return {
        "wer": 100.0 * errors / n_words,
        "substitutions": out.substitutions,
        "deletions": out.deletions,
        "insertions": out.insertions,
        "hits": out.hits,
        "reference_words": n_words,
        "sentences": len(references),
    }


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus-level WER in percent on lower-cased words (module docstring)."""
    return wer_counts(references, hypotheses)["wer"]
