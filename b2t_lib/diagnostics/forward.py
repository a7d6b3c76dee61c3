r"""Run a model on a diagnostic batch and return the loss the trainer would back-propagate.

The loss is fairseq's label-smoothed cross entropy (docs/methods.md §3.3) *per target token*:

.. math::
    \mathcal{L} = \frac{1}{|\{t: y_t \ne \mathrm{pad}\}|}\sum_{t:\,y_t\ne\mathrm{pad}}
    \Big[(1-\epsilon)(-\log p(y_t)) + \frac{\epsilon}{V}\sum_v -\log p(v)\Big]

Dividing by the number of target tokens is what fairseq does to the gradients before the
optimizer sees them, so gradient norms measured here are on the trainer's scale and do not grow
with the batch size.
"""

from __future__ import annotations

import torch
from torch import nn

from ..loss import label_smoothed_nll_loss  # the trainer's loss, not a second copy
from ..model import forward_batch, model_stacks


def model_loss(model: nn.Module, batch: dict, label_smoothing: float = 0.1) -> torch.Tensor:
    """Per-token label-smoothed loss of ``model`` on ``batch`` (a 0-dim tensor with a graph).

    ``batch`` holds the model's inputs (``src_tokens`` and ``prev_output_tokens`` for an
    encoder-decoder, ``prev_output_tokens`` for a decoder-only model, see
    :func:`b2t_lib.model.forward_batch`) and the ``target`` (batch, tgt_time).
    """
    if "target" not in batch:
        raise KeyError(
            "the batch lacks 'target'; build one with b2t_lib.diagnostics.random_translation_batch "
            "or the trainer's collate"
        )
    logits = forward_batch(model, batch)  # (batch, tgt_time, vocab)
    out = label_smoothed_nll_loss(logits, batch["target"], label_smoothing)
    if int(out.ntokens) == 0:
        raise ValueError("the batch has no non-padding target token, so its loss has no gradient")
    return out.loss / out.ntokens


def layer_of(model: nn.Module, stack: str, layer_index: int) -> nn.Module:
    """``model.<stack>.layers[layer_index]`` (negative indices count from the top), with clear errors."""
    stacks = model_stacks(model)
    if stack not in stacks:
        raise ValueError(f"the model has no {stack!r} stack; it has: {', '.join(stacks) or 'none'}")
    layers = stacks[stack].layers
    if not -len(layers) <= layer_index < len(layers):
        raise IndexError(
            f"layer_index={layer_index} is outside the {len(layers)} {stack} layers "
            f"(use 0..{len(layers) - 1}, or -1 for the top layer)"
        )
    return layers[layer_index]


@torch.no_grad()
def layer_inputs_outputs(model: nn.Module, batch: dict, stack: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(input, output)`` of every layer of one stack of ``model`` (bottom first), from one forward pass on
    ``batch`` in eval mode, taken with forward hooks; the model's train/eval mode is restored afterwards."""
    stacks = model_stacks(model)
    if stack not in stacks:
        raise ValueError(f"the model has no {stack!r} stack; it has: {', '.join(stacks) or 'none'}")
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    handles = [
        layer.register_forward_hook(lambda module, args, output: pairs.append((args[0], output)))
        for layer in stacks[stack].layers
    ]
    was_training = model.training
    model.eval()
    try:
        forward_batch(model, batch)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    if len(pairs) != len(stacks[stack].layers):
        raise RuntimeError(f"expected one call per {stack} layer, the hooks saw {len(pairs)}")
    return pairs
