r"""What each layer does to the stream it receives, in the forward pass: how large the stream grows with depth, and
how much each layer changes it.

For layer :math:`l` of a stack, with input :math:`x_l` and output :math:`y_l` (both (batch, time, d_model); in a
plain stack :math:`x_{l+1} = y_l`), measured over the real (non-padding) token positions :math:`\mathcal T`:

* the **size** of the stream, the root mean square of the layer's output,

  .. math::
      \mathrm{rms}_l = \Big(\frac{1}{|\mathcal T|\,d}\sum_{t\in\mathcal T}\lVert y_{l,t}\rVert^2\Big)^{1/2}.

  A LayerNorm at the end of a layer (Post-LN, Eq. 1; B2T, Eq. 5) keeps it near :math:`\gamma`'s scale. In Pre-LN
  (Eq. 2) every layer adds its branch to an un-normalized sum, so it grows with depth: additively at initialization,
  and faster during training if the branches grow ("massive activations", the argument of Peri-LN);
* the **cosine** between a layer's input and its output, the per-layer form of Figure 5's similarity,

  .. math::
      c_l = \frac{1}{|\mathcal T|}\sum_{t\in\mathcal T}
          \frac{x_{l,t}\cdot y_{l,t}}{\lVert x_{l,t}\rVert\,\lVert y_{l,t}\rVert}.

  :math:`c_l` near 1 means the layer barely turned the vector it received: it contributes little. Section 4 of the
  paper reads Pre-LN's high similarities as "its higher layers are less effective"; LayerNorm Scaling (arXiv
  2502.05795) argues from the same measure that Pre-LN's deep layers approach the identity.

Both come from one forward pass in eval mode, with forward hooks on the layers; the stack's final norm (Pre-LN's) is
not part of any layer. ResiDual's layers output its Post-LN stream; the dual stream lives in the stack's loop and is
not measured here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .forward import layer_inputs_outputs


@dataclass
class LayerActivations:
    """Per-layer forward measurements of one stack (index 0 is the bottom layer)."""

    variant: str
    stack: str
    input_rms: float  # the bottom layer's input (the embedding output, after any norm the variant puts there)
    rms: np.ndarray  # (num_layers,) rms of each layer's output
    io_cosine: np.ndarray  # (num_layers,) mean cosine between each layer's input and output

    def growth(self) -> float:
        """:math:`\\mathrm{rms}_N / \\mathrm{rms}_1`: how much larger the top layer's output is than the bottom's."""
        return float(self.rms[-1] / self.rms[0])

    def top_cosine(self, fraction: float = 0.25) -> float:
        """The mean :math:`c_l` of the top ``fraction`` of the layers (at least one): how little the deep layers do."""
        count = max(1, round(len(self.io_cosine) * fraction))
        return float(self.io_cosine[-count:].mean())


def layer_activations(model: nn.Module, batch: dict, stack: str = "encoder") -> LayerActivations:
    """Measure :class:`LayerActivations` of one stack of ``model`` on ``batch`` (the model is run in eval mode).

    ``batch`` holds the model's inputs (``src_tokens`` for the encoder, ``prev_output_tokens`` for the decoder).
    """
    pairs = layer_inputs_outputs(model, batch, stack)  # (input, output) of each layer, bottom first

    tokens = batch["src_tokens"] if stack == "encoder" else batch["prev_output_tokens"]
    real = tokens.ne(model.cfg.pad_idx)  # (batch, time)

    def rms(y: torch.Tensor) -> float:
        return float(y[real].double().pow(2).mean().sqrt())  # over the real tokens and the features

    cosines = [
        float(nn.functional.cosine_similarity(x[real].double(), y[real].double(), dim=-1).mean()) for x, y in pairs
    ]
    return LayerActivations(
        variant=model.cfg.variant,
        stack=stack,
        input_rms=rms(pairs[0][0]),
        rms=np.array([rms(y) for _, y in pairs]),
        io_cosine=np.array(cosines),
    )
