r"""Word error rate, as Table 5 reports it, computed by ``jiwer``.

Over a whole test set (corpus level, not an average of sentence WERs), with the word-level
Levenshtein alignment of every hypothesis to its reference,

.. math:: \mathrm{WER} = 100 \cdot \frac{S + D + I}{N}

where :math:`S, D, I` are the substituted, deleted and inserted words summed over all sentences and
:math:`N` is the number of reference words. It can exceed 100 (many insertions). Words are compared
lower-cased and split on whitespace, as fairseq S2T scores LibriSpeech (its transcripts are
lower-cased before the vocabulary is built; SentencePiece decoding gives lower-case text).
"""
from __future__ import annotations

from typing import Sequence

import jiwer


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
    out = jiwer.process_words(references, hypotheses)
    errors = out.substitutions + out.deletions + out.insertions
    return {"wer": 100.0 * errors / n_words, "substitutions": out.substitutions, "deletions": out.deletions,
            "insertions": out.insertions, "hits": out.hits, "reference_words": n_words,
            "sentences": len(references)}


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus-level WER in percent on lower-cased words (module docstring)."""
    return wer_counts(references, hypotheses)["wer"]
