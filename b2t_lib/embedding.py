r"""Input embeddings as fairseq builds them (docs/methods.md §3.1 and §1.7).

A token sequence becomes the first layer's input in four steps:

.. math::
    x_0 = \mathrm{Drop}_p\big(\sqrt{d}\cdot \mathrm{WordDrop}_r(E[w]) + \mathrm{PE}(pos)\big)

* :math:`E` is initialised :math:`\mathcal{N}(0, d^{-1/2})` with the padding row set to zero.
* :math:`\mathrm{PE}` is fairseq's sinusoidal table: the first :math:`d/2` channels are sines, the last
  :math:`d/2` cosines (concatenated, not interleaved), with frequencies
  :math:`\omega_i = 10000^{-i/(d/2-1)}`. Positions start at ``pad + 1`` and padding gets the zero vector.
* :math:`\mathrm{WordDrop}_r` (training only) zeroes a whole token vector with probability :math:`r`,
  with no :math:`1/(1-r)` rescaling; the decoder always keeps position 0.

When :math:`E` is also the output projection (:math:`\mathrm{logits} = h E^\top`), a model in training uses it
through :mod:`b2t_lib.tied_matrix`, which builds its gradient in one place.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .special_tokens import PAD


def build_token_embedding(vocab_size: int, d_model: int, pad_idx: int = PAD) -> nn.Embedding:
    """``nn.Embedding`` with fairseq's init: :math:`\\mathcal{N}(0, d^{-1/2})`, padding row zero."""
    embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_idx)
    nn.init.normal_(embedding.weight, mean=0.0, std=d_model**-0.5)
    with torch.no_grad():
        embedding.weight[pad_idx].zero_()
    return embedding


def sinusoidal_table(num_positions: int, d_model: int, pad_idx: int = PAD) -> torch.Tensor:
    """(num_positions, d_model) table; row ``pad_idx`` is zero, real positions start at ``pad_idx + 1``."""
    half = d_model // 2
    step = math.log(10000.0) / max(half - 1, 1)
    frequencies = torch.exp(torch.arange(half, dtype=torch.float) * -step)  # omega_i = 10000^{-i/(d/2-1)}
    angles = torch.arange(num_positions, dtype=torch.float)[:, None] * frequencies[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # (positions, 2 * half)
    if d_model % 2 == 1:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    table[pad_idx] = 0.0
    return table


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal positions; grows its table on demand, so any length works."""

    def __init__(self, d_model: int, pad_idx: int = PAD, init_size: int = 1024):
        super().__init__()
        self.d_model, self.pad_idx = d_model, pad_idx
        self.register_buffer("table", sinusoidal_table(init_size + pad_idx + 1, d_model, pad_idx), persistent=False)

    def forward(self, padding_mask: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        """padding_mask (batch, time), True at padding -> positions (batch, time, d_model). ``offset`` (batch,):
        real tokens before the first column (incremental decoding passes the newest column only)."""
        not_pad = (~padding_mask).long()
        counted = torch.cumsum(not_pad, dim=1) if offset is None else torch.cumsum(not_pad, dim=1) + offset[:, None]
        positions = counted * not_pad + self.pad_idx  # fairseq make_positions
        needed = int(positions.max()) + 1 if positions.numel() else 0
        if needed > self.table.shape[0]:
            self.table = sinusoidal_table(needed, self.d_model, self.pad_idx).to(self.table.device)
        return self.table[positions].to(self.table.dtype)


def word_dropout(embedded: torch.Tensor, rate: float, training: bool, keep_first: bool = False) -> torch.Tensor:
    """Zero whole token vectors with probability ``rate`` (docs/methods.md §1.7); no rescaling.

    embedded: (batch, time, d). ``keep_first`` keeps position 0 (the decoder's EOS/BOS prefix).
    """
    if not training or rate <= 0.0:
        return embedded
    keep = torch.rand(embedded.shape[:2], device=embedded.device) >= rate  # (batch, time)
    if keep_first:
        keep[:, 0] = True
    return embedded * keep.unsqueeze(-1).to(embedded.dtype)


class TokenInput(nn.Module):
    """Tokens -> (scaled embedding + positions, padding mask): the default input of a stack.

    The embedding matrix is passed in (not created here) so that it can be shared with the other
    stack and the output projection; it is registered as ``embed_tokens`` on the stack itself, which
    keeps fairseq's parameter names.
    """

    def __init__(self, d_model: int, pad_idx: int, word_dropout: float = 0.0, keep_first: bool = False):
        super().__init__()
        self.embed_scale = math.sqrt(d_model)
        self.pad_idx = pad_idx
        self.word_dropout = word_dropout
        self.keep_first = keep_first
        self.embed_positions = SinusoidalPositions(d_model, pad_idx)

    def forward(
        self,
        tokens: torch.Tensor,
        embed_tokens: nn.Embedding,
        last_only: bool = False,
        rows: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x (batch, time, d_model), padding_mask (batch, time))``. With ``last_only`` (incremental decoding:
        the earlier positions are cached) ``x`` is the newest position only, (batch, 1, d_model), at the position
        it has in the whole sequence; the padding mask still covers every position. ``rows``: ``embed_tokens(tokens)``
        when the model looked them up already (:func:`~b2t_lib.tied_matrix.tied_lookups`)."""
        padding_mask = tokens.eq(self.pad_idx)  # (batch, time)
        keep_first = self.keep_first and (not last_only or tokens.shape[1] == 1)
        if last_only:
            before = (~padding_mask[:, :-1]).sum(1)  # (batch,) real tokens before the newest one
            positions = self.embed_positions(padding_mask[:, -1:], offset=before)
            tokens = tokens[:, -1:]
        else:
            positions = self.embed_positions(padding_mask)
        looked_up = embed_tokens(tokens) if rows is None else rows  # (batch, time, d_model)
        x = word_dropout(looked_up, self.word_dropout, self.training, keep_first)
        return self.embed_scale * x + positions, padding_mask  # (batch, time, d_model)
