"""Token-based batching with length bucketing (fairseq's ``--max-tokens``).

A batch of :math:`B` sentence pairs is padded to its longest member, so it costs

.. math:: \\text{cost} = B \\cdot \\max_{i \\in \\text{batch}} \\max(|x_i|, |y_i|) \\le \\text{max\\_tokens}

(padding included, EOS counted). Sorting by length first makes neighbours similar in length,
so little of that budget is padding. The order of the *batches* is then shuffled, so training
does not see all short sentences first. Ties in length are broken randomly, so the batches
themselves also change from epoch to epoch, as in fairseq.
"""

from __future__ import annotations

import numpy as np
from ..errors import UserError


class BatchSizeError(UserError, ValueError):
    """A single example does not fit into ``max_tokens``."""


def token_batches(
    src_sizes: np.ndarray,
    tgt_sizes: np.ndarray,
    max_tokens: int,
    *,
    shuffle: bool = True,
    seed: int = 1,
    epoch: int = 0,
    rank: int = 0,
    world_size: int = 1,
    max_sentences: int | None = None,
) -> list[list[int]]:
    """Example indices grouped into batches whose padded size obeys ``max_tokens``.

    Deterministic for the same arguments. With ``world_size > 1`` the batch list is padded, by
    repeating its first batches, to a multiple of ``world_size`` (every rank must take the same
    number of steps or the gradient all-reduce hangs), and rank ``r`` takes batches
    ``r, r + W, r + 2W, ...``. The padding re-uses at most ``W - 1`` batches once per epoch.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    lengths = np.maximum(np.asarray(src_sizes, dtype=np.int64), np.asarray(tgt_sizes, dtype=np.int64))
    if len(lengths) == 0:
        return []
    too_long = np.flatnonzero(lengths > max_tokens)
    if len(too_long):
        i = int(too_long[0])
        raise BatchSizeError(
            f"example {i} has {int(lengths[i])} tokens (source {int(src_sizes[i])}, target {int(tgt_sizes[i])}), "
            f"more than max_tokens={max_tokens}, and {len(too_long)} example(s) are that long: raise "
            f"--max-tokens or filter long sentences out of the data"
        )
    rng = np.random.default_rng([seed, epoch])
    tie_breaker = rng.permutation(len(lengths)) if shuffle else np.arange(len(lengths))
    # np.lexsort sorts by the last key first: by padded length, then target length, then random.
    order = np.lexsort((tie_breaker, np.asarray(tgt_sizes), lengths))

    batches: list[list[int]] = []
    start = 0
    sorted_lengths = lengths[order].tolist()
    order_list = order.tolist()
    cap = max_sentences or len(order_list)
    for end in range(1, len(order_list) + 1):
        # Lengths are non-decreasing in this order, so the batch's padded length is its last one.
        n = end - start
        if n > cap or n * sorted_lengths[end - 1] > max_tokens:
            batches.append(order_list[start : end - 1])
            start = end - 1
    batches.append(order_list[start:])

    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    if world_size > 1:
        shortfall = -len(batches) % world_size
        batches = batches + [batches[i % len(batches)] for i in range(shortfall)]
        batches = batches[rank::world_size]
    return batches
