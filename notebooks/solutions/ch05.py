"""Chapter 05: the B2T wiring, the decoder's Eq. 8 from its parts, and the critical width of B2T w/o LN."""

import math

import torch

from b2t_lib.variants import b2t_no_ln_alpha


# Exercise 5.1 ------------------------------------------------------------------------------------------------------
def b2t_forward(x, sublayers):
    x_inp = x
    for branch, norm in sublayers[:-1]:
        x = norm(x + branch(x))  # Eq. 6 (and the decoder's cross-attention)
    branch, norm = sublayers[-1]
    return norm(x_inp + x + branch(x))  # Eq. 5


# Exercise 5.2 ------------------------------------------------------------------------------------------------------
def decoder_eq8(J_sa, J_ln_sa, J_ca, J_ln_ca, J_ffn):
    I = torch.eye(J_sa.shape[0], dtype=J_sa.dtype)
    dx_ffn = J_ln_ca @ (I + J_ca) @ J_ln_sa @ (I + J_sa)  # x_ffn = LN_CA(h1 + CA(h1)), h1 = LN_SA(x + SA(x))
    return I + dx_ffn + J_ffn @ dx_ffn  # Eq. 8 for a decoder layer


# Exercise 5.3 ------------------------------------------------------------------------------------------------------
def critical_width(num_layers, kappa):
    alpha = b2t_no_ln_alpha(num_layers)
    # (alpha + beta)^2 + beta^2 kappa^2 = 1  <=>  (1 + kappa^2) beta^2 + 2 alpha beta + alpha^2 - 1 = 0
    beta = (math.sqrt(1 + kappa**2 * (1 - alpha**2)) - alpha) / (1 + kappa**2)
    return beta**-5  # beta = d^-0.2 (Eq. 11)
