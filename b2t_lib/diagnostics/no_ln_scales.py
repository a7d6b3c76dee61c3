r"""B2T without LayerNorm (Eq. 9-11): what sets the per-layer scale of the gradient, and the critical width.

A B2T w/o LN layer computes :math:`y=\alpha x+\beta\,b(x)` with :math:`b(x)=x+B(x)`, where :math:`B(x)` is the
sum of its sub-layer outputs (every inner sum is a plain residual), so

.. math::
    y=(\alpha+\beta)\,x+\beta\,B(x),\qquad
    g_{x}=(\alpha+\beta)\,g_y+\beta\,J_B^\top g_y .

The paper states no per-layer factor; reading Eq. 10-11 as one keeps only the first term, a factor
:math:`\alpha+\beta` per layer (this course's *identity-only heuristic*). At initialization the
branch term is nearly orthogonal to :math:`g_y` (random weights), so the two add in quadrature:

.. math::
    \frac{\lVert g_x\rVert}{\lVert g_y\rVert}\approx\sqrt{(\alpha+\beta)^2+\beta^2\kappa^2},\qquad
    \kappa=\frac{\lVert J_B^\top g_y\rVert}{\lVert g_y\rVert},

:math:`\kappa` being the *branch gain*. With unit-scale signals :math:`\kappa^2` is a sum over the sub-layers:
the FFN contributes :math:`1/18` with PyTorch's default ``nn.Linear`` init (:math:`\mathrm{Var}(W_1)=1/(3d)`,
:math:`\mathrm{Var}(W_2)=1/(12d)`, ReLU keeps half), the causal self-attention about half the mean squared attention
weight (large at the first positions, which attend to few tokens), the cross-attention little (its values come
from the encoder); about 0.2 in all for this course's batch, so :math:`\kappa\approx0.45`. The gradient neither grows
nor shrinks when the factor is 1; with :math:`\beta=d^{-0.2}` (Eq. 11) that is the critical width

.. math::
    \beta^*=\frac{\sqrt{1+\kappa^2(1-\alpha^2)}-\alpha}{1+\kappa^2},\qquad d^*=(\beta^*)^{-5},

which for :math:`\kappa=0` is the heuristic :math:`d^*=(1-\alpha)^{-5}`. Below :math:`d^*` the forward signal
grows too, and :math:`\kappa` is not a constant: attention's Jacobian grows with the scale of its inputs (its
scores are products of two linear maps of the signal, and the decoder's cross-attention reads the encoder's grown
output), so the explosion is faster than any fixed per-layer factor predicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..variants import b2t_no_ln_alpha, b2t_no_ln_beta
from ..model import model_stacks
from .forward import model_loss


def b2t_no_ln_layer_factor(num_layers: int, d_model: int, branch_gain: float = 0.0) -> float:
    r"""Per-layer gradient factor :math:`\sqrt{(\alpha+\beta)^2+\beta^2\kappa^2}` (``branch_gain`` is
    :math:`\kappa`)."""
    alpha, beta = b2t_no_ln_alpha(num_layers), b2t_no_ln_beta(d_model)
    return math.sqrt((alpha + beta) ** 2 + (beta * branch_gain) ** 2)


def b2t_no_ln_critical_width(num_layers: int, branch_gain: float = 0.0) -> float:
    r"""The width :math:`d^*` at which the per-layer factor is 1; wider models keep the gradient from growing.

    ``branch_gain=0`` gives the identity-only heuristic :math:`(1-\alpha)^{-5}` (only :math:`\alpha+\beta<1`; this
    course's reading, not a rule of the paper).
    """
    if branch_gain < 0:
        raise ValueError(f"branch_gain is a norm ratio and cannot be negative, got {branch_gain}")
    alpha, k2 = b2t_no_ln_alpha(num_layers), branch_gain**2
    beta_star = (math.sqrt(1 + k2 * (1 - alpha**2)) - alpha) / (1 + k2)  # root of (a+b)^2 + b^2 k^2 = 1
    return beta_star**-5


@dataclass
class NoLNBackwardTerms:
    """Per-layer terms of :math:`g_x=(\\alpha+\\beta)g_y+\\beta J_B^\\top g_y` in one stack (index 0 = bottom)."""

    stack: str
    alpha: float
    beta: float
    backward_factor: np.ndarray  # (N,) ||g_x|| / ||g_y|| of each layer
    branch_term: np.ndarray  # (N,) ||g_x - (alpha + beta) g_y|| / ||g_y|| = beta * kappa
    branch_cosine: np.ndarray  # (N,) cos(branch term, g_y): near 0 means the two add in quadrature
    output_rms: np.ndarray  # (N,) root mean square of each layer's output: the forward signal's scale

    @property
    def identity_factor(self) -> float:
        return self.alpha + self.beta

    @property
    def branch_gain(self) -> np.ndarray:
        """:math:`\\kappa` of each layer."""
        return self.branch_term / self.beta

    @property
    def quadrature_factor(self) -> np.ndarray:
        """:math:`\\sqrt{(\\alpha+\\beta)^2+\\beta^2\\kappa^2}` per layer, from the measured :math:`\\kappa`."""
        return np.sqrt(self.identity_factor**2 + self.branch_term**2)


def b2t_no_ln_backward_terms(
    model: nn.Module, batch: dict, stack: str = "decoder", label_smoothing: float = 0.1
) -> NoLNBackwardTerms:
    """Measure, for every layer of a B2T w/o LN ``stack``, the identity and branch parts of its input gradient."""
    stacks = model_stacks(model)
    if stack not in stacks:
        raise ValueError(f"the model has no {stack!r} stack; it has: {', '.join(stacks) or 'none'}")
    layers = stacks[stack].layers
    if layers[0].variant.name != "b2t_no_ln":
        raise ValueError(f"this measures B2T w/o LN layers (Eq. 9), not {layers[0].variant.name}")
    inputs: list[torch.Tensor] = []
    outputs: list[torch.Tensor] = []

    def keep(module, args, output) -> None:
        inputs.append(args[0])
        outputs.append(output)

    handles = [layer.register_forward_hook(keep) for layer in layers]
    try:
        loss = model_loss(model, batch, label_smoothing)
    finally:
        for handle in handles:
            handle.remove()
    grads = torch.autograd.grad(loss, inputs + outputs)
    g_in, g_out = grads[: len(layers)], grads[len(layers) :]
    alpha, beta = b2t_no_ln_alpha(len(layers)), b2t_no_ln_beta(layers[0].d_model)
    factor, branch, cosine = [], [], []
    for gx, gy in zip(g_in, g_out):
        gx, gy = gx.double().flatten(), gy.double().flatten()
        rest = gx - (alpha + beta) * gy  # beta * J_B^T g_y
        factor.append(float(gx.norm() / gy.norm()))
        branch.append(float(rest.norm() / gy.norm()))
        cosine.append(float(torch.nn.functional.cosine_similarity(rest, gy, dim=0)))
    rms = [float(y.detach().double().pow(2).mean().sqrt()) for y in outputs]
    return NoLNBackwardTerms(
        stack=stack,
        alpha=alpha,
        beta=beta,
        backward_factor=np.array(factor),
        branch_term=np.array(branch),
        branch_cosine=np.array(cosine),
        output_rms=np.array(rms),
    )
