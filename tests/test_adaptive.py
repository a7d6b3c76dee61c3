"""Adaptive input and adaptive softmax (docs/methods.md §3.4): normalization, the loss, tying, sizes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from b2t_lib.adaptive import AdaptiveInput, AdaptiveSoftmax, band_boundaries
from b2t_lib.config import ConfigError
from b2t_lib.special_tokens import PAD
from b2t_lib.embedding import TokenInput
from b2t_lib.utils import count_parameters

V, D, CUTOFF = 50, 16, [10, 30]  # bands [0, 10), [10, 30), [30, 50); dims 16, 4, 1


def build(cutoff=CUTOFF, vocab=V, d=D, dropout=0.0, tie=True, tie_proj=True, factor=4.0, seed=0):
    torch.manual_seed(seed)
    inp = AdaptiveInput(vocab, d, cutoff, factor=factor)
    out = AdaptiveSoftmax(
        vocab, d, cutoff, dropout=dropout, factor=factor, adaptive_input=inp if tie else None, tie_proj=tie_proj and tie
    )
    return inp, out


def targets_in_every_band(n_per_band=6, vocab=V, cutoff=CUTOFF, seed=1):
    g = torch.Generator().manual_seed(seed)
    bounds = [0] + band_boundaries(vocab, cutoff)
    parts = [torch.randint(max(lo, 2), hi, (n_per_band,), generator=g) for lo, hi in zip(bounds, bounds[1:])]
    # the in-band index 1 of every tail (fairseq's ignore_index quirk) and the band edges
    parts.append(torch.tensor([b + 1 for b in bounds[1:-1]] + [b for b in bounds[1:-1]] + [vocab - 1, 2]))
    y = torch.cat(parts)
    return y[torch.randperm(len(y), generator=g)]


@pytest.mark.parametrize("tie,tie_proj", [(True, True), (True, False), (False, False)])
def test_log_probabilities_sum_to_one(tie, tie_proj):
    _, softmax = build(tie=tie, tie_proj=tie_proj)
    softmax.eval()
    hidden = torch.randn(3, 7, D) * 3
    log_p = softmax.log_prob(hidden).double()  # (3, 7, V)
    assert log_p.shape == (3, 7, V)
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(3, 7, dtype=torch.float64), atol=1e-5, rtol=0)
    # they are logits too: log_softmax leaves them unchanged (what generation applies)
    torch.testing.assert_close(F.log_softmax(log_p, -1), log_p, atol=1e-5, rtol=0)


@pytest.mark.parametrize("tie", [True, False])
def test_loss_equals_nll_of_the_full_log_probabilities(tie):
    _, softmax = build(tie=tie)
    softmax.eval()
    y = targets_in_every_band()
    y[::5] = PAD  # padding is not counted
    hidden = torch.randn(len(y), D, requires_grad=True)
    nll, ntokens = softmax.loss(hidden, y)
    full = softmax.log_prob(hidden)  # (N, V)
    expected = -full.gather(1, y[:, None]).squeeze(1)[y.ne(PAD)].sum()
    assert int(ntokens) == int(y.ne(PAD).sum())
    torch.testing.assert_close(nll, expected, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(softmax.target_log_prob(hidden, y), full.gather(1, y[:, None]).squeeze(1))
    # and the gradients agree too
    (g_loss,) = torch.autograd.grad(nll, hidden)
    (g_full,) = torch.autograd.grad(expected, hidden)
    torch.testing.assert_close(g_loss, g_full, atol=1e-5, rtol=1e-4)


def test_loss_keeps_batch_shape_and_matches_cross_entropy_per_band():
    """Head cross entropy over all tokens + each tail's over its own tokens (fairseq's adaptive_loss,
    without its ignore_index on the tails) equals the loss."""
    _, softmax = build()
    softmax.eval()
    y = targets_in_every_band().view(3, -1)
    hidden = torch.randn(*y.shape, D)
    nll, _ = softmax.loss(hidden, y)
    h, t = hidden.reshape(-1, D), y.reshape(-1)
    bounds = softmax.cutoff
    head_target = t.clone()
    total = 0.0
    for i in range(len(bounds) - 1):
        in_band = (t >= bounds[i]) & (t < bounds[i + 1])
        head_target[in_band] = bounds[0] + i
        total += F.cross_entropy(softmax.tail[i](h[in_band]), t[in_band] - bounds[i], reduction="sum")
    total += F.cross_entropy(softmax.head(h), head_target, reduction="sum")
    torch.testing.assert_close(nll, total, atol=1e-4, rtol=1e-5)


def test_one_band_is_a_plain_tied_softmax():
    inp, softmax = build(cutoff=[V])
    softmax.eval()
    assert len(softmax.tail) == 0 and softmax.head_size == V
    hidden = torch.randn(4, 5, D)
    embedding = inp.embeddings[0][0].weight  # (V, D)
    torch.testing.assert_close(softmax.log_prob(hidden), F.log_softmax(hidden @ embedding.T, dim=-1))
    y = torch.randint(0, V, (4, 5))
    expected = F.cross_entropy((hidden @ embedding.T).view(-1, V), y.view(-1), ignore_index=PAD, reduction="sum")
    torch.testing.assert_close(softmax.loss(hidden, y)[0], expected)


def test_tying_shares_the_storage():
    inp, softmax = build(tie=True, tie_proj=True)
    assert softmax.head.word_proj.weight is inp.embeddings[0][0].weight
    for i, tail in enumerate(softmax.tail):
        emb, proj = inp.weights_for_band(i + 1)
        assert tail[2].weight is emb and tail[2].weight.data_ptr() == emb.data_ptr()
        assert tail[0].weight is proj and tail[0].weight.data_ptr() == proj.data_ptr()
    # a gradient step on the softmax alone changes what the input embeds
    model = nn.ModuleDict({"input": inp, "softmax": softmax})
    tokens = torch.arange(2, V)
    before = inp(tokens).detach().clone()
    nll, _ = softmax.loss(torch.randn(len(tokens), D), tokens)
    nll.backward()
    with torch.no_grad():  # one plain SGD step (band 0's input projection gets no gradient here)
        for p in model.parameters():
            if p.grad is not None:
                p -= 1.0 * p.grad
    after = inp(tokens).detach()
    bounds = [0] + softmax.cutoff
    for lo, hi in zip(bounds, bounds[1:]):  # every band's embedding moved
        band = (tokens >= lo) & (tokens < hi)
        assert not torch.allclose(before[band], after[band])
    # untied projections: the tail's own Linear, not the input's
    inp2, softmax2 = build(tie=True, tie_proj=False)
    assert all(tail[0].weight is not inp2.weights_for_band(i + 1)[1] for i, tail in enumerate(softmax2.tail))
    assert all(tail[2].weight is inp2.weights_for_band(i + 1)[0] for i, tail in enumerate(softmax2.tail))


def test_state_dict_round_trip_keeps_the_tying():
    inp, softmax = build()
    model = nn.ModuleDict({"input": inp, "softmax": softmax})
    inp2, softmax2 = build(seed=5)
    other = nn.ModuleDict({"input": inp2, "softmax": softmax2})
    other.load_state_dict(model.state_dict())
    assert softmax2.head.word_proj.weight is inp2.embeddings[0][0].weight
    hidden = torch.randn(6, D)
    model.eval(), other.eval()
    torch.testing.assert_close(other["softmax"].log_prob(hidden), softmax.log_prob(hidden))


def _input_parameters(vocab, d, cutoff, factor):
    bounds = [0] + band_boundaries(vocab, cutoff)
    dims = [int(d // factor**i) for i in range(len(bounds) - 1)]
    return sum((hi - lo) * di + di * d for lo, hi, di in zip(bounds, bounds[1:], dims)), bounds, dims


@pytest.mark.parametrize("vocab,d,cutoff", [(V, D, CUTOFF), (267_744, 1024, [20000, 60000])])
def test_parameter_counts_match_the_formula(vocab, d, cutoff):
    # sum_i (n_i d_i + d_i d) for the input; the tied softmax adds only the K-1 cluster vectors
    n_input, bounds, dims = _input_parameters(vocab, d, cutoff, 4)
    n_tails = len(bounds) - 2
    if vocab > 1000:  # the WikiText-103 sizes, from the formula alone (building them takes seconds)
        assert n_input == 20000 * 1024 + 1024 * 1024 + 40000 * 256 + 256 * 1024 + 207_744 * 64 + 64 * 1024
        assert n_input + 1024 * 2 < 0.17 * vocab * d  # vs 274M for a full tied embedding + softmax
        return
    inp, softmax = build(vocab=vocab, d=d, cutoff=cutoff)
    assert count_parameters(inp) == n_input
    assert count_parameters(nn.ModuleDict({"i": inp, "s": softmax})) == n_input + d * n_tails
    inp, softmax = build(vocab=vocab, d=d, cutoff=cutoff, tie_proj=False)
    assert count_parameters(nn.ModuleDict({"i": inp, "s": softmax})) == n_input + d * n_tails + sum(
        d * di for di in dims[1:]
    )
    _, softmax = build(vocab=vocab, d=d, cutoff=cutoff, tie=False)
    assert count_parameters(softmax) == d * (bounds[1] + n_tails) + sum(
        d * di + di * (hi - lo) for lo, hi, di in zip(bounds[1:], bounds[2:], dims[1:])
    )


def test_dropout_only_in_training():
    _, softmax = build(dropout=0.5)
    hidden = torch.randn(8, D)
    y = targets_in_every_band(2)[:8]
    softmax.eval()
    a, b = softmax.log_prob(hidden), softmax.log_prob(hidden)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(softmax.loss(hidden, y)[0], softmax.loss(hidden, y)[0], rtol=0, atol=0)
    _, plain = build(dropout=0.0)
    plain.eval()
    torch.testing.assert_close(a, plain.log_prob(hidden))  # same weights (same seed), no dropout
    softmax.train()
    torch.manual_seed(0)
    c = softmax.log_prob(hidden)
    assert not torch.allclose(a, c)
    assert (softmax.loss(hidden, y)[0] - softmax.loss(hidden, y)[0]).abs() > 0


def test_adaptive_input_bands_init_and_padding():
    inp, _ = build()
    tokens = torch.tensor([[0, 1, 9, 10, 29], [30, 49, 1, 2, 15]])
    out = inp(tokens)  # (2, 5, D)
    assert out.shape == (2, 5, D)
    bounds = [0] + inp.cutoff
    for t, vec in zip(tokens.view(-1).tolist(), out.view(-1, D)):
        band = next(i for i in range(len(bounds) - 1) if bounds[i] <= t < bounds[i + 1])
        emb, proj = inp.weights_for_band(band)
        torch.testing.assert_close(vec, proj @ emb[t - bounds[band]])
    assert torch.count_nonzero(out[0, 1]) == 0  # padding embeds to zero
    assert inp.dims == [16, 4, 1]
    # fairseq's init: N(0, d_i^-1/2), row `pad` zero in every band, xavier projections
    torch.manual_seed(0)
    big = AdaptiveInput(30000, 256, [4000, 12000])
    for (emb, proj), dim in zip((big.weights_for_band(i) for i in range(3)), (256, 64, 16)):
        assert torch.count_nonzero(emb[PAD]) == 0
        assert abs(float(emb.detach().std()) * math.sqrt(dim) - 1) < 0.03
        bound = math.sqrt(6 / (dim + 256))
        assert 0.95 * bound < float(proj.detach().abs().max()) <= bound
    # only band 0's pad row is padding: its gradient is zero, the tail's same row learns
    tokens = torch.tensor([PAD, bounds[1] + PAD, bounds[2] + PAD])
    inp(tokens).sum().backward()
    assert torch.count_nonzero(inp.embeddings[0][0].weight.grad[PAD]) == 0
    assert torch.count_nonzero(inp.embeddings[1][0].weight.grad[PAD]) > 0


def test_adaptive_input_drops_into_the_token_input():
    """The stack's token input calls embed_tokens(tokens) and scales by sqrt(d): unchanged here."""
    inp, _ = build()
    token_input = TokenInput(D, PAD).eval()
    tokens = torch.tensor([[5, 12, 40, 2, PAD]])
    x, padding_mask = token_input(tokens, inp)
    expected = math.sqrt(D) * inp(tokens) + token_input.embed_positions(tokens.eq(PAD))
    torch.testing.assert_close(x, expected)
    assert padding_mask.tolist() == [[False, False, False, False, True]]


def test_every_parameter_gets_a_gradient_even_without_tail_tokens():
    """DistributedDataParallel needs every parameter in every backward pass."""
    for tie_proj in (True, False):
        inp, softmax = build(tie_proj=tie_proj)
        tokens = torch.tensor([[2, 3, 4, 5]])  # band 0 only
        hidden = inp(tokens)
        nll, _ = softmax.loss(hidden, tokens)
        nll.backward()
        params = list(inp.parameters()) + list(softmax.parameters())
        assert all(p.grad is not None for p in params)


def test_generation_needs_only_the_last_position():
    _, softmax = build()
    softmax.eval()
    hidden = torch.randn(2, 6, D)
    full = softmax(hidden)  # (2, 6, V): forward == log_prob
    torch.testing.assert_close(softmax.log_prob(hidden[:, -1]), full[:, -1])
    assert softmax.log_prob(hidden[:, -1]).shape == (2, V)


def test_bfloat16_autocast_gives_fp32_log_probabilities():
    inp, softmax = build()
    tokens = targets_in_every_band().view(2, -1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = inp(tokens)
        nll, _ = softmax.loss(hidden, tokens)
        log_p = softmax.log_prob(hidden)
    assert nll.dtype == torch.float32 and log_p.dtype == torch.float32
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(tokens.shape), atol=1e-4, rtol=0)


def test_bad_configurations_are_refused():
    with pytest.raises(ConfigError, match="increase strictly"):
        AdaptiveInput(V, D, [30, 10])
    with pytest.raises(ConfigError, match="increase strictly"):
        AdaptiveInput(V, D, [10, 60])
    with pytest.raises(ConfigError, match="band dimensions"):
        AdaptiveInput(V, 8, [10, 20, 30, 40])  # 8, 2, 0: a zero-width band
    with pytest.raises(ConfigError, match="first band"):
        AdaptiveInput(V, D, [1, 30])
    inp = AdaptiveInput(V, D, [10, 30])
    with pytest.raises(ConfigError, match="same bands"):
        AdaptiveSoftmax(V, D, [20, 30], adaptive_input=inp)
    with pytest.raises(ConfigError, match="adaptive_input"):
        AdaptiveSoftmax(V, D, [10, 30], tie_proj=True)
    assert band_boundaries(V, [10, 30]) == band_boundaries(V, [10, 30, V]) == [10, 30, V]
