"""Each variant's layer equals its equation, computed by hand from the layer's own sub-modules (eval mode)."""

import math

import pytest
import torch
import torch.nn.functional as F

from b2t_lib import DecoderLayer, EncoderLayer, seed_everything
from b2t_lib.variants import b2t_no_ln_alpha, b2t_no_ln_beta

D_MODEL, N_HEADS, D_FF, NUM_LAYERS = 16, 4, 32, 6


def attention_by_hand(attn, query, memory, key_padding_mask=None, causal=False):
    """softmax(Q K^T / sqrt(d_head) + M) V W_O, written out with plain matrix products."""
    batch, tgt, _ = query.shape
    src = memory.shape[1]
    heads, d_head = attn.n_heads, attn.d_head

    def split(t):
        return t.view(batch, -1, heads, d_head).transpose(1, 2)

    q, k, v = split(attn.q_proj(query)), split(attn.k_proj(memory)), split(attn.v_proj(memory))
    scores = q @ k.transpose(-1, -2) / math.sqrt(d_head)  # (batch, heads, tgt, src)
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    if causal:
        future = torch.ones(tgt, src, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, tgt, heads * d_head)
    return attn.out_proj(context)


def ffn_by_hand(layer, h):
    return layer.fc2(F.relu(layer.fc1(h)))


def encoder_by_hand(layer, variant, x, mask):
    sa = lambda h: attention_by_hand(layer.self_attn, h, h, mask)  # noqa: E731
    ffn = lambda h: ffn_by_hand(layer, h)  # noqa: E731
    ln1, ln2 = layer.self_attn_layer_norm, layer.final_layer_norm
    if variant == "post_ln":  # Eq. 1 for each sub-layer
        h = ln1(x + sa(x))
        return ln2(h + ffn(h))
    if variant == "pre_ln":  # Eq. 2 for each sub-layer
        h = x + sa(ln1(x))
        return h + ffn(ln2(h))
    if variant == "b2t":  # Eq. 6 then Eq. 5
        x_ffn = ln1(sa(x) + x)
        return ln2(x + x_ffn + ffn(x_ffn))
    if variant == "b2t_no_ln":  # Eq. 9-11
        a = x + sa(x)
        alpha, beta = min(NUM_LAYERS / 12, NUM_LAYERS**-0.15), D_MODEL**-0.2
        return alpha * x + beta * (a + ffn(a))
    raise AssertionError(variant)


def decoder_by_hand(layer, variant, x, memory, memory_mask):
    sa = lambda h: attention_by_hand(layer.self_attn, h, h, causal=True)  # noqa: E731
    ca = lambda h: attention_by_hand(layer.encoder_attn, h, memory, memory_mask)  # noqa: E731
    ffn = lambda h: ffn_by_hand(layer, h)  # noqa: E731
    ln1, ln2, ln3 = layer.self_attn_layer_norm, layer.encoder_attn_layer_norm, layer.final_layer_norm
    if variant == "post_ln":
        h1 = ln1(x + sa(x))
        h2 = ln2(h1 + ca(h1))
        return ln3(h2 + ffn(h2))
    if variant == "pre_ln":
        h1 = x + sa(ln1(x))
        h2 = h1 + ca(ln2(h1))
        return h2 + ffn(ln3(h2))
    if variant == "b2t":  # the layer input skips self-attention, cross-attention and the FFN
        h1 = ln1(x + sa(x))
        h2 = ln2(h1 + ca(h1))
        return ln3(x + h2 + ffn(h2))
    if variant == "b2t_no_ln":
        a1 = x + sa(x)
        a2 = a1 + ca(a1)
        alpha, beta = min(NUM_LAYERS / 12, NUM_LAYERS**-0.15), D_MODEL**-0.2
        return alpha * x + beta * (a2 + ffn(a2))
    raise AssertionError(variant)


def lm_layer_by_hand(layer, variant, x):
    """A decoder-only layer: the decoder's equations with the cross-attention line removed
    (docs/methods.md §1.3); for B2T, Eq. 5-7 with x_ffn = LN(SelfAttn(x) + x)."""
    sa = lambda h: attention_by_hand(layer.self_attn, h, h, causal=True)  # noqa: E731
    ffn = lambda h: ffn_by_hand(layer, h)  # noqa: E731
    ln1, ln3 = layer.self_attn_layer_norm, layer.final_layer_norm
    if variant == "post_ln":
        h1 = ln1(x + sa(x))
        return ln3(h1 + ffn(h1))
    if variant == "pre_ln":
        h1 = x + sa(ln1(x))
        return h1 + ffn(ln3(h1))
    if variant == "b2t":  # Eq. 6: x_ffn = LN(SelfAttn(x_inp) + x_inp); Eq. 5: LN(x_inp + x_ffn + FFN(x_ffn))
        x_ffn = ln1(sa(x) + x)
        return ln3(x + x_ffn + ffn(x_ffn))
    if variant == "b2t_no_ln":  # Eq. 9-11 without cross-attention
        a1 = x + sa(x)
        alpha, beta = min(NUM_LAYERS / 12, NUM_LAYERS**-0.15), D_MODEL**-0.2
        return alpha * x + beta * (a1 + ffn(a1))
    raise AssertionError(variant)


VARIANTS = ["post_ln", "pre_ln", "b2t", "b2t_no_ln"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_encoder_layer_matches_equation(variant):
    seed_everything(0)
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, variant, NUM_LAYERS, dropout=0.3).eval()
    x = torch.randn(3, 7, D_MODEL)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[1, 5:] = True
    torch.testing.assert_close(layer(x, mask), encoder_by_hand(layer, variant, x, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_decoder_layer_matches_equation(variant):
    seed_everything(1)
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF, variant, NUM_LAYERS, dropout=0.3).eval()
    x, memory = torch.randn(2, 5, D_MODEL), torch.randn(2, 6, D_MODEL)
    memory_mask = torch.zeros(2, 6, dtype=torch.bool)
    memory_mask[0, 4:] = True
    expected = decoder_by_hand(layer, variant, x, memory, memory_mask)
    torch.testing.assert_close(layer(x, memory, memory_mask), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_language_model_layer_matches_equation(variant):
    """The decoder-only layer of a language model (no cross-attention) against its equation."""
    seed_everything(5)
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF, variant, NUM_LAYERS, dropout=0.3, cross_attention=False).eval()
    with torch.no_grad():  # LayerNorms start as identities; make each one distinct, so a mix-up shows
        for module in layer.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    assert not hasattr(layer, "encoder_attn")
    x = torch.randn(2, 6, D_MODEL)
    torch.testing.assert_close(layer(x), lm_layer_by_hand(layer, variant, x), rtol=1e-5, atol=1e-5)


def test_layer_norms_exist_only_where_the_variant_has_them():
    assert EncoderLayer(D_MODEL, N_HEADS, D_FF, "b2t_no_ln", 6).self_attn_layer_norm is None
    assert isinstance(EncoderLayer(D_MODEL, N_HEADS, D_FF, "b2t", 6).final_layer_norm, torch.nn.LayerNorm)


def test_b2t_no_ln_alpha_beta_values():
    """Eq. 10-11 against the values docs/methods.md §1.6 lists."""
    assert [round(b2t_no_ln_alpha(n), 3) for n in (6, 12, 18, 100)] == [0.5, 0.689, 0.648, 0.501]
    assert round(b2t_no_ln_beta(512), 3) == 0.287 and round(b2t_no_ln_beta(1024), 3) == 0.25
    # alpha rises while N/12 < N^-0.15 (up to N = 9), then falls
    assert b2t_no_ln_alpha(9) > b2t_no_ln_alpha(8) and b2t_no_ln_alpha(10) < b2t_no_ln_alpha(9)


def test_b2t_rescale_init_is_off_by_default_and_scales_weights_by_inverse_sqrt_n():
    seed_everything(2)
    plain = EncoderLayer(D_MODEL, N_HEADS, D_FF, "b2t", 18)
    seed_everything(2)
    rescaled = EncoderLayer(D_MODEL, N_HEADS, D_FF, "b2t", 18, b2t_rescale_init=True)
    for (name, p), (_, q) in zip(plain.named_parameters(), rescaled.named_parameters()):
        if "weight" in name and "layer_norm" not in name:
            torch.testing.assert_close(q, p * 18**-0.5)
        else:
            torch.testing.assert_close(q, p)
