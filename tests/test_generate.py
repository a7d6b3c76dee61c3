"""Search as fairseq's SequenceGenerator does it: exact search by enumeration, the length, blocking and
finalization rules one by one, and a pinned regression case."""

import itertools
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from b2t_lib import BOS, EOS, PAD, UNK, EncoderDecoder, ModelConfig, seed_everything
from b2t_lib.generate import beam_search, beam_search_hypotheses, greedy_search, max_output_length

INF = float("inf")


class TableModel:
    """A stand-in model whose next-token logits depend only on the last token: ``table[last]``.

    It has what the search uses (``cfg``, ``encoder``, ``decoder``, ``eval``), so every rule can be
    set up exactly. ``table`` is (vocab, vocab); -inf forbids a transition.
    """

    def __init__(self, table: torch.Tensor, max_positions: int = 1024):
        vocab = table.shape[0]
        self.table = table
        self.cfg = SimpleNamespace(vocab_size=vocab, pad_idx=PAD, eos_idx=EOS, bos_idx=BOS, max_positions=max_positions)

    def eval(self):
        return self

    def encoder(self, src_tokens):
        return torch.zeros(*src_tokens.shape, 1), src_tokens.eq(PAD)

    def decoder(self, tokens, memory=None, memory_padding_mask=None, cache=None):
        return self.table[tokens[:, -1]][:, None, :]  # (rows, 1, vocab)


def table_model(vocab=8, default=0.0, **rows):
    """Uniform logits ``default`` everywhere, with some entries overridden: rows={'from_to': value}."""
    table = torch.full((vocab, vocab), default)
    for key, value in rows.items():
        source, target = (int(x) for x in key.split("_")[1:])
        table[source, target] = value
    return TableModel(table)


def source(batch=1, width=4):
    src = torch.full((batch, width), 5)
    src[:, -1] = EOS
    return src


# ------------------------------------------------------------------------------------- rule 1: length limit
def test_max_len_counts_the_padded_width_of_the_batch_and_allows_max_len_tokens_then_eos():
    # EOS never attractive: every hypothesis runs to the limit, which is max_len tokens and then EOS.
    model = table_model(**{f"t_{s}_{EOS}": -20.0 for s in range(8)})
    src = torch.tensor([[5, 6, EOS, PAD, PAD]])  # 3 real tokens, padded width 5
    assert max_output_length(src, 1.0, 0, 1024) == 5  # fairseq: src_len = src_tokens.size(1)
    assert max_output_length(src[:, :3], 1.0, 0, 1024) == 3
    assert max_output_length(src, 1.2, 10, 1024) == int(1.2 * 5 + 10)
    assert max_output_length(src, 0.0, 5000, 1024) == 1023  # capped, one position kept for EOS
    for a, b, expected in ((1.0, 0, 5), (0.0, 3, 3), (0.5, 1, 3)):
        assert [len(h) for h in greedy_search(model, src, max_len_a=a, max_len_b=b)] == [expected]
        assert [len(h) for h in beam_search(model, src, beam_size=3, max_len_a=a, max_len_b=b)] == [expected]
        for hypothesis in beam_search_hypotheses(model, src, beam_size=3, max_len_a=a, max_len_b=b)[0]:
            assert len(hypothesis.tokens) == expected


def test_one_length_limit_for_the_whole_batch():
    model = table_model(**{f"t_{s}_{EOS}": -20.0 for s in range(8)})
    short = torch.tensor([[5, EOS]])
    batch = torch.tensor([[5, EOS, PAD, PAD], [5, 6, 7, EOS]])
    assert [len(h) for h in greedy_search(model, short, max_len_a=1.0, max_len_b=1)] == [3]
    # In a batch with a longer sentence the same source gets the batch's limit (fairseq does the same).
    assert [len(h) for h in greedy_search(model, batch, max_len_a=1.0, max_len_b=1)] == [5, 5]
    assert [len(h) for h in beam_search(model, batch, beam_size=2, max_len_a=1.0, max_len_b=1)] == [5, 5]


# ----------------------------------------------------------------------------------- rule 2: minimum length
@pytest.mark.parametrize("min_len", [0, 1, 3])
def test_min_len_forbids_eos_before_min_len_tokens(min_len):
    # EOS is by far the most likely token everywhere, so every hypothesis is as short as allowed.
    model = table_model(**{f"t_{s}_{EOS}": 10.0 for s in range(8)})
    src = source()
    assert [len(h) for h in greedy_search(model, src, max_len_b=6, min_len=min_len)] == [min_len]
    assert [len(h) for h in beam_search(model, src, beam_size=3, max_len_b=6, min_len=min_len)] == [min_len]
    for hypothesis in beam_search_hypotheses(model, src, beam_size=3, max_len_b=6, min_len=min_len)[0]:
        assert len(hypothesis.tokens) >= min_len


def test_default_min_len_is_one_no_empty_hypothesis():
    model = table_model(**{f"t_{s}_{EOS}": 10.0 for s in range(8)})
    assert len(greedy_search(model, source())[0]) == 1
    assert all(len(h.tokens) >= 1 for h in beam_search_hypotheses(model, source(), beam_size=4)[0])


def test_min_len_above_the_length_limit_is_refused():
    with pytest.raises(ValueError, match="min_len=4 is larger than the length limit max_len=3"):
        beam_search(table_model(), source(), max_len_b=3, min_len=4)
    with pytest.raises(ValueError, match="min_len"):
        greedy_search(table_model(), source(), max_len_b=3, min_len=4)


# -------------------------------------------------------------------------------- rule 3: blocked symbols
def test_only_padding_is_blocked_bos_may_be_generated():
    # <pad> has the highest logit, <s> the next: <s> is generated, <pad> never.
    model = table_model(**{f"t_{s}_{PAD}": 9.0 for s in range(8)}, **{f"t_{s}_{BOS}": 5.0 for s in range(8)})
    greedy = greedy_search(model, source(), max_len_b=3)[0]
    assert greedy.tolist() == [BOS, BOS, BOS]
    for hypothesis in beam_search_hypotheses(model, source(), beam_size=4, max_len_b=3)[0]:
        assert PAD not in hypothesis.tokens.tolist()
    assert beam_search(model, source(), beam_size=4, max_len_b=3)[0].tolist() == [BOS, BOS, BOS]


def test_unk_penalty_is_subtracted_from_unk():
    model = table_model(**{f"t_{s}_{UNK}": 3.0 for s in range(8)}, **{f"t_{s}_6": 2.0 for s in range(8)})
    assert greedy_search(model, source(), max_len_b=2)[0].tolist() == [UNK, UNK]  # default penalty 0
    assert greedy_search(model, source(), max_len_b=2, unk_penalty=1.5)[0].tolist() == [6, 6]
    assert beam_search(model, source(), beam_size=2, max_len_b=2, unk_penalty=1.5)[0].tolist() == [6, 6]
    scores = beam_search_hypotheses(model, source(), beam_size=3, max_len_b=2, unk_penalty=0.5)[0]
    assert scores[0].tokens.tolist() == [UNK, UNK]


# -------------------------------------------------------------------- rules 5-8: finalization and ties
def test_equal_scores_keep_the_order_they_were_finished_in():
    # From the start, 4 and 5 are equally likely (log 1/2 each); 4 must end, 5 must go on to 6, then end.
    # With lenpen 0, [4] (finished at step 1) and [5, 6] (finished at step 2) score exactly log(1/2).
    table = torch.full((8, 8), -INF)
    table[EOS, 4] = table[EOS, 5] = 0.0
    table[4, EOS] = table[5, 6] = table[6, EOS] = 0.0
    hypotheses = beam_search_hypotheses(TableModel(table), source(), beam_size=2, len_penalty=0.0, max_len_b=5)[0]
    assert [h.tokens.tolist() for h in hypotheses] == [[4], [5, 6]]
    assert hypotheses[0].score == hypotheses[1].score == pytest.approx(-math.log(2))


def test_an_eos_candidate_is_finished_only_among_the_first_beam_candidates():
    # [4] then EOS is the best hypothesis (lenpen 0), but at step 1 its EOS ranks third of the 2 * beam
    # candidates: with beam 2 fairseq does not finish it (and never sees it again); with beam 3 it does.
    table = torch.full((8, 8), -INF)
    table[EOS, 4] = table[EOS, 5] = 0.0
    table[4, 6] = table[5, 7] = 0.0
    table[4, EOS] = table[5, EOS] = -0.5
    table[6, UNK] = table[7, UNK] = 0.0
    table[6, EOS] = table[7, EOS] = -5.0  # at step 2 = max_len only EOS may follow, and it is unlikely
    model = TableModel(table)
    narrow = beam_search_hypotheses(model, source(), beam_size=2, len_penalty=0.0, max_len_b=2)[0]
    wide = beam_search_hypotheses(model, source(), beam_size=3, len_penalty=0.0, max_len_b=2)[0]
    assert sorted(h.tokens.tolist() for h in narrow) == [[4, 6], [5, 7]]
    assert wide[0].tokens.tolist() in ([4], [5]) and wide[0].score > narrow[0].score + 4


def test_a_sentence_keeps_at_most_beam_hypotheses_and_stops_once_it_has_them():
    calls = []
    model = table_model(**{f"t_{s}_{EOS}": 1.0 for s in range(8)})
    original = model.decoder

    def counting_decoder(tokens, *args):
        calls.append(tokens.shape)
        return original(tokens, *args)

    model.decoder = counting_decoder
    hypotheses = beam_search_hypotheses(model, source(), beam_size=3, max_len_b=50)[0]
    assert len(hypotheses) == 3
    assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
    assert len(calls) < 50  # finished long before the length limit


class SourceSaysWhenToStop(TableModel):
    """EOS is very likely when the source starts with 5 and very unlikely otherwise; the decoder sees
    the source only through ``memory``, so a wrong memory row after reordering changes the result."""

    def encoder(self, src_tokens):
        memory = src_tokens[:, :1, None].float().expand(*src_tokens.shape, 1)  # (batch, src_time, 1)
        return memory, src_tokens.eq(PAD)

    def decoder(self, tokens, memory=None, memory_padding_mask=None, cache=None):
        self.rows.append(tokens.shape[0])
        logits = self.table[tokens[:, -1]].clone()
        logits[:, EOS] += torch.where(memory[:, 0, 0] == 5, 10.0, -10.0)
        return logits[:, None, :]


def test_finished_sentences_leave_the_batch():
    model = SourceSaysWhenToStop(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))
    model.rows = []
    batch = torch.tensor([[6, 7, EOS], [5, 7, EOS], [6, 6, EOS]])
    together = beam_search_hypotheses(model, batch, beam_size=2, max_len_b=4)
    assert model.rows[:3] == [6, 6, 4]  # the sentence that starts with 5 is done after two steps
    assert [len(h[0].tokens) for h in together] == [4, 1, 4]
    for i in range(3):  # each sentence alone gives the same hypotheses and scores
        alone = beam_search_hypotheses(model, batch[i : i + 1], beam_size=2, max_len_b=4)[0]
        assert [(h.tokens.tolist(), h.score) for h in alone] == [(h.tokens.tolist(), h.score) for h in together[i]]


# ------------------------------------------------------------------------------ exact search, real model
class RestrictedVocabulary:
    """A real model whose output may only be ``allowed`` tokens (or EOS): a tiny vocabulary in which a
    beam of ``vocab_size - 1`` holds every prefix, so beam search must enumerate every hypothesis."""

    def __init__(self, model, allowed):
        self.model, self.cfg, self.encoder = model, model.cfg, model.encoder
        self.blocked = torch.ones(model.cfg.vocab_size, dtype=torch.bool)
        self.blocked[list(allowed) + [EOS]] = False

    def eval(self):
        self.model.eval()
        return self

    def decoder(self, tokens, memory, memory_padding_mask, cache=None):
        logits = self.model.decoder(tokens, memory, memory_padding_mask, cache)
        return logits.masked_fill(self.blocked, -INF)


def enumerate_hypotheses(model, src, allowed, max_len, min_len, len_penalty, unk_penalty):
    """Every hypothesis of length min_len..max_len, scored with full (non-incremental) forwards."""
    memory, mask = model.encoder(src[None])
    scored = []
    for length in range(max(min_len, 0), max_len + 1):
        for tokens in itertools.product(allowed, repeat=length):
            target = torch.tensor([*tokens, EOS])
            prev = torch.tensor([EOS, *tokens])[None]
            log_probs = F.log_softmax(model.decoder(prev, memory, mask)[0].float(), dim=-1)
            log_probs[:, UNK] -= unk_penalty
            total = log_probs.gather(1, target[:, None]).sum()
            scored.append((tokens, float(total / (length + 1) ** len_penalty)))
    return sorted(scored, key=lambda item: item[1], reverse=True)


@pytest.mark.parametrize(
    "variant, len_penalty, min_len, unk_penalty",
    [("b2t", 0.6, 1, 0.0), ("post_ln", 1.0, 1, 0.5), ("pre_ln", 0.0, 2, 0.0), ("b2t_no_ln", 2.0, 1, 0.0)],
)
def test_beam_search_with_a_wide_beam_equals_exact_search_by_enumeration(variant, len_penalty, min_len, unk_penalty):
    seed_everything(11)
    cfg = ModelConfig(
        vocab_size=40,
        d_model=16,
        n_heads=2,
        d_ff=32,
        encoder_layers=1,
        decoder_layers=2,
        variant=variant,
        dropout=0.0,
        share_embeddings=False,
        share_decoder_io=False,
    )
    base = EncoderDecoder(cfg).eval()
    with torch.no_grad():
        base.decoder.output_projection.weight.mul_(4.0)  # peaked distributions: no near-ties
    allowed = (BOS, UNK, 7)  # <s> and <unk> are ordinary tokens for the search
    model = RestrictedVocabulary(base, allowed)
    src = torch.tensor([[9, 12, 30, EOS], [17, EOS, PAD, PAD]])
    max_len = 3  # 3 + 9 + 27 = 39 hypotheses: a beam of vocab_size - 1 = 39 keeps every prefix
    with torch.no_grad():
        found = beam_search_hypotheses(
            model,
            src,
            beam_size=39,
            len_penalty=len_penalty,
            max_len_b=max_len,
            min_len=min_len,
            unk_penalty=unk_penalty,
        )
        for i in range(2):
            exact = enumerate_hypotheses(
                model, src[i, src[i] != PAD], allowed, max_len, min_len, len_penalty, unk_penalty
            )
            assert exact[0][1] - exact[1][1] > 1e-3  # the optimum is unique: a real test of the search
            assert len(found[i]) == len(exact)  # every hypothesis was finished ...
            assert found[i][0].tokens.tolist() == list(exact[0][0])  # ... and the best is the exact optimum
            by_tokens = {tuple(h.tokens.tolist()): h.score for h in found[i]}
            for tokens, score in exact:  # ... with the same length-normalized scores
                assert by_tokens[tokens] == pytest.approx(score, abs=1e-4)


# ------------------------------------------------------------------------------------ regression
def pinned_model():
    seed_everything(7)
    cfg = ModelConfig(
        vocab_size=40,
        d_model=32,
        n_heads=4,
        d_ff=64,
        encoder_layers=2,
        decoder_layers=2,
        variant="b2t",
        dropout=0.0,
        share_embeddings=False,
        share_decoder_io=False,
    )
    model = EncoderDecoder(cfg).eval()
    with torch.no_grad():
        weight = model.decoder.output_projection.weight
        weight.mul_(3.0)  # peaked distributions
        weight[EOS] = 1.2 * (weight[4] + weight[29] + weight[33]) / 3  # EOS likely: hypotheses of all lengths
    src = torch.tensor([[31, 8, 29, 6, 35, 19, EOS], [27, 8, 21, EOS, PAD, PAD, PAD], [6, 26, 22, 32, EOS, PAD, PAD]])
    return model, src


PINNED_BEST = [[34, 29, 33], [34, 29, 33, 29], [18, 29, 33]]
PINNED_NBEST_1 = [[34, 18, 30, 29, 33], [18, 29, 33, 29], [18, 4, 4, 4, 4, 4]]
PINNED_GREEDY = [[34, 7, 8, 24, 4, 4, 4, 4], [18, 29, 33, 29], [18, 4, 4, 4, 4, 4, 4, 4]]


class NoisyLogits:
    """The same model with tiny random noise on every logit: a pinned result that survives it does not
    hang on a near-tie, so other CPUs and thread counts (differences ~1e-6) give it too."""

    def __init__(self, model, size, seed):
        self.model, self.cfg, self.encoder = model, model.cfg, model.encoder
        self.size, self.generator = size, torch.Generator().manual_seed(seed)

    def eval(self):
        return self

    def decoder(self, *args):
        logits = self.model.decoder(*args)
        return logits + self.size * torch.randn(logits.shape, generator=self.generator)


def test_regression_pinned_hypotheses_of_a_seeded_model():
    model, src = pinned_model()
    options = dict(beam_size=4, len_penalty=0.6, max_len_a=0.0, max_len_b=8)
    found = beam_search_hypotheses(model, src, **options)
    assert [h[0].tokens.tolist() for h in found] == PINNED_BEST
    assert [h[1].tokens.tolist() for h in found] == PINNED_NBEST_1
    assert [t.tolist() for t in beam_search(model, src, **options)] == PINNED_BEST
    assert [t.tolist() for t in greedy_search(model, src, max_len_b=8)] == PINNED_GREEDY
    for hypotheses in found:
        assert hypotheses[0].score - hypotheses[1].score > 0.05
    for i in range(3):  # a sentence alone: the same hypotheses as in the batch (rows leave it as they finish)
        alone = beam_search_hypotheses(model, src[i : i + 1, : int((src[i] != PAD).sum())], **options)[0]
        assert [h.tokens.tolist() for h in alone] == [h.tokens.tolist() for h in found[i]]
    for seed in range(4):  # no decision of the search sits on a near-tie
        noisy = NoisyLogits(model, 1e-3, seed)
        assert [t.tolist() for t in beam_search(noisy, src, **options)] == PINNED_BEST
        assert [t.tolist() for t in greedy_search(NoisyLogits(model, 1e-3, seed), src, max_len_b=8)] == PINNED_GREEDY
