r"""The shared embedding matrix in training: its three uses as two autograd nodes, its gradient built in place.

In a model that shares :math:`E` (V, d) between the encoder's look-ups, the decoder's look-ups and the output
projection (:math:`\mathrm{logits} = h E^\top`, docs/methods.md §3.1), the gradient is the sum of one term per use:

.. math::
    \nabla_E = \underbrace{(\nabla_{\mathrm{logits}})^\top h}_{\text{output projection}}
        + \sum_i \mathrm{scatter}\big(w^{(i)}, \nabla_{E[w^{(i)}]}\big)

Autograd, given ``F.embedding`` and ``F.linear`` one by one, makes each term a fresh (V, d) tensor and adds the
tensors whole: at V = 32768, d = 512, three 64 MB tensors per step, two of them zeros with a few hundred rows
filled. Here:

* :func:`tied_lookups` (:class:`_TiedLookups`) makes the look-ups and the weight handed on to the output projection
  one node, whose backward adds each look-up's rows, summed per token, into the projection's term in place;
* :func:`tied_projection` (:class:`_TiedProjection`) computes the projection's term into memory kept from an
  earlier step (once nothing else holds it), since a fresh 64 MB tensor costs the CPU about 16,000 page faults to
  touch and a ``munmap`` to free.

Both give the same values and gradients, to the bit, as the uses one by one (``tests/test_tied_matrix.py``). On a
GPU, under ``torch.compile`` and with no gradient being recorded they are exactly the plain ``F.embedding`` and
``F.linear``, and so is the projection under CPU autocast. The cost: up to two (V, d) tensors per matrix stay
allocated between steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.utils.weak import WeakIdKeyDictionary


class _TiedLookups(torch.autograd.Function):
    r"""One autograd node for every use of a shared matrix :math:`E` (V, d) in a forward pass: the look-ups of
    each token tensor :math:`w^{(i)}` and the weight handed on to the output projection.

    .. math::
        \nabla_E = \nabla_E^{\mathrm{out}} + \sum_i \mathrm{scatter}\big(w^{(i)}, \nabla_{E[w^{(i)}]}\big)

    Autograd, given ``F.embedding`` once per stack, makes each scatter a dense (V, d) tensor of zeros with a few
    rows filled, and adds each whole tensor to the output projection's gradient: at V = 32768, d = 512 a 64 MB
    fill and a 64 MB addition per look-up and step, for a few hundred rows. Here each look-up's rows are summed
    per token (a small table, duplicates in token order, as the embedding's own backward sums them) and added to
    those rows of :math:`\nabla_E^{\mathrm{out}}` in place, the last look-up first: the order in which
    autograd's engine would have added the dense tensors, so the gradient is the same to the bit.
    """

    @staticmethod
    def forward(ctx, weight, padding_idx, *tokens):
        ctx.save_for_backward(*tokens)
        ctx.padding_idx, ctx.num_rows = padding_idx, weight.shape[0]
        rows = [F.embedding(t, weight) for t in tokens]  # (..., d) each
        return (weight.view_as(weight), *rows)

    @staticmethod
    @once_differentiable  # a second derivative through it raises instead of being wrong
    def backward(ctx, grad_weight, *grad_rows):
        # grad_weight: the output projection's gradient of E, (V, d), made by tied_projection (or F.linear) for
        # this node alone, so the rows go into it in place; None when the projection was not used
        grad = grad_weight.contiguous() if grad_weight is not None else None
        for tokens, grad_row in reversed(list(zip(ctx.saved_tensors, grad_rows))):  # the last look-up first
            if grad_row is None:
                continue
            if grad is None:
                grad = grad_row.new_zeros(ctx.num_rows, grad_row.shape[-1])
            present, inverse = torch.unique(tokens, return_inverse=True)  # the distinct tokens, sorted
            at_padding = (present == ctx.padding_idx).nonzero() if ctx.padding_idx is not None else present[:0]
            padding = int(at_padding[0]) if len(at_padding) else -1  # the padding token's place: no gradient
            summed = torch.ops.aten.embedding_dense_backward(  # (distinct tokens, d): rows summed per token
                grad_row, inverse, present.numel(), padding, False
            )
            grad.index_add_(0, present, summed)  # each row once: E's gradient row + that token's sum
        return (grad, None) + (None,) * len(grad_rows)


def tied_lookups(embed: nn.Embedding, *tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(weight, embed(tokens_1), ..., embed(tokens_n))``: the rows of every token tensor, and the matrix to use as
    the output projection, as one autograd node (:class:`_TiedLookups`), so that the matrix's gradient is built
    in place. Equal values and, on a CPU, the same gradient to the bit as ``embed.weight`` and ``embed(t)`` used
    one by one. On a GPU, under ``torch.compile``, with no gradient being recorded, or for an embedding with
    options the node does not implement, it is exactly that (on a GPU the dense tensors cost little, while finding
    the distinct tokens would wait for the device every step).
    """
    plain = (
        type(embed) is not nn.Embedding
        or not (torch.is_grad_enabled() and embed.weight.requires_grad)
        or embed.weight.device.type != "cpu"
        or torch.compiler.is_compiling()  # a compiled model keeps the graph torch.compile knows
        or embed.max_norm is not None
        or embed.scale_grad_by_freq
        or embed.sparse
    )
    if plain:
        return (embed.weight, *(embed(t) for t in tokens))
    return _TiedLookups.apply(embed.weight, embed.padding_idx, *tokens)


_KEPT_PER_MATRIX = 2  # one gradient for the optimizer and one more for a second batch accumulated into it
_gradient_memory: WeakIdKeyDictionary = WeakIdKeyDictionary()  # embedding module -> (V, d) tensors kept


def _held_elsewhere(memory: torch.Tensor) -> bool:
    """True when any tensor other than ``memory`` itself uses its storage (a ``.grad``, a reference a caller
    kept, a view of either). The storage object made to ask holds one reference too. Without the count
    (another torch), every memory counts as held, and each step gets a fresh tensor, as autograd gives."""
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    return use_count is None or use_count(memory.untyped_storage()._cdata) != 2


def _gradient_storage(owner: nn.Module, like: torch.Tensor) -> torch.Tensor:
    """A tensor shaped like ``like`` for the gradient of ``owner``'s matrix: kept memory nothing else uses, or a
    fresh one (kept for later steps while fewer than ``_KEPT_PER_MATRIX`` are)."""
    fits = lambda t: t.shape == like.shape and t.dtype == like.dtype and t.device == like.device  # noqa: E731
    kept = [t for t in _gradient_memory.get(owner, []) if fits(t)]
    for memory in kept:
        if not _held_elsewhere(memory):
            return memory
    fresh = torch.empty_like(like, memory_format=torch.contiguous_format)
    _gradient_memory[owner] = kept + [fresh] if len(kept) < _KEPT_PER_MATRIX else kept
    return fresh


class _TiedProjection(torch.autograd.Function):
    r""":math:`\mathrm{logits} = h E^\top` whose gradient of :math:`E`, :math:`(\nabla_{\mathrm{logits}})^\top h`,
    is written into memory kept from an earlier step (:func:`_gradient_storage`).

    Its backward makes the same two products as ``F.linear``'s (for ``h`` (N, d): :math:`\nabla_h =
    \nabla_{\mathrm{logits}} E` and :math:`\nabla_E = (\nabla_{\mathrm{logits}})^\top h`), so the bits are the same.
    """

    @staticmethod
    def forward(ctx, features, weight, owner):
        ctx.save_for_backward(features, weight)
        ctx.owner = owner
        return F.linear(features, weight)  # (batch, time, V)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logits):
        features, weight = ctx.saved_tensors
        grad_2d = grad_logits.reshape(-1, grad_logits.shape[-1])  # (tokens, V)
        features_2d = features.reshape(-1, features.shape[-1])  # (tokens, d)
        grad_features = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_features = grad_2d.mm(weight).view(features.shape)  # (batch, time, d)
        if ctx.needs_input_grad[1]:
            memory = _gradient_storage(ctx.owner, weight)
            # detach(): a tensor of its own over the kept storage, which autograd may then keep as .grad
            grad_weight = torch.mm(grad_2d.t(), features_2d, out=memory).detach()  # (V, d)
        return grad_features, grad_weight, None


def tied_projection(features: torch.Tensor, weight: torch.Tensor, embed: nn.Embedding) -> torch.Tensor:
    """Logits (batch, time, V) ``= F.linear(features, weight)``, where ``weight`` is ``embed.weight`` as
    :func:`tied_lookups` handed it on. When it came from the node (not ``embed.weight`` itself), the matrix's
    gradient is computed into kept memory (:class:`_TiedProjection`); otherwise, and under CPU autocast, which
    casts inside ``F.linear``, it is ``F.linear``."""
    if weight is embed.weight or torch.is_autocast_enabled("cpu"):
        return F.linear(features, weight)
    return _TiedProjection.apply(features, weight, embed)
