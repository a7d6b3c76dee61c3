r"""Chapter 10's exercises: DeepNet's constants at any depth, and the word dropout of Appendix C's recipe.

10.1 (DeepNet, Wang et al. 2022, its Table 1; docs/methods.md §2.1): the shortcut weight :math:`\alpha` and the
initialization scale :math:`\beta` of each stack. Encoder-decoder with :math:`N` encoder and :math:`M` decoder layers:
encoder :math:`\alpha=0.81(N^4M)^{1/16}`, :math:`\beta=0.87(N^4M)^{-1/16}`; decoder :math:`\alpha=(3M)^{1/4}`,
:math:`\beta=(12M)^{-1/4}`. A stack alone (encoder-only or decoder-only, :math:`L` layers): :math:`\alpha=(2L)^{1/4}`,
:math:`\beta=(8L)^{-1/4}`.

10.2 (Appendix C.1; docs/methods.md §1.7): word dropout zeroes whole token vectors of the scaled embedding plus
positions with probability :math:`p`, without rescaling, and never the decoder's first position.
"""

from __future__ import annotations

import torch

from ..baselines.deepnet import deepnet_constants
from ..embedding import word_dropout as library_word_dropout
from ..variants import StackInfo
from ._core import Wrong, as_tensor, call, diagnose, exercise, number, seeded

DEPTHS = ((6, 6), (18, 18), (100, 100), (12, 6), (6, 12))  # (encoder layers N, decoder layers M)


def _reference(role: str, n: int, m: int) -> tuple[float, float]:
    if role == "encoder":
        return deepnet_constants(StackInfo(role="encoder", num_layers=n, encoder_layers=n, decoder_layers=m))
    if role == "decoder":
        return deepnet_constants(StackInfo(role="decoder", num_layers=m, encoder_layers=n, decoder_layers=m))
    return deepnet_constants(StackInfo(role="lm", num_layers=m, encoder_layers=0, decoder_layers=m))


def deepnet_mistakes(role: str, n: int, m: int):
    own = n if role == "encoder" else m  # the stack's own depth
    alone = number([(2 * own) ** 0.25, (8 * own) ** -0.25])
    if role == "encoder":
        yield (
            alone,
            "that is the row of a stack alone; an encoder with a decoder uses 0.81 (N^4 M)^(1/16), "
            "0.87 (N^4 M)^(-1/16)",
        )
        yield (
            number([0.81 * (n * m**4) ** (1 / 16), 0.87 * (n * m**4) ** (-1 / 16)]),
            "N^4 M, not N M^4: the encoder's own depth N carries the 4th power",
        )
        yield (
            number([0.81 * (n**4 * m) ** (1 / 16), 1.15 * (n**4 * m) ** (-1 / 16)]),
            "that is torchscale's factor 1.15 for beta; the DeepNet paper (and this course's default) has 0.87",
        )
        yield (
            number([(n**4 * m) ** (1 / 16), (n**4 * m) ** (-1 / 16)]),
            "the constants 0.81 (alpha) and 0.87 (beta) are missing",
        )
    elif role == "decoder":
        yield (
            alone,
            "that is the row of a decoder-only model; a decoder with cross-attention uses (3M)^(1/4), (12M)^(-1/4)",
        )
        yield (
            number([(3 * n) ** 0.25, (12 * n) ** -0.25]),
            "the decoder's constants use its own depth M, not the encoder's N",
        )
    else:
        yield (
            number([(3 * m) ** 0.25, (12 * m) ** -0.25]),
            "that is the decoder of an encoder-decoder; a decoder-only model uses (2M)^(1/4), (8M)^(-1/4)",
        )


@exercise("10.1", "DeepNet's alpha and beta")
def check_deepnet_constants(fn) -> str:
    """``fn(role, encoder_layers, decoder_layers)`` returns ``(alpha, beta)`` for ``role`` "encoder" or "decoder" of an
    encoder-decoder, or "lm" for a decoder-only model (``encoder_layers`` = 0)."""
    for role in ("encoder", "decoder", "lm"):
        for n, m in DEPTHS:
            n_here = 0 if role == "lm" else n
            got = as_tensor(call(fn, role, n_here, m, what="your function"), f"your (alpha, beta) for {role}")
            if got.numel() != 2:
                raise Wrong(f"return two numbers (alpha, beta); got shape {tuple(got.shape)} for {role}")
            diagnose(
                got.reshape(2),
                number(list(_reference(role, n, m))),
                deepnet_mistakes(role, n, m),
                f"your (alpha, beta) for the {role} of {n_here}L-{m}L",
                rtol=1e-6,
            )
    return "matches deepnet_constants (b2t_lib/baselines/deepnet.py) for every stack and depth"


def dropout_cases():
    generator = seeded(102)
    for batch, time, d, rate, keep_first in ((4, 9, 8, 0.1, False), (3, 7, 5, 0.3, True), (2, 12, 4, 0.5, True)):
        yield torch.randn(batch, time, d, generator=generator, dtype=torch.float64), rate, keep_first


def dropout_mistakes(embedded, rate, keep_first, seed):
    torch.manual_seed(seed)
    keep = (torch.rand(embedded.shape[:2]) >= rate).unsqueeze(-1).to(embedded.dtype)
    forced = keep.clone()
    if keep_first:
        forced[:, 0] = 1.0
    yield (
        embedded * forced / (1 - rate),
        "no rescaling: word dropout zeroes whole tokens and leaves the others as they are",
    )
    if keep_first:
        yield embedded * keep, "the decoder's first position (its <eos>/<bos> prefix) is never dropped: keep_first"
    yield embedded * (1 - forced), "you kept the tokens you should drop: keep where rand >= rate"
    torch.manual_seed(seed)
    elementwise = (torch.rand(embedded.shape) >= rate).to(embedded.dtype)
    if keep_first:
        elementwise[:, 0] = 1.0
    yield (
        embedded * elementwise,
        "that drops single numbers, like nn.Dropout; word dropout zeroes whole token vectors (one draw per token)",
    )


@exercise("10.2", "word dropout")
def check_word_dropout(fn) -> str:
    """``fn(embedded, rate, keep_first)`` returns the (batch, time, d) input with whole tokens zeroed; it draws its
    random numbers with one ``torch.rand((batch, time))`` call, as the library does."""
    for index, (embedded, rate, keep_first) in enumerate(dropout_cases()):
        seed = 1000 + index
        torch.manual_seed(seed)
        got = call(fn, embedded.clone(), rate, keep_first, what="your function")
        torch.manual_seed(seed)
        expected = library_word_dropout(embedded, rate, training=True, keep_first=keep_first)
        diagnose(
            got,
            expected,
            dropout_mistakes(embedded, rate, keep_first, seed),
            f"your output (rate {rate}, keep_first={keep_first})",
            rtol=1e-12,
            atol=0.0,
            hint="draw one torch.rand((batch, time)) and keep a token where it is >= rate",
        )
    return "matches b2t_lib.embedding.word_dropout, which the deep100 recipe turns on at rate 0.1"
