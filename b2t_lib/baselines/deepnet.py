r"""DeepNet (Wang et al. 2022): DeepNorm residuals plus a depth-scaled initialization (docs/methods.md §2.1).

Every sub-layer (self-attention, cross-attention, FFN) is Post-LN with the shortcut up-weighted by a
constant :math:`\alpha > 1`:

.. math::
    x_{l+1} = \mathrm{LN}\big(\alpha\, x_l + \mathrm{Drop}(\mathcal{G}(x_l))\big)

and the weights of the value projection, the attention output projection and the FFN start
:math:`\beta` times smaller than Xavier (:math:`\beta < 1`). Both constants depend on the depths:

=========================  ==================================  ====================================
stack                      :math:`\alpha`                       :math:`\beta`
=========================  ==================================  ====================================
encoder-only, N layers     :math:`(2N)^{1/4}`                   :math:`(8N)^{-1/4}`
decoder-only, M layers     :math:`(2M)^{1/4}`                   :math:`(8M)^{-1/4}`
enc-dec, encoder           :math:`0.81\,(N^4 M)^{1/16}`          :math:`0.87\,(N^4 M)^{-1/16}`
enc-dec, decoder           :math:`(3M)^{1/4}`                   :math:`(12M)^{-1/4}`
=========================  ==================================  ====================================

Choices (documented in notebook 11 as well):

* The encoder's :math:`\beta` factor is the DeepNet paper's 0.87 (open point 3); torchscale's code
  uses 1.15. Switch with ``ModelConfig(deepnet_encoder_beta_factor=1.15)``.
* The initialization follows the DeepNet paper's pseudocode (and the Admin repository's ``deepnet``
  branch): ``xavier_normal_(gain=beta)`` for ``fc1``, ``fc2``, ``v_proj``, ``out_proj`` and
  ``xavier_normal_(gain=1)`` for ``q_proj``, ``k_proj``, in self- and cross-attention alike, and,
  as that code does, zero biases for q/k/v and the FFN (the output projection's is zero anyway).
  (torchscale instead divides the default init, biases included, by :math:`1/\beta`.)
* A decoder layer with cross-attention always uses the encoder-decoder decoder row; a standalone
  encoder stack without a decoder uses the encoder-only row.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import model_default
from ..variants import StackInfo, Variant, register
from .common import attention_modules, zero_attention_biases


def deepnet_constants(stack: StackInfo) -> tuple[float, float]:
    r"""(:math:`\alpha`, :math:`\beta`) of DeepNet for a layer of ``stack`` (table in the module docstring)."""
    n = stack.num_layers
    if stack.role == "lm":
        return (2 * n) ** 0.25, (8 * n) ** -0.25  # decoder-only, M layers
    if stack.role == "decoder":
        return (3 * n) ** 0.25, (12 * n) ** -0.25  # decoder of an encoder-decoder, M layers
    m = stack.decoder_layers
    if m == 0:
        return (2 * n) ** 0.25, (8 * n) ** -0.25  # encoder-only, N layers
    factor = stack.options.get("deepnet_encoder_beta_factor", model_default("deepnet_encoder_beta_factor"))
    return 0.81 * (n**4 * m) ** (1 / 16), factor * (n**4 * m) ** (-1 / 16)  # encoder of an enc-dec


@register
class DeepNet(Variant):
    r"""Post-LN with :math:`x \leftarrow \mathrm{LN}(\alpha x + \mathcal{F}(x))` and the :math:`\beta` init."""

    name, title, equation = "deepnet", "DeepNet", "Wang et al. 2022 (docs/methods.md §2.1)"

    def layer_forward(self, layer, x, sublayers):
        alpha = layer.deepnet_alpha
        for branch, norm in sublayers:
            x = norm(alpha * x + branch(x))  # DeepNorm: x_{l+1} = LN(alpha x_l + G(x_l))
        return x

    def build_layer(self, layer: nn.Module) -> None:
        layer.deepnet_alpha, beta = deepnet_constants(layer.stack)  # plain floats, not learned
        for attention in attention_modules(layer):
            nn.init.xavier_normal_(attention.q_proj.weight, gain=1.0)
            nn.init.xavier_normal_(attention.k_proj.weight, gain=1.0)
            nn.init.xavier_normal_(attention.v_proj.weight, gain=beta)  # beta-scaled: value ...
            nn.init.xavier_normal_(attention.out_proj.weight, gain=beta)  # ... and output projection
        nn.init.xavier_normal_(layer.fc1.weight, gain=beta)  # beta-scaled FFN
        nn.init.xavier_normal_(layer.fc2.weight, gain=beta)
        zero_attention_biases(layer)
        with torch.no_grad():
            layer.fc1.bias.zero_()
            layer.fc2.bias.zero_()
