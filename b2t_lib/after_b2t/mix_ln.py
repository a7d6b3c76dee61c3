r"""Mix-LN (Li, Yin and Liu, ICLR 2025, arXiv 2412.13795): Post-LN at the bottom of a stack, Pre-LN above it.

With :math:`L` layers in a stack and the ratio :math:`\alpha` (``ModelConfig.mix_ln_ratio``, 0.25 as in the
paper's released scripts), layer :math:`l` (1 at the bottom) is

.. math::
    l \le \lfloor \alpha L \rfloor:\quad x \leftarrow \mathrm{LN}(x + \mathcal F(x)) \;\text{(Eq. 1)},\qquad
    l > \lfloor \alpha L \rfloor:\quad x \leftarrow x + \mathcal F(\mathrm{LN}(x)) \;\text{(Eq. 2)},

and the stack ends with Pre-LN's final LayerNorm. The paper's argument: Pre-LN's deep layers do little (their
outputs resemble their inputs, the paper's Figure 5 measure here), Post-LN's early layers get too little gradient;
Post-LN below and Pre-LN above is meant to give every layer both. The paper applies it to decoder-only language
models; here it applies to every stack (encoder, decoder, language model) by the same rule.

The reference code (``lmsdss/LayerNorm-Scaling``, ``modeling_llama.py``, norm type ``post_pre``) counts the
Post-LN layers as a number (``POST_NUM``); the ratio here gives that number for each stack's depth.
"""

from __future__ import annotations

import math

from ..variants import PostLN, PreLN, StackInfo, Variant, register


def post_ln_layers(stack: StackInfo) -> int:
    r""":math:`\lfloor \alpha L \rfloor`: how many layers at the bottom of this stack are Post-LN."""
    return math.floor(stack.options.get("mix_ln_ratio", 0.25) * stack.num_layers)


@register
class MixLN(Variant):
    r"""Post-LN in layers :math:`1..\lfloor\alpha L\rfloor`, Pre-LN above them, Pre-LN's final LayerNorm."""

    name, title, equation = "mix_ln", "Mix-LN", "Li et al. 2025 (docs/methods.md §6.2)"
    final_norm = True  # the Pre-LN layers on top leave an un-normalized stream

    def layer_forward(self, layer, x, sublayers):
        if layer.depth <= post_ln_layers(layer.stack):
            return PostLN.layer_forward(self, layer, x, sublayers)  # x <- LN(x + F(x))
        return PreLN.layer_forward(self, layer, x, sublayers)  # x <- x + F(LN(x))
