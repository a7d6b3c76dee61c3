r"""RealFormer (He et al. 2021): Post-LN with residual attention scores (methods_spec 2.4).

Each attention layer adds the previous layer's *raw* pre-softmax scores to its own, per head:

.. math::
    S_l = \frac{Q_l K_l^\top}{\sqrt{d_{head}}} + S_{l-1}, \quad S_0 = 0, \qquad
    A_l = \mathrm{softmax}(S_l + M)

so :math:`S_l` is the running sum of the scaled scores of layers :math:`1..l`. The mask :math:`M`
(padding, causal) enters only the softmax; what goes up to the next layer is the unmasked
:math:`S_l`. Everything else is Post-LN (Eq. 1).

Choices:

* The RealFormer code is encoder-only. For an encoder-decoder there are three separate score
  streams (open point 4): encoder self-attention, decoder self-attention and decoder
  cross-attention, each passed from layer to layer within its own type. The layers keep them in
  the per-forward ``state`` dict; :class:`~b2t_lib.attention.MultiheadAttention` does the sum.
* ``ModelConfig(realformer_running_mean=True)`` turns on RealFormer's running-mean option,
  :math:`A_l = \mathrm{softmax}(S_l / l + M)` (off by default, as in the RealFormer code; its
  docstring suggests it at 30+ layers).
* Computing :math:`S_l` explicitly replaces the fused attention kernel, so RealFormer runs slower
  than the other variants; the others are untouched (``score_residual`` is False for them).
"""
from __future__ import annotations

from ..variants import Variant, register


@register
class RealFormer(Variant):
    r"""Post-LN; every attention adds the previous layer's raw scores :math:`S_{l-1}` before its softmax."""

    name, title, equation = "realformer", "RealFormer", "He et al. 2021 (methods_spec 2.4)"
    score_residual = True  # the layers pass one score stream per attention type

    def layer_forward(self, layer, x, sublayers):
        for branch, norm in sublayers:
            x = norm(x + branch(x))  # Eq. 1: LN(x + F(x)); the score residual lives inside branch
        return x
