"""Chapter 04: the layer similarity matrix, and Pre-LN's similarity predicted from the norms of its stream."""

import torch


# Exercise 4.1 ------------------------------------------------------------------------------------------------------
def similarity_matrix(outputs, padding_mask):
    real = ~padding_mask  # (batch, time)
    units = torch.stack([torch.nn.functional.normalize(y[real], dim=-1) for y in outputs])  # (layers, tokens, d)
    return torch.einsum("itd,jtd->ijt", units, units).mean(dim=-1)  # (layers, layers)


# Exercise 4.2 ------------------------------------------------------------------------------------------------------
def predicted_similarity(norm_i, norm_final):
    # y_N = y_i + (later branches), each orthogonal to y_i: y_i . y_N = ||y_i||^2
    return norm_i / norm_final
