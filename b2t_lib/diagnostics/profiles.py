"""One call from (variant, depth, width) to a gradient profile at initialization.

Notebooks 03 and 05 and the interactive explorer compare many configurations; each one is a
freshly initialized :class:`~b2t_lib.model.EncoderDecoder` (dropout off, so the profile is a
deterministic function of the seed) measured on the fixed random batch of
:func:`~b2t_lib.diagnostics.batches.random_translation_batch`.
"""

from __future__ import annotations

from ..config import ModelConfig
from ..model import EncoderDecoder
from ..utils import seed_everything
from .batches import random_translation_batch
from .layer_gradients import LayerGradientNorms, layer_gradient_norms

# The diagnostic batch of the course: 8 sentence pairs of up to 16 tokens, about a quarter padding.
DEFAULT_BATCH = dict(vocab_size=1000, batch_size=8, src_len=16, tgt_len=16, seed=0)


def init_model(
    variant: str,
    encoder_layers: int,
    decoder_layers: int,
    d_model: int = 64,
    n_heads: int = 4,
    d_ff: int | None = None,
    vocab_size: int = DEFAULT_BATCH["vocab_size"],
    seed: int = 1,
    **config,
) -> EncoderDecoder:
    """A freshly initialized encoder-decoder with dropout 0 (``d_ff`` defaults to ``4 * d_model``)."""
    seed_everything(seed)
    cfg = ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_heads=n_heads,
        d_ff=d_ff or 4 * d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        variant=variant,
        dropout=0.0,
        **config,
    )
    return EncoderDecoder(cfg)


def default_batch(**overrides) -> dict:
    """The course's fixed diagnostic batch (``DEFAULT_BATCH``, with ``overrides``)."""
    return random_translation_batch(**{**DEFAULT_BATCH, **overrides})


def init_gradient_profile(
    variant: str,
    encoder_layers: int = 18,
    decoder_layers: int = 18,
    d_model: int = 64,
    n_heads: int = 4,
    d_ff: int | None = None,
    seed: int = 1,
    batch: dict | None = None,
    **config,
) -> LayerGradientNorms:
    """Figure 3's per-layer gradient norms of a fresh model at initialization."""
    model = init_model(variant, encoder_layers, decoder_layers, d_model, n_heads, d_ff, seed=seed, **config)
    return layer_gradient_norms(model, batch if batch is not None else default_batch())
