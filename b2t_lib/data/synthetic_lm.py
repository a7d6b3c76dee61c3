"""A synthetic WikiText-like corpus for the ``tiny`` language-modeling scale.

The text imitates WikiText-103's layout and statistics at a size a CPU can learn in minutes:

* **articles**: a blank line, a title ``= Title =``, a blank line, paragraphs (one per line),
  and sections ``= = Heading = =``, as in ``wiki.train.tokens``; every line ends in ``</s>``
  when binarized, blank lines included;
* **sentences** from a small English grammar (the synthetic translation task's, without the
  translation): ``NP verb NP? PP? adverb?``, optionally ``, conjunction`` a second clause, with
  determiner-noun agreement (``a``/``an``/``some``, ``this``/``these``), plural nouns and
  subject-verb agreement across the adjectives in between;
* **a Zipfian vocabulary of a few thousand words**: the real English words of the translation
  task's grammar plus seeded pseudo-words (nouns, adjectives, verbs, adverbs, with their plural
  and third-person forms); within each class the r-th word is drawn with probability
  :math:`\\propto 1/r`. So a few function words and common words cover most running text and
  thousands of words are rare, and frequency bands (adaptive input/softmax cutoffs such as
  200 and 1000) hold very different words, as on WikiText-103;
* **topics**: every article has three topic nouns (the first is its title) that fill a third of
  its noun slots, so context beyond the sentence carries information, as in Wikipedia articles
  (a 6-layer d=64 model trained for 800 updates does not use it yet: its loss does not fall with
  the position in a 256-token block);
* **<unk>**: as in WikiText, training words seen fewer than ``min_count`` (3) times, and
  valid/test words never seen in training, are replaced by ``<unk>`` in the text itself.

Deterministic for a seed; another seed gives another lexicon and other text.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections import Counter
from pathlib import Path

from .synthetic import (
    ADJECTIVES,
    ADVERBS,
    INTRANSITIVE,
    NOUNS,
    PREPOSITIONS,
    TRANSITIVE,
    _english_plural,
    _english_third_person,
)

GENERATOR_VERSION = 1  # bump when the text changes, so prepared data is regenerated
CONJUNCTIONS = ("and", "but", "because", "while")
_ONSETS = "b d f g h k l m n p r s t v w z br dr fl gr kr pl st tr sh ch".split()
_VOWELS = "a e i o u a e i o ai ea oo ou".split()
_CODAS = ["", "", "", "n", "r", "l", "s", "t", "m", "nd", "rt", "x"]


class _Zipf:
    """Draw from ``words`` with probability proportional to ``1 / rank``."""

    def __init__(self, words: list[str], exponent: float = 1.0) -> None:
        self.words = words
        self.cumulative = list(itertools.accumulate(1.0 / (r + 1) ** exponent for r in range(len(words))))

    def draw(self, rng: random.Random) -> str:
        return self.words[bisect.bisect_right(self.cumulative, rng.random() * self.cumulative[-1])]


class SyntheticLMLexicon:
    """The seeded vocabulary: real words first (most frequent), then pseudo-words, per class."""

    def __init__(
        self,
        seed: int = 0,
        *,
        n_nouns: int = 2000,
        n_adjectives: int = 600,
        n_transitive: int = 400,
        n_intransitive: int = 150,
        n_adverbs: int = 60,
    ) -> None:
        rng = random.Random(f"lm-lexicon-{seed}")
        self.used: set[str] = set()
        for w in NOUNS + ADJECTIVES + TRANSITIVE + INTRANSITIVE + ADVERBS + list(PREPOSITIONS) + list(CONJUNCTIONS):
            self.used |= {w, _english_plural(w), _english_third_person(w)}
        self.used |= {"the", "a", "an", "some", "this", "these", "my", "its", "their"}
        self.nouns = _Zipf(self._fill(rng, NOUNS, n_nouns))
        self.adjectives = _Zipf(self._fill(rng, ADJECTIVES, n_adjectives))
        self.transitive = _Zipf(self._fill(rng, TRANSITIVE, n_transitive))
        self.intransitive = _Zipf(self._fill(rng, INTRANSITIVE, n_intransitive))
        self.adverbs = _Zipf(self._fill(rng, ADVERBS, n_adverbs))
        self.prepositions = sorted(PREPOSITIONS)

    def _fill(self, rng: random.Random, real: list[str], n: int) -> list[str]:
        words = list(dict.fromkeys(real))[:n]
        while len(words) < n:
            word = "".join(
                rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(rng.choice((1, 2, 2, 3)))
            )
            forms = {word, _english_plural(word), _english_third_person(word)}
            if len(word) >= 3 and not forms & self.used:
                self.used |= forms
                words.append(word)
        return words

    # ------------------------------------------------------------------ text
    def noun_phrase(self, rng: random.Random, topic: list[str]) -> tuple[list[str], bool]:
        noun = rng.choice(topic) if topic and rng.random() < 0.35 else self.nouns.draw(rng)
        plural = rng.random() < 0.3
        adjectives = [self.adjectives.draw(rng) for _ in range(rng.choices((0, 1, 2), (60, 30, 10))[0])]
        head = _english_plural(noun) if plural else noun
        det = rng.choices(("the", "a", "this", "my", "its"), (50, 25, 10, 7, 8))[0]
        if det == "a":
            det = "some" if plural else ("an" if (adjectives + [head])[0][0] in "aeiou" else "a")
        elif det == "this" and plural:
            det = "these"
        return [det, *adjectives, head], plural

    def clause(self, rng: random.Random, topic: list[str]) -> list[str]:
        subject, plural = self.noun_phrase(rng, topic)
        transitive = rng.random() < 0.6
        verb = (self.transitive if transitive else self.intransitive).draw(rng)
        words = subject + [verb if plural else _english_third_person(verb)]
        if transitive:
            words += self.noun_phrase(rng, topic)[0]
        if rng.random() < 0.35:
            words += [rng.choice(self.prepositions)] + self.noun_phrase(rng, topic)[0]
        if rng.random() < 0.25:
            words.append(self.adverbs.draw(rng))
        return words

    def sentence(self, rng: random.Random, topic: list[str]) -> list[str]:
        words = self.clause(rng, topic)
        if rng.random() < 0.25:
            words += [",", rng.choice(CONJUNCTIONS)] + self.clause(rng, topic)
        words[0] = words[0].capitalize()
        return words + ["."]

    def article(self, rng: random.Random) -> list[str]:
        """Lines of one article: title, sections, paragraphs, blank lines between (WikiText layout)."""
        topic: list[str] = []
        while len(topic) < 3:
            noun = self.nouns.draw(rng)
            if noun not in topic:
                topic.append(noun)
        lines = ["", f"= {topic[0].capitalize()} =", ""]
        for section in range(rng.randint(1, 3)):
            if section:
                lines += ["", f"= = {self.adjectives.draw(rng).capitalize()} {rng.choice(topic)} = =", ""]
            for _ in range(rng.randint(1, 3)):
                lines.append(" ".join(w for _ in range(rng.randint(2, 6)) for w in self.sentence(rng, topic)))
        return lines


def generate_synthetic_lm_text(
    *,
    train_tokens: int = 1_000_000,
    valid_tokens: int = 25_000,
    test_tokens: int = 25_000,
    seed: int = 0,
    min_count: int = 3,
    **lexicon_sizes,
) -> dict[str, list[str]]:
    """``{'train', 'valid', 'test'}`` -> lines of whitespace-tokenized text, ``<unk>``-mapped.

    Each split holds whole articles and at least the requested number of tokens (words plus one
    end-of-line per line, as binarized).
    """
    lexicon = SyntheticLMLexicon(seed, **lexicon_sizes)
    splits: dict[str, list[str]] = {}
    for split, target in (("test", test_tokens), ("valid", valid_tokens), ("train", train_tokens)):
        rng = random.Random(f"lm-text-{seed}-{split}")
        lines: list[str] = []
        n = 0
        while n < target:
            article = lexicon.article(rng)
            lines += article
            n += sum(len(line.split()) + 1 for line in article)
        splits[split] = lines
    counts = Counter(w for line in splits["train"] for w in line.split())
    keep = {w for w, c in counts.items() if c >= min_count}
    return {
        split: [" ".join(w if w in keep else "<unk>" for w in line.split()) for line in lines]
        for split, lines in splits.items()
    }


def prepare_synthetic_lm(
    out_dir: str | Path,
    *,
    train_tokens: int = 1_000_000,
    valid_tokens: int = 25_000,
    test_tokens: int = 25_000,
    seed: int = 0,
) -> Path:
    """Write the synthetic corpus to ``out_dir/raw/{train,valid,test}.txt`` and prepare it like WikiText-103.

    The raw files go through exactly the WikiText-103 pipeline (:func:`b2t_lib.data.lm.prepare_lm_data`).
    Returns ``out_dir``; a second call with the same arguments only checks the files.
    """
    from .lm import SPLITS, prepare_lm_data
    from .steps import StepRunner, clear_digest_cache

    out_dir = Path(out_dir)
    raw_dir = out_dir / "raw"
    outputs = [raw_dir / f"{split}.txt" for split in SPLITS]

    def build(tmps: list[Path]) -> None:
        text = generate_synthetic_lm_text(
            train_tokens=train_tokens, valid_tokens=valid_tokens, test_tokens=test_tokens, seed=seed
        )
        for split, tmp in zip(SPLITS, tmps):
            tmp.write_text("".join(line + "\n" for line in text[split]), encoding="utf-8")

    clear_digest_cache()
    params = dict(
        train_tokens=train_tokens,
        valid_tokens=valid_tokens,
        test_tokens=test_tokens,
        seed=seed,
        generator=GENERATOR_VERSION,
    )
    StepRunner(out_dir, out_dir / "work").run("synthetic-lm-corpus", params, [], outputs, build)
    return prepare_lm_data(raw_dir, out_dir)
