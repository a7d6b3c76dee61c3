"""The paper's Figure 3 at initialization: gradient norms of the loss w.r.t. each decoder layer's output (18L-18L)."""

import pytest
import torch
import torch.nn.functional as F

from b2t_lib import EncoderDecoder, ModelConfig, seed_everything

LAYERS, VOCAB = 18, 100


def decoder_gradient_norms(variant: str, seed: int = 0) -> list[float]:
    """||dL/dy_l|| for every decoder layer output y_l, bottom (l=1) to top (l=18)."""
    seed_everything(seed)
    cfg = ModelConfig(
        vocab_size=VOCAB,
        d_model=64,
        n_heads=4,
        d_ff=256,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        variant=variant,
        dropout=0.0,
    )
    model = EncoderDecoder(cfg)
    g = torch.Generator().manual_seed(seed + 100)
    src = torch.randint(4, VOCAB, (8, 20), generator=g)
    target = torch.randint(4, VOCAB, (8, 20), generator=g)
    outputs = {}

    def keep(index):
        def hook(module, inputs, output):
            output.retain_grad()
            outputs[index] = output

        return hook

    for i, layer in enumerate(model.decoder.layers):
        layer.register_forward_hook(keep(i))
    logits = model(src, target)
    F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1)).backward()
    return [outputs[i].grad.norm().item() for i in range(LAYERS)]


@pytest.fixture(scope="module")
def bottom_to_top_ratios():
    ratios = {}
    for variant in ("post_ln", "pre_ln", "b2t"):
        norms = decoder_gradient_norms(variant)
        ratios[variant] = norms[0] / norms[-1]
    return ratios


def test_post_ln_decoder_gradients_vanish_by_an_order_of_magnitude(bottom_to_top_ratios):
    assert bottom_to_top_ratios["post_ln"] < 0.1, bottom_to_top_ratios


def test_pre_ln_decoder_gradients_do_not_shrink(bottom_to_top_ratios):
    assert bottom_to_top_ratios["pre_ln"] >= 1.0, bottom_to_top_ratios


def test_b2t_shrinks_far_less_than_post_ln(bottom_to_top_ratios):
    assert bottom_to_top_ratios["b2t"] > 10 * bottom_to_top_ratios["post_ln"], bottom_to_top_ratios
    assert bottom_to_top_ratios["b2t"] > 0.3, bottom_to_top_ratios


def test_post_ln_decay_is_monotone_on_average():
    """Exponential decay toward the bottom: every block of 6 layers has a smaller mean than the one above."""
    norms = decoder_gradient_norms("post_ln", seed=1)
    blocks = [sum(norms[i : i + 6]) / 6 for i in (0, 6, 12)]
    assert blocks[0] < blocks[1] < blocks[2], blocks
