"""Chapter 10: DeepNet's alpha and beta, and word dropout."""

import torch


# Exercise 10.1 -----------------------------------------------------------------------------------------------------
def deepnet_alpha_beta(role, encoder_layers, decoder_layers):
    n, m = encoder_layers, decoder_layers
    if role == "encoder" and m > 0:  # the encoder of an encoder-decoder
        return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)
    if role == "decoder":  # a decoder with cross-attention
        return (3 * m) ** 0.25, (12 * m) ** -0.25
    own = n if role == "encoder" else m  # a stack alone: encoder-only or decoder-only
    return (2 * own) ** 0.25, (8 * own) ** -0.25


# Exercise 10.2 -----------------------------------------------------------------------------------------------------
def word_dropout(embedded, rate, keep_first):
    keep = torch.rand(embedded.shape[:2]) >= rate  # (batch, time): one draw per token
    if keep_first:
        keep[:, 0] = True  # the decoder's <eos>/<bos> prefix stays
    return embedded * keep.unsqueeze(-1).to(embedded.dtype)  # whole vectors, no 1/(1 - rate)
