r"""A prepared language-modeling split as contiguous blocks (fairseq ``--sample-break-mode none``).

The split's stream :math:`x_1 \dots x_L` (lines joined, each ending in ``</s>``) is cut into
blocks of :math:`S` *target* tokens, ignoring line and document boundaries. Block :math:`b`
predicts :math:`x_{bS+1} \dots x_{(b+1)S}` from the same tokens shifted right by one,

.. math:: p(x_{bS+1} \dots x_{(b+1)S}) = \prod_{t=bS+1}^{(b+1)S} p(x_t \mid x_{t-1}, \dots, x_{bS}),
          \qquad x_0 = \texttt{</s>},

so the input of block :math:`b` is :math:`x_{bS} \dots x_{(b+1)S-1}` and the target
:math:`x_{bS+1} \dots x_{(b+1)S}` (fairseq's ``TokenBlockDataset`` with targets: the very first
input is ``</s>``, the end of an imagined previous line). Every token of the stream is a target
exactly once, so the summed NLL over all blocks is the stream's NLL and
:math:`\mathrm{PPL} = \exp(\mathrm{NLL}/L)`. The last block may be shorter.

**Context window** (fairseq ``eval_lm --context-window C``, ``LMContextWindowDataset``): for
evaluation, each block also sees up to :math:`C` earlier tokens as context, which are not scored
(their targets are ``<pad>``): inputs are at most :math:`T = S + C` tokens long
(``tokens_per_sample``). Every token is still scored once, but with at least :math:`C` tokens of
history (except at the start), which lowers perplexity. Training uses :math:`C = 0`, :math:`S = T`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..special_tokens import EOS, PAD

from .batching import token_batches
from .dictionary import Dictionary
from .indexed import RaggedArray
from .lm import LM_DATA, split_files


def lm_manifest(data_dir: str | Path) -> dict:
    """The manifest of a prepared LM data set (raises if preparation never finished)."""
    return LM_DATA.manifest(data_dir)


def unigram_baseline(data_dir: str | Path, split: str = "valid") -> dict:
    """``{'bits_per_token', 'ppl'}`` of the add-one unigram model on ``split`` (computed at preparation)."""
    return dict(lm_manifest(data_dir)["unigram"][split])


def load_lm_split(
    data_dir: str | Path, split: str, *, tokens_per_sample: int, context_window: int = 0, verify: bool | str = "sampled"
) -> "LMBlockDataset":
    """Open ``split`` (``'train'``, ``'valid'``, ``'test'``) of a prepared data set as blocks.

    The files are checked against the manifest first (:func:`.steps.verify_level`: sizes and digests, of sampled
    blocks for a file over 256 MB unless ``verify="full"``); damaged data raises instead of being used.
    """
    data_dir = Path(data_dir)
    LM_DATA.open_split(
        data_dir, split, lambda _: ["dict.txt"] + [p.name for p in split_files(data_dir, split)], verify=verify
    )
    lines = RaggedArray(*split_files(data_dir, split))
    return LMBlockDataset(
        lines.data,
        Dictionary.load(data_dir / "dict.txt"),
        tokens_per_sample,
        context_window=context_window,
        split=split,
    )


class LMBlockDataset:
    """Blocks over one token stream; ``batches`` and ``collate`` as the trainer expects.

    ``stream`` is a 1-D array of ids (a memory map is fine: blocks are sliced on demand).
    """

    def __init__(
        self,
        stream: np.ndarray,
        dictionary: Dictionary,
        tokens_per_sample: int,
        *,
        context_window: int = 0,
        split: str = "",
    ) -> None:
        if tokens_per_sample < 1:
            raise ValueError(f"tokens_per_sample must be positive, got {tokens_per_sample}")
        if not 0 <= context_window < tokens_per_sample:
            raise ValueError(
                f"context_window must lie in [0, tokens_per_sample={tokens_per_sample}), got "
                f"{context_window}: each block needs at least one new token to score"
            )
        if len(stream) == 0:
            raise ValueError(f"the {split or 'given'} token stream is empty")
        self.stream, self.dictionary, self.split = stream, dictionary, split
        self.tokens_per_sample, self.context_window = tokens_per_sample, context_window
        self.block_targets = tokens_per_sample - context_window  # S
        n = -(-len(stream) // self.block_targets)  # ceil(L / S)
        starts = np.arange(n, dtype=np.int64) * self.block_targets  # first target of block b
        self.target_start = starts  # (n,)
        self.target_end = np.minimum(starts + self.block_targets, len(stream))  # (n,)
        self.input_start = np.maximum(starts - context_window, 0)  # (n,) context included
        self.sizes = self.target_end - self.input_start  # (n,) input lengths <= T

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def num_tokens(self) -> int:
        """Scored tokens in the split (each stream token once): the perplexity's denominator."""
        return int(len(self.stream))

    def __repr__(self) -> str:
        return (
            f"LMBlockDataset({self.split!r}, {len(self)} blocks of {self.tokens_per_sample} tokens"
            f"{f' (context {self.context_window})' if self.context_window else ''}, {self.num_tokens} tokens, "
            f"vocab {len(self.dictionary)})"
        )

    def __getitem__(self, b: int) -> dict:
        """Block ``b``: ``source`` (input ids) and ``target`` (``<pad>`` at context positions)."""
        if not 0 <= b < len(self):
            raise IndexError(f"block {b} out of range for {len(self)} blocks")
        i0, t0, t1 = int(self.input_start[b]), int(self.target_start[b]), int(self.target_end[b])
        # np.array copies: the stream is a read-only memory map and must never be written
        target = np.array(self.stream[i0:t1], dtype=np.int64)  # x_{i0+1} .. x_{t1}
        if i0 == 0:  # x_0 = </s>
            source = np.concatenate([[EOS], np.array(self.stream[: t1 - 1], dtype=np.int64)])
        else:
            source = np.array(self.stream[i0 - 1 : t1 - 1], dtype=np.int64)
        target[: t0 - i0] = PAD  # context: seen, not scored
        return {"id": b, "source": torch.from_numpy(source), "target": torch.from_numpy(target)}

    def batches(
        self,
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 1,
        epoch: int = 0,
        rank: int = 0,
        world_size: int = 1,
        max_sentences: int | None = None,
    ) -> list[list[int]]:
        """Block indices grouped so that ``n_blocks * tokens_per_sample <= max_tokens``.

        Deterministic in (seed, epoch, rank, world_size); see
        :func:`b2t_lib.data.batching.token_batches` (shuffled blocks, batch order shuffled, the list
        padded to a multiple of ``world_size`` and dealt out by rank).
        """
        return token_batches(
            self.sizes,
            self.sizes,
            max_tokens,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
            rank=rank,
            world_size=world_size,
            max_sentences=max_sentences,
        )

    def collate(self, indices: list[int]) -> dict:
        """Blocks -> right-padded ``tokens`` and ``target`` (B, T) with ``ntokens`` scored targets."""
        if len(indices) == 0:
            raise ValueError("cannot collate an empty batch")
        items = [self[int(b)] for b in indices]
        width = max(len(item["source"]) for item in items)
        tokens = torch.full((len(items), width), PAD, dtype=torch.long)  # (B, T)
        target = torch.full((len(items), width), PAD, dtype=torch.long)  # (B, T)
        for row, item in enumerate(items):
            tokens[row, : len(item["source"])] = item["source"]
            target[row, : len(item["target"])] = item["target"]
        return {
            "id": torch.tensor([int(b) for b in indices], dtype=torch.long),  # (B,)
            "tokens": tokens,
            "target": target,
            "ntokens": int(target.ne(PAD).sum()),
            "nsentences": len(items),
        }
