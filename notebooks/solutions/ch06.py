"""Chapter 06: the label-smoothed loss of a batch, and the inverse-sqrt learning-rate schedule."""

import math

import torch.nn.functional as F


# Exercise 6.1 ------------------------------------------------------------------------------------------------------
def label_smoothed_loss(logits, target, epsilon, pad):
    lprobs = F.log_softmax(logits, dim=-1)  # (B, T, V)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # -log p(y_t), (B, T)
    smooth = -lprobs.sum(-1)  # sum_v -log p(v) over all V words, <pad> included, (B, T)
    keep = target.ne(pad)  # padding positions are not tokens
    vocab = logits.shape[-1]
    return ((1 - epsilon) * nll[keep] + epsilon / vocab * smooth[keep]).sum()  # a sum, not a mean


# Exercise 6.2 ------------------------------------------------------------------------------------------------------
def inverse_sqrt_lr(t, lr, warmup_updates, warmup_init_lr):
    if t < warmup_updates:
        return warmup_init_lr + t * (lr - warmup_init_lr) / warmup_updates  # linear warmup from warmup_init_lr
    return lr * math.sqrt(warmup_updates) / math.sqrt(t)  # continuous at t = W
