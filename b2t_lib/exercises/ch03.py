"""Chapter 03's exercises: measure Figure 3's per-layer gradient norms yourself, and fit the per-layer decay factor."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..diagnostics import default_batch, init_model, layer_gradient_norms
from ._core import Wrong, as_tensor, call, diagnose, exercise, seeded


@exercise("3.1", "per-layer gradient norms with hooks")
def check_layer_gradient_norms(fn) -> str:
    """``fn(model, batch)`` returns ``||dL/dy_l||`` for every decoder layer l of ``model``, bottom layer first, with
    L = ``b2t_lib.diagnostics.model_loss(model, batch)``; it must leave no hook behind."""
    model = init_model("post_ln", 4, 4, d_model=32, seed=31)
    batch = default_batch(batch_size=4, src_len=8, tgt_len=8)
    reference = layer_gradient_norms(model, batch)
    got = as_tensor(call(fn, model, batch, what="your function"), "your norms").flatten()
    left = sum(
        len(layer._forward_hooks) + len(layer._forward_pre_hooks)
        for stack in (model.encoder, model.decoder)
        for layer in stack.layers
    )
    if left:
        raise Wrong(
            f"your function left {left} hook(s) on the model: keep the handle of each register_forward_hook "
            "and call handle.remove() (in a finally: block)"
        )
    expected = torch.as_tensor(reference.output["decoder"], dtype=torch.float64)
    if got.numel() != expected.numel():
        raise Wrong(f"expected one norm per decoder layer ({expected.numel()}), got {got.numel()}")
    mistakes = [
        (expected.flip(0), "your list is top layer first; index 0 must be the bottom layer"),
        (
            torch.as_tensor(reference.output["encoder"], dtype=torch.float64),
            "these are the encoder's layers; measure the decoder's",
        ),
        (
            torch.as_tensor(reference.parameters["decoder"], dtype=torch.float64),
            "these are the norms of the layers' parameter gradients; measure the gradient of each layer's output y_l",
        ),
    ]
    try:
        diagnose(got, expected, mistakes, "your norms", rtol=1e-4, atol=0.0)
    except Wrong:
        ratio = got / expected
        if torch.all(ratio > 0) and float(ratio.max() / ratio.min()) < 1.001:
            raise Wrong(
                f"your norms are the reference times {float(ratio.mean()):.4g} at every layer: take the "
                "Frobenius norm of the whole (batch, time, d_model) gradient of the per-token loss model_loss, "
                "with no other normalization"
            ) from None
        raise
    return f"your profile matches layer_gradient_norms (bottom/top = {float(got[0] / got[-1]):.3f})"


@exercise("3.2", "the per-layer decay factor from a depth sweep")
def check_decay_factor(fn) -> str:
    """``fn(depths, ratios)`` returns the factor c of a geometric law ``ratio ~ A c^(N-1)``, fitted to every point."""
    generator = seeded(32)
    depths = np.array([2, 6, 12, 18, 24])
    true_c, offset = 0.8, 1.6  # the top layer's own factor makes A != 1: a single point gives a biased c
    noise = np.exp(0.05 * torch.randn(len(depths), generator=generator, dtype=torch.float64).numpy())
    ratios = offset * true_c ** (depths - 1.0) * noise
    slope, _ = np.polyfit(depths, np.log(ratios), 1)
    expected = math.exp(slope)
    got = call(fn, depths.copy(), ratios.copy(), what="your function")
    got = as_tensor(got, "your factor")
    if got.numel() != 1:
        raise Wrong(f"your factor must be one number, got shape {tuple(got.shape)}")
    deepest = len(depths) - 1
    linear_slope = np.polyfit(depths, ratios, 1)[0]
    mistakes = [
        (
            torch.tensor(ratios[deepest] ** (1 / (depths[deepest] - 1))),
            "you took c from the deepest point alone, (g_1/g_N)^(1/(N-1)); the ratio is A c^(N-1) with A != 1, so "
            "fit the slope of log(ratio) against N over all depths",
        ),
        (
            torch.tensor(ratios[deepest] ** (1 / depths[deepest])),
            "you took c from the deepest point alone; fit the slope of log(ratio) against N over all depths",
        ),
        (torch.tensor(slope), "that is the slope of log(ratio); the factor is c = exp(slope)"),
        (
            torch.tensor(10 ** np.polyfit(depths, np.log(ratios), 1)[0]),
            "the slope is in natural-log units, so c = exp(slope), not 10**slope",
        ),
        (
            torch.tensor(math.exp(linear_slope)),
            "you fitted the ratios on a linear scale; a geometric law is a straight line in log(ratio)",
        ),
        (
            torch.tensor(1 + linear_slope),
            "you fitted the ratios on a linear scale; a geometric law is a straight line in log(ratio)",
        ),
    ]
    diagnose(
        got.reshape(()),
        torch.tensor(expected),
        mistakes,
        "your factor",
        rtol=1e-3,
        atol=0.0,
        hint="fit log(ratio) = log(A) + (N - 1) log(c) by least squares, e.g. numpy.polyfit",
    )
    return f"c = {float(got):.3f} (the data were drawn with c = {true_c})"
