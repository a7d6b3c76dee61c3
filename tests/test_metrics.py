"""ROUGE F1 (Table 3's metric) on examples checked by hand."""

from __future__ import annotations

import pytest

from b2t_lib.metrics import corpus_rouge, rouge_per_example


def test_rouge_on_a_hand_checked_pair():
    # hypothesis tokens: police kill gunman | reference: police killed the gunman
    # ROUGE-1: 2 matches (police, gunman): P = 2/3, R = 2/4, F = 4/7
    # ROUGE-2: bigrams {police kill, kill gunman} vs {police killed, killed the, the gunman}: 0
    # ROUGE-L: LCS = police gunman (2): F = 4/7
    scores = corpus_rouge(["police kill gunman"], ["police killed the gunman"])
    assert scores["rouge1"] == pytest.approx(100 * 4 / 7)
    assert scores["rouge2"] == 0.0
    assert scores["rougeL"] == pytest.approx(100 * 4 / 7)
    # With the Porter stemmer (perl -m) 'killed' -> 'kill': R-1 P = 1, R = 3/4, F = 6/7;
    # R-2 matches 'police kill': P = 1/2, R = 1/3, F = 2/5; LCS = 3: F = 6/7.
    stemmed = corpus_rouge(["police kill gunman"], ["police killed the gunman"], use_stemmer=True)
    assert stemmed == pytest.approx({"rouge1": 100 * 6 / 7, "rouge2": 40.0, "rougeL": 100 * 6 / 7})


def test_rouge_l_rewards_order_and_rouge_1_does_not():
    # Same bag of words, reversed order: R-1 = 100, R-2 = 0, LCS = 1 of 3 tokens: F = 1/3.
    scores = corpus_rouge(["c b a"], ["a b c"])
    assert scores["rouge1"] == pytest.approx(100.0)
    assert scores["rouge2"] == 0.0
    assert scores["rougeL"] == pytest.approx(100 / 3)


def test_gigaword_placeholders_and_punctuation_vanish():
    # '#.##' and '#' have no a-z0-9 character: they are no tokens at all; '-lrb-' -> 'lrb'; "'s" -> 's'.
    same = corpus_rouge(["## killed in blast"], ["#.## killed in blast ."])
    assert same == pytest.approx({"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0})
    scores = rouge_per_example(["us 's lrb deficit"], ["-lrb- us 's deficit -rrb-"])
    # hyp: us s lrb deficit (4) | ref: lrb us s deficit rrb (5); unigram matches 4: P = 1, R = 4/5
    assert scores["rouge1"][0] == pytest.approx(2 * 0.8 / 1.8)
    assert scores["rougeL"][0] == pytest.approx(2 * (3 / 4) * (3 / 5) / (3 / 4 + 3 / 5))  # LCS: us s deficit


def test_corpus_score_is_the_mean_of_per_example_f1_times_100():
    scores = corpus_rouge(["a b", "x y", ""], ["a b", "p q", "p q"])
    assert scores == pytest.approx({"rouge1": 100 / 3, "rouge2": 100 / 3, "rougeL": 100 / 3})
    per = rouge_per_example(["a b", "x y"], ["a b", "p q"])
    assert per == {"rouge1": [1.0, 0.0], "rouge2": [1.0, 0.0], "rougeL": [1.0, 0.0]}


def test_misaligned_or_empty_input_is_an_error():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_rouge(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no hypotheses"):
        corpus_rouge([], [])
