"""Eq. 8's paths measured in a real layer, and the B2T w/o LN scale terms (Eq. 9-11)."""

import math

import numpy as np
import pytest

from b2t_lib.diagnostics import (
    b2t_no_ln_backward_terms,
    b2t_no_ln_critical_width,
    b2t_no_ln_layer_factor,
    default_batch,
    gradient_paths,
    init_gradient_profile,
    init_model,
)
from b2t_lib.variants import b2t_no_ln_alpha, b2t_no_ln_beta


@pytest.fixture(scope="module")
def batch():
    return default_batch(batch_size=4, src_len=10, tgt_len=10)


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_paths_add_up_and_only_b2t_has_the_identity_term(batch, stack):
    paths = {}
    for variant in ("b2t", "post_ln"):
        model = init_model(variant, 4, 4, d_model=32, seed=3)
        model.train()
        p = gradient_paths(model, batch, stack, -1)
        assert model.training, "the model's mode must be restored"
        assert p.mismatch < 1e-5, "identity + inner + FFN paths must add up to the layer's input gradient"
        assert p.layer_index == 3 and p.num_layers == 4
        assert set(p.inner_std) == ({"SA-LN"} if stack == "encoder" else {"SA-LN", "CA-LN"})
        paths[variant] = p
    b2t, post = paths["b2t"], paths["post_ln"]
    assert b2t.identity == pytest.approx(b2t.at_sum) and post.identity == 0.0
    assert 1.5 < b2t.sum_std < 2.3, "s = x_inp + x_ffn + FFN(x_ffn) has sigma near 2 at initialization"
    assert post.sum_std < 1.3
    assert 0.35 < b2t.ratio("identity") < 0.65, "the identity path alone keeps about half"
    assert b2t.cosine_identity_norms > 0.5, "the identity and inner paths point the same way"
    assert b2t.ratio("total") > b2t.ratio("identity") + 0.2
    assert b2t.predicted_factor == pytest.approx(b2t.ratio("total"), rel=0.2)


def test_paths_refuse_layers_without_a_final_layer_norm(batch):
    with pytest.raises(ValueError, match="no final LayerNorm"):
        gradient_paths(init_model("b2t_no_ln", 2, 2, d_model=16, seed=0), batch)


@pytest.mark.parametrize("num_layers", [6, 12, 18, 100])
def test_critical_width_reduces_to_the_heuristic_and_balances_the_factor(num_layers):
    alpha = b2t_no_ln_alpha(num_layers)
    assert b2t_no_ln_critical_width(num_layers) == pytest.approx((1 - alpha) ** -5)
    for kappa in (0.0, 0.45, 1.0):
        d_star = b2t_no_ln_critical_width(num_layers, kappa)
        assert b2t_no_ln_layer_factor(num_layers, d_star, kappa) == pytest.approx(1.0)
        assert (
            b2t_no_ln_layer_factor(num_layers, 2 * d_star, kappa)
            < 1
            < b2t_no_ln_layer_factor(num_layers, d_star / 2, kappa)
        )
    assert b2t_no_ln_critical_width(num_layers, 0.45) > b2t_no_ln_critical_width(num_layers, 0.0)
    with pytest.raises(ValueError, match="negative"):
        b2t_no_ln_critical_width(num_layers, -0.1)


def test_layer_factor_is_the_quadrature_sum():
    alpha, beta = b2t_no_ln_alpha(18), b2t_no_ln_beta(256)
    assert b2t_no_ln_layer_factor(18, 256, 0.5) == pytest.approx(math.hypot(alpha + beta, 0.5 * beta))


def test_backward_terms_reproduce_the_profile(batch):
    model = init_model("b2t_no_ln", 6, 6, d_model=64, seed=1)
    terms = b2t_no_ln_backward_terms(model, batch, "decoder")
    profile = init_gradient_profile("b2t_no_ln", 6, 6, d_model=64, seed=1, batch=batch)
    # g_1 / g_N is the product of the per-layer factors of the layers above the bottom one
    assert float(np.prod(terms.backward_factor[1:])) == pytest.approx(profile.bottom_to_top("decoder"), rel=1e-4)
    assert terms.identity_factor == pytest.approx(b2t_no_ln_alpha(6) + b2t_no_ln_beta(64))
    assert np.all(np.abs(terms.branch_cosine) < 0.3), "at initialization the branch term is nearly orthogonal"
    np.testing.assert_allclose(terms.backward_factor, terms.quadrature_factor, rtol=0.05)
    assert np.all((terms.branch_gain > 0.2) & (terms.branch_gain < 1.0))
    with pytest.raises(ValueError, match="B2T w/o LN"):
        b2t_no_ln_backward_terms(init_model("post_ln", 2, 2, d_model=16, seed=0), batch)
