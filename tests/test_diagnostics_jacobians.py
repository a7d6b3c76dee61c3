"""Eq. 3, 4 and 8 and the LayerNorm Jacobian: closed forms against autograd (float64)."""

import pytest
import torch

from b2t_lib import DecoderLayer, EncoderLayer, seed_everything
from b2t_lib.diagnostics import (
    final_sum_jacobians,
    jacobian,
    layer_norm_jacobian,
    layer_norm_std,
    post_ln_jacobian,
    pre_ln_jacobian,
)

D = 8


@pytest.fixture
def layer_norm():
    seed_everything(0)
    norm = torch.nn.LayerNorm(D).double()
    with torch.no_grad():  # non-trivial gain and bias, so a formula that ignores them fails
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.normal_()
    return norm


def test_layer_norm_jacobian_matches_autograd(layer_norm):
    x = torch.randn(D, dtype=torch.float64) * 3 + 1
    closed = layer_norm_jacobian(x, layer_norm.weight, layer_norm.eps)
    torch.testing.assert_close(closed, jacobian(layer_norm, x))
    # its largest singular value is max(gamma) / sigma: the gradient is divided by the input's std
    top = torch.linalg.matrix_norm(layer_norm_jacobian(x, eps=0.0), ord=2)
    assert float(top) == pytest.approx(1.0 / float(layer_norm_std(x, 0.0)), rel=1e-6)


def test_layer_norm_jacobian_rejects_sequences():
    with pytest.raises(ValueError, match="one token vector"):
        layer_norm_jacobian(torch.randn(3, D))


def test_eq3_and_eq4_against_autograd(layer_norm):
    seed_everything(1)
    layer = EncoderLayer(D, 2, 16, "post_ln", num_layers=6).double()
    x = torch.randn(D, dtype=torch.float64)
    post = lambda h: layer_norm(h + layer.ffn(h))  # Eq. 1
    pre = lambda h: h + layer.ffn(layer_norm(h))  # Eq. 2
    torch.testing.assert_close(post_ln_jacobian(layer.ffn, layer_norm, x), jacobian(post, x))
    torch.testing.assert_close(pre_ln_jacobian(layer.ffn, layer_norm, x), jacobian(pre, x))
    # and they are different matrices: swapping the two formulas must fail
    assert not torch.allclose(post_ln_jacobian(layer.ffn, layer_norm, x), jacobian(pre, x), atol=1e-3)


@pytest.mark.parametrize("layer_class", [EncoderLayer, DecoderLayer])
def test_eq8_identity_term_only_in_b2t(layer_class):
    seed_everything(2)
    x = torch.randn(3, D, dtype=torch.float64)
    memory = torch.randn(4, D, dtype=torch.float64) if layer_class is DecoderLayer else None
    identity = torch.eye(3 * D, dtype=torch.float64)
    for variant, expected in (("b2t", identity), ("post_ln", torch.zeros_like(identity))):
        layer = layer_class(D, 2, 16, variant, num_layers=6).double()
        terms = final_sum_jacobians(layer, x, memory)
        torch.testing.assert_close(terms.remainder, expected, atol=1e-10, rtol=0)
        torch.testing.assert_close(terms.layer, terms.final_norm @ terms.total)  # chain rule through the last LN
        assert layer.training, "the layer's mode must be restored"
        assert not layer.final_layer_norm._forward_hooks


def test_eq8_needs_a_final_layer_norm():
    with pytest.raises(ValueError, match="no final LayerNorm"):
        final_sum_jacobians(EncoderLayer(D, 2, 16, "b2t_no_ln", num_layers=6), torch.randn(3, D))
