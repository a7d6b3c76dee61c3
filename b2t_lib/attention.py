r"""Multi-head attention on ``torch.nn.functional.scaled_dot_product_attention``.

For each head :math:`h` with queries :math:`Q_h = x W^Q_h`, keys :math:`K_h = m W^K_h` and values
:math:`V_h = m W^V_h` (``m = x`` for self-attention, the encoder output for cross-attention):

.. math::
    \mathrm{Attn}(x, m) = \mathrm{concat}_h\Big(\mathrm{softmax}\big(\tfrac{Q_h K_h^\top}{\sqrt{d_{head}}} + M\big)
    V_h\Big) W^O

with :math:`M` the additive mask (``-inf`` at padding keys and, for causal attention, at future keys).

Parameter names follow fairseq (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``) so fairseq
checkpoints load unchanged; so does the initialization (docs/methods.md §3.2): ``xavier_uniform`` with
gain :math:`1/\sqrt{2}` for q/k/v, plain ``xavier_uniform`` and a zero bias for the output projection.

Two extras:

* an incremental key/value cache for step-by-step generation: a plain dict per layer, whose self-attention history
  is a :class:`KeyValueCache` (beam search reorders it in place, copying only the rows that change). The
  cross-attention cache may hold fewer rows than there are queries: beam search keeps one copy of a sentence's
  encoder keys and values for all its ``beam`` consecutive rows, and those rows' queries then attend to it
  together, as ``beam`` query positions of one row (the same softmax per query; the products are grouped
  differently, so results agree to about 1e-7);
* a per-forward-pass ``state`` dict, shared by the attentions of one type from layer to layer, for
  variants whose attention carries something up the stack (:data:`b2t_lib.variants.Variant.attention_class`).
  This class ignores it; a subclass overrides :meth:`MultiheadAttention.attend` to use it.

``forward`` returns ``(output, None)``, the shape of fairseq's ``(attn, attn_weights)`` with
``need_weights=False``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class MultiheadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, attention_dropout: float = 0.0, kdim: int | None = None):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        kdim = kdim or d_model
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.attention_dropout = attention_dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(kdim, d_model)
        self.v_proj = nn.Linear(kdim, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = 1 / math.sqrt(2)  # fairseq: q, k, v share one fused-equivalent init
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight, gain=gain)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, _ = x.shape
        return x.view(batch, time, self.n_heads, self.d_head).transpose(1, 2)  # (batch, heads, time, d_head)

    def forward(
        self,
        query: torch.Tensor,
        key_value: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        causal: bool = False,
        cache: dict | None = None,
        static_kv: bool = False,
        state: dict | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Attend from ``query`` (batch, tgt_time, d_model) to ``key_value`` (batch, src_time, kdim).

        Args:
            key_value: None for self-attention.
            key_padding_mask: (batch, src_time), True at padding keys (with a grouped cache, below, it may also
                have one row per cached row).
            causal: hide future keys (decoder self-attention).
            cache: dict for incremental decoding. Self-attention appends this step's keys/values to its
                :class:`KeyValueCache`; cross-attention (``static_kv=True``) computes them once and reuses them.
                With ``g`` times fewer cached rows than queries, query rows ``i * g ... i * g + g - 1`` share
                cached row ``i`` (the beams of one sentence).
            state: the per-forward-pass dict of this attention type (see the module docstring), or None.

        Returns:
            (output (batch, tgt_time, d_model), None).
        """
        source = query if key_value is None else key_value
        q = self._split_heads(self.q_proj(query))  # (batch, heads, tgt_time, d_head)

        if cache is not None and static_kv and "k" in cache:
            k, v = cache["k"], cache["v"]  # encoder keys/values, computed at the first step (or before it)
        elif cache is not None and static_kv:
            k, v = self.cache_static_kv(source, cache)
        else:
            k = self._split_heads(self.k_proj(source))  # (batch, heads, src_time, d_head)
            v = self._split_heads(self.v_proj(source))
            if cache is not None:  # append this step to the self-attention history: every position so far
                if "history" not in cache:
                    cache["history"] = KeyValueCache()
                k, v = cache["history"].append(k, v)

        rows = q.shape[0]
        group = rows // k.shape[0]  # > 1 only for a cross-attention cache holding one copy per sentence
        if group > 1:  # the `group` beams of a sentence (consecutive rows) attend together, as query positions
            q = q.unflatten(0, (-1, group)).transpose(1, 2).flatten(2, 3)  # (sentences, heads, group * tgt, d_head)
            if key_padding_mask is not None and key_padding_mask.shape[0] == rows:  # one per row: take one per group
                key_padding_mask = key_padding_mask[::group]  # (sentences, src_time)
        tgt_time, src_time = q.shape[2], k.shape[2]
        own_key = causal and key_value is None  # decoder self-attention: a query always sees its own key
        # With a cache the new query is the last position: it may see every cached key, so no causal mask.
        causal = causal and tgt_time > 1
        dropout_p = self.attention_dropout if self.training else 0.0
        mask = None
        if key_padding_mask is not None:
            mask = attention_mask(key_padding_mask, tgt_time, src_time, causal, own_key)
            causal = False  # now part of `mask`
        context = self.attend(q, k, v, mask, causal, dropout_p, state)  # (batch, heads, tgt, d_head)
        if group > 1:  # back to one row per beam
            context = context.unflatten(2, (group, -1)).transpose(1, 2).flatten(0, 1)  # (rows, heads, tgt, d_head)
        context = context.transpose(1, 2).reshape(rows, query.shape[1], self.d_model)  # (rows, tgt_time, d_model)
        return self.out_proj(context), None

    def cache_static_kv(self, source: torch.Tensor, cache: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Project ``source`` (batch, src_time, kdim), the encoder output, into the keys and values that
        cross-attention reuses at every step, and keep them in ``cache``: each (batch, heads, src_time, d_head)."""
        cache["k"] = self._split_heads(self.k_proj(source))
        cache["v"] = self._split_heads(self.v_proj(source))
        return cache["k"], cache["v"]

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        causal: bool,
        dropout_p: float,
        state: dict | None,
    ) -> torch.Tensor:
        r""":math:`\mathrm{softmax}(QK^\top/\sqrt{d_{head}} + M)\,V` per head with the fused kernel.

        q (batch, heads, tgt_time, d_head), k and v (batch, heads, src_time, d_head); ``mask``
        (batch, 1, tgt_time, src_time) is True where a query may attend, or None; ``causal`` hides
        future keys when no mask carries them. Returns the context (batch, heads, tgt_time, d_head).
        ``state`` is unused here.
        """
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)


def attention_mask(
    key_padding_mask: torch.Tensor, tgt_time: int, src_time: int, causal: bool, own_key: bool
) -> torch.Tensor:
    """(batch, 1, tgt_time, src_time) boolean mask, True where a query may attend: not at padding keys,
    not at future keys when ``causal``. With ``own_key`` (decoder self-attention) every query also sees
    its own key, which changes nothing for a real position but gives a padding query (left padding,
    whose output nothing uses) a finite output instead of the NaN of an all-masked row."""
    mask = ~key_padding_mask[:, None, None, :]  # (batch, 1, 1, src_time)
    if causal:
        mask = mask & causal_mask(tgt_time, src_time, key_padding_mask.device)
    if own_key:
        offset = src_time - tgt_time  # query i is position i + offset of the keys (incremental decoding)
        positions = torch.arange(src_time, device=key_padding_mask.device)
        mask = mask | (positions[None, :] == positions[:tgt_time, None] + offset)
    return mask


def causal_mask(tgt_time: int, src_time: int, device) -> torch.Tensor:
    """(tgt_time, src_time) boolean mask, True where query i may see key j (j <= i + offset)."""
    offset = src_time - tgt_time
    return torch.ones(tgt_time, src_time, dtype=torch.bool, device=device).tril(diagonal=offset)


class KeyValueCache:
    """The keys and values of every position a self-attention has seen so far, for incremental decoding.

    They live in ``(batch, heads, capacity, d_head)`` buffers whose first ``length`` positions are filled; a new
    position is written in place, and the buffers double when full. Beam search reorders the rows after every
    step (each beam continues one of the previous beams, and sentences leave the batch), but most beams continue
    themselves: :meth:`reorder` copies only the rows that change, in place. fairseq concatenates the new
    position and then gathers every row into a new tensor: the whole history twice per step.
    """

    def __init__(self):
        self.keys = self.values = None  # (batch, heads, capacity, d_head); positions [:length] hold the history
        self.length = 0  # positions filled

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``k``, ``v`` (batch, heads, new, d_head); return the keys and values of every position so far."""
        end = self.length + k.shape[2]
        if self.keys is None or self.keys.shape[2] < end:  # no room left: twice the positions needed
            self.keys, self.values = (self._grow(history, k, 2 * end) for history in (self.keys, self.values))
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def _grow(self, history: torch.Tensor | None, new: torch.Tensor, capacity: int) -> torch.Tensor:
        batch, heads, _, d_head = new.shape
        buffer = new.new_empty(batch, heads, capacity, d_head)
        if history is not None:
            buffer[:, :, : self.length] = history[:, :, : self.length]
        return buffer

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` positions now, so that appending up to there never copies the history."""
        if self.keys is not None and self.keys.shape[2] < capacity:
            self.keys, self.values = (self._grow(history, history, capacity) for history in (self.keys, self.values))

    def reorder(self, order: torch.Tensor, moved: torch.Tensor | None = None) -> None:
        """Row ``i`` of the history becomes the old row ``order[i]`` (``order`` may be shorter: rows leave).

        Only the rows ``moved`` (those with ``order[i] != i``; computed when not given) are copied."""
        if self.keys is None:
            return
        if moved is None:
            moved = moved_rows(order)
        rows = len(order)
        if rows > self.keys.shape[0]:  # more rows than before (a first step of one row per sentence): new buffers
            self.keys, self.values = self.keys.index_select(0, order), self.values.index_select(0, order)
            return
        for history in (self.keys, self.values):
            filled = history[:, :, : self.length]
            # read every source row before any is overwritten (a source may itself move)
            filled.index_copy_(0, moved, filled.index_select(0, order[moved]))
        self.keys, self.values = self.keys[:rows], self.values[:rows]


def moved_rows(order: torch.Tensor) -> torch.Tensor:
    """The rows ``i`` whose reorder takes another row (``order[i] != i``), as a 1-D index."""
    return (order != torch.arange(len(order), device=order.device)).nonzero().squeeze(1)


def reorder_cache(cache: dict, order: torch.Tensor, moved: torch.Tensor | None = None) -> None:
    """Reorder every cached tensor along the batch dimension (beam search keeps the best beams); ``moved``, if
    given, is :func:`moved_rows` of ``order``."""
    for name, value in cache.items():
        if isinstance(value, torch.Tensor):
            cache[name] = value.index_select(0, order)
        elif isinstance(value, KeyValueCache):
            value.reorder(order, moved)
        elif isinstance(value, dict):
            reorder_cache(value, order, moved)


def reserve_cache(cache: dict, positions: int) -> None:
    """Give every self-attention history in ``cache`` room for ``positions`` positions (a search that knows its
    length limit calls it once, and its histories are then never copied to grow)."""
    for value in cache.values():
        if isinstance(value, KeyValueCache):
            value.reserve(positions)
        elif isinstance(value, dict):
            reserve_cache(value, positions)
