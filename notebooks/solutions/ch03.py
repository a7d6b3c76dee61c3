"""Chapter 03: per-layer gradient norms with hooks, and the per-layer decay factor from a depth sweep."""

import math

import numpy as np
import torch

from b2t_lib.diagnostics import model_loss


# Exercise 3.1 ------------------------------------------------------------------------------------------------------
def decoder_gradient_norms(model, batch):
    outputs = []
    handles = [
        layer.register_forward_hook(lambda module, args, output: outputs.append(output))
        for layer in model.decoder.layers
    ]
    try:
        loss = model_loss(model, batch)
    finally:
        for handle in handles:
            handle.remove()
    grads = torch.autograd.grad(loss, outputs)
    return [float(g.norm()) for g in grads]  # bottom layer first


# Exercise 3.2 ------------------------------------------------------------------------------------------------------
def decay_factor(depths, ratios):
    slope, _ = np.polyfit(depths, np.log(ratios), 1)  # log ratio = log A + (N - 1) log c
    return math.exp(slope)
