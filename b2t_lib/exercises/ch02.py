"""Chapter 02's exercises: the LayerNorm Jacobian for any gamma, and the gradient kept by a LayerNorm over a batch."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..diagnostics import layer_norm_jacobian, layer_norm_std
from ._core import Wrong, as_tensor, call, diagnose, exercise, seeded


def _jacobian_parts(x: torch.Tensor, eps: float, unbiased: bool = False, with_eps: bool = True):
    d = x.numel()
    var = x.var(unbiased=unbiased)
    sigma = torch.sqrt(var + eps) if with_eps else torch.sqrt(var)
    n = (x - x.mean()) / sigma
    identity = torch.eye(d, dtype=x.dtype)
    mean_part = torch.ones(d, d, dtype=x.dtype) / d
    return identity, mean_part, torch.outer(n, n) / d, sigma


@exercise("2.1", "the LayerNorm Jacobian for any gamma")
def check_ln_jacobian(fn) -> str:
    """``fn(x, gamma, eps)`` returns :math:`\\partial\\mathrm{LN}(x)/\\partial x` (d, d) for one token x (d,)."""
    generator = seeded(21)
    cases = []
    for d, scale in ((6, 3.0), (16, 1.0), (16, 0.01)):  # the last one has sigma^2 ~ 1e-4, where eps matters
        x = scale * torch.randn(d, generator=generator, dtype=torch.float64) + 1.0
        cases.append((x, torch.ones(d, dtype=torch.float64)))
        cases.append((x, 0.5 + torch.rand(d, generator=generator, dtype=torch.float64)))
    eps = 1e-5
    for x, gamma in cases:
        got = call(fn, x.clone(), gamma.clone(), eps, what="your function")
        expected = layer_norm_jacobian(x, gamma, eps)
        I, M, N, sigma = _jacobian_parts(x, eps)
        P = I - M - N
        G = torch.diag(gamma)
        constant_gamma = bool((gamma == 1).all())
        mistakes = [
            (
                P / sigma,
                "your Jacobian is correct for gamma = 1 but not for a non-constant gamma: did you forget diag(gamma)?",
            ),
            (
                P @ G / sigma,
                "gamma multiplies the wrong side: LN(x)_i = gamma_i n_i, so row i carries gamma_i: diag(gamma) @ P / "
                "sigma",
            ),
            (
                G @ (I - M) / sigma,
                "the -n n^T / d term is missing: it is the derivative of sigma (the std depends on x too)",
            ),
            (G @ (I - N) / sigma, "the -1 1^T / d term is missing: it is the derivative of the mean"),
            (G @ P / sigma**2, "divide by sigma, not sigma^2"),
        ]
        I2, M2, N2, sigma2 = _jacobian_parts(x, eps, unbiased=True)
        mistakes.append(
            (
                G @ (I2 - M2 - N2) / sigma2,
                "LayerNorm uses the biased variance (divide by d: x.var(unbiased=False)), not torch.var's default",
            )
        )
        I3, M3, N3, sigma3 = _jacobian_parts(x, eps, with_eps=False)
        mistakes.append(
            (
                G @ (I3 - M3 - N3) / sigma3,
                "eps is missing: sigma = sqrt(var + eps), which matters when the variance is small",
            )
        )
        diagnose(
            got,
            expected,
            mistakes,
            f"your Jacobian (d = {x.numel()}, {'gamma = 1' if constant_gamma else 'random gamma'})",
            rtol=1e-6,
            atol=1e-8,
            hint="check it against autograd: b2t_lib.diagnostics.jacobian(norm, x)",
        )
    return "matches the closed form (and autograd) for constant and non-constant gamma"


@exercise("2.2", "the gradient a LayerNorm keeps over a batch")
def check_ln_gradient_factor(fn) -> str:
    """``fn(sigmas, d)`` predicts :math:`\\lVert g_{in}\\rVert/\\lVert g_{out}\\rVert` for a random upstream gradient
    through a LayerNorm with gamma = 1, over tokens of width ``d`` whose standard deviations are ``sigmas``."""
    notes = []
    for d, seed in ((16, 22), (64, 23)):
        generator = seeded(seed)
        tokens = 512
        # tokens with very different standard deviations: normalized vectors times a per-token scale in [0.5, 4]
        scale = torch.exp(
            torch.empty(tokens, 1, dtype=torch.float64).uniform_(math.log(0.5), math.log(4.0), generator=generator)
        )
        x = (
            scale * F.layer_norm(torch.randn(tokens, d, generator=generator, dtype=torch.float64), (d,))
        ).requires_grad_(True)
        upstream = torch.randn(tokens, d, generator=generator, dtype=torch.float64)
        (grad_in,) = torch.autograd.grad(F.layer_norm(x, (d,)), x, upstream)
        measured = float(grad_in.norm() / upstream.norm())
        sigmas = layer_norm_std(x.detach())  # (tokens,)
        expected = math.sqrt((d - 2) / d) * float(sigmas.pow(-2).mean().sqrt())
        if abs(expected / measured - 1) > 0.03:
            raise RuntimeError(f"the reference prediction {expected:.4f} is off the measurement {measured:.4f}")
        got = call(fn, sigmas.clone(), d, what="your function")
        got = as_tensor(got, "your prediction")
        if got.numel() != 1:
            raise Wrong(f"your prediction must be one number for the whole batch, got shape {tuple(got.shape)}")
        keep = math.sqrt((d - 2) / d)
        mistakes = [
            (
                torch.tensor(keep / float(sigmas.mean())),
                "you used one sigma (the mean) for all tokens; each token is divided by its own sigma_t, and squared "
                "norms add: sqrt(mean(1 / sigma_t^2))",
            ),
            (
                torch.tensor(keep * float(sigmas.pow(-1).mean())),
                "you averaged 1 / sigma_t, but norms add in squares over tokens: average 1 / sigma_t^2, then take "
                "the square root",
            ),
            (
                torch.tensor(float(sigmas.pow(-2).mean().sqrt())),
                "the projection P removes 2 of the d directions of a random gradient: multiply by sqrt((d - 2) / d)",
            ),
            (
                torch.tensor((d - 2) / d * float(sigmas.pow(-2).mean().sqrt())),
                "P keeps (d - 2) / d of the *squared* norm, so sqrt((d - 2) / d) of the norm",
            ),
        ]
        diagnose(got.reshape(()), torch.tensor(expected), mistakes, f"your prediction (d = {d})", rtol=2e-3, atol=0.0)
        notes.append(f"d = {d}: predicted {float(got):.4f}, measured {measured:.4f}")
    return "; ".join(notes)
