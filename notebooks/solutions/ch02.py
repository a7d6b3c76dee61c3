"""Chapter 02: the LayerNorm Jacobian for any gamma, and the gradient a LayerNorm keeps over a batch."""

import math

import torch


# Exercise 2.1 ------------------------------------------------------------------------------------------------------
def ln_jacobian(x, gamma, eps=1e-5):
    d = x.numel()
    sigma = torch.sqrt(x.var(unbiased=False) + eps)  # LayerNorm's biased variance, eps inside the root
    n = (x - x.mean()) / sigma
    projection = torch.eye(d, dtype=x.dtype) - torch.ones(d, d, dtype=x.dtype) / d - torch.outer(n, n) / d
    return torch.diag(gamma) @ projection / sigma  # row i carries gamma_i


# Exercise 2.2 ------------------------------------------------------------------------------------------------------
def ln_gradient_factor(sigmas, d):
    # token t: ||P g_t||^2 / sigma_t^2 with E||P g_t||^2 = (d-2)/d ||g_t||^2; squared norms add over tokens
    return math.sqrt((d - 2) / d) * float(sigmas.pow(-2).mean().sqrt())
