"""What a task needs of a data set: the two interfaces every loader's dataset implements.

A task (:mod:`b2t_lib.train.task`) trains and evaluates through these methods only, so a new data set is one class
with them, whatever its files hold:

* :class:`Dataset` - every split the trainer reads (translation, headlines, language modeling, speech): its
  examples are batched by ``batches`` (token-based, deterministic in seed, epoch and rank, as
  :func:`b2t_lib.data.batching.token_batches`) and made tensors by ``collate``.
* :class:`DecodableDataset` - a test split that :meth:`Task.decode <b2t_lib.train.task.Task.decode>` decodes with
  beam search: it orders examples by ``src_sizes``, gives the model ``collate``'s batches, turns output ids back
  into text with ``decode`` and scores them against ``references``.

Both are :class:`typing.Protocol` classes: a dataset does not inherit from them, it has the methods
(``isinstance(dataset, DecodableDataset)`` checks that it does; tests/test_data_units.py checks every loader).
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Dataset(Protocol):
    """One split the trainer batches and collates."""

    def __len__(self) -> int:
        """Examples (sentence pairs, blocks of tokens, utterances)."""

    def batches(
        self,
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 1,
        epoch: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> list[list[int]]:
        """Example indices grouped so a batch holds at most ``max_tokens`` tokens (frames for speech), padding
        included; this process's share (``rank`` of ``world_size``), the same for the same arguments."""

    def collate(self, indices: list[int]) -> dict:
        """The batch of ``indices`` as tensors: the model input, ``target``, ``ntokens`` (non-padding target
        tokens) and ``id`` (the indices, so decoded output can be put back in corpus order)."""


@runtime_checkable
class DecodableDataset(Dataset, Protocol):
    """A split decoded by search and scored against text references."""

    src_sizes: np.ndarray  # (n,) source length of each example (tokens, or feature frames for speech)

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of output ids, as the metric compares it (BPE removed, detokenized where the task does)."""

    def references(self) -> list[str]:
        """The reference text of every example, in corpus order."""
