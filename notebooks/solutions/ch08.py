"""Chapter 08: the adaptive softmax's parameter count, and perplexity from the model's log-probabilities."""

import torch


# Exercise 8.1 ------------------------------------------------------------------------------------------------------
def adaptive_softmax_params(vocab_size, d_model, cutoff, factor):
    bounds = [0, *cutoff, vocab_size]
    sizes = [end - start for start, end in zip(bounds, bounds[1:])]  # words per band
    dims = [int(d_model // factor**i) for i in range(len(sizes))]  # d_i = floor(d / factor^i)
    total = d_model * (sizes[0] + len(sizes) - 1)  # head: band 0's words and one cluster logit per tail
    for size, dim in zip(sizes[1:], dims[1:]):
        total += d_model * dim + dim * size  # tail i: projection d -> d_i, then its words
    return total


# Exercise 8.2 ------------------------------------------------------------------------------------------------------
def perplexity(log_probs, target, pad):
    log_p = log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # log p(y_t), (B, T)
    keep = target.ne(pad)
    nll = -log_p[keep].sum() / keep.sum()  # mean NLL in nats per token
    return torch.exp(nll)
