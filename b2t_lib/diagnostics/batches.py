"""A fixed, seeded batch of random tokens with padding: the input of every diagnostic at initialization.

At initialization the weights carry no knowledge of language, so the gradient profile of the
paper's Figures 3, 4 and 7 depends on the *shapes* of the batch (length, padding), not on which
tokens it holds. A random batch therefore stands in for WMT at CPU cost, and it is the same on
every machine because it is drawn from a seeded generator.

A batch is a plain dict, the same layout the trainer uses:

* ``src_tokens`` (batch, src_time): source ids, right-padded with ``PAD``, each row ending in ``EOS``;
* ``prev_output_tokens`` (batch, tgt_time): ``EOS`` followed by the target shifted right
  (fairseq's teacher forcing), padded with ``PAD``;
* ``target`` (batch, tgt_time): the target ids ending in ``EOS``, padded with ``PAD``.
"""

from __future__ import annotations

import torch

from ..special_tokens import EOS, PAD, SPECIAL_TOKENS


def random_translation_batch(
    vocab_size: int,
    batch_size: int = 8,
    src_len: int = 12,
    tgt_len: int = 12,
    min_len: int | None = None,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Random token ids of random lengths in ``[min_len, max_len]``, padded to a rectangle.

    Args:
        vocab_size: the model's vocabulary; ordinary ids are drawn from ``[4, vocab_size)``.
        batch_size: number of sentence pairs.
        src_len, tgt_len: longest source / target length, ``EOS`` included.
        min_len: shortest length (default: half the longest), so most rows carry padding.
        seed: the batch is a function of the arguments only.
    """
    first_ordinary = len(SPECIAL_TOKENS)
    if vocab_size <= first_ordinary:
        raise ValueError(
            f"vocab_size={vocab_size} leaves no ordinary tokens after the "
            f"{first_ordinary} special ones; use vocab_size >= {first_ordinary + 1}"
        )
    if min(batch_size, src_len, tgt_len) < 2:
        raise ValueError(f"need batch_size, src_len and tgt_len >= 2, got {batch_size}, {src_len}, {tgt_len}")
    generator = torch.Generator().manual_seed(seed)

    def padded_rows(max_len: int) -> torch.Tensor:
        shortest = max(2, min_len if min_len is not None else max_len // 2)
        if shortest > max_len:
            raise ValueError(f"min_len={min_len} is longer than the longest sequence {max_len}")
        lengths = torch.randint(shortest, max_len + 1, (batch_size,), generator=generator)
        lengths[0] = max_len  # one full row fixes the padded width
        tokens = torch.randint(first_ordinary, vocab_size, (batch_size, max_len), generator=generator)
        positions = torch.arange(max_len)[None, :]  # (1, time)
        tokens[positions == (lengths[:, None] - 1)] = EOS
        tokens[positions >= lengths[:, None]] = PAD
        return tokens  # (batch, time)

    src_tokens = padded_rows(src_len)
    target = padded_rows(tgt_len)
    prev_output_tokens = torch.full_like(target, PAD)
    prev_output_tokens[:, 0] = EOS
    prev_output_tokens[:, 1:] = target[:, :-1]
    prev_output_tokens[target.eq(PAD)] = PAD  # the final EOS is never fed back in
    return {"src_tokens": src_tokens, "prev_output_tokens": prev_output_tokens, "target": target}
