"""A synthetic headline-generation task for the ``tiny`` scale, in the form of the Gigaword data.

Articles are English sentences from the grammar of the synthetic translation task
(:mod:`.synthetic`: determiners, adjectives, nouns, verbs, prepositional phrases, adverbs, a
second clause after a conjunction), dressed like the first sentences of news articles::

    article  := opener? (main ("," conj clause)? | conj clause "," main) ("," source "said")? "."
    opener   := "on monday ," | "last week ," | ...            source := "police" | "officials" | ...
    headline := count? subject-noun verb object-noun? (preposition noun)?      (of the main clause)

The headline is a learnable compression, the way news headlines drop function words: keep the
nouns, the verb and the preposition of the *main* clause; drop determiners, adjectives,
adverbs, the opener, the other clause (which may come first: "because ..., main") and the
attribution. Articles are in the past tense half of the time, headlines always in the present
("the dog saw a cat" -> "dog sees cat"), so the verb is rewritten, not copied. A plural subject
sometimes comes with a count instead of a determiner, which the headline keeps. Everything is
lower-cased and every digit becomes ``#``, as in Gigaword::

    on saturday , because my children ate without the brave man , my snakes cried from this goat , the report said .
        -> snakes cry from goat
    this morning , # mothers laughed now , after the quiet cats ran .
        -> # mothers laugh

(test examples 6 and 32 of seed 0, :func:`headline_splits`; a test checks them).

Deterministic for a seed; articles are unique across train/valid/test (compared after digit
normalization), and the test set of a seed does not depend on ``n_train``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from .synthetic import Clause, Sentence, SyntheticLanguagePair, draw_distinct_pairs, write_raw_pairs
from .text import digits_to_hash

GENERATOR_VERSION = 1  # bump when the grammar changes, so prepared data is regenerated
OPENERS = (
    "on monday",
    "on tuesday",
    "on wednesday",
    "on thursday",
    "on friday",
    "on saturday",
    "on sunday",
    "last week",
    "last month",
    "this morning",
    "earlier today",
    "late on friday",
)
# How often an article has each part the headline drops (or, for the count, keeps). With these, a
# headline holds about a third of its article's tokens, and copying the first k article tokens
# or every content word scores far below a model that learned the rule (see the tests).
P_SECOND_CLAUSE, P_OPENER, P_SOURCE, P_COUNT, P_PAST, P_FRONT = 0.6, 0.5, 0.5, 0.35, 0.5, 0.5
# Conjunctions joining the second clause -> whether its clause may come first ("because ..., X").
CONJUNCTIONS = {"and": False, "but": False, "because": True, "while": True, "after": True, "although": True}
# Articles report in the past tense half of the time; headlines always use the present.
IRREGULAR_PAST = {
    "see": "saw",
    "find": "found",
    "buy": "bought",
    "sell": "sold",
    "know": "knew",
    "draw": "drew",
    "build": "built",
    "catch": "caught",
    "throw": "threw",
    "hold": "held",
    "read": "read",
    "bring": "brought",
    "take": "took",
    "meet": "met",
    "sleep": "slept",
    "run": "ran",
    "sing": "sang",
    "swim": "swam",
    "eat": "ate",
}


def past_tense(verb: str) -> str:
    """English simple past of a verb of the synthetic grammar (``carry`` -> ``carried``)."""
    if verb in IRREGULAR_PAST:
        return IRREGULAR_PAST[verb]
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ied"
    return verb + "ed"


SOURCES = (
    "police",
    "officials",
    "witnesses",
    "the mayor",
    "a spokesman",
    "the report",
    "neighbors",
    "the newspaper",
    "local media",
    "the ministry",
)


@dataclass(frozen=True)
class Story:
    """One article: a sentence of the synthetic grammar plus the news-style extras."""

    sentence: Sentence
    count: int | None = None  # replaces the determiner of a plural subject (e.g. 12)
    opener: str | None = None  # "on monday", ... before the sentence
    source: str | None = None  # "police", ... in a final ", <source> said"
    past: bool = False  # the article's verbs in the past tense
    fronted: bool = False  # the second (subordinate) clause comes first


class HeadlineTask:
    """Samples stories and renders (article, headline) pairs, Gigaword-style."""

    def __init__(self, seed: int = 0) -> None:
        self.english = SyntheticLanguagePair(seed)  # the grammar and word lists of the MT task

    def sample_story(self, rng: random.Random) -> Story:
        clauses = (self.english.sample_clause(rng),)
        conjunction = None
        if rng.random() < P_SECOND_CLAUSE:
            clauses += (self.english.sample_clause(rng),)
            conjunction = rng.choice(sorted(CONJUNCTIONS))
        count = None
        if clauses[0].subject.plural and rng.random() < P_COUNT:
            count = rng.choice((rng.randint(2, 9), rng.randint(10, 99), rng.randint(100, 999)))
        opener = rng.choice(OPENERS) if rng.random() < P_OPENER else None
        source = rng.choice(SOURCES) if rng.random() < P_SOURCE else None
        past = rng.random() < P_PAST
        fronted = conjunction is not None and CONJUNCTIONS[conjunction] and rng.random() < P_FRONT
        return Story(Sentence(clauses, conjunction, "."), count, opener, source, past, fronted)

    # ------------------------------------------------------------------ rendering
    def _clause_words(self, clause: Clause, story: Story, count: int | None = None) -> list[str]:
        words = self.english.source_clause(clause)
        verb_at = len(self.english.source_noun_phrase(clause.subject))
        if story.past:
            words[verb_at] = past_tense(clause.verb)
        if count is not None:
            words[0] = str(count)  # "the old horses" -> "12 old horses"
        return words

    def article_words(self, story: Story) -> list[str]:
        s = story.sentence
        words = [*story.opener.split(), ","] if story.opener else []
        main = self._clause_words(s.clauses[0], story, story.count)
        if s.conjunction is None:
            words += main
        elif story.fronted:  # "because the cat slept , the dog ran"
            words += [s.conjunction, *self._clause_words(s.clauses[1], story), ",", *main]
        else:
            words += [*main, ",", s.conjunction, *self._clause_words(s.clauses[1], story)]
        if story.source:
            words += [",", *story.source.split(), "said"]
        return words + ["."]

    def headline_words(self, story: Story) -> list[str]:
        clause: Clause = story.sentence.clauses[0]
        english = self.english
        subject = english.source_noun_phrase(clause.subject)
        words = ([str(story.count)] if story.count is not None else []) + [subject[-1]]
        words.append(english.source_clause(clause)[len(subject)])  # the verb: present tense, agreeing
        if clause.obj:
            words.append(english.source_noun_phrase(clause.obj)[-1])
        if clause.preposition:
            words += [clause.preposition, english.source_noun_phrase(clause.prep_object)[-1]]
        return words

    def render(self, story: Story) -> tuple[str, str]:
        """(article, headline): lower case, space-separated tokens, digits -> ``#``."""
        return (
            digits_to_hash(" ".join(self.article_words(story))),
            digits_to_hash(" ".join(self.headline_words(story))),
        )


def generate_headline_pairs(n: int, seed: int = 0, *, skip: set[str] | None = None) -> list[tuple[str, str]]:
    """``n`` (article, headline) pairs with distinct articles; articles in ``skip`` are not
    produced (and the produced ones are added to it), which keeps the splits disjoint."""
    task = HeadlineTask(seed)
    rng = random.Random(f"headlines-{seed}-{len(skip) if skip else 0}")
    return draw_distinct_pairs(
        n, lambda: task.render(task.sample_story(rng)), skip if skip is not None else set(), "articles"
    )


def headline_splits(*, n_train: int, n_valid: int, n_test: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """Disjoint ``{'train', 'valid', 'test'}`` pair lists; test is drawn first, then valid, then
    train, so the test set of a seed does not change with ``n_train``."""
    seen: set[str] = set()
    return {
        split: generate_headline_pairs(n, seed, skip=seen)
        for split, n in (("test", n_test), ("valid", n_valid), ("train", n_train))
    }


def prepare_synthetic_summarization(
    out_dir: str | Path,
    *,
    n_train: int = 20_000,
    n_valid: int = 500,
    n_test: int = 500,
    seed: int = 0,
    bpe_vocab_size: int = 500,
    workers: int | None = None,
) -> Path:
    """Generate the synthetic headline corpus in ``out_dir/raw`` and prepare it like Gigaword.

    The raw files (``{train,valid,test}.{article,headline}``, already normalized like the
    Gigaword release) go through exactly the Gigaword pipeline
    (:func:`.summarization.prepare_summarization_data` with ``tokenizer="none"``: joint BPE,
    dictionary, binarization), with a small BPE vocabulary so that words really are split into
    pieces. Returns ``out_dir``; a second call with the same arguments only checks the files.
    """
    from .summarization import ARTICLE, HEADLINE, prepare_summarization_data

    params = dict(n_train=n_train, n_valid=n_valid, n_test=n_test, seed=seed, generator=GENERATOR_VERSION)
    raw_dir = write_raw_pairs(
        Path(out_dir),
        "synthetic-headlines",
        params,
        (ARTICLE, HEADLINE),
        lambda: headline_splits(n_train=n_train, n_valid=n_valid, n_test=n_test, seed=seed),
    )
    return prepare_summarization_data(
        raw_dir, out_dir, tokenizer="none", bpe_vocab_size=bpe_vocab_size, workers=workers
    )
