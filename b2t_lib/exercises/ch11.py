r"""Chapter 11's exercises: RealFormer's score stream, and T-Fixup's initialization factors.

11.1 (RealFormer, He et al. 2021; docs/methods.md §2.4): layer :math:`l` attends with
:math:`S_l=QK^\top/\sqrt{d_{head}}+S_{l-1}` (:math:`S_0=0`), softmax over :math:`S_l`, or over :math:`S_l/l` with the
running-mean option.

11.2 (T-Fixup, Huang et al. 2020; docs/methods.md §2.3): with :math:`N` encoder and :math:`M` decoder layers the
encoder's ``fc1``, ``fc2`` and ``out_proj`` are multiplied by :math:`0.67N^{-1/4}`, the decoder's by
:math:`(9M)^{-1/4}`, each ``v_proj`` by the same factor times :math:`\sqrt2`, and a shared embedding by
:math:`(9N)^{-1/4}`.
"""

from __future__ import annotations

import math

import torch

from ..baselines.realformer import RealFormerAttention
from ..baselines.tfixup import tfixup_embedding_factor, tfixup_layer_factor
from ._core import Wrong, as_tensor, call, diagnose, exercise, number, seeded


def score_cases():
    """Per-layer raw scores ``(L, heads, T, S)`` (``Q K^T / sqrt(d_head)`` of each layer) and the q, k behind them."""
    generator = seeded(111)
    for layers, heads, time, d_head in ((4, 2, 5, 8), (12, 3, 4, 4)):
        q = torch.randn(layers, 1, heads, time, d_head, generator=generator, dtype=torch.float64)
        k = torch.randn(layers, 1, heads, time, d_head, generator=generator, dtype=torch.float64)
        yield q, k, d_head


def _library_logits(q, k, d_head, running_mean):
    """What RealFormerAttention puts into the softmax, layer after layer, sharing one score stream."""
    layer = RealFormerAttention(q.shape[2] * d_head, q.shape[2])
    layer.running_mean = running_mean
    state, logits = {}, []
    v = torch.zeros_like(q[0])
    for l in range(q.shape[0]):
        layer.attend(q[l], k[l], v, None, False, 0.0, state)
        logits.append(state["scores"][0] / (state["depth"] if running_mean else 1))
    return torch.stack(logits)  # (L, heads, T, S)


def score_mistakes(raw, running_mean):
    layers = raw.shape[0]
    depth = torch.arange(1, layers + 1, dtype=raw.dtype).view(-1, 1, 1, 1)
    summed = raw.cumsum(0)
    yield raw, "that is plain attention: RealFormer adds the previous layer's scores S_{l-1} before the softmax"
    if running_mean:
        yield summed, "with the running-mean option the softmax reads S_l / l, the mean of the scores so far"
        yield summed / layers, "divide by l, the layers so far, not by the total depth"
    else:
        yield summed / depth, "that is the running-mean option (off by default): the softmax reads S_l itself"
    probs = torch.softmax(raw, dim=-1).cumsum(0)
    yield probs, "RealFormer adds the raw scores before the softmax, not the attention probabilities after it"


@exercise("11.1", "RealFormer's score stream")
def check_realformer_logits(fn) -> str:
    """``fn(raw_scores, running_mean)`` returns what each layer's softmax reads: ``raw_scores`` (L, heads, T, S) holds
    every layer's own ``Q K^T / sqrt(d_head)``; the answer has the same shape."""
    for q, k, d_head in score_cases():
        raw = (q @ k.transpose(-1, -2) / math.sqrt(d_head))[:, 0]  # (L, heads, T, S)
        for running_mean in (False, True):
            got = call(fn, raw.clone(), running_mean, what="your function")
            expected = _library_logits(q, k, d_head, running_mean)
            diagnose(
                got,
                expected,
                score_mistakes(raw, running_mean),
                f"your logits ({raw.shape[0]} layers, running_mean={running_mean})",
                rtol=1e-9,
            )
    return "matches RealFormerAttention's score stream, with and without the running mean"


TFIXUP_PARTS = ("encoder fc", "encoder v_proj", "decoder fc", "decoder v_proj", "embedding")
TFIXUP_DEPTHS = ((6, 6), (18, 18), (12, 6), (100, 100))


def tfixup_reference(n: int, m: int) -> torch.Tensor:
    enc, dec = tfixup_layer_factor("encoder", n), tfixup_layer_factor("decoder", m)
    return number([enc, enc * math.sqrt(2), dec, dec * math.sqrt(2), tfixup_embedding_factor(n)])


def tfixup_mistakes(n: int, m: int):
    enc, dec = 0.67 * n**-0.25, (9 * m) ** -0.25
    yield (
        number([enc, enc, dec, dec, (9 * n) ** -0.25]),
        "v_proj gets the factor times sqrt(2): it undoes fairseq's 1/sqrt(2) Xavier gain on v_proj",
    )
    yield (
        number([(9 * n) ** -0.25, (9 * n) ** -0.25 * math.sqrt(2), dec, dec * math.sqrt(2), (9 * n) ** -0.25]),
        "the encoder's layers use 0.67 N^(-1/4); (9N)^(-1/4) is for the embedding",
    )
    yield (
        number([enc, enc * math.sqrt(2), dec, dec * math.sqrt(2), dec]),
        "a shared embedding is scaled once, by the encoder's factor (9N)^(-1/4)",
    )
    yield (
        number(
            [
                0.67 * m**-0.25,
                0.67 * m**-0.25 * math.sqrt(2),
                (9 * n) ** -0.25,
                (9 * n) ** -0.25 * math.sqrt(2),
                (9 * n) ** -0.25,
            ]
        ),
        "N and M are swapped: the encoder's factor uses the encoder's depth N",
    )


@exercise("11.2", "T-Fixup's initialization factors")
def check_tfixup_factors(fn) -> str:
    """``fn(encoder_layers, decoder_layers)`` returns the five factors in the order of ``TFIXUP_PARTS``: encoder
    fc1/fc2/out_proj, encoder v_proj, decoder fc1/fc2/out_proj, decoder v_proj, the shared embedding."""
    for n, m in TFIXUP_DEPTHS:
        got = as_tensor(call(fn, n, m, what="your function"), f"your factors for {n}L-{m}L")
        if got.numel() != len(TFIXUP_PARTS):
            raise Wrong(f"return {len(TFIXUP_PARTS)} numbers ({', '.join(TFIXUP_PARTS)}); got shape {tuple(got.shape)}")
        diagnose(
            got.reshape(-1),
            tfixup_reference(n, m),
            tfixup_mistakes(n, m),
            f"your factors for {n}L-{m}L ({', '.join(TFIXUP_PARTS)})",
            rtol=1e-6,
        )
    return "matches tfixup_layer_factor and tfixup_embedding_factor (b2t_lib/baselines/tfixup.py)"
