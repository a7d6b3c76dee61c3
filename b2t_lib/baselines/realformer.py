r"""RealFormer (He et al. 2021): Post-LN with residual attention scores (docs/methods.md §2.4).

Each attention layer adds the previous layer's *raw* pre-softmax scores to its own, per head:

.. math::
    S_l = \frac{Q_l K_l^\top}{\sqrt{d_{head}}} + S_{l-1}, \quad S_0 = 0, \qquad
    A_l = \mathrm{softmax}(S_l + M)

so :math:`S_l` is the running sum of the scaled scores of layers :math:`1..l`. The mask :math:`M`
(padding, causal) enters only the softmax; what goes up to the next layer is the unmasked
:math:`S_l`. Everything else is Post-LN (Eq. 1): :class:`RealFormer` inherits Post-LN's layer and
only swaps in its own attention, :class:`RealFormerAttention`.

Choices:

* The RealFormer code is encoder-only. For an encoder-decoder there are three separate score
  streams (open point 4): encoder self-attention, decoder self-attention and decoder
  cross-attention, each passed from layer to layer within its own type. The stream lives in the
  per-forward-pass ``state`` dict that the layers hand to each attention type
  (:mod:`b2t_lib.attention`); it is gone when the forward pass ends.
* ``ModelConfig(realformer_running_mean=True)`` turns on RealFormer's running-mean option,
  :math:`A_l = \mathrm{softmax}(S_l / l + M)` (off by default, as in the RealFormer code; its
  docstring suggests it at 30+ layers).
* Computing :math:`S_l` explicitly replaces the fused attention kernel, so RealFormer runs slower
  than the other variants; the others are untouched.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiheadAttention, causal_mask
from ..variants import PostLN, register
from .common import attention_modules


class RealFormerAttention(MultiheadAttention):
    """Multi-head attention that adds the score stream :math:`S_{l-1}` of the layers below."""

    running_mean = False  # set per layer from ModelConfig.realformer_running_mean

    def attend(self, q, k, v, mask, causal, dropout_p, state):
        r""":math:`S_l = Q K^\top/\sqrt{d_{head}} + S_{l-1}`, softmax over the masked :math:`S_l` (divided by
        :math:`l` for the running-mean option); the unmasked :math:`S_l` goes up to the next layer."""
        state = {} if state is None else state  # a stand-alone call is a first layer
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d_head)  # (batch, heads, tgt, src)
        if "scores" in state:
            scores = scores + state["scores"]  # + S_{l-1}
        state["depth"] = depth = state.get("depth", 0) + 1  # l: layers of this attention type so far
        state["scores"] = scores  # unmasked, for the next layer
        logits = scores / depth if self.running_mean else scores
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf"))  # mask: True where a query may attend
        if causal:
            logits = logits.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
        probs = F.dropout(torch.softmax(logits.float(), dim=-1).to(v.dtype), p=dropout_p, training=dropout_p > 0)
        return torch.matmul(probs, v)  # (batch, heads, tgt, d_head)


@register
class RealFormer(PostLN):
    r"""Post-LN; every attention adds the previous layer's raw scores :math:`S_{l-1}` before its softmax."""

    name, title, equation = "realformer", "RealFormer", "He et al. 2021 (docs/methods.md §2.4)"
    attention_class = RealFormerAttention

    def build_layer(self, layer: nn.Module) -> None:
        for attention in attention_modules(layer):
            attention.running_mean = bool(layer.stack.options.get("realformer_running_mean", False))
