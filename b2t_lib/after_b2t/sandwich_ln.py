r"""Sandwich-LN (CogView, Ding et al. 2021, arXiv 2105.13290): a LayerNorm on the input *and* the output of every
sub-layer, the layout that Peri-LN (Kim et al., ICML 2025, arXiv 2502.02732) analyses:

.. math::
    x \leftarrow x + \mathrm{LN}_{out}\big(\mathcal F(\mathrm{LN}_{in}(x))\big),

and Pre-LN's final LayerNorm on the stack. The residual stream itself is never normalized, as in Pre-LN, so the
gradient keeps an identity path (Eq. 4); but every sub-layer adds a vector of fixed scale (the output LayerNorm's
:math:`\gamma`), so the stream grows additively with depth instead of as Pre-LN's does (Peri-LN's argument).

``LN_in`` is the layer's usual LayerNorm of the sub-layer (``self_attn_layer_norm``, ``encoder_attn_layer_norm``,
``final_layer_norm``); the output LayerNorms are ``output_layer_norms.{i}``, one per sub-layer in execution order.
The output LayerNorm normalizes the branch after its residual dropout (:math:`\mathrm{LN}_{out}(\mathrm{Drop}(
\mathcal F))`): in CogView's Megatron code the attention and MLP modules apply their output dropout inside, before
the third LayerNorm.

``peri_ln`` is the same layer with Peri-LN's one addition on the stack: a LayerNorm on the embedding output before
the first layer, :math:`x_0 = \mathrm{LN}_{emb}(\mathrm{embed})` (``embedding_layer_norm`` on each stack), which
Peri-LN's description calls optional; the course includes it, so that the two entries differ in exactly that. No
public implementation by Peri-LN's authors could be read here (docs/methods.md §6.4).
"""

from __future__ import annotations

from torch import nn

from ..model import model_stacks
from ..variants import PreLN, register


@register
class SandwichLN(PreLN):
    r""":math:`x + \mathrm{LN}_{out}(\mathcal F(\mathrm{LN}_{in}(x)))` for every sub-layer, Pre-LN's final LayerNorm."""

    name, title, equation = "sandwich_ln", "Sandwich-LN", "Ding et al. 2021 (docs/methods.md §6.4)"

    def build_layer(self, layer: nn.Module) -> None:
        count = 3 if getattr(layer, "cross_attention", False) else 2  # self-attn, (cross-attn), FFN
        layer.output_layer_norms = nn.ModuleList(nn.LayerNorm(layer.d_model, eps=1e-5) for _ in range(count))

    def layer_forward(self, layer, x, sublayers):
        for (branch, norm), out_norm in zip(sublayers, layer.output_layer_norms, strict=True):
            x = x + out_norm(branch(norm(x)))  # x + LN_out(Drop(F(LN_in(x))))
        return x


@register
class PeriLN(SandwichLN):
    r"""Sandwich-LN's layer and a LayerNorm on the embedding output, :math:`x_0 = \mathrm{LN}_{emb}(\mathrm{embed})`."""

    name, title, equation = "peri_ln", "Peri-LN", "Kim et al. 2025 (docs/methods.md §6.4)"

    def build_model(self, model: nn.Module) -> None:
        for stack in model_stacks(model).values():
            stack.embedding_layer_norm = nn.LayerNorm(stack.layers[0].d_model, eps=1e-5)

    def run_stack(self, stack, x, run_layer):
        x = stack.embedding_layer_norm(x)  # x_0 = LN_emb(embedding output), (batch, time, d_model)
        for i, layer in enumerate(stack.layers):
            x = run_layer(i, layer, x)
        return x
