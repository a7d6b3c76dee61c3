r"""Cosine similarity between the outputs of every pair of layers: the paper's Figure 5.

For layers :math:`i, j` of one stack with outputs :math:`y_i, y_j` (batch, time, d_model),

.. math::
    S_{ij} = \frac{1}{|\mathcal{T}|}\sum_{t\in\mathcal{T}}
             \frac{y_{i,t}\cdot y_{j,t}}{\lVert y_{i,t}\rVert\,\lVert y_{j,t}\rVert}

where :math:`\mathcal{T}` are the real (non-padding) token positions of the batch. A high
:math:`S_{iN}` for a shallow layer :math:`i` means the final layer's output is still close to what
layer :math:`i` produced: the layers in between changed little. Section 4 reads Pre-LN's high
lower-left similarities as "its higher layers are less effective"; the residual stream of Eq. 2
carries every layer's input to the top unchanged, while Post-LN (and B2T, whose extra connection
ends *before* the last LayerNorm) re-normalizes at every layer.

The outputs are the layers' own outputs, taken with forward hooks; Pre-LN's final stack
LayerNorm is not part of any layer and is not applied.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .forward import layer_inputs_outputs


@dataclass
class LayerSimilarity:
    """(num_layers, num_layers) mean cosine similarity of layer outputs; index 0 is the bottom layer."""

    variant: str
    stack: str
    matrix: np.ndarray

    def to_final(self) -> np.ndarray:
        """:math:`S_{iN}` for every layer :math:`i` below the top: how close each layer is to the last."""
        return self.matrix[:-1, -1]


def layer_output_similarity(model: nn.Module, batch: dict, stack: str = "encoder") -> LayerSimilarity:
    """Figure 5's matrix for one stack of ``model`` on ``batch``, with the model in eval mode.

    ``batch`` holds ``src_tokens`` (read by the encoder) and ``prev_output_tokens`` (decoder).
    """
    outputs = [output for _, output in layer_inputs_outputs(model, batch, stack)]

    tokens = batch["src_tokens"] if stack == "encoder" else batch["prev_output_tokens"]
    real = tokens.ne(model.cfg.pad_idx if hasattr(model, "cfg") else 1)  # (batch, time)
    variant = model.cfg.variant if hasattr(model, "cfg") else "?"
    return LayerSimilarity(variant=variant, stack=stack, matrix=cosine_similarity_matrix(outputs, real))


def cosine_similarity_matrix(outputs: list[torch.Tensor], real: torch.Tensor) -> np.ndarray:
    r""":math:`S_{ij}`, the mean over real tokens of the cosine between layer outputs ``outputs[i]`` and ``outputs[j]``.

    ``outputs``: one (batch, time, d_model) tensor per layer; ``real``: (batch, time), True at non-padding tokens.
    """
    # unit vectors of the real tokens only: (num_layers, num_real_tokens, d_model)
    units = torch.stack([nn.functional.normalize(y[real].detach().double(), dim=-1) for y in outputs])
    cosines = torch.einsum("itd,jtd->ijt", units, units)  # (num_layers, num_layers, num_real_tokens)
    return cosines.mean(dim=-1).numpy()
