r"""The one registry of layer-normalization variants, and the four variants of the paper.

A Transformer layer is a short chain of *sub-layers* (self-attention, cross-attention, FFN). Each
sub-layer is handed to the variant as a pair ``(branch, norm)``: ``branch(x)`` computes
:math:`\mathrm{Drop}_p(\mathcal{F}(x))` and ``norm`` is the LayerNorm that belongs to it (``None``
when the variant has no per-layer LayerNorm). The variant decides how they are wired, which is the
whole difference between the methods of the paper:

=============  ===========================================================================
``post_ln``    :math:`x \leftarrow \mathrm{LN}(x + \mathcal{F}(x))` for every sub-layer (Eq. 1)
``pre_ln``     :math:`x \leftarrow x + \mathcal{F}(\mathrm{LN}(x))` (Eq. 2), final LN on the stack
``b2t``        Post-LN, and the layer input :math:`x_{inp}` is added right before the last LN (Eq. 5-7)
``b2t_no_ln``  no LN; :math:`y = \alpha x_{inp} + \beta(x_{ffn} + \mathrm{FFN}(x_{ffn}))` (Eq. 9-11)
=============  ===========================================================================

The baselines (DLCL, Admin, T-Fixup, RealFormer, DeepNet) plug into the same registry through the
hooks of :class:`Variant`: per-layer parameters (:meth:`Variant.build_layer`), per-layer and
per-model initialization (:meth:`Variant.init_layer`, :meth:`Variant.init_model`), state passed
from layer to layer (the ``state`` dict, RealFormer's score stream), a different loop over the
layers of a stack (:meth:`Variant.run_stack`, DLCL) and a pass over a batch before training
(:meth:`Variant.prepare_for_training`, Admin). A hook a variant does not override costs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

SubLayer = tuple[Callable[[torch.Tensor], torch.Tensor], nn.Module | None]


@dataclass
class StackInfo:
    """Where a layer sits: its stack's role and depth, the model's depths, and variant options."""

    role: str = "encoder"  # "encoder" | "decoder" | "lm" (decoder-only)
    num_layers: int = 6  # N of Eq. 10: layers in this stack
    encoder_layers: int = 0  # 0 for a decoder-only model
    decoder_layers: int = 0
    options: dict = field(default_factory=dict)  # b2t_rescale_init, deepnet_encoder_beta_factor, ...


class Variant:
    """Base class: the hooks every variant may override. Subclasses set ``name`` and register."""

    name: str = ""
    title: str = ""  # how figures and tables name it
    equation: str = ""  # where the paper (or methods_spec) defines it
    layer_norm: bool = True  # layers own LayerNorms (self_attn_layer_norm, ..., final_layer_norm)
    final_norm: bool = False  # the stack has a final LayerNorm (encoder.layer_norm / decoder.layer_norm)
    score_residual: bool = False  # attention passes raw scores from layer to layer (RealFormer)
    recipe: str = ""  # a training recipe of b2t_lib.presets the method needs (T-Fixup: "tfixup"), or ""

    def layer_forward(self, layer: nn.Module, x: torch.Tensor, sublayers: list[SubLayer]) -> torch.Tensor:
        raise NotImplementedError

    def build_layer(self, layer: nn.Module) -> None:
        """Create variant-specific parameters on a freshly built layer."""

    def init_layer(self, layer: nn.Module) -> None:
        """Change a layer's initialization (after fairseq's default init)."""

    def init_model(self, model: nn.Module) -> None:
        """Change the whole model's initialization (embeddings, stack-level parameters)."""

    def build_stack(self, stack: nn.Module) -> None:
        """Create stack-level parameters (for example DLCL's layer-combination weights)."""

    def run_stack(self, stack: nn.Module, x: torch.Tensor, run_layer: Callable) -> torch.Tensor:
        """Run the layers of ``stack`` on ``x``; ``run_layer(i, layer, x)`` runs one layer."""
        for i, layer in enumerate(stack.layers):
            x = run_layer(i, layer, x)
        return x

    def prepare_for_training(self, model: nn.Module, batch: dict) -> bool:
        """Run once before training from scratch; return True when it changed the model."""
        return False

    def __repr__(self) -> str:
        return f"<variant {self.name}: {self.title}>"


VARIANTS: dict[str, Variant] = {}


def register(variant_class: type[Variant]) -> type[Variant]:
    """Class decorator: add one instance of ``variant_class`` to :data:`VARIANTS`."""
    if variant_class.name in VARIANTS:
        raise ValueError(f"variant {variant_class.name!r} is registered twice")
    VARIANTS[variant_class.name] = variant_class()
    return variant_class


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; known variants are: {', '.join(sorted(VARIANTS))}")
    return VARIANTS[name]


@register
class PostLN(Variant):
    name, title, equation = "post_ln", "Post-LN", "Eq. 1"

    def layer_forward(self, layer, x, sublayers):
        for branch, norm in sublayers:
            x = norm(x + branch(x))  # Eq. 1: PostLN(x) = LN(x + F(x))
        return x


@register
class PreLN(Variant):
    name, title, equation = "pre_ln", "Pre-LN", "Eq. 2"
    final_norm = True

    def layer_forward(self, layer, x, sublayers):
        for branch, norm in sublayers:
            x = x + branch(norm(x))  # Eq. 2: PreLN(x) = x + F(LN(x))
        return x


@register
class B2T(Variant):
    r"""Post-LN plus the bottom-to-top connection (Eq. 5-7).

    Encoder: :math:`x_{ffn} = \mathrm{LN}(\mathrm{SelfAttn}(x_{inp}) + x_{inp})` (Eq. 6) and
    :math:`y = \mathrm{LN}(x_{inp} + x_{ffn} + \mathrm{FFN}(x_{ffn}))` (Eq. 5). In the decoder the
    input skips self-attention, cross-attention and the FFN alike.

    Option ``b2t_rescale_init`` (off by default, methods_spec 1.5): the official code's later change
    that multiplies every non-LayerNorm weight of the layer by :math:`N^{-1/2}`.
    """

    name, title, equation = "b2t", "B2T connection", "Eq. 5-7"

    def layer_forward(self, layer, x, sublayers):
        x_inp = x
        for branch, norm in sublayers[:-1]:
            x = norm(x + branch(x))  # Eq. 6: x_ffn = LN(SelfAttn(x_inp) + x_inp) (and cross-attention)
        branch, norm = sublayers[-1]
        return norm(x_inp + x + branch(x))  # Eq. 5: LN(x_inp + x_ffn + FFN(x_ffn))

    def init_layer(self, layer):
        if layer.stack.options.get("b2t_rescale_init", False):
            rescale_layer_weights(layer, layer.stack.num_layers**-0.5)


@register
class B2TNoLN(Variant):
    r"""B2T without LayerNorm (Appendix D, Eq. 9-11).

    .. math::
        y = \alpha x_{inp} + \beta\,(x_{ffn} + \mathrm{FFN}(x_{ffn})),\quad
        \alpha = \min(N/12, N^{-0.15}),\quad \beta = d^{-0.2}

    where every inner sub-layer is a plain residual :math:`x + \mathcal{F}(x)`, so
    :math:`x_{ffn} + \mathrm{FFN}(x_{ffn})` already contains :math:`x_{inp}`.
    """

    name, title, equation = "b2t_no_ln", "B2T w/o LN", "Eq. 9-11"
    layer_norm = False

    def layer_forward(self, layer, x, sublayers):
        x_inp = x
        for branch, _ in sublayers:
            x = x + branch(x)  # residual sub-layers without LayerNorm
        alpha, beta = b2t_no_ln_alpha(layer.stack.num_layers), b2t_no_ln_beta(layer.d_model)
        return alpha * x_inp + beta * x  # Eq. 9

    def init_layer(self, layer):
        if layer.stack.options.get("b2t_rescale_init", False):
            rescale_layer_weights(layer, layer.stack.num_layers**-0.5)


def b2t_no_ln_alpha(num_layers: int) -> float:
    r"""Eq. 10: :math:`\alpha = \min(N/12, N^{-0.15})`; rises until N=9, then falls."""
    return min(num_layers / 12, num_layers**-0.15)


def b2t_no_ln_beta(d_model: int) -> float:
    r"""Eq. 11: :math:`\beta = d^{-0.2}`."""
    return d_model**-0.2


def rescale_layer_weights(layer: nn.Module, factor: float) -> None:
    """Multiply every parameter of ``layer`` whose name has 'weight' but not 'layer_norm' by ``factor``."""
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if "weight" in name and "layer_norm" not in name:
                param.mul_(factor)
