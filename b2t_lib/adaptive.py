r"""Adaptive input representations and the adaptive softmax (Baevski & Auli 2019; Grave et al. 2017).

Both split a frequency-ordered vocabulary (ids sorted by descending training count, as
:class:`b2t_lib.data.dictionary.Dictionary` does) into *bands* at the cutoffs
:math:`0 = c_0 < c_1 < \dots < c_K = V` (WikiText-103: :math:`c = (20000, 60000, V)`), and give
band :math:`i` (ids :math:`[c_i, c_{i+1})`) a smaller dimension

.. math:: d_i = \lfloor d / \text{factor}^i \rfloor \qquad (d = 1024,\ \text{factor} = 4:\ 1024, 256, 64)

so that the many rare words cost few parameters and little compute (docs/methods.md §3.4, fairseq's
``modules/adaptive_input.py`` and ``modules/adaptive_softmax.py``).

**Adaptive input.** Band :math:`i` has an embedding :math:`E_i \in \mathbb{R}^{(c_{i+1}-c_i) \times d_i}`
and a bias-free projection :math:`P_i \in \mathbb{R}^{d \times d_i}` up to the model dimension:

.. math:: \mathrm{emb}(w) = P_i\, E_i[w - c_i] \qquad \text{for } c_i \le w < c_{i+1}

It is *not* scaled here: the stack's token input multiplies it by :math:`\sqrt d`, exactly as it
does an ``nn.Embedding`` (:class:`b2t_lib.embedding.TokenInput`; fairseq's ``embed_scale`` does
the same with adaptive inputs, since ``transformer_lm_wiki103`` keeps ``no_scale_embedding=False``).

**Adaptive softmax.** The *head* scores the :math:`c_1` frequent words plus one logit per tail
band (a "cluster"); tail :math:`i \ge 1` scores the words of band :math:`i` given that cluster:

.. math::
    \log p(w \mid h) = \begin{cases}
        \log \mathrm{softmax}([h E_0^\top;\ h C^\top])_w & w < c_1 \\
        \log \mathrm{softmax}([h E_0^\top;\ h C^\top])_{c_1 + i - 1}
          + \log \mathrm{softmax}\big(\mathrm{Drop}(h P_i)\, E_i^\top\big)_{w - c_i} & c_i \le w < c_{i+1}
    \end{cases}

With tied weights (``tie_adaptive_weights``) the head's word scores use band 0's embedding
:math:`E_0` and tail :math:`i` uses :math:`E_i`; with ``tie_proj`` tail :math:`i`'s down-projection
:math:`d \to d_i` is :math:`P_i^\top`, the transpose of the input projection. Only the cluster
matrix :math:`C \in \mathbb{R}^{K-1 \times d}` is the softmax's own. In training the hidden state
gets dropout (``adaptive_softmax_dropout``, 0.2 for WikiText-103) before the head and the tails,
and again inside each tail after its projection.

The training loss needs :math:`\log p(y_t)` only: head log-probabilities for every token, and
tail :math:`i`'s log-softmax only for the tokens whose target lies in band :math:`i`; the full
:math:`(N, V)` matrix is never built. :meth:`AdaptiveSoftmax.log_prob` builds it for evaluation,
tests and generation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ConfigError
from .special_tokens import PAD


def band_boundaries(vocab_size: int, cutoff: list[int] | tuple[int, ...]) -> list[int]:
    """The cutoffs with ``vocab_size`` appended as the last boundary (fairseq appends it too).

    ``[20000, 60000]`` and ``[20000, 60000, V]`` both give ``[20000, 60000, V]``.
    """
    bounds = [int(c) for c in cutoff]
    if not bounds or bounds[-1] != vocab_size:
        bounds.append(vocab_size)
    if bounds[0] <= 0 or any(later <= earlier for earlier, later in zip(bounds, bounds[1:])) or bounds[-1] > vocab_size:
        raise ConfigError(
            f"adaptive cutoffs {list(cutoff)} must increase strictly and lie in (0, {vocab_size}] "
            f"(the vocabulary size); e.g. 20000,60000 for WikiText-103, 200,1000 at tiny scale"
        )
    return bounds


def band_dims(d_model: int, n_bands: int, factor: float) -> list[int]:
    """Band dimensions :math:`d_i = \\lfloor d / \\text{factor}^i \\rfloor`; each must be at least 1."""
    dims = [int(d_model // (factor**i)) for i in range(n_bands)]
    if factor < 1 or dims[-1] < 1:
        raise ConfigError(
            f"adaptive factor {factor} with {n_bands} bands gives band dimensions {dims} for "
            f"d_model={d_model}; use fewer cutoffs or a smaller factor"
        )
    return dims


class TiedLinear(nn.Module):
    """``F.linear`` with a weight owned by another module (optionally transposed); no bias.

    The weight is registered here as well, under fairseq's name, so ``state_dict`` keys match
    fairseq's; ``model.parameters()`` still yields the shared tensor once.
    """

    def __init__(self, weight: nn.Parameter, transpose: bool):
        super().__init__()
        self.weight = weight
        self.transpose = transpose

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.t() if self.transpose else self.weight)


class AdaptiveInput(nn.Module):
    """Token ids -> (..., d_model) vectors, band by band; a drop-in for ``nn.Embedding`` in a stack.

    ``forward(tokens)`` is unscaled, like ``nn.Embedding``; :class:`b2t_lib.embedding.TokenInput`
    multiplies by :math:`\\sqrt d`. ``embeddings[i]`` is ``Sequential(Embedding, Linear)`` as in
    fairseq (parameter names ``embeddings.{i}.0.weight`` and ``embeddings.{i}.1.weight``).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        cutoff: list[int] | tuple[int, ...],
        factor: float = 4.0,
        pad_idx: int = PAD,
    ):
        super().__init__()
        self.cutoff = band_boundaries(vocab_size, cutoff)  # [c_1, ..., c_K = V]
        if not 0 <= pad_idx < self.cutoff[0]:
            raise ConfigError(f"the padding id {pad_idx} must lie in the first band [0, {self.cutoff[0]})")
        self.num_embeddings, self.embedding_dim, self.padding_idx = vocab_size, d_model, pad_idx
        self.factor = factor
        self.dims = band_dims(d_model, len(self.cutoff), factor)
        starts = [0] + self.cutoff[:-1]
        self.embeddings = nn.ModuleList()
        for i, (start, end, dim) in enumerate(zip(starts, self.cutoff, self.dims)):
            self.embeddings.append(
                nn.Sequential(
                    nn.Embedding(end - start, dim, padding_idx=pad_idx if i == 0 else None),  # E_i
                    nn.Linear(dim, d_model, bias=False),  # P_i
                )
            )
        with torch.no_grad():
            for band in self.embeddings:
                embedding, projection = band
                nn.init.normal_(embedding.weight, mean=0.0, std=embedding.weight.shape[1] ** -0.5)
                # fairseq zeroes row `pad` of *every* band (its init function does not know which
                # band holds padding). Only band 0's row is padding and stays zero; the same row of
                # a tail band is an ordinary word that starts at zero and learns.
                if pad_idx < embedding.weight.shape[0]:
                    embedding.weight[pad_idx].zero_()
                nn.init.xavier_uniform_(projection.weight)

    def weights_for_band(self, band: int) -> tuple[nn.Parameter, nn.Parameter]:
        """``(E_band (n_band, d_band), P_band (d_model, d_band))``: what the adaptive softmax ties to."""
        return self.embeddings[band][0].weight, self.embeddings[band][1].weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (...) int64 -> (..., d_model), unscaled."""
        flat = tokens.reshape(-1)  # (N,)
        out = None
        start = 0
        for band, end in zip(self.embeddings, self.cutoff):
            # Every band runs, even when no token falls in it (an empty matmul), so that every
            # parameter takes part in every backward pass, as DistributedDataParallel requires.
            rows = ((flat >= start) & (flat < end)).nonzero().squeeze(1)  # (n_i,)
            vectors = band(flat.index_select(0, rows) - start)  # (n_i, d_model)
            if out is None:
                out = vectors.new_zeros(flat.shape[0], self.embedding_dim)  # (N, d_model)
            out = out.index_copy(0, rows, vectors.to(out.dtype))
            start = end
        return out.view(*tokens.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        return f"vocab={self.num_embeddings}, d_model={self.embedding_dim}, cutoff={self.cutoff}, dims={self.dims}"


class _TiedHead(nn.Module):
    """Head scores: band-0 words through :math:`E_0` (tied) and one logit per tail cluster."""

    def __init__(self, band0_embedding: nn.Parameter, d_model: int, n_clusters: int):
        super().__init__()
        n_words, emb_dim = band0_embedding.shape
        if emb_dim != d_model:
            raise ConfigError(
                f"band 0 of the adaptive input has dimension {emb_dim}, the softmax input "
                f"{d_model}; they must agree to tie the head"
            )
        self.word_proj = TiedLinear(band0_embedding, transpose=False)  # h E_0^T
        self.class_proj = nn.Linear(d_model, n_clusters, bias=False) if n_clusters else None  # h C^T
        if self.class_proj is not None:
            nn.init.xavier_uniform_(self.class_proj.weight)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        words = self.word_proj(h)  # (N, c_1)
        if self.class_proj is None:
            return words
        return torch.cat([words, self.class_proj(h).to(words.dtype)], dim=-1)  # (N, c_1 + K - 1)


class AdaptiveSoftmax(nn.Module):
    """The adaptive softmax output layer: training loss, per-token and full log-probabilities.

    ``adaptive_input`` ties the word matrices (``tie_adaptive_weights``); ``tie_proj`` also ties
    each tail's projection to the transpose of the input band's. Without ``adaptive_input`` every
    matrix is the softmax's own (xavier-uniform, as fairseq). Module names follow fairseq:
    ``head.word_proj``, ``head.class_proj`` (``head`` is one Linear when untied),
    ``tail.{i}.0`` (projection), ``tail.{i}.1`` (dropout), ``tail.{i}.2`` (band words).

    * :meth:`loss` ``(hidden, target) -> (nll_sum, ntokens)`` for training (no (N, V) matrix);
    * :meth:`target_log_prob` ``(hidden, target) -> log p(target)`` per token (evaluation);
    * :meth:`log_prob` / ``forward`` ``(hidden) -> (..., V)`` normalized log-probabilities. They
      can stand in for logits anywhere (``log_softmax`` leaves them unchanged), so a decoder's
      ``output_layer`` and generation work unchanged; generation passes the last position only.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        cutoff: list[int] | tuple[int, ...],
        dropout: float = 0.0,
        factor: float = 4.0,
        adaptive_input: AdaptiveInput | None = None,
        tie_proj: bool = False,
        pad_idx: int = PAD,
    ):
        super().__init__()
        self.cutoff = band_boundaries(vocab_size, cutoff)  # [c_1, ..., c_K = V]
        self.vocab_size, self.d_model, self.factor, self.pad_idx = vocab_size, d_model, factor, pad_idx
        self.dropout = dropout
        n_tails = len(self.cutoff) - 1
        self.head_size = self.cutoff[0] + n_tails  # c_1 words + one logit per cluster
        dims = band_dims(d_model, len(self.cutoff), factor)
        if adaptive_input is not None:
            if adaptive_input.cutoff != self.cutoff or adaptive_input.dims != dims:
                raise ConfigError(
                    f"tied adaptive softmax and input need the same bands: input cutoff "
                    f"{adaptive_input.cutoff} dims {adaptive_input.dims}, softmax cutoff "
                    f"{self.cutoff} dims {dims}"
                )
            self.head = _TiedHead(adaptive_input.weights_for_band(0)[0], d_model, n_tails)
        else:
            if tie_proj:
                raise ConfigError("tie_proj ties the tail projections to an adaptive input: pass adaptive_input")
            self.head = nn.Linear(d_model, self.head_size, bias=False)
            nn.init.xavier_uniform_(self.head.weight)
        self.tail = nn.ModuleList()
        for i in range(n_tails):
            band = i + 1
            if adaptive_input is not None and tie_proj:
                proj = TiedLinear(adaptive_input.weights_for_band(band)[1], transpose=True)  # h P_i: d -> d_i
            else:
                proj = nn.Linear(d_model, dims[band], bias=False)
                nn.init.xavier_uniform_(proj.weight)
            if adaptive_input is not None:
                words = TiedLinear(adaptive_input.weights_for_band(band)[0], transpose=False)  # . E_i^T
            else:
                words = nn.Linear(dims[band], self.cutoff[band] - self.cutoff[band - 1], bias=False)
                nn.init.xavier_uniform_(words.weight)
            self.tail.append(nn.Sequential(proj, nn.Dropout(dropout), words))

    # ------------------------------------------------------------------ pieces
    def _features(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (N, d) with the softmax's input dropout (training only)."""
        if hidden.shape[-1] != self.d_model:
            raise ValueError(f"hidden states have dimension {hidden.shape[-1]}, the softmax expects {self.d_model}")
        return F.dropout(hidden.reshape(-1, self.d_model), p=self.dropout, training=self.training)

    def _tail_log_probs(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """(n, d) -> (n, c_{i+1} - c_i): log-softmax over tail i's words, in fp32."""
        return F.log_softmax(self.tail[i](h).float(), dim=-1)

    # ------------------------------------------------------------------ training and evaluation
    def target_log_prob(self, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """:math:`\\log p(y_t \\mid h_t)` for every position: hidden (..., d), target (...) -> (...) fp32.

        Head log-probabilities for all positions, tail ``i`` only for the positions whose target is
        in band ``i`` (fairseq's ``adaptive_loss`` does the same). Padding targets give their
        head value; mask them yourself or use :meth:`loss`.
        """
        h = self._features(hidden)  # (N, d)
        y = target.reshape(-1)  # (N,)
        if y.shape[0] != h.shape[0]:
            raise ValueError(f"{h.shape[0]} hidden states but {y.shape[0]} targets")
        head = F.log_softmax(self.head(h).float(), dim=-1)  # (N, c_1 + K - 1)
        # Position of each target in the head: the word itself (band 0) or its band's cluster.
        band = torch.bucketize(y, torch.tensor(self.cutoff, device=y.device), right=True)  # (N,) 0..K-1
        head_index = torch.where(band == 0, y, self.cutoff[0] + band - 1)
        out = head.gather(1, head_index.unsqueeze(1)).squeeze(1)  # (N,)
        for i in range(len(self.tail)):
            start = self.cutoff[i]
            # Runs even with no row (an empty matmul) so every parameter is used (DDP).
            rows = band.eq(i + 1).nonzero().squeeze(1)  # (n_i,)
            tail = self._tail_log_probs(i, h.index_select(0, rows))  # (n_i, c_{i+1} - c_i)
            word = (y.index_select(0, rows) - start).unsqueeze(1)  # (n_i, 1)
            out = out.index_add(0, rows, tail.gather(1, word).squeeze(1))
        return out.view(target.shape)

    def loss(
        self, hidden: torch.Tensor, target: torch.Tensor, ignore_index: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training loss: ``(sum of -log p(y_t) over non-padding targets, their number)``.

        No label smoothing (fairseq's ``adaptive_loss`` has none). Differs from fairseq in one
        deliberate way: fairseq passes ``ignore_index=pad`` to *every* band's cross entropy, so
        the word with in-band index ``pad`` (ids ``c_i + 1``, 20001 and 60001 on WikiText-103)
        never contributes loss; here padding is masked on the original target ids only.
        """
        pad = self.pad_idx if ignore_index is None else ignore_index
        log_p = self.target_log_prob(hidden, target)  # (...)
        keep = target.ne(pad)
        return -(log_p.masked_fill(~keep, 0.0).sum()), keep.sum()

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        """Normalized log-probabilities over the whole vocabulary: (..., d) -> (..., V), fp32.

        :math:`\\log p(w) = \\log p_\\text{head}(w)` for band 0 and
        :math:`\\log p_\\text{head}(\\text{cluster}_i) + \\log p_{\\text{tail } i}(w)` for band
        :math:`i`. Memory is :math:`N V` floats: pass only the positions you need (generation:
        the last one; perplexity: use :meth:`target_log_prob`).
        """
        h = self._features(hidden)  # (N, d)
        head = F.log_softmax(self.head(h).float(), dim=-1)  # (N, c_1 + K - 1)
        pieces = [head[:, : self.cutoff[0]]]  # band 0 words
        for i in range(len(self.tail)):
            cluster = head[:, self.cutoff[0] + i].unsqueeze(1)  # (N, 1) log p(cluster i)
            pieces.append(cluster + self._tail_log_probs(i, h))  # (N, c_{i+1} - c_i)
        return torch.cat(pieces, dim=1).view(*hidden.shape[:-1], self.vocab_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Same as :meth:`log_prob`: what a decoder's ``output_layer`` returns in place of logits."""
        return self.log_prob(hidden)

    def extra_repr(self) -> str:
        return f"vocab={self.vocab_size}, cutoff={self.cutoff}, dropout={self.dropout}"
