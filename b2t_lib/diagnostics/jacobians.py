r"""Jacobians of LayerNorm, of one Post-LN / Pre-LN sub-layer (Eq. 3, 4) and of a B2T layer (Eq. 8).

**LayerNorm.** For :math:`x\in\mathbb{R}^d` with mean :math:`\mu`, standard deviation
:math:`\sigma=\sqrt{\tfrac1d\sum_k (x_k-\mu)^2+\epsilon}` and :math:`n=(x-\mu)/\sigma`,
:math:`\mathrm{LN}(x)=\gamma\odot n+\beta`, and

.. math::
    \frac{\partial\,\mathrm{LN}(x)}{\partial x} = \frac{\mathrm{diag}(\gamma)}{\sigma}
    \Big(I - \tfrac1d\mathbf{1}\mathbf{1}^\top - \tfrac1d\, n n^\top\Big).

The bracket is (for :math:`\epsilon=0`) the orthogonal projection that removes the mean direction
:math:`\mathbf 1` and the direction :math:`n` of :math:`x` itself, so its norm is 1 and the
Jacobian's norm is :math:`\max|\gamma|/\sigma`: **the gradient crossing a LayerNorm is divided by
the standard deviation of the LayerNorm's input.** In Post-LN that input is a residual sum
:math:`x+\mathcal F(x)` of a unit-variance :math:`x` and a branch, so :math:`\sigma>1` and each
crossing shrinks the gradient.

**Eq. 3 and 4.** With :math:`J_F` the Jacobian of the sub-layer :math:`\mathcal F`:

.. math::
    \frac{\partial\,\mathrm{PostLN}(x)}{\partial x} = J_{LN}(x+\mathcal F(x))\,(I + J_F(x)),\qquad
    \frac{\partial\,\mathrm{PreLN}(x)}{\partial x} = I + J_F(\mathrm{LN}(x))\,J_{LN}(x).

**Eq. 8.** For a B2T layer the sum inside the final LayerNorm is
:math:`s = x_{inp} + x_{ffn} + \mathrm{FFN}(x_{ffn})` (Eq. 5, 7), so
:math:`\partial s/\partial x_{inp} = I + \partial x_{ffn}/\partial x_{inp}
+ \partial\mathrm{FFN}(x_{ffn})/\partial x_{inp}`:
an identity term that no inner LayerNorm multiplies.

Every Jacobian here is a plain matrix computed with ``torch.func.jacrev``; for a sequence of
:math:`T` tokens it is :math:`(Td)\times(Td)`, so keep the layer small (d = 8, T = 3).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import jacrev

from ..layers import DecoderLayer


def layer_norm_jacobian(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    r"""Closed-form :math:`\partial\mathrm{LN}(x)/\partial x` for one vector ``x`` (d,), a (d, d) matrix."""
    if x.dim() != 1:
        raise ValueError(
            f"layer_norm_jacobian takes one token vector (d,), got shape {tuple(x.shape)}; "
            f"a LayerNorm acts on each token separately, so loop or use block_diagonal"
        )
    d = x.numel()
    sigma = layer_norm_std(x, eps)  # sqrt(var + eps)
    n = (x - x.mean()) / sigma  # (d,) the normalized input
    identity = torch.eye(d, dtype=x.dtype, device=x.device)
    projection = identity - torch.ones(d, d, dtype=x.dtype, device=x.device) / d - torch.outer(n, n) / d
    gamma = torch.ones_like(x) if weight is None else weight.to(x.dtype)
    return gamma[:, None] / sigma * projection  # diag(gamma)/sigma (I - 11^T/d - n n^T/d)


def layer_norm_std(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    r""":math:`\sigma = \sqrt{\mathrm{Var}(x) + \epsilon}` over the last dimension (biased variance, as LN)."""
    return torch.sqrt(x.var(dim=-1, unbiased=False) + eps)


def module_layer_norm_jacobian(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """Closed-form Jacobian of the LayerNorm module ``norm`` at every token of ``x`` (time, d), block-diagonal."""
    return torch.block_diag(*[layer_norm_jacobian(token, norm.weight.detach(), norm.eps) for token in x])


def jacobian(fn, x: torch.Tensor) -> torch.Tensor:
    """Autograd Jacobian of ``fn`` at ``x`` as a matrix (numel of fn(x), numel of x), via ``torch.func.jacrev``."""
    with warnings.catch_warnings():
        # vmap over the fused attention kernel's backward falls back to a loop: slower, still exact
        warnings.filterwarnings("ignore", message="There is a performance drop")
        out = jacrev(fn)(x)
    return out.reshape(-1, x.numel())


def post_ln_jacobian(sublayer, norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    r"""Eq. 3 assembled from its parts: :math:`J_{LN}(x+\mathcal F(x))\,(I+J_F(x))` for one token x (d,)."""
    identity = torch.eye(x.numel(), dtype=x.dtype)
    residual_sum = x + sublayer(x)  # (d,) the LN's input
    return layer_norm_jacobian(residual_sum.detach(), norm.weight.detach(), norm.eps) @ (
        identity + jacobian(sublayer, x)
    )


def pre_ln_jacobian(sublayer, norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    r"""Eq. 4 assembled from its parts: :math:`I + J_F(\mathrm{LN}(x))\,J_{LN}(x)` for one token x (d,)."""
    identity = torch.eye(x.numel(), dtype=x.dtype)
    normalized = norm(x).detach()  # (d,) the sub-layer's input
    return identity + jacobian(sublayer, normalized) @ layer_norm_jacobian(x, norm.weight.detach(), norm.eps)


@dataclass
class FinalSumJacobians:
    r"""The Jacobians of Eq. 8 for one layer at one input ``x_inp`` (time, d); all (time*d, time*d).

    ``total`` is :math:`\partial s/\partial x_{inp}` of the layer's *actual* sum inside its final
    LayerNorm; ``through_norms`` is :math:`\partial x_{ffn}/\partial x_{inp}` (the path through the
    inner LayerNorms, Eq. 6) and ``through_ffn`` is :math:`\partial\mathrm{FFN}(x_{ffn})/\partial x_{inp}`.
    """

    total: torch.Tensor
    through_norms: torch.Tensor
    through_ffn: torch.Tensor
    layer: torch.Tensor  # dy/dx_inp of the whole layer (its output, after the final LayerNorm)
    final_norm: torch.Tensor  # closed-form Jacobian of the final LayerNorm at s, block-diagonal

    @property
    def remainder(self) -> torch.Tensor:
        """``total - through_norms - through_ffn``: I for B2T (Eq. 8), zero for Post-LN (Eq. 3)."""
        return self.total - self.through_norms - self.through_ffn


def final_sum_jacobians(layer: nn.Module, x_inp: torch.Tensor, memory: torch.Tensor | None = None) -> FinalSumJacobians:
    """Eq. 8's terms for a Post-LN or B2T ``layer`` at ``x_inp`` (time, d); ``memory`` (src_time, d) for a decoder.

    The layer's sum :math:`s` is read from the layer itself: a forward hook on its
    ``final_layer_norm`` returns the LayerNorm's input instead of its output, so the layer as
    written computes :math:`s`. The two paths are built from the layer's own sub-layers with the
    inner Post-LN wiring of Eq. 6; the layer is evaluated in eval mode (no dropout).
    """
    if getattr(layer, "final_layer_norm", None) is None:
        raise ValueError(
            f"the {layer.variant.name} layer has no final LayerNorm; Eq. 8 is about Post-LN "
            f"and B2T layers (variants post_ln, b2t)"
        )
    if x_inp.dim() != 2:
        raise ValueError(f"x_inp must be one sequence (time, d_model), got shape {tuple(x_inp.shape)}")
    is_decoder = isinstance(layer, DecoderLayer) and layer.cross_attention
    if is_decoder and memory is None:
        raise ValueError("a decoder layer with cross-attention needs `memory` (src_time, d_model)")
    batched_memory = memory[None] if memory is not None else None

    def run_layer(x):  # (time, d) -> (time, d)
        if is_decoder:
            return layer(x[None], batched_memory)[0]
        return layer(x[None])[0]

    def inner_sublayers():
        return layer.sublayers(batched_memory) if is_decoder else layer.sublayers()

    def x_ffn(x):  # Eq. 6: the input of the FFN, after every inner Post-LN sub-layer
        h = x[None]
        for branch, norm in inner_sublayers()[:-1]:
            h = norm(h + branch(h))
        return h[0]

    def ffn_of_x_ffn(x):
        return layer.ffn(x_ffn(x)[None])[0]

    was_training = layer.training
    layer.eval()
    handle = layer.final_layer_norm.register_forward_hook(lambda module, args, output: args[0])
    try:
        total = jacobian(run_layer, x_inp)  # the hook makes the layer return s
        with torch.no_grad():
            s = run_layer(x_inp)  # (time, d)
    finally:
        handle.remove()
    try:
        result = FinalSumJacobians(
            total=total,
            through_norms=jacobian(x_ffn, x_inp),
            through_ffn=jacobian(ffn_of_x_ffn, x_inp),
            layer=jacobian(run_layer, x_inp),
            final_norm=module_layer_norm_jacobian(layer.final_layer_norm, s),
        )
    finally:
        layer.train(was_training)
    return result
