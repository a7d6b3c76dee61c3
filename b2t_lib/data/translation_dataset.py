"""A prepared translation split: memory-mapped ids, batching, collation and decoding.

Shapes follow fairseq's ``LanguagePairDataset`` (with right padding): for a batch of :math:`B`
pairs with target :math:`y = (y_1, \\dots, y_T)` the decoder is trained with teacher forcing,

.. math:: p(y \\mid x) = \\prod_{t=1}^{T+1} p(y_t \\mid y_{<t}, x), \\qquad y_{T+1} = \\texttt{</s>}

so ``target`` is :math:`(y_1, \\dots, y_T, \\texttt{</s>})` and the decoder input
``prev_output_tokens`` is the same sequence shifted right by one, starting with ``</s>``
(fairseq starts decoding from EOS, not BOS).

The same class serves headline generation (article -> headline): the manifest's ``tokenizer``
decides how :meth:`TranslationDataset.encode` tokenizes raw text and whether
:meth:`TranslationDataset.decode` Moses-detokenizes (MT) or only removes BPE (headlines, which
are scored as tokenized text against tokenized references).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from ..special_tokens import EOS, PAD, strip_special

from .batching import token_batches
from .bpe import BPE, remove_bpe
from .dictionary import Dictionary
from .indexed import RaggedArray
from .translation import TRANSLATION_DATA, split_files
from .text import moses_detokenize, tokenize_line


def test_split_names(data_dir: str | Path) -> list[str]:
    """Names of the test sets of a prepared data set (``['test']`` for the synthetic tasks and
    Gigaword, ``['newstest2010', ..., 'newstest2016']`` for WMT)."""
    return list(TRANSLATION_DATA.manifest(data_dir)["test_splits"])


test_split_names.__test__ = False  # its name starts with "test_": tell pytest it is not a test


def load_translation_split(data_dir: str | Path, split: str, *, verify: bool | str = "sampled") -> "TranslationDataset":
    """Open one split (``'train'``, ``'valid'`` or a test-set name) of a prepared data set.

    The files are checked against the manifest first (:func:`.steps.verify_level`): by default their sizes and
    a digest of each file (of sampled blocks of a file over 256 MB); ``verify="full"`` hashes every byte (about
    one second per GB). Damaged data raises instead of training on it.
    """
    data_dir = Path(data_dir)

    def needed(manifest: dict) -> list[str]:
        return ["dict.txt", "bpe.codes"] + [
            str(f.relative_to(data_dir))
            for lang in (manifest["src_lang"], manifest["tgt_lang"])
            for f in split_files(data_dir, split, lang)
        ]

    return TranslationDataset(data_dir, split, TRANSLATION_DATA.open_split(data_dir, split, needed, verify=verify))


class TranslationDataset:
    """One split of a prepared data set; rows are read from memory-mapped files on demand."""

    def __init__(self, data_dir: Path, split: str, manifest: dict) -> None:
        self.data_dir, self.split, self.manifest = data_dir, split, manifest
        self.src_lang, self.tgt_lang = manifest["src_lang"], manifest["tgt_lang"]
        # "moses" (MT), "none" or "rush" (headlines); manifests written before the option: moses.
        self.tokenizer: str = manifest.get("tokenizer", "moses")
        self.dictionary = Dictionary.load(data_dir / "dict.txt")
        src, tgt = (split_files(data_dir, split, lang) for lang in (self.src_lang, self.tgt_lang))
        self.src, self.tgt = RaggedArray(src[0], src[1]), RaggedArray(tgt[0], tgt[1])
        self.src_raw, self.tgt_raw = RaggedArray(src[2], src[3]), RaggedArray(tgt[2], tgt[3])
        if not len(self.src) == len(self.tgt) == len(self.src_raw) == len(self.tgt_raw):
            raise ValueError(f"{data_dir}: the files of split {split!r} disagree in length; re-run the preparation")
        self.src_sizes: np.ndarray = self.src.sizes  # (n,) tokens per source sentence, EOS included
        self.tgt_sizes: np.ndarray = self.tgt.sizes  # (n,) tokens per target sentence, EOS included

    def __len__(self) -> int:
        return len(self.src)

    def __repr__(self) -> str:
        return (
            f"TranslationDataset({self.split!r}, {len(self)} pairs, {self.src_lang}->{self.tgt_lang}, "
            f"vocab {len(self.dictionary)})"
        )

    def __getitem__(self, i: int) -> dict:
        return {
            "id": i,
            "source": torch.from_numpy(self.src[i].astype(np.int64)),
            "target": torch.from_numpy(self.tgt[i].astype(np.int64)),
        }

    # ------------------------------------------------------------------ batches
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
        """Index batches with ``n_sentences * max(src_len, tgt_len) <= max_tokens``; see
        :func:`b2t_lib.data.batching.token_batches`."""
        return token_batches(
            self.src_sizes,
            self.tgt_sizes,
            max_tokens,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
            rank=rank,
            world_size=world_size,
            max_sentences=max_sentences,
        )

    def collate(self, indices: list[int]) -> dict:
        """Pad a batch of examples into tensors (right padding with ``<pad>``)."""
        if len(indices) == 0:
            raise ValueError("cannot collate an empty batch")
        sources = [self.src[i] for i in indices]
        targets = [self.tgt[i] for i in indices]
        batch_size = len(indices)
        src_lengths = np.array([len(s) for s in sources], dtype=np.int64)
        tgt_lengths = np.array([len(t) for t in targets], dtype=np.int64)
        src_tokens = np.full((batch_size, src_lengths.max()), PAD, dtype=np.int64)  # (B, S)
        target = np.full((batch_size, tgt_lengths.max()), PAD, dtype=np.int64)  # (B, T)
        prev_output_tokens = np.full_like(target, PAD)  # (B, T)
        for row, (s, t) in enumerate(zip(sources, targets)):
            src_tokens[row, : len(s)] = s  # x_1 .. x_S, </s>
            target[row, : len(t)] = t  # y_1 .. y_T, </s>
            prev_output_tokens[row, 0] = EOS  # </s>, y_1 .. y_T
            prev_output_tokens[row, 1 : len(t)] = t[:-1]
        return {
            "id": torch.tensor(indices, dtype=torch.long),  # (B,)
            "src_tokens": torch.from_numpy(src_tokens),
            "src_lengths": torch.from_numpy(src_lengths),  # (B,)
            "target": torch.from_numpy(target),
            "prev_output_tokens": torch.from_numpy(prev_output_tokens),
            "ntokens": int(tgt_lengths.sum()),
            "nsentences": batch_size,
        }

    # ------------------------------------------------------------------ text
    @cached_property
    def _bpe(self) -> BPE:
        return BPE.from_file(self.data_dir / "bpe.codes")

    def encode(self, text: str, lang: str | None = None, *, append_eos: bool = True) -> list[int]:
        """Raw text -> ids through the preparation's pipeline (normalize, tokenize, BPE, dictionary).

        ``lang`` defaults to the source language; the result matches a ``src_tokens`` row.
        """
        lang = lang or self.src_lang
        aggressive = self.manifest["params"]["aggressive_dash_splits"]
        tokens = tokenize_line(text, lang, self.tokenizer, aggressive_dash_splits=aggressive)
        ids = self.dictionary.encode_line(self._bpe.apply(tokens))
        return ids + [EOS] if append_eos else ids

    def decode(self, token_ids, lang: str | None = None) -> str:
        """Model output ids -> text as the metric scores it (SacreBLEU for MT, ROUGE for headlines).

        Leading ``<s>``/``</s>`` are skipped, the sequence ends at the next ``</s>``, ``<pad>`` is
        dropped, then BPE is undone (``@@``) and, for Moses-tokenized data (MT), the Moses
        tokenization reverted; other data stays tokenized, like its references. ``lang``
        defaults to the target language.
        """
        pieces = self.dictionary.string(strip_special(token_ids))
        if self.tokenizer != "moses":
            return remove_bpe(pieces)
        return moses_detokenize(remove_bpe(pieces), lang or self.tgt_lang)

    def references(self) -> list[str]:
        """The target lines of this split as the metric compares them, aligned with the indices:
        raw (untokenized) for MT, the tokenized (normalized) text for headline data."""
        return [self.tgt_raw.text(i) for i in range(len(self))]

    def source_text(self, i: int) -> str:
        """The source line of example ``i`` (raw for MT, tokenized for headline data)."""
        return self.src_raw.text(i)

    def target_text(self, i: int) -> str:
        """The target line of example ``i`` (raw for MT, tokenized for headline data)."""
        return self.tgt_raw.text(i)
