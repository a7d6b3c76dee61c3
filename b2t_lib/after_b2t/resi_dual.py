r"""ResiDual (Xie et al. 2023, arXiv 2304.14802; microsoft/ResiDual): a Post-LN stream and an un-normalized dual
stream side by side, added at the top of the stack.

For every sub-layer :math:`\mathcal F` of every layer (self-attention, cross-attention, FFN), with :math:`x_0 = d_0`
the embedding output,

.. math::
    x_{k+1} = \mathrm{LN}\big(x_k + \mathcal F(x_k)\big), \qquad d_{k+1} = d_k + \mathcal F(x_k), \qquad
    \text{output} = x_N + \mathrm{LN}_d(d_N).

The Post-LN stream :math:`x` keeps Post-LN's representation (Eq. 1); the dual stream :math:`d` sums every branch
output un-normalized, as Pre-LN's residual stream does, and gives every sub-layer an identity path to the output
that crosses one LayerNorm, :math:`\mathrm{LN}_d`. The official code (``resi_dual/resi_dual.py`` and
``resi_dual_layers.py``) starts the dual stream from the embedding output, adds each branch after its residual
dropout, and scales neither stream by default (``enc_alpha = dec_alpha = 1``, ``*_res_input_norm_scale = 1``); its
:math:`\mathrm{LN}_d` has :math:`\epsilon = 10^{-7}`. All of this is kept here. :math:`\mathrm{LN}_d` is
``dual_layer_norm`` on each stack.

The layer is Post-LN's; what is new lives in the stack's loop (:meth:`ResiDual.run_stack`). A layer leaves the sum
of its branch outputs, :math:`\sum \mathcal F`, on itself (``dual_increment``) for the loop to take.
"""

from __future__ import annotations

from torch import nn

from ..model import model_stacks
from ..variants import PostLN, register


@register
class ResiDual(PostLN):
    r"""Post-LN layers; the stack returns :math:`x_N + \mathrm{LN}_d(d_N)`, :math:`d` the un-normalized sum."""

    name, title, equation = "resi_dual", "ResiDual", "Xie et al. 2023 (docs/methods.md §6.1)"

    def build_model(self, model: nn.Module) -> None:
        for stack in model_stacks(model).values():
            stack.dual_layer_norm = nn.LayerNorm(stack.layers[0].d_model, eps=1e-7)

    def layer_forward(self, layer, x, sublayers):
        increment = 0.0
        for branch, norm in sublayers:
            update = branch(x)  # Drop(F(x_k))
            increment = increment + update  # d_{k+1} - d_k
            x = norm(x + update)  # x_{k+1} = LN(x_k + F(x_k))
        layer.dual_increment = increment
        return x

    def run_stack(self, stack, x, run_layer):
        dual = x  # d_0: the embedding output, (batch, time, d_model)
        for i, layer in enumerate(stack.layers):
            x = run_layer(i, layer, x)
            dual = dual + layer.__dict__.pop("dual_increment")  # d <- d + sum of the layer's F(x_k)
        return x + stack.dual_layer_norm(dual)  # x_N + LN_d(d_N)
