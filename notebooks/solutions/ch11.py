"""Chapter 11: RealFormer's score stream, and T-Fixup's initialization factors."""

import math

import torch


# Exercise 11.1 -----------------------------------------------------------------------------------------------------
def realformer_logits(raw_scores, running_mean):
    summed = raw_scores.cumsum(dim=0)  # S_l = raw_l + S_{l-1}, (L, heads, T, S)
    if not running_mean:
        return summed
    depth = torch.arange(1, raw_scores.shape[0] + 1, dtype=raw_scores.dtype).view(-1, 1, 1, 1)
    return summed / depth  # S_l / l


# Exercise 11.2 -----------------------------------------------------------------------------------------------------
def tfixup_factors(encoder_layers, decoder_layers):
    encoder = 0.67 * encoder_layers**-0.25
    decoder = (9 * decoder_layers) ** -0.25
    embedding = (9 * encoder_layers) ** -0.25  # shared: scaled once, by the encoder's factor
    return [encoder, encoder * math.sqrt(2), decoder, decoder * math.sqrt(2), embedding]
