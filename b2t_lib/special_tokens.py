"""The four special token ids every vocabulary of the course shares, fairseq's: ``<s>=0 <pad>=1 </s>=2 <unk>=3``.

A leaf module (it imports nothing of the library), so the data pipelines read these ids without loading the
model. :class:`~b2t_lib.data.dictionary.Dictionary` (BPE words, WikiText words) and
:class:`~b2t_lib.data.speech_vocab.SpeechVocabulary` (SentencePiece pieces) give them the same ids, and
:func:`strip_special` turns model output into the ids a decoder turns back into text.
"""

from __future__ import annotations

from typing import Iterable

BOS, PAD, EOS, UNK = 0, 1, 2, 3
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")


def strip_special(token_ids: Iterable[int]) -> list[int]:
    """The ids of one hypothesis as text is made of them: leading ``<s>``/``</s>`` skipped, everything from the next
    ``</s>`` on cut, ``<pad>`` and ``<s>`` dropped (``<unk>`` kept: it is a wrong word, not nothing). Accepts a
    list, a tensor or any iterable of ints."""
    ids = [int(i) for i in (token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids)]
    start = 0
    while start < len(ids) and ids[start] in (BOS, EOS):
        start += 1
    ids = ids[start:]
    if EOS in ids:
        ids = ids[: ids.index(EOS)]
    return [i for i in ids if i not in (PAD, BOS)]


class SpecialIds:
    """``bos()``, ``pad()``, ``eos()``, ``unk()`` of a vocabulary (fairseq's dictionary interface), the same for all."""

    def bos(self) -> int:
        return BOS

    def pad(self) -> int:
        return PAD

    def eos(self) -> int:
        return EOS

    def unk(self) -> int:
        return UNK
