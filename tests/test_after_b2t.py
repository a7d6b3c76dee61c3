"""The methods after B2T (b2t_lib/after_b2t): each layer equals its equation, computed by hand from the layer's own
sub-modules (eval mode), and each stack-level rule (ResiDual's dual stream, Mix-LN's split, DyT's final norm) holds
in a built model. The registry-wide tests (test_core_model, test_core_layers, test_baselines_training, ...) cover
them as every other variant."""

import math

import pytest
import torch

from b2t_lib import DecoderLayer, EncoderDecoder, EncoderLayer, LanguageModel, ModelConfig, seed_everything
from b2t_lib.after_b2t import AFTER_B2T, DynamicTanh, post_ln_layers
from b2t_lib.config import ConfigError
from b2t_lib.variants import VARIANTS
from test_core_layers import attention_by_hand, ffn_by_hand

D_MODEL, N_HEADS, D_FF = 16, 4, 32


def small_config(variant, encoder_layers, decoder_layers, **options):
    return ModelConfig(
        vocab_size=40,
        d_model=D_MODEL,
        n_heads=N_HEADS,
        d_ff=D_FF,
        variant=variant,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        **options,
    )


def distinct_norms(layer):
    """LayerNorms and DyTs start as identities (or nearly); make each one distinct, so a mix-up shows."""
    with torch.no_grad():
        for module in layer.modules():
            if isinstance(module, (torch.nn.LayerNorm, DynamicTanh)):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
            if isinstance(module, DynamicTanh):
                module.alpha.fill_(0.8)
    return layer


def encoder_layer(variant, num_layers=8, depth=1):
    seed_everything(0)
    layer = distinct_norms(EncoderLayer(D_MODEL, N_HEADS, D_FF, variant, num_layers, dropout=0.3)).eval()
    layer.depth = depth
    return layer


def inputs():
    x = torch.randn(3, 7, D_MODEL)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[1, 5:] = True
    return x, mask


def parts(layer, mask):
    sa = lambda h: attention_by_hand(layer.self_attn, h, h, mask)  # noqa: E731
    ffn = lambda h: ffn_by_hand(layer, h)  # noqa: E731
    return sa, ffn, layer.self_attn_layer_norm, layer.final_layer_norm


def test_the_new_variants_are_registered_with_a_source():
    assert set(AFTER_B2T) <= set(VARIANTS)
    for name in AFTER_B2T:
        assert "docs/methods.md §6" in VARIANTS[name].equation and VARIANTS[name].title


@pytest.mark.parametrize("depth, kind", [(1, "post"), (2, "post"), (3, "pre"), (8, "pre")])
def test_mix_ln_layer_is_post_ln_below_floor_alpha_l_and_pre_ln_above(depth, kind):
    layer = encoder_layer("mix_ln", num_layers=8, depth=depth)  # floor(0.25 * 8) = 2 Post-LN layers
    x, mask = inputs()
    sa, ffn, ln1, ln2 = parts(layer, mask)
    if kind == "post":  # Eq. 1
        h = ln1(x + sa(x))
        expected = ln2(h + ffn(h))
    else:  # Eq. 2
        h = x + sa(ln1(x))
        expected = h + ffn(ln2(h))
    torch.testing.assert_close(layer(x, mask), expected, rtol=1e-5, atol=1e-5)


def test_mix_ln_split_follows_the_ratio_and_each_stack_depth():
    cfg = small_config("mix_ln", 8, 3, mix_ln_ratio=0.5)
    model = EncoderDecoder(cfg)
    assert [layer.depth for layer in model.encoder.layers] == list(range(1, 9))
    assert post_ln_layers(model.encoder.stack) == 4 and post_ln_layers(model.decoder.stack) == 1
    assert model.encoder.layer_norm is not None and model.decoder.layer_norm is not None  # Pre-LN's final norms
    with pytest.raises(ConfigError, match="mix_ln_ratio must lie in"):
        ModelConfig(variant="mix_ln", mix_ln_ratio=1.5)
    with pytest.raises(ConfigError, match="applies to variant mix_ln only"):
        ModelConfig(variant="pre_ln", mix_ln_ratio=0.5)


def test_layer_norm_scaling_divides_each_norm_output_by_sqrt_depth():
    layer = encoder_layer("ln_scaling", depth=4)
    x, mask = inputs()
    sa, ffn, ln1, ln2 = parts(layer, mask)
    h = x + sa(ln1(x) / 2)  # 1 / sqrt(4)
    torch.testing.assert_close(layer(x, mask), h + ffn(ln2(h) / 2), rtol=1e-5, atol=1e-5)
    bottom = encoder_layer("ln_scaling", depth=1)  # layer 1 is plain Pre-LN
    sa, ffn, ln1, ln2 = parts(bottom, mask)
    h = x + sa(ln1(x))
    torch.testing.assert_close(bottom(x, mask), h + ffn(ln2(h)), rtol=1e-5, atol=1e-5)


def test_sandwich_ln_normalizes_each_sublayers_input_and_output():
    layer = encoder_layer("sandwich_ln")
    x, mask = inputs()
    sa, ffn, ln1, ln2 = parts(layer, mask)
    out1, out2 = layer.output_layer_norms
    h = x + out1(sa(ln1(x)))
    torch.testing.assert_close(layer(x, mask), h + out2(ffn(ln2(h))), rtol=1e-5, atol=1e-5)
    decoder = DecoderLayer(D_MODEL, N_HEADS, D_FF, "sandwich_ln", 6)
    assert len(decoder.output_layer_norms) == 3  # self-attention, cross-attention, FFN
    assert len(DecoderLayer(D_MODEL, N_HEADS, D_FF, "sandwich_ln", 6, cross_attention=False).output_layer_norms) == 2


def test_peri_ln_is_sandwich_ln_with_a_layer_norm_on_the_embedding_output():
    layer = encoder_layer("peri_ln")
    x, mask = inputs()
    sa, ffn, ln1, ln2 = parts(layer, mask)
    out1, out2 = layer.output_layer_norms
    h = x + out1(sa(ln1(x)))
    torch.testing.assert_close(layer(x, mask), h + out2(ffn(ln2(h))), rtol=1e-5, atol=1e-5)
    seed_everything(3)
    model = EncoderDecoder(small_config("peri_ln", 2, 2)).eval()
    for stack in (model.encoder, model.decoder):
        distinct_norms(stack)
    src = torch.randint(4, 40, (2, 6))
    embedded, mask = model.encoder.input(src, model.encoder.embed_tokens)
    x = model.encoder.embedding_layer_norm(embedded)  # x_0 = LN_emb(embedding output)
    for layer in model.encoder.layers:
        x = layer(x, mask, {})
    out, _ = model.encoder(src)
    torch.testing.assert_close(out, model.encoder.layer_norm(x), rtol=1e-5, atol=1e-5)
    sandwich = EncoderDecoder(small_config("sandwich_ln", 2, 2))
    assert not hasattr(sandwich.encoder, "embedding_layer_norm"), "Sandwich-LN has no embedding LayerNorm"


def dyt_by_hand(module, x):
    return module.weight * torch.tanh(module.alpha * x) + module.bias


def test_dyt_is_gamma_tanh_alpha_x_plus_beta_and_starts_at_alpha_one_half():
    fresh = DynamicTanh(D_MODEL)
    assert float(fresh.alpha.detach()) == 0.5 and bool((fresh.weight == 1).all()) and bool((fresh.bias == 0).all())
    x = torch.randn(4, D_MODEL) * 5
    torch.testing.assert_close(fresh(x), torch.tanh(0.5 * x))
    layer = encoder_layer("dyt")
    assert isinstance(layer.self_attn_layer_norm, DynamicTanh) and isinstance(layer.final_layer_norm, DynamicTanh)
    x, mask = inputs()
    sa, ffn, n1, n2 = parts(layer, mask)
    h = x + sa(dyt_by_hand(n1, x))  # Pre-LN with DyT
    torch.testing.assert_close(layer(x, mask), h + ffn(dyt_by_hand(n2, h)), rtol=1e-5, atol=1e-5)


def test_b2t_with_dyt_keeps_the_b2t_wiring():
    layer = encoder_layer("b2t_dyt")
    x, mask = inputs()
    sa, ffn, n1, n2 = parts(layer, mask)
    x_ffn = dyt_by_hand(n1, sa(x) + x)  # Eq. 6 with DyT
    torch.testing.assert_close(layer(x, mask), dyt_by_hand(n2, x + x_ffn + ffn(x_ffn)), rtol=1e-5, atol=1e-5)


def test_dyt_replaces_the_final_norms_too():
    cfg = small_config("dyt", 2, 2)
    model = EncoderDecoder(cfg)
    assert isinstance(model.encoder.layer_norm, DynamicTanh) and isinstance(model.decoder.layer_norm, DynamicTanh)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules()), "no LayerNorm is left"
    lm = LanguageModel(cfg.replace(encoder_layers=0, decoder_final_norm=False))
    assert lm.decoder.layer_norm is None  # fairseq's LM recipe drops the final norm; DyT does not add one


def test_resi_dual_stack_returns_the_post_ln_stream_plus_the_normalized_dual_stream():
    seed_everything(3)
    cfg = small_config("resi_dual", 3, 2)
    model = EncoderDecoder(cfg).eval()
    for stack in (model.encoder, model.decoder):
        distinct_norms(stack)
    src = torch.randint(4, 40, (2, 6))
    out, mask = model.encoder(src)
    x, _ = model.encoder.input(src, model.encoder.embed_tokens)  # the embedding output, x_0 = d_0
    dual = x
    for layer in model.encoder.layers:
        sa, ffn, ln1, ln2 = parts(layer, mask)
        a = sa(x)
        h = ln1(x + a)  # the Post-LN stream
        f = ffn(h)
        dual = dual + a + f  # the un-normalized sum of every branch
        x = ln2(h + f)
    assert model.encoder.dual_layer_norm.eps == 1e-7
    torch.testing.assert_close(out, x + model.encoder.dual_layer_norm(dual), rtol=1e-5, atol=1e-5)
    assert not any("dual_increment" in vars(layer) for layer in model.encoder.layers), "nothing left on a layer"


@pytest.mark.parametrize("variant", AFTER_B2T)
def test_an_18l_decoder_decodes_incrementally_as_in_full(variant):
    """The registry-wide test runs 2 layers, where Mix-LN has no Post-LN layer (floor(0.25 * 2) = 0): at 18 layers
    the incremental path (one position at a time, a cache) must give the full pass's logits through Mix-LN's split
    and ResiDual's dual stream."""
    seed_everything(4)
    cfg = small_config(variant, 18, 18)
    model = EncoderDecoder(cfg).eval()
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 6))
    memory, memory_mask = model.encoder(src)
    full = model.decoder(tgt, memory, memory_mask)
    cache = {}
    steps = [model.decoder(tgt[:, : t + 1], memory, memory_mask, cache=cache) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)
    assert math.isfinite(float(full.detach().abs().max()))


@pytest.mark.parametrize("variant", AFTER_B2T)
@pytest.mark.parametrize("layers", [18, 100])
def test_deep_models_run_forward_and_backward_with_finite_values(variant, layers):
    seed_everything(5)
    cfg = small_config(variant, layers, layers)
    model = EncoderDecoder(cfg)
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 6))
    logits = model(src, tgt)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), torch.randint(4, 40, (12,)))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert math.isfinite(float(loss.detach())) and all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
