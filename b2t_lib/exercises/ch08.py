r"""Chapter 08's exercises: the adaptive softmax's parameter count, and perplexity from the model's log-probabilities.

8.1: the head has :math:`d\,(c_1 + K - 1)` weights, tail band :math:`i` has :math:`d\,d_i + d_i\,(c_{i+1} - c_i)`
with :math:`d_i = \lfloor d / \text{factor}^i \rfloor`.
8.2 (Table 4): :math:`\mathrm{PPL} = \exp\big(-\frac{1}{L}\sum_{t:\,y_t \ne \text{pad}} \log p(y_t)\big)`.
"""

from __future__ import annotations

import math

import torch

from ..adaptive import AdaptiveSoftmax
from ..special_tokens import PAD
from ._core import Wrong, as_tensor, call, diagnose, exercise, number, seeded

SOFTMAX_CASES = (  # (vocab size V, d_model, cutoffs without V, factor)
    (267744, 1024, (20000, 60000), 4.0),  # WikiText-103 (Table 4)
    (1000, 64, (200,), 4.0),
    (5000, 96, (100, 600, 2000), 2.0),
    (3000, 48, (300, 1200), 3.0),
)


def library_count(vocab: int, d_model: int, cutoff, factor: float) -> int:
    """Parameters of the library's untied adaptive softmax, built on the meta device (no memory)."""
    with torch.device("meta"):
        softmax = AdaptiveSoftmax(vocab, d_model, list(cutoff), factor=factor)
    return sum(p.numel() for p in softmax.parameters())


def count_mistakes(vocab: int, d_model: int, cutoff, factor: float):
    bounds = [0, *cutoff, vocab]
    sizes = [end - start for start, end in zip(bounds, bounds[1:])]
    tails = len(sizes) - 1

    def count(clusters=True, projections=True, dims=None):
        dims = dims or [int(d_model // factor**i) for i in range(len(sizes))]
        total = d_model * (sizes[0] + (tails if clusters else 0))
        for size, dim in zip(sizes[1:], dims[1:]):
            total += size * dim + (d_model * dim if projections else 0)
        return number(float(total))

    yield count(clusters=False), "the head also scores one cluster per tail band: d (c_1 + K - 1) parameters"
    yield count(projections=False), "each tail band first projects h from d down to d_i: d d_i more parameters"
    yield count(False, False), "the head's cluster logits and the tails' projections d -> d_i are both missing"
    yield number(float(vocab * d_model)), "that is a full softmax (V d): the bands have smaller dimensions"
    yield count(dims=[d_model] * len(sizes)), "band i has dimension d / factor^i, not d"
    yield (
        count(dims=[d_model] + [int(d_model // (factor * i)) for i in range(1, len(sizes))]),
        "band i's dimension is d / factor^i (a power), not d / (factor i)",
    )


@exercise("8.1", "the adaptive softmax's parameter count")
def check_adaptive_params(fn) -> str:
    """``fn(vocab_size, d_model, cutoff, factor)`` returns the number of parameters of an adaptive softmax with
    untied weights (``cutoff`` without ``vocab_size``, e.g. ``(20000, 60000)``; b2t_lib/adaptive.py)."""
    for vocab, d_model, cutoff, factor in SOFTMAX_CASES:
        got = as_tensor(call(fn, vocab, d_model, cutoff, factor, what="your function"), "your count")
        if got.numel() != 1:
            raise Wrong(f"your count must be one number, got shape {tuple(got.shape)}")
        expected = number(float(library_count(vocab, d_model, cutoff, factor)))
        what = f"your count (V = {vocab}, d = {d_model}, cutoff = {cutoff}, factor = {factor})"
        diagnose(got.reshape(()), expected, count_mistakes(vocab, d_model, cutoff, factor), what, rtol=0, atol=0.5)
    vocab, d_model, cutoff, factor = SOFTMAX_CASES[0]
    adaptive, full = library_count(vocab, d_model, cutoff, factor), vocab * d_model
    return (
        f"WikiText-103's adaptive softmax has {adaptive / 1e6:.1f}M parameters; a full softmax would have "
        f"{full / 1e6:.1f}M"
    )


def perplexity_cases():
    """``(softmax, hidden (B, T, d), target (B, T) with padding)``: small random adaptive softmaxes, eval mode."""
    generator = seeded(81)
    for vocab, d_model, cutoff, batch, time in ((40, 16, (10, 25), 3, 7), (30, 8, (12,), 2, 5)):
        torch.manual_seed(int(torch.randint(0, 2**31, (), generator=generator)))
        softmax = AdaptiveSoftmax(vocab, d_model, list(cutoff), factor=2.0).double().eval()
        hidden = torch.randn(batch, time, d_model, generator=generator, dtype=torch.float64)
        target = torch.randint(PAD + 1, vocab, (batch, time), generator=generator)
        target[-1, time - 2 :] = PAD
        yield softmax, hidden, target


def perplexity_mistakes(log_p_target, keep):
    nats = -log_p_target[keep]
    mean = nats.mean()
    yield torch.exp(mean / math.log(2)), "exp(NLL in bits) is not the perplexity: PPL = 2^(bits) = e^(nats)"
    yield 2**mean, "the log-probabilities are in nats (natural log): PPL = e^(NLL), or 2^(NLL / ln 2)"
    yield torch.exp(-log_p_target.mean()), "the padding positions are not tokens: average over y_t != pad only"
    yield nats.exp().mean(), "PPL is the exponent of the mean NLL, not the mean of the per-token perplexities"
    yield torch.exp(-mean), "that is 1 / PPL: the NLL is minus the log-probability"
    yield mean, "that is the mean NLL itself; the perplexity is its exponent"


@exercise("8.2", "perplexity from the model's log-probabilities")
def check_perplexity(fn) -> str:
    """``fn(log_probs, target, pad)`` returns the perplexity of a batch: ``log_probs`` (B, T, V) are the model's
    natural-log probabilities, ``target`` (B, T) the next tokens, ``pad`` the padding id (b2t_lib/train/lm_task.py:
    PPL = exp(NLL / L) over the non-padding tokens)."""
    for softmax, hidden, target in perplexity_cases():
        with torch.no_grad():
            log_probs = softmax.log_prob(hidden)  # (B, T, V), what the learner sees
            log_p_target = softmax.target_log_prob(hidden, target)  # (B, T), what the evaluation uses
        keep = target.ne(PAD)
        expected = torch.exp(-log_p_target[keep].sum() / keep.sum())
        got = as_tensor(call(fn, log_probs.clone(), target.clone(), PAD, what="your function"), "your perplexity")
        if got.numel() != 1:
            raise Wrong(f"your perplexity must be one number, got shape {tuple(got.shape)}")
        what = f"your perplexity (B, T, V = {tuple(log_probs.shape)})"
        diagnose(got.reshape(()), expected, perplexity_mistakes(log_p_target, keep), what, rtol=1e-6)
    return "matches exp(mean NLL) from AdaptiveSoftmax.target_log_prob, the evaluation's perplexity (Table 4)"
