r"""DLCL (Wang et al. 2019): each layer reads a learned combination of all layers below it (docs/methods.md §2.5).

The paper applies DLCL to Post-LN. Per stack of :math:`L` layers, with :math:`y_0` the embedding
output (after :math:`\sqrt d` scaling, positions and dropout) and :math:`y_k` the output of the
ordinary Post-LN layer :math:`k`:

.. math::
    x_1 = W_{0,0}\, y_0, \qquad
    x_{k+1} = \mathrm{LN}_k\Big(\sum_{j=0}^{k} W_{k,j}\, y_j\Big) \;(1 \le k < L), \qquad
    \text{output} = \mathrm{LN}_L\Big(\sum_{j=0}^{L} W_{L,j}\, y_j\Big)

:math:`W \in \mathbb{R}^{(L+1)\times(L+1)}` is learned and lower-triangular (entries above the
diagonal are never read); it starts as the running average, :math:`W_{k,j} = 1/(k+1)` for
:math:`j \le k`, so :math:`W_{0,0}` starts at 1 and is learned like the others
(:math:`\mathrm{LN}_0` is the identity). There are :math:`L` extra LayerNorms
:math:`\mathrm{LN}_1..\mathrm{LN}_L` per stack and no other final LayerNorm. Official defaults kept:
scalar weights, no softmax over them, no history dropout, all earlier layers (window -1). As in the
official DLCL code, ``fc1``/``fc2`` start from ``xavier_uniform_`` with zero bias and the q/k/v
biases are zero.

DLCL is a Post-LN variant: :class:`DLCL` inherits Post-LN's layer (Eq. 1) and changes only the loop
over the stack (:meth:`~b2t_lib.variants.Variant.run_stack`).

Parameter names: ``dlcl_weights`` and ``dlcl_layer_norms.{k-1}`` (for :math:`\mathrm{LN}_k`) on the
encoder and decoder (no fairseq name is reused).
"""

from __future__ import annotations

import torch
from torch import nn

from ..model import model_stacks
from ..variants import PostLN, register
from .common import xavier_ffn_init, zero_attention_biases


def dlcl_average_weights(num_layers: int) -> torch.Tensor:
    r"""The 'avg' init: :math:`W_{k,j} = 1/(k+1)` for :math:`j \le k`, zero above the diagonal."""
    rows = torch.arange(num_layers + 1, dtype=torch.float)
    return torch.tril(torch.ones(num_layers + 1, num_layers + 1)) / (rows[:, None] + 1)  # (L+1, L+1)


@register
class DLCL(PostLN):
    r"""Post-LN layers; layer :math:`k+1` reads :math:`\mathrm{LN}_k(\sum_{j\le k} W_{k,j} y_j)`."""

    name, title, equation = "dlcl", "DLCL", "Wang et al. 2019 (docs/methods.md §2.5)"

    def build_layer(self, layer: nn.Module) -> None:
        xavier_ffn_init(layer)
        zero_attention_biases(layer)

    def build_model(self, model: nn.Module) -> None:
        for stack in model_stacks(model).values():
            num_layers, d_model = len(stack.layers), stack.layers[0].d_model
            stack.dlcl_weights = nn.Parameter(dlcl_average_weights(num_layers))  # W, (L+1, L+1)
            stack.dlcl_layer_norms = nn.ModuleList(nn.LayerNorm(d_model, eps=1e-5) for _ in range(num_layers))

    def run_stack(self, stack, x, run_layer):
        weights = stack.dlcl_weights
        outputs = [x]  # y_0 = embedding output; y_k = output of layer k, each (batch, time, d_model)
        for k, layer in enumerate(stack.layers):
            if k == 0:
                x = weights[0, 0] * x  # x_1 = W_00 y_0 (LN_0 is the identity)
            else:
                x = combine(outputs, weights[k, : k + 1], stack.dlcl_layer_norms[k - 1])  # x_{k+1}
            outputs.append(run_layer(k, layer, x))
        num_layers = len(stack.layers)
        return combine(outputs, weights[num_layers], stack.dlcl_layer_norms[num_layers - 1])  # stack output


def combine(outputs: list[torch.Tensor], row: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    r""":math:`\mathrm{LN}_k(\sum_j W_{k,j} y_j)` over ``outputs`` :math:`y_0..y_k` with ``row`` :math:`W_{k,0..k}`."""
    stacked = torch.stack(outputs, dim=0)  # (k+1, batch, time, d_model)
    return norm(torch.einsum("j,jbtd->btd", row.to(stacked.dtype), stacked))
