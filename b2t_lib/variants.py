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

The baselines (:mod:`b2t_lib.baselines`: DLCL, Admin, T-Fixup, RealFormer, DeepNet) register in the
same registry, each in its own module, through these hooks of :class:`Variant`:

* :meth:`Variant.layer_forward` - the wiring of one layer's sub-layers (every variant);
* :meth:`Variant.build_layer` - extra parameters and initialization of one layer (B2T's optional
  rescaling, Admin, DeepNet, T-Fixup, DLCL);
* :meth:`Variant.build_model` - what needs the whole model: per-stack parameters and embedding
  initialization (DLCL, Admin, T-Fixup);
* :meth:`Variant.run_stack` - the loop over a stack's layers. Only DLCL changes it (each layer
  reads a combination of *all* earlier layers), and no other hook can express that;
* :meth:`Variant.prepare_for_training` - a pass over real data before training. Only Admin needs
  it (its initialization is measured on the first batch); it receives a function that runs the
  model's forward pass, so it knows nothing about batches;

and four class attributes: ``layer_norm``/``final_norm`` (which LayerNorms exist),
``attention_class`` (RealFormer swaps in its own attention), ``recipe`` (T-Fixup's schedule) and
``bottom_to_top`` (B2T's extra connection, which fairseq checkpoints name by a flag).
Each attention module also receives a per-forward-pass ``state`` dict shared by the attentions of
one type (encoder self-, decoder self-, decoder cross-attention) from layer to layer; plain
attention ignores it. A hook a variant does not override costs nothing.

``Variant.title`` is the one label of a variant in every figure and table; ``Variant.equation``
says where it is defined (``python -m b2t_lib train --help`` lists both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from .attention import MultiheadAttention

SubLayer = tuple[Callable[[torch.Tensor], torch.Tensor], nn.Module | None]


@dataclass
class StackInfo:
    """The one description a layer is built from: its stack's role and depth, the model's depths, the model's
    options (every ModelConfig field: d_model, dropout, b2t_rescale_init, ...) and the variant, resolved once
    per model from the registry."""

    role: str = "encoder"  # "encoder" | "decoder" | "lm" (decoder-only)
    num_layers: int = 6  # N of Eq. 10: layers in this stack
    encoder_layers: int = 0  # 0 for a decoder-only model
    decoder_layers: int = 0
    options: dict = field(default_factory=dict)  # the model's ModelConfig fields (b2t_rescale_init, ...)
    variant: "Variant | None" = None  # the registry's entry for options["variant"]


class Variant:
    """Base class: the hooks every variant may override. Subclasses set ``name`` and register."""

    name: str = ""
    title: str = ""  # how figures and tables name it
    equation: str = ""  # where the paper (or docs/methods.md) defines it
    layer_norm: bool = True  # layers own LayerNorms (self_attn_layer_norm, ..., final_layer_norm)
    final_norm: bool = False  # the stack has a final LayerNorm (encoder.layer_norm / decoder.layer_norm)
    attention_class: type[nn.Module] = MultiheadAttention  # what self- and cross-attention are built as
    recipe: str = ""  # a training recipe of b2t_lib.presets the method needs (T-Fixup: "tfixup"), or ""
    bottom_to_top: bool = False  # adds the layer input before its last sum (the B2T code's --residual-bottom-to-top)

    def layer_forward(self, layer: nn.Module, x: torch.Tensor, sublayers: list[SubLayer]) -> torch.Tensor:
        raise NotImplementedError

    def build_layer(self, layer: nn.Module) -> None:
        """Create variant parameters on a freshly built layer and change its initialization
        (called once, after fairseq's default initialization of the layer)."""

    def build_model(self, model: nn.Module) -> None:
        """Create per-stack parameters and change initializations that need the whole model
        (called once, after every stack is built)."""

    def run_stack(self, stack: nn.Module, x: torch.Tensor, run_layer: Callable) -> torch.Tensor:
        """Run the layers of ``stack`` on ``x``; ``run_layer(i, layer, x)`` runs one layer."""
        for i, layer in enumerate(stack.layers):
            x = run_layer(i, layer, x)
        return x

    def prepare_for_training(self, model: nn.Module, run_forward: Callable[[], object]) -> bool:
        """Run once before training from scratch; ``run_forward()`` runs the model's forward pass on
        the first training batch. Return True when the model changed."""
        return False

    def __repr__(self) -> str:
        return f"<variant {self.name}: {self.title} ({self.equation})>"


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

    Option ``b2t_rescale_init`` (off by default, docs/methods.md §1.5): the official code's later change
    that multiplies every non-LayerNorm weight of the layer by :math:`N^{-1/2}`.
    """

    name, title, equation = "b2t", "B2T connection", "Eq. 5-7"
    bottom_to_top = True

    def layer_forward(self, layer, x, sublayers):
        x_inp = x
        for branch, norm in sublayers[:-1]:
            x = norm(x + branch(x))  # Eq. 6: x_ffn = LN(SelfAttn(x_inp) + x_inp) (and cross-attention)
        branch, norm = sublayers[-1]
        return norm(x_inp + x + branch(x))  # Eq. 5: LN(x_inp + x_ffn + FFN(x_ffn))

    def build_layer(self, layer):
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
    bottom_to_top = True

    def layer_forward(self, layer, x, sublayers):
        x_ffn_out = residual_sublayers(x, sublayers)  # x_ffn + FFN(x_ffn), which contains x_inp
        alpha, beta = b2t_no_ln_alpha(layer.stack.num_layers), b2t_no_ln_beta(layer.d_model)
        return alpha * x + beta * x_ffn_out  # Eq. 9: alpha x_inp + beta (x_ffn + FFN(x_ffn))

    build_layer = B2T.build_layer  # the same optional rescaling


def residual_sublayers(x: torch.Tensor, sublayers: list[SubLayer]) -> torch.Tensor:
    r""":math:`x \leftarrow x + \mathcal{F}(x)` for every sub-layer, no LayerNorm: the inner sub-layers of
    B2T w/o LN (Eq. 9) and every sub-layer of T-Fixup."""
    for branch, _ in sublayers:
        x = x + branch(x)
    return x


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
