"""Chapter 07: ROUGE-N F1 of one headline, and the corpus R-N of Table 3."""

from collections import Counter


# Exercise 7.1 ------------------------------------------------------------------------------------------------------
def rouge_n(hypothesis, reference, n):
    def ngrams(text):
        words = text.split()
        return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))

    hyp, ref = ngrams(hypothesis), ngrams(reference)
    matches = sum(min(count, ref[gram]) for gram, count in hyp.items())  # clipped matches
    if matches == 0:
        return 0.0
    precision, recall = matches / sum(hyp.values()), matches / sum(ref.values())
    return 2 * precision * recall / (precision + recall)


# Exercise 7.2 ------------------------------------------------------------------------------------------------------
def corpus_rouge_n(hypotheses, references, n):
    scores = [rouge_n(h, r, n) for h, r in zip(hypotheses, references)]
    return 100 * sum(scores) / len(scores)  # the mean per-example F1, times 100
