"""Diagnostics behind Figures 3, 4, 5 and 7: each measurement checked against a direct computation."""

import numpy as np
import pytest
import torch

from b2t_lib import EOS, PAD, EncoderDecoder, ModelConfig, seed_everything
from b2t_lib.diagnostics import (
    init_gradient_profile,
    init_model,
    layer_activations,
    layer_gradient_norms,
    layer_norm_std,
    layer_output_similarity,
    model_loss,
    random_translation_batch,
    residual_path_gradients,
)

VOCAB = 50


def small_model(variant, layers=3, d_model=16, seed=0):
    seed_everything(seed)
    cfg = ModelConfig(
        vocab_size=VOCAB,
        d_model=d_model,
        n_heads=2,
        d_ff=32,
        encoder_layers=layers,
        decoder_layers=layers,
        variant=variant,
        dropout=0.0,
    )
    return EncoderDecoder(cfg)


@pytest.fixture(scope="module")
def batch():
    return random_translation_batch(VOCAB, batch_size=4, src_len=7, tgt_len=6, seed=3)


def test_random_batch_is_seeded_padded_and_teacher_forced(batch):
    again = random_translation_batch(VOCAB, batch_size=4, src_len=7, tgt_len=6, seed=3)
    other = random_translation_batch(VOCAB, batch_size=4, src_len=7, tgt_len=6, seed=4)
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    assert not torch.equal(batch["src_tokens"], other["src_tokens"])
    target, prev = batch["target"], batch["prev_output_tokens"]
    assert batch["src_tokens"].shape == (4, 7) and target.shape == prev.shape == (4, 6)
    assert batch["src_tokens"].eq(PAD).any(), "the batch must contain padding to test masking"
    for tokens in (batch["src_tokens"], target):
        lengths = tokens.ne(PAD).sum(1)
        assert torch.all(tokens[torch.arange(4), lengths - 1] == EOS)  # each row ends in EOS
        assert torch.all(tokens.ne(PAD).cumprod(1).sum(1) == lengths)  # padding only on the right
    assert torch.all(prev[:, 0] == EOS)
    real = target.ne(PAD)
    assert torch.equal(prev[:, 1:][real[:, 1:]], target[:, :-1][real[:, 1:]])  # shifted right
    assert torch.equal(prev.eq(PAD), target.eq(PAD))


def test_layer_gradient_norms_match_backward(batch):
    model = small_model("post_ln")
    profile = layer_gradient_norms(model, batch)
    assert all(p.grad is None for p in model.parameters()), "the measurement must not fill .grad"
    assert not any(layer._forward_hooks for layer in model.modules()), "hooks must be removed"

    outputs = []
    handles = [
        layer.register_forward_hook(lambda m, a, out: (out.retain_grad(), outputs.append(out)) and None)
        for layer in list(model.encoder.layers) + list(model.decoder.layers)
    ]
    model_loss(model, batch).backward()
    for h in handles:
        h.remove()
    expected_outputs = np.array([float(o.grad.norm()) for o in outputs])
    expected_params = np.array(
        [
            float(torch.sqrt(sum(p.grad.pow(2).sum() for p in layer.parameters())))
            for layer in list(model.encoder.layers) + list(model.decoder.layers)
        ]
    )
    measured_outputs = np.concatenate([profile.norms("encoder"), profile.norms("decoder")])
    measured_params = np.concatenate([profile.norms("encoder", "parameters"), profile.norms("decoder", "parameters")])
    np.testing.assert_allclose(measured_outputs, expected_outputs, rtol=1e-5)
    np.testing.assert_allclose(measured_params, expected_params, rtol=1e-5)
    assert profile.bottom_to_top("decoder") == pytest.approx(expected_outputs[3] / expected_outputs[5], rel=1e-5)


def test_figure3_ordering_at_6l(batch):
    """Section 3 at 6L-6L: Post-LN's decoder gradient decays downwards, B2T decays less, Pre-LN not at all."""
    ratio = {
        v: init_gradient_profile(v, 6, 6, d_model=32, seed=1).bottom_to_top("decoder")
        for v in ("post_ln", "b2t", "pre_ln")
    }
    assert ratio["post_ln"] < 0.6 * ratio["b2t"], ratio
    assert ratio["b2t"] < ratio["pre_ln"], ratio
    assert ratio["pre_ln"] > 1.0, ratio


def test_residual_path_points_and_consistency(batch):
    model = small_model("post_ln")
    path = residual_path_gradients(model, batch, "decoder", 1)
    assert path.labels == [
        "input",
        "SA-LN in",
        "SA-LN out",
        "CA-LN in",
        "CA-LN out",
        "FFN-LN in",
        "FFN-LN out = output",
    ]
    profile = layer_gradient_norms(model, batch)
    dec = profile.norms("decoder")
    assert path.norm("output") == pytest.approx(dec[1], rel=1e-5)  # the same tensor as Figure 3's
    assert path.norm("input") == pytest.approx(dec[0], rel=1e-5)  # input of layer 2 = output of layer 1
    ratios = path.layer_norm_ratios()
    assert set(ratios) == {"SA-LN", "CA-LN", "FFN-LN"}
    # Crossing a LayerNorm (gamma = 1 at init) multiplies each token's gradient by at most 1/sigma_t,
    # so the batch ratio is bounded by the largest 1/sigma_t of that LayerNorm's input.
    sigmas = {}
    layer = model.decoder.layers[1]
    handles = [
        getattr(layer, name).register_forward_hook(
            lambda m, args, out, short=short: sigmas.__setitem__(short, layer_norm_std(args[0][real], m.eps)) and None
        )
        for name, short in (
            ("self_attn_layer_norm", "SA-LN"),
            ("encoder_attn_layer_norm", "CA-LN"),
            ("final_layer_norm", "FFN-LN"),
        )
    ]
    real = batch["prev_output_tokens"].ne(PAD)
    with torch.no_grad():
        model(batch["src_tokens"], batch["prev_output_tokens"])
    for h in handles:
        h.remove()
    for short, ratio in ratios.items():
        bound = float((1.0 / sigmas[short]).max())
        assert ratio <= bound * (1 + 1e-5), f"{short}: ratio {ratio} above the LayerNorm bound {bound}"
    assert min(ratios.values()) < 1.0, f"at least one Post-LN LayerNorm must shrink the gradient: {ratios}"

    pre = residual_path_gradients(small_model("pre_ln"), batch, "encoder", -1)
    assert pre.labels == ["input = SA-LN in", "SA-LN out", "FFN-LN in", "FFN-LN out", "output"]
    assert pre.layer_index == 2 and pre.title == "encoder layer 3 of 3"
    no_ln = residual_path_gradients(small_model("b2t_no_ln"), batch, "decoder", 0)
    assert no_ln.labels == ["input", "output"] and no_ln.layer_norm_ratios() == {}


def test_residual_path_bad_arguments(batch):
    model = small_model("post_ln")
    with pytest.raises(IndexError, match="outside the 3 decoder layers"):
        residual_path_gradients(model, batch, "decoder", 3)
    with pytest.raises(ValueError, match="no 'middle' stack"):
        residual_path_gradients(model, batch, "middle", 0)
    with pytest.raises(KeyError, match="src_tokens"):
        layer_gradient_norms(model, {k: v for k, v in batch.items() if k != "src_tokens"})


def test_similarity_is_mean_cosine_over_real_tokens(batch):
    model = small_model("pre_ln")
    sim = layer_output_similarity(model, batch, "encoder")
    assert sim.matrix.shape == (3, 3)
    np.testing.assert_allclose(np.diag(sim.matrix), 1.0, atol=1e-6)
    np.testing.assert_allclose(sim.matrix, sim.matrix.T, atol=1e-9)

    outputs = []
    handles = [
        layer.register_forward_hook(lambda m, a, out: outputs.append(out.detach()) and None)
        for layer in model.encoder.layers
    ]
    with torch.no_grad():
        model(batch["src_tokens"], batch["prev_output_tokens"])
    for h in handles:
        h.remove()
    real = batch["src_tokens"].ne(PAD)
    manual = torch.nn.functional.cosine_similarity(outputs[0][real], outputs[2][real], dim=-1).mean()
    assert sim.matrix[0, 2] == pytest.approx(float(manual), abs=1e-5)
    with_pad = torch.nn.functional.cosine_similarity(outputs[0], outputs[2], dim=-1).mean()
    assert abs(float(with_pad) - float(manual)) > 1e-4, "the check must be able to tell padding apart"
    assert sim.to_final().shape == (2,)


def test_similarity_keeps_training_mode(batch):
    model = init_model("b2t", 2, 2, d_model=16, vocab_size=VOCAB)
    model.train()
    layer_output_similarity(model, batch, "decoder")
    assert model.training


@pytest.mark.parametrize("variant", ["post_ln", "pre_ln", "peri_ln"])
def test_layer_activations_are_each_layers_size_and_input_output_cosine_over_real_tokens(batch, variant):
    model = small_model(variant).eval()
    acts = layer_activations(model, batch, "encoder")
    x, mask = model.encoder.input(batch["src_tokens"], model.encoder.embed_tokens)  # (batch, time, d), no dropout
    if variant == "peri_ln":
        x = model.encoder.embedding_layer_norm(x)  # Peri-LN's bottom layer receives the normalized embedding
    real = batch["src_tokens"].ne(PAD)
    assert acts.input_rms == pytest.approx(float(x[real].pow(2).mean().sqrt()), rel=1e-5)
    with torch.no_grad():
        for i, layer in enumerate(model.encoder.layers):
            y = layer(x, mask, {})
            assert acts.rms[i] == pytest.approx(float(y[real].pow(2).mean().sqrt()), rel=1e-5)
            cos = torch.nn.functional.cosine_similarity(x[real], y[real], dim=-1).mean()
            assert acts.io_cosine[i] == pytest.approx(float(cos), abs=1e-5)
            x = y
    assert acts.growth() == pytest.approx(acts.rms[-1] / acts.rms[0])
    if variant == "post_ln":  # a LayerNorm ends every layer: unit size (gamma = 1, beta = 0)
        np.testing.assert_allclose(acts.rms, 1.0, atol=1e-3)
    assert acts.top_cosine(1.0) == pytest.approx(acts.io_cosine.mean())
    assert acts.top_cosine(0.25) == pytest.approx(acts.io_cosine[-1])  # a quarter of 3 layers: the top one


def test_layer_activations_name_a_missing_stack_and_keep_training_mode(batch):
    model = init_model("pre_ln", 2, 2, d_model=16, vocab_size=VOCAB)
    model.train()
    layer_activations(model, batch, "decoder")
    assert model.training
    with pytest.raises(ValueError, match="no 'lm' stack"):
        layer_activations(model, batch, "lm")
