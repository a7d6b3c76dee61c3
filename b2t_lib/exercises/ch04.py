"""Chapter 04's exercises: Figure 5's similarity matrix, and Pre-LN's similarity predicted from the stream's norms."""

from __future__ import annotations

import torch

from ..diagnostics import cosine_similarity_matrix, default_batch, init_model
from ._core import as_tensor, call, diagnose, exercise, seeded


@exercise("4.1", "the layer similarity matrix")
def check_layer_similarity(fn) -> str:
    """``fn(outputs, padding_mask)``: ``outputs`` is a list of (batch, time, d) layer outputs, ``padding_mask`` is
    (batch, time) and True at padding; returns the (layers, layers) matrix of mean per-token cosines over real
    tokens."""
    generator = seeded(41)
    batch, time, d, layers = 3, 7, 8, 4
    stream = [torch.randn(batch, time, d, generator=generator, dtype=torch.float64)]
    for _ in range(layers - 1):  # each layer adds to the previous one, so the similarities are far from 0
        stream.append(stream[-1] + 0.8 * torch.randn(batch, time, d, generator=generator, dtype=torch.float64))
    lengths = torch.tensor([7, 4, 2])
    padding_mask = torch.arange(time)[None, :] >= lengths[:, None]  # (batch, time)
    outputs = [y.clone() for y in stream]
    for y in outputs:  # padding positions hold unrelated vectors, as a model's padded positions do
        y[padding_mask] = 3.0 * torch.randn(int(padding_mask.sum()), d, generator=generator, dtype=torch.float64)
    real = ~padding_mask
    expected = torch.as_tensor(cosine_similarity_matrix(outputs, real))
    got = call(fn, [y.clone() for y in outputs], padding_mask.clone(), what="your function")
    everything = torch.ones_like(real)
    flat = torch.stack([y[real].flatten() for y in outputs])
    flat_units = flat / flat.norm(dim=1, keepdim=True)
    dots = torch.stack([torch.stack([(a[real] * b[real]).sum(-1).mean() for b in outputs]) for a in outputs])
    mistakes = [
        (
            torch.as_tensor(cosine_similarity_matrix(outputs, everything)),
            "you averaged over the padding positions too; average only where padding_mask is False",
        ),
        (
            torch.as_tensor(cosine_similarity_matrix(outputs, padding_mask)),
            "you averaged over the padding positions only: padding_mask is True at padding, so keep ~padding_mask",
        ),
        (
            flat_units @ flat_units.T,
            "that is the cosine between whole flattened outputs; S_ij averages the cosines of each token's two vectors",
        ),
        (dots, "those are dot products; divide by both vectors' norms to get cosines"),
    ]
    diagnose(got, expected, mistakes, "your matrix", rtol=1e-6, atol=1e-9)
    return "your matrix matches layer_output_similarity's"


@exercise("4.2", "Pre-LN's similarity from the norms of its stream")
def check_similarity_prediction(fn) -> str:
    """``fn(norm_i, norm_final)`` predicts, token by token, the cosine between y_i and y_N of a Pre-LN stack at
    initialization from the two norms alone, assuming every later branch adds a vector orthogonal to y_i."""
    generator = seeded(42)
    norm_i = 1.0 + 4.0 * torch.rand(50, generator=generator, dtype=torch.float64)
    norm_final = norm_i * (1.0 + 3.0 * torch.rand(50, generator=generator, dtype=torch.float64))
    got = as_tensor(call(fn, norm_i.clone(), norm_final.clone(), what="your function"), "your prediction")
    expected = norm_i / norm_final
    mistakes = [
        (
            expected**2,
            "that is the ratio of squared norms; y_i . y_N = ||y_i||^2, so cos = ||y_i||^2 / (||y_i|| ||y_N||) = "
            "||y_i|| / ||y_N||",
        ),
        (1 / expected, "a cosine cannot exceed 1: the ratio is ||y_i|| / ||y_N||, the smaller norm on top"),
        (expected.sqrt(), "no square root: cos = ||y_i||^2 / (||y_i|| ||y_N||) = ||y_i|| / ||y_N||"),
    ]
    diagnose(got.flatten(), expected, mistakes, "your prediction", rtol=1e-6, atol=1e-9)
    # and against a measurement: a fresh 6L Pre-LN encoder on the course's batch
    model = init_model("pre_ln", 6, 6, d_model=64, seed=1).eval()
    batch = default_batch()
    outputs = []
    handles = [
        layer.register_forward_hook(lambda module, args, out: outputs.append(out)) for layer in model.encoder.layers
    ]
    try:
        with torch.no_grad():
            model(batch["src_tokens"], batch["prev_output_tokens"])
    finally:
        for handle in handles:
            handle.remove()
    real = batch["src_tokens"].ne(model.cfg.pad_idx)
    final = outputs[-1][real].double()
    predicted = [
        float(
            as_tensor(
                call(fn, y[real].double().norm(dim=-1), final.norm(dim=-1), what="your function"), "your prediction"
            ).mean()
        )
        for y in outputs[:3]
    ]
    measured = torch.as_tensor(cosine_similarity_matrix(outputs, real))[:3, -1].tolist()
    return (
        "6L Pre-LN at initialization, layers 1-3 against layer 6: predicted "
        + ", ".join(f"{p:.2f}" for p in predicted)
        + "; measured "
        + ", ".join(f"{m:.2f}" for m in measured)
    )
