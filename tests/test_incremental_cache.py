"""What the faster search rests on: the key/value history reordered in one copy (and given its room once), one copy
of the encoder keys per sentence shared by its beams, a first step of one row per sentence, the newest-position
embedding and the row-wise NaN rule each compute what the straightforward code computes."""

import pytest
import torch
import torch.nn.functional as F

from b2t_lib import EOS, PAD, EncoderDecoder, ModelConfig, seed_everything
from b2t_lib.attention import KeyValueCache, MultiheadAttention, reorder_cache
from b2t_lib.embedding import TokenInput, build_token_embedding
from b2t_lib.generate import _next_log_probs, beam_search_hypotheses


def test_the_history_equals_concatenation_through_reorders_and_rows_leaving():
    generator = torch.Generator().manual_seed(0)
    history, keys, values = KeyValueCache(), None, None
    rows = 6
    for step in range(9):
        k, v = (torch.randn(rows, 3, 1, 4, generator=generator) for _ in range(2))  # (batch, heads, new, d_head)
        keys = k if keys is None else torch.cat([keys, k], dim=2)
        values = v if values is None else torch.cat([values, v], dim=2)
        seen_k, seen_v = history.append(k, v)
        assert torch.equal(seen_k, keys) and torch.equal(seen_v, values)
        if step == 3:
            continue  # no reorder: the next step is concatenated
        order = torch.randperm(rows, generator=generator)
        if step == 5:
            rows -= 2  # two rows leave (a sentence is done)
            order = order[:rows]
        history.reorder(order)
        keys, values = keys[order], values[order]
    assert history.length == 9


def test_reserved_room_is_written_in_place_and_a_first_step_widens_to_every_beam():
    generator = torch.Generator().manual_seed(2)
    history = KeyValueCache()
    k = torch.randn(2, 3, 1, 4, generator=generator)  # (sentences, heads, 1, d_head): the first step, one row each
    history.append(k, -k)
    history.reorder(torch.tensor([0, 0, 0, 1, 1, 1]))  # three beams per sentence
    history.reserve(8)
    buffer = history.keys.data_ptr()
    keys = k[[0, 0, 0, 1, 1, 1]]
    for _ in range(7):
        new = torch.randn(6, 3, 1, 4, generator=generator)
        keys = torch.cat([keys, new], dim=2)
        seen, seen_values = history.append(new, -new)
        assert torch.equal(seen, keys) and torch.equal(seen_values, -keys)
    assert history.keys.data_ptr() == buffer  # eight positions fit the room reserved: never copied to grow


def test_several_positions_at_once_and_the_dict_reorder():
    history = KeyValueCache()
    k = torch.arange(2 * 5 * 3, dtype=torch.float).view(2, 1, 5, 3)  # (batch 2, heads 1, 5 positions, d_head 3)
    seen, _ = history.append(k, -k)
    assert torch.equal(seen, k)
    cache = {"self": {"history": history}, "cross": {"k": torch.tensor([[1.0], [2.0]])}}
    reorder_cache(cache, torch.tensor([1, 1]))
    assert torch.equal(history.append(k[:, :, :1], k[:, :, :1])[0][:, :, :5], k[[1, 1]])
    assert cache["cross"]["k"].tolist() == [[2.0], [2.0]]


def test_beams_attend_together_to_one_copy_of_their_sentences_encoder_keys():
    seed_everything(3)
    attention = MultiheadAttention(d_model=16, n_heads=4).eval()
    sentences, beam = 3, 4
    memory = torch.randn(sentences, 5, 16)  # (sentences, src_time, d_model)
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    queries = torch.randn(sentences * beam, 1, 16)  # (rows, 1, d_model): `beam` consecutive rows per sentence
    rows = torch.arange(sentences).repeat_interleave(beam)
    per_row, _ = attention(queries, memory[rows], padding[rows])  # every beam with its own copy
    cache: dict = {}
    attention(queries[::beam], memory, padding, cache=cache, static_kv=True)  # one copy per sentence
    assert cache["k"].shape[0] == sentences
    shared, _ = attention(queries, memory[rows], padding[rows], cache=cache, static_kv=True)
    assert shared.shape == per_row.shape
    torch.testing.assert_close(shared, per_row, rtol=0, atol=1e-6)
    assert not torch.equal(shared[:beam], shared[beam : 2 * beam])  # the rows did not mix sentences
    # the mask may come with one row per cached row (a sentence), and memory too: it is not read once cached
    one_per_sentence, _ = attention(queries, memory, padding, cache=cache, static_kv=True)
    assert torch.equal(one_per_sentence, shared)


class EndsSoonerForShorterSources:
    """The model, cached or not, with EOS pulled up as the prefix grows, faster for a sentence with more source
    padding: sentences finish at different steps and leave the batch while the others go on."""

    def __init__(self, model, use_cache: bool):
        self.model, self.cfg, self.encoder, self.use_cache = model, model.cfg, model.encoder, use_cache

    def eval(self):
        return self

    def decoder(self, tokens, memory, memory_padding_mask, cache=None):
        # without a cache every step recomputes the whole prefix, each beam with its own copy of the encoder output
        logits = self.model.decoder(tokens, memory, memory_padding_mask, cache if self.use_cache else None)
        pads = memory_padding_mask.sum(dim=1)  # (rows,)
        logits[:, -1, EOS] += 0.5 * tokens.shape[1] * (1 + pads)
        return logits


@pytest.mark.parametrize("variant", ["b2t", "realformer", "pre_ln"])
def test_the_cached_search_finds_what_the_search_without_cache_finds(variant):
    seed_everything(5)
    cfg = ModelConfig(vocab_size=30, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=3,
                      variant=variant, dropout=0.0, share_embeddings=False, share_decoder_io=False)  # fmt: skip
    model = EncoderDecoder(cfg).eval()
    with torch.no_grad():
        model.decoder.output_projection.weight.mul_(3.0)  # peaked distributions: no near-ties
    src = torch.tensor([[9, 12, 20, 6, EOS], [17, 8, EOS, PAD, PAD], [5, 21, 22, EOS, PAD]])
    options = dict(beam_size=3, len_penalty=0.6, max_len_b=12)
    cached = beam_search_hypotheses(EndsSoonerForShorterSources(model, use_cache=True), src, **options)
    plain = beam_search_hypotheses(EndsSoonerForShorterSources(model, use_cache=False), src, **options)
    assert len({len(h[0].tokens) for h in cached}) == 3  # the sentences finished at different steps
    for found, expected in zip(cached, plain):
        assert [h.tokens.tolist() for h in found] == [h.tokens.tolist() for h in expected]
        assert [h.score for h in found] == pytest.approx([h.score for h in expected], abs=1e-5)


class WithoutCache:
    """The model as any other decoder: no cache (every step recomputes the whole prefix), one memory row per beam."""

    def __init__(self, model):
        self.model, self.cfg, self.encoder = model, model.cfg, model.encoder

    def eval(self):
        return self

    def decoder(self, tokens, memory, memory_padding_mask, cache=None):
        return self.model.decoder(tokens, memory, memory_padding_mask)


@pytest.mark.parametrize("variant", ["b2t", "realformer", "pre_ln"])
def test_the_library_decoder_shares_the_encoder_keys_and_finds_what_the_search_without_cache_finds(variant):
    seed_everything(6)
    cfg = ModelConfig(vocab_size=30, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=3,
                      variant=variant, dropout=0.0, share_embeddings=False, share_decoder_io=False)  # fmt: skip
    model = EncoderDecoder(cfg).eval()
    with torch.no_grad():
        model.decoder.output_projection.weight.mul_(3.0)  # peaked distributions: no near-ties
        model.decoder.output_projection.weight[EOS].mul_(12.0)  # hypotheses that end at different steps
    src = torch.tensor([[9, 12, 20, 6, EOS], [17, 8, EOS, PAD, PAD], [5, 21, 22, EOS, PAD], [7, 7, 9, EOS, PAD]])
    rows_seen = {"keys": [], "queries": []}
    layer = model.decoder.layers[1]
    layer.encoder_attn.k_proj.register_forward_hook(lambda m, i, o: rows_seen["keys"].append(i[0].shape[0]))
    layer.self_attn.q_proj.register_forward_hook(lambda m, i, o: rows_seen["queries"].append(i[0].shape[0]))
    options = dict(beam_size=3, len_penalty=0.6, max_len_b=12)
    cached = beam_search_hypotheses(model, src, **options)
    assert rows_seen["keys"] == [4]  # the encoder keys: once, one row per sentence
    assert rows_seen["queries"][:2] == [4, 12]  # the first step one row per sentence, then one per beam
    assert len(set(rows_seen["queries"])) > 2  # sentences left the batch
    plain = beam_search_hypotheses(WithoutCache(model), src, **options)
    assert len({len(h[0].tokens) for h in cached}) > 1  # the sentences finished at different steps
    for found, expected in zip(cached, plain):
        assert [h.tokens.tolist() for h in found] == [h.tokens.tolist() for h in expected]
        assert [h.score for h in found] == pytest.approx([h.score for h in expected], abs=1e-5)


def test_the_newest_position_alone_is_embedded_as_in_the_whole_sequence():
    seed_everything(0)
    embed = build_token_embedding(30, 8, PAD)
    token_input = TokenInput(8, PAD, keep_first=True).eval()
    tokens = torch.tensor([[EOS, 5, 6, 7], [PAD, EOS, 9, 4], [EOS, 5, PAD, PAD]])  # left and right padding
    full, mask = token_input(tokens, embed)
    last, last_mask = token_input(tokens, embed, last_only=True)
    assert last.shape == (3, 1, 8) and torch.equal(last_mask, mask)
    assert torch.equal(last, full[:, -1:])


class FixedLogits:
    """A decoder whose next-token logits are given: what the search's rule 3 does to them."""

    def __init__(self, logits):
        self.logits = logits
        self.cfg = type("cfg", (), dict(eos_idx=EOS, pad_idx=PAD, unk_idx=3))

    def decoder(self, *args):
        return self.logits[:, None, :]


class FixedLogitsModule(torch.nn.Module):
    """The same as a module, which computes its output afresh in every call: the search writes over it."""

    def __init__(self, logits):
        super().__init__()
        self.logits, self.cfg = logits, FixedLogits(logits).cfg

    def decoder(self, *args):
        return self.logits.clone()[:, None, :]


@pytest.mark.parametrize("decoder", [FixedLogits, FixedLogitsModule])
def test_a_row_with_nan_becomes_minus_infinity_and_the_other_rows_are_untouched(decoder):
    logits = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
    logits[1, 4] = float("nan")
    logits[2, 7] = float("inf")  # its log-softmax is NaN too
    logits[3, :] = float("-inf")
    model = decoder(logits)
    log_probs = _next_log_probs(model, None, None, None, None, step=2, max_len=9, min_len=1, unk_penalty=0.0)
    expected = F.log_softmax(logits, dim=-1)
    expected = expected.masked_fill(torch.isnan(expected), float("-inf"))
    expected[:, PAD] = float("-inf")
    assert torch.equal(log_probs, expected)
    assert not torch.isnan(log_probs).any() and bool(torch.isinf(log_probs[1:]).all())
