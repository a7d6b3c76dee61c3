"""Unit tests of the MT data pieces that need no prepared data set: the synthetic language pair,
the dictionary, BPE, cleaning and token batching."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from b2t_lib.special_tokens import BOS, EOS, PAD, UNK
from b2t_lib.data import BatchSizeError, Dictionary, SyntheticLanguagePair, generate_synthetic_pairs, token_batches
from b2t_lib.data.bpe import BPE, learn_bpe, load_codes, remove_bpe, save_codes
from b2t_lib.data.synthetic import STRONG_ENDING, Clause, NounPhrase, Sentence, synthetic_splits
from b2t_lib.data.text import keep_pair


# ---------------------------------------------------------------------------- synthetic task
def test_synthetic_pairs_are_deterministic_per_seed_and_differ_across_seeds():
    a, b = generate_synthetic_pairs(300, seed=0), generate_synthetic_pairs(300, seed=0)
    c = generate_synthetic_pairs(300, seed=1)
    assert a == b
    assert len({src for src, _ in a}) == 300  # distinct sentences
    assert sum(x != y for x, y in zip(a, c)) > 290
    # The lexicon itself depends on the seed: the same English word gets another translation.
    assert SyntheticLanguagePair(0).lexicon["dog"] != SyntheticLanguagePair(1).lexicon["dog"]


def test_synthetic_splits_are_disjoint_and_test_set_independent_of_train_size():
    small = synthetic_splits(n_train=200, n_valid=50, n_test=50, seed=3)
    large = synthetic_splits(n_train=400, n_valid=50, n_test=50, seed=3)
    assert small["test"] == large["test"] and small["valid"] == large["valid"]
    sources = [{s for s, _ in small[k]} for k in ("train", "valid", "test")]
    assert not (sources[0] & sources[1]) and not (sources[0] & sources[2]) and not (sources[1] & sources[2])


def _pair_with_genders():
    pair = SyntheticLanguagePair(0)
    by_gender = {}
    for noun, gender in pair.gender.items():
        by_gender.setdefault(gender, noun)
    assert set(by_gender) == {"m", "f", "n"}, "the lexicon should use all three genders"
    return pair, by_gender


def test_synthetic_target_reorders_adjectives_and_adverb():
    pair, _ = _pair_with_genders()
    subject = NounPhrase("the", ("big", "red"), "dog", plural=False)
    sentence = Sentence((Clause(subject, "see", obj=NounPhrase("a", (), "cat", False), adverb="today"),))
    src, tgt = pair.source_words(sentence), pair.target_words(sentence)
    assert src[:6] == ["the", "big", "red", "dog", "sees", "a"] and src[-2] == "today"
    stems = [w.lower() for w in tgt]
    noun, big, red = (pair.lexicon[w] for w in ("dog", "big", "red"))
    i_noun = stems.index(noun)
    i_red = next(i for i, w in enumerate(stems) if w.startswith(red))
    i_big = next(i for i, w in enumerate(stems) if w.startswith(big))
    assert i_noun < i_red < i_big  # noun first, adjectives mirrored
    i_verb = next(i for i, w in enumerate(stems) if w.startswith(pair.lexicon["see"]))
    assert stems[i_verb + 1] == pair.lexicon["today"]  # adverb moved to right after the verb
    assert tgt[i_noun][0].isupper()  # nouns are capitalized


def test_synthetic_target_agrees_in_gender_number_and_case():
    pair, noun_of = _pair_with_genders()

    def np_words(noun, plural=False, case="nom", det="the"):
        return pair._target_np(NounPhrase(det, ("big",), noun, plural), case)

    adjective = pair.lexicon["big"]
    endings = {g: np_words(noun_of[g])[2][len(adjective) :] for g in "mfn"}
    assert len(set(endings.values())) == 3  # one adjective ending per gender
    assert endings == {g: STRONG_ENDING["nom"][g] for g in "mfn"}
    assert len({np_words(noun_of[g])[0] for g in "mfn"}) == 3  # der / die / das
    m = noun_of["m"]
    assert np_words(m, plural=True)[0] != np_words(m)[0]  # number changes the determiner
    assert np_words(m, plural=True)[1] != np_words(m)[1]  # and the noun (plural suffix)
    assert len({np_words(m, case=c)[0] for c in ("nom", "acc", "dat")}) == 3  # case: der/den/dem
    # Subject-verb agreement, and the preposition decides the case of its object.
    sing = Sentence(
        (
            Clause(
                NounPhrase("the", (), m, False),
                "sleep",
                preposition="with",
                prep_object=NounPhrase("the", (), m, False),
            ),
        )
    )
    plur = Sentence(
        (
            Clause(
                NounPhrase("the", (), m, True), "sleep", preposition="for", prep_object=NounPhrase("the", (), m, False)
            ),
        )
    )
    t_sing, t_plur = pair.target_words(sing), pair.target_words(plur)
    assert t_sing[2] != t_plur[2] and t_sing[2].startswith(pair.lexicon["sleep"])
    assert t_sing[4] == "dem" and t_plur[4] == "den"  # 'mit' + dative, 'für' + accusative


def test_synthetic_corpus_shows_the_phenomena_at_scale():
    pair = SyntheticLanguagePair(0)
    rng = random.Random(0)
    sentences = [pair.sample_sentence(rng) for _ in range(2000)]
    lengths = [len(pair.source_words(s)) - 1 for s in sentences]
    assert 3 <= min(lengths) and max(lengths) <= 15
    forms = Counter(w for s in sentences for w in pair.target_words(s) if w.startswith(pair.lexicon["big"]))
    assert len(forms) >= 4  # the same adjective in several agreeing forms
    words = {w for s in sentences for w in pair.source_words(s) + pair.target_words(s)}
    assert 300 <= len(words) <= 1500  # "a few hundred word types"


# ---------------------------------------------------------------------------- dictionary
def test_dictionary_follows_fairseq_order_padding_and_file_format(tmp_path):
    d = Dictionary.build(Counter({"b": 5, "a": 5, "c": 9, "rare": 1}), padding_factor=8)
    assert [d.bos(), d.pad(), d.eos(), d.unk()] == [BOS, PAD, EOS, UNK] == [0, 1, 2, 3]
    assert d.symbols[4:8] == ["c", "a", "b", "rare"]  # count desc, ties alphabetical
    assert len(d) == 8 and len(Dictionary.build(Counter({"x": 1}), padding_factor=8)) == 8
    assert d.encode_line("a c never-seen") == [d.index("a"), d.index("c"), UNK]
    d.save(tmp_path / "dict.txt")
    lines = (tmp_path / "dict.txt").read_text().splitlines()
    assert lines[0] == "c 9" and not any(line.split()[0] in ("<s>", "<pad>", "</s>", "<unk>") for line in lines)
    assert Dictionary.load(tmp_path / "dict.txt") == d
    (tmp_path / "bad.txt").write_text("c nine\n")
    with pytest.raises(ValueError, match="bad.txt:1"):
        Dictionary.load(tmp_path / "bad.txt")


# ---------------------------------------------------------------------------- BPE
def test_bpe_merges_most_frequent_pairs_first_and_round_trips(tmp_path):
    # Pair counts: (a, b</w>) 10, (b, c</w>) 5 + 3, (a, b) 5: merged in that order.
    lines = ["ab"] * 10 + ["abc"] * 5 + ["bc"] * 3
    merges = learn_bpe(lines, merges=10)
    assert merges == [("a", "b</w>"), ("b", "c</w>"), ("a", "bc</w>")]
    assert learn_bpe(lines, merges=2) == merges[:2]
    save_codes(merges, tmp_path / "codes")
    assert load_codes(tmp_path / "codes") == merges
    bpe = BPE(merges)
    assert bpe.apply("ab abc abd cab") == "ab abc a@@ b@@ d c@@ ab"
    text = "abd ab cab bca abc"
    assert remove_bpe(bpe.apply(text)) == text


def _textbook_bpe(lines, n_merges, min_frequency=2):
    """Recount every pair after every merge; ties go to the smaller pair."""
    from b2t_lib.data.bpe import _merge_word

    counts = Counter(w for line in lines for w in line.split())
    words = {tuple(w[:-1]) + (w[-1] + "</w>",): c for w, c in counts.items()}
    merges = []
    for _ in range(n_merges):
        stats = Counter()
        for word, c in words.items():
            for pair in zip(word, word[1:]):
                stats[pair] += c
        best = min(stats, key=lambda p: (-stats[p], p), default=None)
        if best is None or stats[best] < min_frequency:
            break
        merges.append(best)
        words = {_merge_word(w, *best): c for w, c in words.items()}
    return merges


def test_incremental_bpe_equals_the_textbook_algorithm():
    pairs = generate_synthetic_pairs(600, seed=4)
    lines = [s for s, _ in pairs] + [t for _, t in pairs]
    fast = learn_bpe(lines, merges=150)
    assert fast == _textbook_bpe(lines, 150)
    assert fast == learn_bpe(list(reversed(lines)), merges=150)  # independent of corpus order
    alphabet = {ch for line in lines for w in line.split() for ch in list(w[:-1]) + [w[-1] + "</w>"]}
    assert len(learn_bpe(lines, vocab_size=len(alphabet) + 40)) == 40


def test_keep_pair_is_clean_corpus_n():
    assert keep_pair(10, 15) and not keep_pair(10, 16)  # ratio 1.5
    assert not keep_pair(0, 1) and not keep_pair(81, 80) and keep_pair(80, 80)


# ---------------------------------------------------------------------------- batching
@pytest.fixture(scope="module")
def sizes():
    rng = np.random.default_rng(0)
    src = rng.integers(2, 40, size=1000)
    return src, np.clip(src + rng.integers(-5, 6, size=1000), 2, None)


def test_batches_obey_max_tokens_and_cover_each_example_once(sizes):
    src, tgt = sizes
    for max_tokens in (45, 256, 1000):
        batches = token_batches(src, tgt, max_tokens, seed=1, epoch=0)
        for b in batches:
            assert len(b) * max(max(src[b]), max(tgt[b])) <= max_tokens
        assert sorted(i for b in batches for i in b) == list(range(len(src)))
    # Length bucketing: much less padding than random batches of the same count.
    batches = token_batches(src, tgt, 256)
    padded = sum(len(b) * max(np.maximum(src[b], tgt[b])) for b in batches)
    assert padded < 1.2 * np.maximum(src, tgt).sum()


def test_batch_order_is_seeded_by_seed_and_epoch(sizes):
    src, tgt = sizes
    run = lambda **kw: token_batches(src, tgt, 256, **kw)  # noqa: E731
    assert run(seed=1, epoch=0) == run(seed=1, epoch=0)
    assert run(seed=1, epoch=0) != run(seed=1, epoch=1)
    assert run(seed=1, epoch=0) != run(seed=2, epoch=0)
    fixed = run(shuffle=False)
    assert fixed == run(shuffle=False, epoch=5)
    longest = [max(np.maximum(src[b], tgt[b])) for b in fixed]
    assert longest == sorted(longest)  # unshuffled: in order of length


def test_ranks_partition_the_batches_with_equal_counts(sizes):
    src, tgt = sizes
    full = token_batches(src, tgt, 256, seed=3, epoch=2)
    for world in (2, 3, 4):
        per_rank = [token_batches(src, tgt, 256, seed=3, epoch=2, rank=r, world_size=world) for r in range(world)]
        assert len({len(b) for b in per_rank}) == 1  # same number of steps
        interleaved = [per_rank[r][k] for k in range(len(per_rank[0])) for r in range(world)]
        assert interleaved[: len(full)] == full  # rank r takes r, r+W, ...
        assert len(interleaved) - len(full) < world  # padding only fills the tail
        assert interleaved[len(full) :] == full[: len(interleaved) - len(full)]
    with pytest.raises(ValueError, match="rank"):
        token_batches(src, tgt, 256, rank=2, world_size=2)


def test_too_long_example_raises_an_actionable_error(sizes):
    src, tgt = sizes
    with pytest.raises(BatchSizeError, match="--max-tokens"):
        token_batches(src, tgt, int(max(src.max(), tgt.max())) - 1)
