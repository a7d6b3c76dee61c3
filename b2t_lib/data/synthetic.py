"""A synthetic English -> pseudo-German translation task for the ``tiny`` scale.

The source side is a small English grammar::

    sentence := clause ("," conj clause)? ("." | "!")
    clause   := NP_subject verb NP_object? PP? adverb?
    NP       := determiner adjective{0,2} noun          PP := preposition NP

The target side is a made-up language whose content words are random pseudo-words (drawn from
the seed) and whose grammar is German-like, so a model must learn more than a word-for-word map:

* **reordering** -- adjectives follow the noun, in mirrored order (``the big red dog`` ->
  ``der Hund rotes großes``-like), and the adverb moves from the end of the clause to right
  after the verb;
* **agreement** -- every noun has a gender (m/f/n, from the seed); determiners and adjectives
  take endings that agree with the noun's gender, number and case (nominative subject,
  accusative object, dative or accusative after a preposition, as the preposition demands);
  nouns take a gender-dependent plural suffix; verbs agree in number with the subject;
* nouns are capitalized, as in German.

Everything is deterministic for a seed: the same seed gives the same lexicon and sentences,
another seed a different lexicon and different sentences. Sentences are unique across the
splits, so test BLEU measures generalization, not memorization.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

NOUNS = """dog cat horse bird mouse cow sheep goat fox wolf bear lion tiger rabbit duck frog snake
owl child man woman teacher doctor farmer king queen baker painter singer soldier student
friend brother sister mother father neighbor driver house car tree garden river city village
book letter table chair window door apple bread cheese flower road bridge ship train boat
stone hat coat shoe cup bottle box key lamp clock bed ball song picture cake egg forest
mountain lake field castle tower church market""".split()
IRREGULAR_PLURALS = {
    "mouse": "mice",
    "sheep": "sheep",
    "child": "children",
    "man": "men",
    "woman": "women",
    "wolf": "wolves",
}
ADJECTIVES = """big small old young red green blue black white happy sad quiet loud fast slow
tall short warm cold new strange clever brave kind angry tired hungry rich poor beautiful
ugly heavy light dark bright clean dirty famous friendly lazy busy wild gentle proud
wooden golden""".split()
TRANSITIVE = """see like find help visit carry paint buy sell call watch follow know need want
love hate draw build open close wash clean catch throw hold read bring take meet""".split()
INTRANSITIVE = "sleep run sing dance wait laugh swim work smile travel cry jump rest eat play".split()
# Preposition -> (target word, case it governs): dative for most, accusative for a few.
PREPOSITIONS = {
    "in": ("in", "dat"),
    "on": ("auf", "dat"),
    "near": ("bei", "dat"),
    "behind": ("hinter", "dat"),
    "under": ("unter", "dat"),
    "with": ("mit", "dat"),
    "from": ("von", "dat"),
    "without": ("ohne", "acc"),
    "for": ("für", "acc"),
    "through": ("durch", "acc"),
    "around": ("um", "acc"),
}
ADVERBS = "today often always again now here there tomorrow yesterday quickly slowly together".split()
CONJUNCTIONS = {"and": "und", "but": "aber", "because": "denn"}
DETERMINERS = ("the", "a", "this", "my")  # lemma; 'a' is 'a'/'an' (sg) or 'some' (pl)

GENERATOR_VERSION = 1  # bump when the grammar changes, so prepared data is regenerated
GENDERS = ("m", "f", "n")
# Target determiners and endings, indexed by case and by gender (or 'pl').
DEFINITE = {
    "nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"},
}
STRONG_ENDING = {
    "nom": {"m": "er", "f": "e", "n": "es", "pl": "e"},  # dies-, adjectives
    "acc": {"m": "en", "f": "e", "n": "es", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
EIN_ENDING = {
    "nom": {"m": "", "f": "e", "n": "", "pl": "e"},  # ein-, mein-
    "acc": {"m": "en", "f": "e", "n": "", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
PLURAL_SUFFIX = {"m": "e", "f": "en", "n": "er"}

_ONSETS = "b d f g h k l m n p r s t w z sch st br kr tr pf fl gr".split()
_VOWELS = "a e i o u a e i o u ä ö ü au ei".split()
_CODAS = ["", "", "", "n", "r", "l", "s", "t", "ch", "ng", "m"]


@dataclass(frozen=True)
class NounPhrase:
    determiner: str  # one of DETERMINERS
    adjectives: tuple[str, ...]
    noun: str
    plural: bool


@dataclass(frozen=True)
class Clause:
    subject: NounPhrase
    verb: str
    obj: NounPhrase | None = None
    preposition: str | None = None
    prep_object: NounPhrase | None = None
    adverb: str | None = None


@dataclass(frozen=True)
class Sentence:
    clauses: tuple[Clause, ...]
    conjunction: str | None = None  # joins clauses[0] and clauses[1]
    punctuation: str = "."


def _english_plural(noun: str) -> str:
    if noun in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _english_third_person(verb: str) -> str:
    if verb.endswith(("s", "x", "ch", "sh", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


class SyntheticLanguagePair:
    """The lexicon and grammar of one seeded toy language pair."""

    def __init__(self, seed: int = 0) -> None:
        rng = random.Random(f"lexicon-{seed}")
        reserved = {w for table in (DEFINITE,) for row in table.values() for w in row.values()}
        reserved |= {t for t, _ in PREPOSITIONS.values()} | set(CONJUNCTIONS.values())
        self.lexicon: dict[str, str] = {}  # source lemma -> target stem
        used: set[str] = set(reserved)
        for lemma in NOUNS + ADJECTIVES + TRANSITIVE + INTRANSITIVE + ADVERBS:
            if lemma in self.lexicon:
                continue
            stem = self._pseudo_word(rng, used)
            used.add(stem)
            self.lexicon[lemma] = stem
        self.gender = {noun: rng.choice(GENDERS) for noun in NOUNS}

    @staticmethod
    def _pseudo_word(rng: random.Random, used: set[str]) -> str:
        while True:
            syllables = rng.choice((1, 2, 2))
            word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))
            if word not in used and len(word) >= 3:
                return word

    # ------------------------------------------------------------------ sampling
    def sample_noun_phrase(self, rng: random.Random) -> NounPhrase:
        n_adjectives = rng.choices((0, 1, 2), weights=(55, 35, 10))[0]
        adjectives = tuple(rng.sample(ADJECTIVES, n_adjectives))
        return NounPhrase(rng.choice(DETERMINERS), adjectives, rng.choice(NOUNS), rng.random() < 0.4)

    def sample_clause(self, rng: random.Random) -> Clause:
        transitive = rng.random() < 0.65
        prep = rng.choice(sorted(PREPOSITIONS)) if rng.random() < 0.35 else None
        return Clause(
            subject=self.sample_noun_phrase(rng),
            verb=rng.choice(TRANSITIVE if transitive else INTRANSITIVE),
            obj=self.sample_noun_phrase(rng) if transitive else None,
            preposition=prep,
            prep_object=self.sample_noun_phrase(rng) if prep else None,
            adverb=rng.choice(ADVERBS) if rng.random() < 0.3 else None,
        )

    def sample_sentence(self, rng: random.Random, max_words: int = 15) -> Sentence:
        while True:
            clauses = (self.sample_clause(rng),)
            conjunction = None
            if rng.random() < 0.25:
                clauses += (self.sample_clause(rng),)
                conjunction = rng.choice(sorted(CONJUNCTIONS))
            sentence = Sentence(clauses, conjunction, rng.choice((".", ".", ".", ".", "!")))
            if len(self.source_words(sentence)) - 1 <= max_words:  # punctuation not counted
                return sentence

    # ------------------------------------------------------------------ English side
    def source_noun_phrase(self, np_: NounPhrase) -> list[str]:
        noun = _english_plural(np_.noun) if np_.plural else np_.noun
        if np_.determiner == "a":
            following = (np_.adjectives + (noun,))[0]
            det = "some" if np_.plural else ("an" if following[0] in "aeiou" else "a")
        elif np_.determiner == "this":
            det = "these" if np_.plural else "this"
        else:
            det = np_.determiner
        return [det, *np_.adjectives, noun]

    def source_clause(self, c: Clause) -> list[str]:
        verb = c.verb if c.subject.plural else _english_third_person(c.verb)
        words = self.source_noun_phrase(c.subject) + [verb]
        if c.obj:
            words += self.source_noun_phrase(c.obj)
        if c.preposition:
            words += [c.preposition] + self.source_noun_phrase(c.prep_object)
        if c.adverb:
            words.append(c.adverb)
        return words

    def source_words(self, s: Sentence) -> list[str]:
        words = self.source_clause(s.clauses[0])
        if s.conjunction:
            words += [",", s.conjunction] + self.source_clause(s.clauses[1])
        return words + [s.punctuation]

    # ------------------------------------------------------------------ pseudo-German side
    def _target_np(self, np_: NounPhrase, case: str) -> list[str]:
        gender = self.gender[np_.noun]
        slot = "pl" if np_.plural else gender  # agreement slot: gender or plural
        stem = self.lexicon[np_.noun]
        noun = (stem + PLURAL_SUFFIX[gender] if np_.plural else stem).capitalize()
        if np_.determiner == "the":
            det = DEFINITE[case][slot]
        elif np_.determiner == "a":
            det = ("einig" + STRONG_ENDING[case]["pl"]) if np_.plural else "ein" + EIN_ENDING[case][slot]
        elif np_.determiner == "this":
            det = "dies" + STRONG_ENDING[case][slot]
        else:
            det = "mein" + EIN_ENDING[case][slot]
        # Adjectives follow the noun in mirrored order and agree with it.
        adjectives = [self.lexicon[a] + STRONG_ENDING[case][slot] for a in reversed(np_.adjectives)]
        return [det, noun, *adjectives]

    def _target_clause(self, c: Clause) -> list[str]:
        verb = self.lexicon[c.verb] + ("en" if c.subject.plural else "t")  # subject-verb agreement
        words = self._target_np(c.subject, "nom") + [verb]
        if c.adverb:  # adverb right after verb
            words.append(self.lexicon[c.adverb])
        if c.obj:
            words += self._target_np(c.obj, "acc")
        if c.preposition:
            word, case = PREPOSITIONS[c.preposition]
            words += [word] + self._target_np(c.prep_object, case)
        return words

    def target_words(self, s: Sentence) -> list[str]:
        words = self._target_clause(s.clauses[0])
        if s.conjunction:
            words += [",", CONJUNCTIONS[s.conjunction]] + self._target_clause(s.clauses[1])
        return words + [s.punctuation]

    def render(self, s: Sentence) -> tuple[str, str]:
        """(English, pseudo-German) raw text: first letter capitalized, no space before punctuation."""
        return _detokenize(self.source_words(s)), _detokenize(self.target_words(s))


def _detokenize(words: list[str]) -> str:
    text = " ".join(words).replace(" ,", ",").replace(" .", ".").replace(" !", "!")
    return text[0].upper() + text[1:]


def draw_distinct_pairs(
    n: int, draw: Callable[[], tuple[str, str]], seen: set[str], what: str
) -> list[tuple[str, str]]:
    """``n`` pairs from ``draw()`` whose first sides are distinct and not in ``seen`` (each one
    produced is added to it: that keeps train, valid and test disjoint)."""
    out: list[tuple[str, str]] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 20 * n + 1000:
            raise RuntimeError(f"could not draw {n} distinct {what}; ask for fewer")
        src, tgt = draw()
        if src not in seen:
            seen.add(src)
            out.append((src, tgt))
    return out


def generate_synthetic_pairs(n: int, seed: int = 0, *, skip: set[str] | None = None) -> list[tuple[str, str]]:
    """``n`` distinct (English, pseudo-German) raw sentence pairs of the seed's language pair.

    Sources in ``skip`` are not produced (and the produced ones are added to it), which keeps
    train, valid and test disjoint.
    """
    pair = SyntheticLanguagePair(seed)
    rng = random.Random(f"sentences-{seed}-{len(skip) if skip else 0}")
    return draw_distinct_pairs(
        n, lambda: pair.render(pair.sample_sentence(rng)), skip if skip is not None else set(), "sentences"
    )


def synthetic_splits(*, n_train: int, n_valid: int, n_test: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """Disjoint ``{'train', 'valid', 'test'}`` pair lists of the seed's language pair.

    Test sentences are drawn first, then valid, then train, so the test set of a seed does not
    change with ``n_train``.
    """
    seen: set[str] = set()
    splits = {}
    for split, n in (("test", n_test), ("valid", n_valid), ("train", n_train)):
        splits[split] = generate_synthetic_pairs(n, seed, skip=seen)
    return splits


def write_raw_pairs(
    out_dir: Path, step: str, params: dict, suffixes: tuple[str, str], make_splits: Callable[[], dict]
) -> Path:
    """Write the generated pairs of ``make_splits()`` (``{split: [(a, b), ...]}`` for train, valid and test) as
    ``out_dir/raw/<split>.<suffix>``, one side per file, in one restartable step (skipped when ``params`` are
    unchanged and the files intact); return the raw folder the pipelines read."""
    from .steps import StepRunner, clear_digest_cache

    raw_dir = out_dir / "raw"
    names = [(split, suffix) for split in ("train", "valid", "test") for suffix in suffixes]

    def build(tmps: list[Path]) -> None:
        splits = make_splits()
        for (split, suffix), tmp in zip(names, tmps):
            side = suffixes.index(suffix)
            tmp.write_text("".join(pair[side] + "\n" for pair in splits[split]), encoding="utf-8")

    clear_digest_cache()
    outputs = [raw_dir / f"{split}.{suffix}" for split, suffix in names]
    StepRunner(out_dir, out_dir / "work").run(step, params, [], outputs, build)
    return raw_dir


def prepare_synthetic_mt(
    out_dir: str | Path,
    *,
    n_train: int = 30_000,
    n_valid: int = 500,
    n_test: int = 500,
    seed: int = 0,
    bpe_vocab_size: int = 1000,
    workers: int | None = None,
    src_lang: str = "en",
    tgt_lang: str = "de",
) -> Path:
    """Generate the synthetic corpus as raw text in ``out_dir/raw`` and prepare it like WMT.

    The raw files go through exactly the WMT pipeline (:func:`prepare_translation_data`: Moses,
    joint BPE, dictionary, binarization), with a small BPE vocabulary so that the long
    pseudo-words really are split into pieces. Returns ``out_dir``; a second call with the same
    arguments only checks the files.
    """
    from .translation import prepare_translation_data

    params = dict(
        n_train=n_train,
        n_valid=n_valid,
        n_test=n_test,
        seed=seed,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        generator=GENERATOR_VERSION,
    )
    raw_dir = write_raw_pairs(
        Path(out_dir),
        "synthetic-corpus",
        params,
        (src_lang, tgt_lang),
        lambda: synthetic_splits(n_train=n_train, n_valid=n_valid, n_test=n_test, seed=seed),
    )
    return prepare_translation_data(
        raw_dir, out_dir, src_lang=src_lang, tgt_lang=tgt_lang, bpe_vocab_size=bpe_vocab_size, workers=workers
    )
