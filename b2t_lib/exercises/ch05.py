"""Chapter 05's exercises: the B2T wiring (Eq. 5-6), the decoder's Eq. 8 from its parts, B2T w/o LN's critical width."""

from __future__ import annotations

import functools

import torch

from ..diagnostics import (
    b2t_no_ln_critical_width,
    final_sum_jacobians,
    init_gradient_profile,
    jacobian,
    module_layer_norm_jacobian,
)
from .. import DecoderLayer, seed_everything
from ..variants import b2t_no_ln_alpha
from ._core import Wrong, as_tensor, call, diagnose, exercise, seeded
from .ch01 import check_wiring, post_ln, randomize_norms, wiring_cases


def b2t(x, sublayers):
    x_inp = x
    for branch, norm in sublayers[:-1]:
        x = norm(x + branch(x))  # Eq. 6
    branch, norm = sublayers[-1]
    return norm(x_inp + x + branch(x))  # Eq. 5


def _b2t_after_norm(x, sublayers):
    return post_ln(x, sublayers) + x


def _b2t_every_sublayer(x, sublayers):
    x_inp = x
    for branch, norm in sublayers:
        x = norm(x_inp + x + branch(x))
    return x


def _b2t_adds_x_ffn(x, sublayers):
    for branch, norm in sublayers[:-1]:
        x = norm(x + branch(x))
    branch, norm = sublayers[-1]
    return norm(x + x + branch(x))


def _b2t_without_x_ffn(x, sublayers):
    x_inp = x
    for branch, norm in sublayers[:-1]:
        x = norm(x + branch(x))
    branch, norm = sublayers[-1]
    return norm(x_inp + branch(x))


@exercise("5.1", "the B2T wiring")
def check_b2t_wiring(b2t_forward) -> str:
    """``b2t_forward(x, sublayers)`` computes a B2T layer (Eq. 5-6) from its ``(branch, norm)`` pairs."""

    def mistakes(x, subs):
        yield (
            post_ln(x, subs),
            "that is Post-LN: B2T adds the layer input x_inp inside the last LayerNorm, LN(x_inp + x_ffn + FFN(x_ffn))",
        )
        yield (
            _b2t_after_norm(x, subs),
            (
                "you added x_inp after the last LayerNorm: that is a direct path from the layer's input "
                "to its output, which B2T avoids by adding x_inp before it (Section 4)"
            ),
        )
        yield _b2t_every_sublayer(x, subs), "x_inp enters the last sum only; the inner sub-layers stay Post-LN (Eq. 6)"
        yield (
            _b2t_adds_x_ffn(x, subs),
            "you added x_ffn twice: keep a copy of the layer input x_inp before the loop changes x",
        )
        yield _b2t_without_x_ffn(x, subs), "the last sum keeps the residual x_ffn too: x_inp + x_ffn + FFN(x_ffn)"

    check_wiring(b2t_forward, wiring_cases("b2t"), "b2t_forward", b2t, mistakes)
    return "your wiring matches the library's B2T layers, encoder and decoder"


def decoder_jacobian_parts():
    """A B2T decoder layer (d = 8, 3 tokens, float64), the Jacobians of its parts, and the true ds/dx_inp."""
    seed_everything(51)
    generator = seeded(51)
    layer = DecoderLayer(8, 2, 16, "b2t", num_layers=6).double().eval()
    randomize_norms(layer, generator)
    x = torch.randn(3, 8, generator=generator, dtype=torch.float64)  # (time, d_model)
    memory = torch.randn(4, 8, generator=generator, dtype=torch.float64)  # (src_time, d_model)
    (sa, ln_sa), (ca, ln_ca), _ = layer.sublayers(memory[None])

    def one(fn):  # a (time, d) -> (time, d) function of one sequence
        return lambda h: fn(h[None])[0]

    with torch.no_grad():
        s1 = x + one(sa)(x)
        h1 = ln_sa(s1)
        s2 = h1 + one(ca)(h1)
        x_ffn = ln_ca(s2)
    parts = dict(
        J_sa=jacobian(one(sa), x),
        J_ln_sa=module_layer_norm_jacobian(ln_sa, s1),
        J_ca=jacobian(one(ca), h1),
        J_ln_ca=module_layer_norm_jacobian(ln_ca, s2),
        J_ffn=jacobian(one(layer.ffn), x_ffn),
    )
    return parts, final_sum_jacobians(layer, x, memory).total


@exercise("5.2", "the decoder's Eq. 8")
def check_decoder_eq8(fn) -> str:
    """``fn(J_sa, J_ln_sa, J_ca, J_ln_ca, J_ffn)`` assembles ds/dx_inp of a B2T decoder layer from the Jacobians of
    its self-attention branch, self-attention LayerNorm, cross-attention branch, cross-attention LayerNorm and FFN."""
    parts, expected = decoder_jacobian_parts()
    J_sa, J_ln_sa, J_ca, J_ln_ca, J_ffn = (parts[k] for k in ("J_sa", "J_ln_sa", "J_ca", "J_ln_ca", "J_ffn"))
    I = torch.eye(J_sa.shape[0], dtype=torch.float64)
    inner = J_ln_ca @ (I + J_ca) @ J_ln_sa @ (I + J_sa)  # dx_ffn/dx_inp
    if not torch.allclose(I + inner + J_ffn @ inner, expected, atol=1e-10):
        raise RuntimeError("the checker's own assembly of Eq. 8 disagrees with final_sum_jacobians")
    got = call(fn, *(p.clone() for p in (J_sa, J_ln_sa, J_ca, J_ln_ca, J_ffn)), what="your function")
    encoder_like = J_ln_sa @ (I + J_sa)
    reversed_inner = (I + J_sa) @ J_ln_sa @ (I + J_ca) @ J_ln_ca
    no_residual = J_ln_ca @ J_ca @ J_ln_sa @ J_sa
    mistakes = [
        (inner + J_ffn @ inner, "the identity term is missing: that is Post-LN's derivative; B2T's x_inp adds I"),
        (
            I + encoder_like + J_ffn @ encoder_like,
            "you left out the cross-attention sub-layer: in a decoder x_ffn = LN_CA(h1 + CA(h1)) with h1 = "
            "LN_SA(x_inp + SA(x_inp))",
        ),
        (
            I + reversed_inner + reversed_inner @ J_ffn,
            "the chain rule's order is reversed: the Jacobian of the function applied last goes on the left",
        ),
        (
            I + reversed_inner + J_ffn @ reversed_inner,
            "the inner chain is in reverse order: dx_ffn/dx_inp = J_ln_ca (I + J_ca) J_ln_sa (I + J_sa)",
        ),
        (
            I + inner + inner @ J_ffn,
            "J_ffn goes on the left of dx_ffn/dx_inp: the FFN is applied after the inner sub-layers",
        ),
        (
            I + inner + J_ffn,
            "the FFN's Jacobian must be chained with dx_ffn/dx_inp: the FFN's input is x_ffn, not x_inp",
        ),
        (I + inner, "the FFN path (Eq. 8's third term) is missing"),
        (
            I + no_residual + J_ffn @ no_residual,
            "each inner sub-layer is a residual sum, so its factor is (I + J), not J",
        ),
    ]
    diagnose(got, expected, mistakes, "your ds/dx_inp", rtol=1e-7, atol=1e-9)
    return "matches autograd's ds/dx_inp of a B2T decoder layer"


@functools.lru_cache(maxsize=None)
def _measured_bottom_to_top(num_layers: int, d_model: int) -> float:
    return init_gradient_profile("b2t_no_ln", num_layers, num_layers, d_model=d_model, seed=1).bottom_to_top("decoder")


@exercise("5.3", "the critical width of B2T w/o LN")
def check_critical_width(fn) -> str:
    """``fn(num_layers, kappa)`` returns d*, the width at which sqrt((alpha+beta)^2 + beta^2 kappa^2) = 1
    (Eq. 10-11)."""
    for num_layers, kappa in ((18, 0.45), (6, 0.0), (12, 0.3), (100, 0.8), (18, 1.0)):
        got = as_tensor(call(fn, num_layers, kappa, what="your function"), "your d*")
        if got.numel() != 1:
            raise Wrong(f"your d* must be one number, got shape {tuple(got.shape)}")
        alpha = b2t_no_ln_alpha(num_layers)
        expected = b2t_no_ln_critical_width(num_layers, kappa)
        beta_star = expected**-0.2
        linear_beta = (1 - alpha) / (1 + kappa)
        mistakes = [
            (
                torch.tensor((1 - alpha) ** -5),
                "that is the identity-only heuristic alpha + beta < 1: it leaves out the branch term beta J_B^T g, "
                "which adds beta^2 kappa^2 to the squared factor",
            ),
            (
                torch.tensor(linear_beta**-5),
                "you added the branch term's norm to alpha + beta; at initialization it is orthogonal to g, so the "
                "squares add: (alpha + beta)^2 + beta^2 kappa^2 = 1",
            ),
            (torch.tensor(beta_star), "that is beta*; the width is d* = beta*^(-5), because beta = d^(-0.2) (Eq. 11)"),
            (torch.tensor(beta_star**5), "d* = beta*^(-5), not beta*^5"),
        ]
        diagnose(
            got.reshape(()),
            torch.tensor(expected),
            mistakes,
            f"your d* (N = {num_layers}, kappa = {kappa})",
            rtol=1e-6,
            atol=0.0,
        )
    d_star = float(as_tensor(call(fn, 18, 0.45, what="your function"), "your d*"))
    below, above = _measured_bottom_to_top(18, 192), _measured_bottom_to_top(18, 256)
    return (
        f"for 18L-18L with kappa = 0.45, d* = {d_star:.0f}; measured decoder bottom/top at initialization: "
        f"d = 192 -> {below:.2f} (grows), d = 256 -> {above:.2f} (shrinks)"
    )
