r"""T-Fixup (Huang et al. 2020): no LayerNorm at all, a depth-scaled init, no warmup (docs/methods.md §2.3).

Every sub-layer is a plain residual, and no stack has a final LayerNorm:

.. math::
    x \leftarrow x + \mathrm{Drop}(\mathcal{F}(x))

Training stays stable because the initialization shrinks every update's effect with the depth.
After fairseq's default init (fc1/fc2: ``xavier_uniform_`` with zero bias, as in the T-Fixup code):

=================================================  ======================================
what                                               multiplied by
=================================================  ======================================
encoder ``fc1``, ``fc2``, ``self_attn.out_proj``    :math:`0.67\,N^{-1/4}`
encoder ``self_attn.v_proj``                        :math:`0.67\,N^{-1/4}\cdot\sqrt{2}`
decoder ``fc1``, ``fc2``, both ``out_proj``         :math:`(9M)^{-1/4}`
decoder ``self_attn.v_proj``, ``encoder_attn.v_proj``  :math:`(9M)^{-1/4}\cdot\sqrt{2}`
encoder token embedding                             :math:`(9N)^{-1/4}`
decoder token embedding (when not shared)           :math:`(9M)^{-1/4}`
=================================================  ======================================

The :math:`\sqrt 2` undoes fairseq's :math:`1/\sqrt 2` Xavier gain on ``v_proj``. ``q_proj``,
``k_proj``, biases and a separate output projection are left alone. With shared embeddings the one
matrix is scaled once, by the encoder's factor. A language model's decoder uses the decoder rows.
An adaptive input (several band matrices and projections) has no T-Fixup scaling: it is refused.

Schedule: T-Fixup trains without warmup, :math:`\eta_t = \eta\sqrt{P/(P+t)}`; the trainer's recipe
``--recipe tfixup`` sets ``--lr-scheduler inverse_sqrt_nowarmup`` (and T-Fixup's lr 5e-4,
:math:`P = 4000`). The paper used T-Fixup's own hyper-parameters for T-Fixup only (Appendix A.1).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..config import ConfigError
from ..model import model_stacks
from ..variants import Variant, register, residual_sublayers
from .common import attention_modules, xavier_ffn_init

RECIPE = "tfixup"  # the trainer recipe (b2t_lib.presets.RECIPES) that carries the no-warmup schedule


def tfixup_layer_factor(role: str, num_layers: int) -> float:
    r"""Scale of fc1, fc2 and out_proj: :math:`0.67 N^{-1/4}` (encoder) or :math:`(9M)^{-1/4}` (decoder)."""
    if role == "encoder":
        return 0.67 * num_layers**-0.25
    return (9 * num_layers) ** -0.25


def tfixup_embedding_factor(num_layers: int) -> float:
    r"""Scale of a stack's token embedding: :math:`(9N)^{-1/4}`."""
    return (9 * num_layers) ** -0.25


@register
class TFixup(Variant):
    r"""No LayerNorm: :math:`x \leftarrow x + \mathcal{F}(x)`, with T-Fixup's initialization."""

    name, title, equation = "tfixup", "T-Fixup", "Huang et al. 2020 (docs/methods.md §2.3)"
    layer_norm = False
    recipe = RECIPE  # the trainer recipe with T-Fixup's no-warmup schedule

    def layer_forward(self, layer, x, sublayers):
        return residual_sublayers(x, sublayers)  # x <- x + F(x) for every sub-layer, no LayerNorm

    def build_layer(self, layer: nn.Module) -> None:
        xavier_ffn_init(layer)
        factor = tfixup_layer_factor(layer.stack.role, layer.stack.num_layers)
        with torch.no_grad():
            layer.fc1.weight.mul_(factor)
            layer.fc2.weight.mul_(factor)
            for attention in attention_modules(layer):
                attention.out_proj.weight.mul_(factor)
                attention.v_proj.weight.mul_(factor * math.sqrt(2))  # sqrt(2) undoes the 1/sqrt(2) gain

    def build_model(self, model: nn.Module) -> None:
        scaled = set()
        with torch.no_grad():
            for stack in model_stacks(model).values():
                embedding = stack.embed_tokens
                if embedding is None or id(embedding) in scaled:
                    continue  # a speech encoder has none; shared with the encoder: scaled once, by its factor
                if not isinstance(embedding, nn.Embedding):
                    # T-Fixup scales one embedding matrix; an adaptive input has one per band and
                    # projections between them, for which Huang et al. define no scaling.
                    raise ConfigError(
                        f"T-Fixup's initialization scales the token embedding matrix by (9N)^(-1/4); it is not "
                        f"defined for a {type(embedding).__name__} (band embeddings and projections). Use "
                        f"--no-adaptive-input with --variant tfixup"
                    )
                embedding.weight.mul_(tfixup_embedding_factor(stack.stack.num_layers))
                scaled.add(id(embedding))
