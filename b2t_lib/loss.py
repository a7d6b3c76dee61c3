r"""Label-smoothed cross entropy, summed over the non-padding target tokens (docs/methods.md §3.3).

fairseq's ``label_smoothed_cross_entropy`` spreads $\epsilon$ of the probability mass uniformly
over the vocabulary of size $V$:

.. math::
    \mathcal{L} = \sum_{t:\,y_t \ne \text{pad}} \Big[(1-\epsilon)\,(-\log p_\theta(y_t))
                  + \frac{\epsilon}{V}\sum_{v=1}^{V} (-\log p_\theta(v))\Big]

The loss is a *sum*; the trainer divides the gradients by the number of target tokens of the
whole update (all processes, all accumulation steps), as fairseq does.

This module sits below both the trainer (:mod:`b2t_lib.train`) and the diagnostics
(:mod:`b2t_lib.diagnostics`), which measure gradients of the very loss the trainer back-propagates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .special_tokens import PAD


@dataclass
class LossOutput:
    """Sums over the target tokens of one batch (tensors, so they can be all-reduced)."""

    loss: torch.Tensor  # label-smoothed loss, summed over tokens (what is back-propagated)
    nll: torch.Tensor  # plain negative log-likelihood in nats, summed over tokens
    ntokens: torch.Tensor  # number of non-padding target tokens (0-dim, no host sync)


def label_smoothed_nll_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int = PAD
) -> LossOutput:
    """Label-smoothed loss and plain NLL of ``logits`` (B, T, V) against ``target`` (B, T).

    Computed in fp32 whatever the autocast dtype, as fairseq does for the softmax.
    """
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"label smoothing must lie in [0, 1), got {epsilon}")
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    lprobs = lprobs.view(-1, lprobs.size(-1))  # (B*T, V)
    target = target.reshape(-1)  # (B*T,)
    keep = target.ne(ignore_index)  # (B*T,)
    # -log p(y_t): the term weighted by (1 - eps)
    nll = -lprobs.gather(1, target.clamp_min(0).unsqueeze(1)).squeeze(1)  # (B*T,)
    # sum_v -log p(v): the uniform term weighted by eps / V
    smooth = -lprobs.sum(dim=-1)  # (B*T,)
    nll = nll.masked_fill(~keep, 0.0).sum()
    smooth = smooth.masked_fill(~keep, 0.0).sum()
    vocab = lprobs.size(-1)
    loss = (1.0 - epsilon) * nll + (epsilon / vocab) * smooth
    return LossOutput(loss=loss, nll=nll.detach(), ntokens=keep.sum())
