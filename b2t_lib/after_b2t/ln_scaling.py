r"""LayerNorm Scaling ("The Curse of Depth in Large Language Models", Sun et al. 2025, arXiv 2502.05795).

Pre-LN (Eq. 2) with the output of every LayerNorm of layer :math:`l` (1 at the bottom) scaled down by
:math:`\sqrt{l}`:

.. math::
    x \leftarrow x + \mathcal F\!\left(\frac{1}{\sqrt{l}}\,\mathrm{LN}(x)\right)

The paper's argument: in Pre-LN the variance of the residual stream grows with depth, so a deep layer's
sub-layers see a normalized input whose contribution is small against the stream, and the layer is nearly an
identity (its Jacobian approaches 1); dividing by :math:`\sqrt l` keeps the output variance from growing faster
than the stream's. The official code (``lmsdss/LayerNorm-Scaling``, ``peft_pretraining/modeling_llama.py``, norm
type ``LNS``) scales both LayerNorms of a layer by ``1 / sqrt(layer_index + 1)`` and leaves the final LayerNorm
unscaled, as here.
"""

from __future__ import annotations

from ..variants import PreLN, register


@register
class LayerNormScaling(PreLN):
    r"""Pre-LN whose LayerNorm outputs in layer :math:`l` are multiplied by :math:`1/\sqrt{l}`."""

    name, title, equation = "ln_scaling", "LayerNorm Scaling", "Sun et al. 2025 (docs/methods.md §6.3)"

    def layer_forward(self, layer, x, sublayers):
        scale = layer.depth**-0.5  # 1 / sqrt(l), l = 1 at the bottom of the stack
        for branch, norm in sublayers:
            x = x + branch(scale * norm(x))  # x + F(LN(x) / sqrt(l))
        return x
