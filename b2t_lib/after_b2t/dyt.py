r"""Dynamic Tanh (DyT: "Transformers without Normalization", Zhu, Chen, He, LeCun and Liu, CVPR 2025, arXiv
2503.10622): every LayerNorm replaced by an element-wise squashing with a learnable scalar :math:`\alpha`,

.. math::
    \mathrm{DyT}(x) = \gamma \odot \tanh(\alpha x) + \beta, \qquad \alpha_0 = 0.5,\ \gamma_0 = 1,\ \beta_0 = 0.

DyT computes no statistics over the features: where a LayerNorm divides by the standard deviation of each
vector, DyT squashes each coordinate on its own, which the paper finds to mimic the S-shaped input-output map of
trained LayerNorms. The paper replaces the norms of Pre-LN Transformers (ViT, LLaMA, DiT, wav2vec); ``dyt`` does so
here. ``b2t_dyt`` puts DyT into the B2T connection's layer (Eq. 5-7), a combination that no paper has tested: B2T
relies on its last LayerNorm to bound the sum :math:`x_{inp} + x_{ffn} + \mathrm{FFN}(x_{ffn})`, and a tanh bounds
each coordinate, not the vector's scale.

:math:`\alpha_0 = 0.5` is the paper's default (its LLaMA runs tune :math:`\alpha_0` per block and width; not
reproduced). The module keeps the LayerNorm's parameter names ``weight`` (:math:`\gamma`) and ``bias``
(:math:`\beta`) and adds ``alpha``, so it sits where the LayerNorms were (``self_attn_layer_norm``, ...).
"""

from __future__ import annotations

import torch
from torch import nn

from ..model import model_stacks
from ..variants import B2T, PreLN, register


class DynamicTanh(nn.Module):
    r""":math:`\gamma \odot \tanh(\alpha x) + \beta` over the last dimension; :math:`\alpha` is one learned scalar."""

    symbol = "DyT"  # how Figure 2 (b2t_lib.plots.architecture) labels it

    def __init__(self, d_model: int, alpha_init: float = 0.5):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), alpha_init))
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma
        self.bias = nn.Parameter(torch.zeros(d_model))  # beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias  # (..., d_model)


NORM_NAMES = ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")


def replace_layer_norms(layer: nn.Module) -> None:
    """Swap every LayerNorm of ``layer`` for a :class:`DynamicTanh` under the same name."""
    for name in NORM_NAMES:
        if isinstance(getattr(layer, name, None), nn.LayerNorm):
            setattr(layer, name, DynamicTanh(layer.d_model))


@register
class DyT(PreLN):
    r"""Pre-LN (Eq. 2) with DyT in place of every LayerNorm, the final ones included."""

    name, title, equation = "dyt", "DyT (Pre-LN)", "Zhu et al. 2025 (docs/methods.md §6.5)"

    def build_layer(self, layer: nn.Module) -> None:
        replace_layer_norms(layer)

    def build_model(self, model: nn.Module) -> None:
        for stack in model_stacks(model).values():
            if isinstance(stack.layer_norm, nn.LayerNorm):  # the stack's final norm (none for fairseq's LM recipe)
                stack.layer_norm = DynamicTanh(stack.layer_norm.normalized_shape[0])


@register
class B2TDyT(B2T):
    r"""The B2T connection (Eq. 5-7) with DyT in place of its LayerNorms."""

    name, title, equation = "b2t_dyt", "B2T with DyT", "Eq. 5-7 with DyT (docs/methods.md §6.5)"

    def build_layer(self, layer: nn.Module) -> None:  # B2T's optional N^-1/2 rescaling is not offered here
        replace_layer_norms(layer)
