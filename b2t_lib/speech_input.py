r"""The speech front end of the S2T Transformer (Wang et al. 2020; docs/methods.md §3.5) and SpecAugment.

The encoder of a speech model reads filter-bank frames instead of token ids. Everything above
its input is the text Transformer unchanged, so the front end is a drop-in replacement for the
encoder's token input (:attr:`b2t_lib.model.Encoder.input`), chosen by one model option::

    cfg = ModelConfig(encoder_input="speech", share_embeddings=False, share_decoder_io=True, ...)
    model = EncoderDecoder(cfg)      # encoder.input = build_speech_input(cfg); no encoder embedding
    memory, padding_mask = model.encoder(SpeechSource(features, lengths))
    logits = forward_batch(model, batch)            # batch: features, src_lengths, prev_output_tokens

:class:`SpeechInput` computes, for fbank frames :math:`f_{1..T}` (after CMVN):

.. math::
    h = \mathrm{GLU}\big(\mathrm{Conv}_{80 \to C}(f)\big), \quad
    z = \mathrm{GLU}\big(\mathrm{Conv}_{C/2 \to 2d}(h)\big), \quad
    x_0 = \sqrt{d}\, z + \mathrm{PE}(pos)

with kernel 5, stride 2, padding 2 (so :math:`T' = \lfloor (T-1)/2 + 1 \rfloor` per convolution,
4x fewer positions: 40 ms per encoder position) and :math:`\mathrm{GLU}(a, b) = a \odot \sigma(b)`
over the channel halves. The encoder's dropout follows, as for tokens. The front end sits
*below* layer 1: every variant's residual stream (Post-LN, Pre-LN, B2T, ...) starts at
:math:`x_0` exactly as with a token embedding, so the paper's argument is unchanged.

One deliberate difference from fairseq: positions past an utterance's length are zeroed before
each convolution, so an utterance's output does not depend on what it is batched with (fairseq
lets the first convolution's bias leak into the padding, which the second convolution then reads
at the utterance's last frames).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torchaudio
from torch import nn

from .special_tokens import PAD
from .embedding import SinusoidalPositions


class SpeechSource(NamedTuple):
    """The encoder's source for speech: padded features and their lengths.

    ``features`` ``(batch, frames, 80)`` float, ``lengths`` ``(batch,)`` long. ``shape``,
    ``device`` and ``to`` follow ``features``, so code written for a ``src_tokens`` tensor
    (``src.shape[0]``, ``src.device``, e.g. :mod:`b2t_lib.generate`) works unchanged.
    """

    features: torch.Tensor
    lengths: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.features.shape

    @property
    def device(self) -> torch.device:
        return self.features.device

    def to(self, *args, **kwargs) -> "SpeechSource":
        features = self.features.to(*args, **kwargs)
        return SpeechSource(features, self.lengths.to(features.device))


def lengths_to_padding_mask(lengths: torch.Tensor, max_length: int) -> torch.Tensor:
    """``(batch,)`` lengths -> ``(batch, max_length)`` mask, True at padding."""
    return torch.arange(max_length, device=lengths.device)[None, :] >= lengths[:, None]


def subsampled_lengths(lengths: torch.Tensor, num_layers: int = 2) -> torch.Tensor:
    r"""Output lengths after ``num_layers`` stride-2 convolutions: :math:`L \mapsto \lfloor (L-1)/2 + 1 \rfloor`."""
    for _ in range(num_layers):
        lengths = torch.div(lengths - 1, 2, rounding_mode="floor") + 1
    return lengths


class Conv1dSubsampler(nn.Module):
    """Two Conv1d + GLU layers, each halving time (fairseq ``Conv1dSubsampler``, defaults ``5,5`` and 1024).

    ``forward(features (batch, frames, in_channels), lengths (batch,))`` ->
    ``(x (batch, frames', out_channels), lengths' (batch,))``.
    """

    def __init__(self, in_channels: int, mid_channels: int, out_channels: int, kernel_sizes: tuple[int, ...] = (5, 5)):
        super().__init__()
        if mid_channels % 2:
            raise ValueError(f"mid_channels must be even (GLU halves it), got {mid_channels}")
        self.conv_layers = nn.ModuleList(
            nn.Conv1d(
                in_channels if i == 0 else mid_channels // 2,
                mid_channels if i < len(kernel_sizes) - 1 else out_channels * 2,
                k,
                stride=2,
                padding=k // 2,
            )
            for i, k in enumerate(kernel_sizes)
        )

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = features.transpose(1, 2)  # (batch, channels, frames)
        for conv in self.conv_layers:
            x = x.masked_fill(lengths_to_padding_mask(lengths, x.shape[-1])[:, None, :], 0.0)
            x = F.glu(conv(x), dim=1)  # (batch, channels' / 2, ceil(frames / 2))
            lengths = subsampled_lengths(lengths, 1)
        return x.transpose(1, 2), lengths  # (batch, frames', out_channels)


class SpecAugment(nn.Module):
    r"""SpecAugment without time warping, fairseq's policy ``ld`` by default: 2 frequency masks of
    width < F=27 and 2 time masks of width < min(T=100, p * frames), p=1.0 (Park et al. 2019).

    Active only in training mode (``module.train()``); in ``eval()`` it returns its input. Each
    utterance gets its own masks within its own length (padding stays as it is), drawn from
    torch's global RNG (seed it for reproducible runs). The masks are torchaudio's:
    ``FrequencyMasking`` and, for time, the same ``mask_along_axis`` that ``TimeMasking`` calls,
    with the width bound per utterance (``TimeMasking``'s bound is fixed when it is built). The
    masked value is 0, the mean of a CMVN-normalized utterance (fairseq masks with the utterance
    mean).
    """

    def __init__(
        self,
        freq_masks: int = 2,
        freq_width: int = 27,
        time_masks: int = 2,
        time_width: int = 100,
        time_proportion: float = 1.0,
        mask_value: float = 0.0,
    ):
        super().__init__()
        if not 0.0 < time_proportion <= 1.0:
            raise ValueError(f"time_proportion must be in (0, 1], got {time_proportion}")
        self.freq_masks, self.time_masks = freq_masks, time_masks
        self.time_width, self.time_proportion, self.mask_value = time_width, time_proportion, mask_value
        self.frequency_masking = torchaudio.transforms.FrequencyMasking(freq_width)

    def extra_repr(self) -> str:
        return (
            f"freq_masks={self.freq_masks}, freq_width={self.frequency_masking.mask_param}, "
            f"time_masks={self.time_masks}, time_width={self.time_width}, p={self.time_proportion}"
        )

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``features`` ``(batch, frames, freq)``, ``lengths`` ``(batch,)`` -> masked copy (training only)."""
        if not self.training:
            return features
        out = features.clone()
        for i, length in enumerate(lengths.tolist()):
            spec = out[i, :length].transpose(0, 1)  # (freq, frames): torchaudio's layout
            if length == 0 or spec.shape[0] < self.frequency_masking.mask_param:
                continue
            for _ in range(self.freq_masks):
                spec = self.frequency_masking(spec, self.mask_value)
            max_width = min(self.time_width, math.floor(length * self.time_proportion))
            if max_width >= 1:
                for _ in range(self.time_masks):
                    spec = torchaudio.functional.mask_along_axis(spec, max_width, self.mask_value, axis=1)
            out[i, :length] = spec.transpose(0, 1)
        return out


class SpeechInput(nn.Module):
    """Features -> (scaled subsampled features + positions, padding mask): the speech encoder's input.

    ``forward(src, embed_tokens=None)`` with ``src = (features (batch, frames, in_features),
    lengths (batch,))`` (a :class:`SpeechSource` or any pair) returns ``x (batch, frames', d_model)``
    and ``padding_mask (batch, frames')``, True at padding; ``frames' = ceil(ceil(frames/2)/2)``.
    ``embed_tokens`` is ignored (the signature of :class:`b2t_lib.embedding.TokenInput`).
    ``spec_augment`` (e.g. ``SpecAugment()``) masks the features first, in training mode only.
    """

    def __init__(
        self,
        d_model: int,
        in_features: int = 80,
        conv_channels: int = 1024,
        kernel_sizes: tuple[int, ...] = (5, 5),
        pad_idx: int = PAD,
        spec_augment: SpecAugment | None = None,
    ):
        super().__init__()
        self.spec_augment = spec_augment
        self.subsample = Conv1dSubsampler(in_features, conv_channels, d_model, kernel_sizes)
        self.embed_scale = math.sqrt(d_model)
        self.embed_positions = SinusoidalPositions(d_model, pad_idx)

    def forward(self, src, embed_tokens: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(src, torch.Tensor):
            raise TypeError(
                "a speech encoder reads a SpeechSource(features, lengths), not a tensor of token ids; "
                "build the model with encoder_input='tokens' for text"
            )
        features, lengths = src
        if features.dim() != 3 or lengths.dim() != 1 or len(lengths) != len(features):
            raise ValueError(
                f"speech source must be features (batch, frames, dims) and lengths (batch,), got "
                f"{tuple(features.shape)} and {tuple(lengths.shape)}"
            )
        in_features = self.subsample.conv_layers[0].in_channels
        if features.shape[-1] != in_features:
            raise ValueError(
                f"this model reads {in_features} features per frame, the source has "
                f"{features.shape[-1]}; check input_features against the data"
            )
        if self.spec_augment is not None:
            features = self.spec_augment(features, lengths)
        x, out_lengths = self.subsample(features, lengths)  # (batch, frames', d_model)
        padding_mask = lengths_to_padding_mask(out_lengths, x.shape[1])  # (batch, frames')
        x = self.embed_scale * x + self.embed_positions(padding_mask)
        return x, padding_mask


def build_spec_augment(cfg) -> SpecAugment | None:
    """SpecAugment from a :class:`~b2t_lib.config.ModelConfig`'s ``specaug_*`` fields (None when it has no masks)."""
    if cfg.specaug_freq_masks == 0 and cfg.specaug_time_masks == 0:
        return None
    return SpecAugment(
        freq_masks=cfg.specaug_freq_masks,
        freq_width=cfg.specaug_freq_width,
        time_masks=cfg.specaug_time_masks,
        time_width=cfg.specaug_time_width,
        time_proportion=cfg.specaug_time_proportion,
    )


def build_speech_input(cfg) -> SpeechInput:
    """The S2T encoder input of a ``ModelConfig`` with ``encoder_input="speech"`` (its ``input_features``,
    ``conv_channels``, ``conv_kernel_sizes`` and ``specaug_*`` fields)."""
    return SpeechInput(
        cfg.d_model,
        in_features=cfg.input_features,
        conv_channels=cfg.conv_channels,
        kernel_sizes=tuple(cfg.conv_kernel_sizes),
        pad_idx=cfg.pad_idx,
        spec_augment=build_spec_augment(cfg),
    )
