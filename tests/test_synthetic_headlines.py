"""The synthetic headline task: deterministic, disjoint splits, the compression rule, Gigaword form,
and trivial extractive baselines far below the tiny-scale target (so ROUGE measures learning)."""

from __future__ import annotations

import random

import pytest

from b2t_lib.data import load_translation_split, prepare_synthetic_summarization, test_split_names
from b2t_lib.data.synthetic import ADJECTIVES, DETERMINERS, _english_third_person
from b2t_lib.data.synthetic_headlines import (
    CONJUNCTIONS,
    HeadlineTask,
    Story,
    generate_headline_pairs,
    headline_splits,
    past_tense,
)
from b2t_lib.metrics import corpus_rouge


def test_pairs_are_deterministic_per_seed_and_differ_across_seeds():
    a = generate_headline_pairs(200, seed=4)
    assert a == generate_headline_pairs(200, seed=4)
    assert a != generate_headline_pairs(200, seed=5)
    assert len({article for article, _ in a}) == 200


def test_splits_are_disjoint_and_test_set_independent_of_train_size():
    small = headline_splits(n_train=300, n_valid=50, n_test=50, seed=1)
    large = headline_splits(n_train=900, n_valid=50, n_test=50, seed=1)
    assert small["test"] == large["test"] and small["valid"] == large["valid"]
    articles = {name: {a for a, _ in pairs} for name, pairs in large.items()}
    assert not articles["train"] & articles["valid"]
    assert not articles["train"] & articles["test"]
    assert not articles["valid"] & articles["test"]


def test_docstring_examples_are_real():
    test = headline_splits(n_train=0, n_valid=0, n_test=40, seed=0)["test"]
    assert test[6] == (
        "on saturday , because my children ate without the brave man , my snakes cried from "
        "this goat , the report said .",
        "snakes cry from goat",
    )
    assert test[32] == ("this morning , # mothers laughed now , after the quiet cats ran .", "# mothers laugh")


def test_text_has_the_gigaword_form():
    pairs = generate_headline_pairs(2000, seed=2)
    text = " ".join(a + " " + h for a, h in pairs)
    assert text == text.lower() and not any(c.isdigit() for c in text)
    assert "#" in text and " , " in text
    assert all(a.endswith(" .") and "  " not in a for a, _ in pairs)
    assert all(2 <= len(h.split()) <= 6 for _, h in pairs)


def test_headline_is_the_main_clause_compressed():
    task = HeadlineTask(seed=0)
    rng = random.Random(0)
    seen_past = seen_fronted = seen_count = 0
    function_words = set(DETERMINERS) | {"an", "some", "these", ",", ".", "said"} | set(CONJUNCTIONS)
    for _ in range(500):
        story: Story = task.sample_story(rng)
        article, headline = task.render(story)
        words = headline.split()
        clause = story.sentence.clauses[0]
        assert len(words) == (story.count is not None) + 2 + bool(clause.obj) + 2 * bool(clause.preposition)
        verb_at = 2 if story.count is not None else 1
        others = {w for i, w in enumerate(words) if i != verb_at}  # 'clean' is an adjective and a verb
        assert not others & function_words and not others & set(ADJECTIVES)
        # The verb: present tense, agreeing with the subject, whatever the article's tense.
        assert words[verb_at] == (clause.verb if clause.subject.plural else _english_third_person(clause.verb))
        if story.past:
            seen_past += 1
            assert past_tense(clause.verb) in article.split()
        # Every headline noun and preposition is in the article; the count is kept as '#'s.
        assert all(w in article.split() for i, w in enumerate(words) if i != verb_at)
        if story.count is not None:
            seen_count += 1
            assert set(words[0]) == {"#"}
        if story.fronted:
            seen_fronted += 1
            conj = story.sentence.conjunction
            assert article.split().index(conj) < article.split().index(words[verb_at - 1])
    assert seen_past > 150 and seen_fronted > 30 and seen_count > 20


def test_past_tense_of_every_verb():
    assert [past_tense(v) for v in ("see", "carry", "like", "play", "jump", "travel")] == [
        "saw",
        "carried",
        "liked",
        "played",
        "jumped",
        "traveled",
    ]


def test_trivial_baselines_stay_far_below_the_target():
    """The tiny-scale target is ROUGE-1 >= 60: copying the first k article words or every content
    word must not get there, so a model that reaches it has learned the compression."""
    test = headline_splits(n_train=0, n_valid=0, n_test=400, seed=0)["test"]
    articles, references = [a for a, _ in test], [h for _, h in test]
    lead = max(corpus_rouge([" ".join(a.split()[:k]) for a in articles], references)["rouge1"] for k in range(2, 16))
    stop = set(DETERMINERS) | {"an", "some", "these", ",", ".", "said"} | set(CONJUNCTIONS)
    content = corpus_rouge([" ".join(w for w in a.split() if w not in stop) for a in articles], references)
    assert lead < 45 and content["rouge1"] < 50
    assert corpus_rouge(references, references) == {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0}


@pytest.mark.slow
def test_prepare_synthetic_summarization_is_deterministic_and_gigaword_shaped(tmp_path):
    a = prepare_synthetic_summarization(tmp_path / "a", n_train=600, n_valid=30, n_test=30, seed=5, bpe_vocab_size=200)
    b = prepare_synthetic_summarization(tmp_path / "b", n_train=600, n_valid=30, n_test=30, seed=5, bpe_vocab_size=200)
    for name in ("train.article.npy", "train.headline.npy", "test.headline.raw.npy", "dict.txt", "bpe.codes"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert test_split_names(a) == ["test"]
    test = load_translation_split(a, "test")
    assert test.tokenizer == "none" and len(test) == 30
    assert test.references() == [h for _, h in headline_splits(n_train=600, n_valid=30, n_test=30, seed=5)["test"]]
    assert all(test.decode(test.tgt[i]) == test.references()[i] for i in range(len(test)))
    assert len(load_translation_split(a, "train")) == 600  # no pair filtered
    assert "@@" in test.dictionary.string(test.src[0].tolist())  # BPE splits words
