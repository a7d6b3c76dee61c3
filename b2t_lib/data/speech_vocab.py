r"""The speech task's target vocabulary: a SentencePiece unigram model, as fairseq S2T builds it.

fairseq's ``gen_vocab`` trains SentencePiece on the lower-cased training transcripts with
``--model_type=unigram --vocab_size=10000 --character_coverage=1.0`` and the ids
``<s>=0, <pad>=1, </s>=2, <unk>=3`` (docs/data.md §2d). Those are the ids of the rest of the
library (:mod:`b2t_lib.special_tokens`), so a piece's SentencePiece id *is* its model id: no second
dictionary, and ``len(vocabulary)`` is the model's ``vocab_size``.

The unigram model starts from a large seed vocabulary of frequent substrings and prunes it by EM
until ``vocab_size`` pieces remain; it cannot have more pieces than the corpus has candidates, and
then SentencePiece refuses ("Vocabulary size too high (N). Please set it to a value <= M."):
:func:`train_sentencepiece` turns that into :class:`VocabularySizeError` with the largest size M.

Training is made reproducible: one thread (multi-threaded EM sums in a varying order) and a fixed
seed for SentencePiece's sentence shuffling, so the same transcripts give a byte-identical model.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Iterable

import sentencepiece as spm

from ..special_tokens import BOS, EOS, PAD, UNK, SpecialIds, strip_special
from ..errors import UserError


class VocabularySizeError(UserError, ValueError):
    """The corpus cannot support the requested number of pieces; ``largest`` says what it can."""

    def __init__(self, requested: int, largest: int | None, detail: str) -> None:
        self.requested, self.largest = requested, largest
        hint = (
            f"the largest these transcripts support is {largest}: pass --vocab-size {largest} or smaller"
            if largest is not None
            else "use a smaller --vocab-size"
        )
        super().__init__(
            f"a SentencePiece vocabulary of {requested} pieces is too large for the training "
            f"transcripts; {hint} (sentencepiece: {detail})"
        )


def train_sentencepiece(
    sentences: Iterable[str], vocab_size: int, *, seed: int = 1, model_type: str = "unigram"
) -> bytes:
    """Train SentencePiece on ``sentences`` (already lower-cased); return the serialized model.

    Deterministic for the same sentences, ``vocab_size``, ``seed`` and sentencepiece version.
    Raises :class:`VocabularySizeError` when ``vocab_size`` is more than the corpus supports.
    """
    if vocab_size <= 4:
        raise ValueError(f"vocab_size must exceed the 4 special symbols, got {vocab_size}")
    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type=model_type,
            vocab_size=vocab_size,
            character_coverage=1.0,
            bos_id=BOS,
            pad_id=PAD,
            eos_id=EOS,
            unk_id=UNK,
            num_threads=1,
            minloglevel=2,
        )
    except RuntimeError as error:
        match = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", str(error))
        if match:
            raise VocabularySizeError(vocab_size, int(match.group(2)), str(error).strip()) from None
        match = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(error))
        if match:
            raise ValueError(
                f"vocab_size={vocab_size} is too small: the transcripts have {match.group(2)} distinct "
                f"characters and special symbols, and character_coverage=1.0 keeps every one; pass "
                f"--vocab-size {match.group(2)} or more"
            ) from None
        raise
    return model.getvalue()


class SpeechVocabulary(SpecialIds):
    """SentencePiece pieces <-> ids, and ids -> words for scoring.

    ``encode(text)`` gives the target ids of a transcript (lower-cased, ``</s>`` appended);
    ``decode(ids)`` turns model output back into lower-case words, the form WER compares.
    """

    def __init__(self, model_proto: bytes) -> None:
        self.model_proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        specials = (self.sp.bos_id(), self.sp.pad_id(), self.sp.eos_id(), self.sp.unk_id())
        if specials != (BOS, PAD, EOS, UNK):
            raise ValueError(
                f"this SentencePiece model has special ids {specials}, the library needs "
                f"{(BOS, PAD, EOS, UNK)} (<s>, <pad>, </s>, <unk>); prepare the data again"
            )

    @classmethod
    def load(cls, path: str | Path) -> "SpeechVocabulary":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"SentencePiece model {path} does not exist; prepare the data first")
        return cls(path.read_bytes())

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def __repr__(self) -> str:
        return f"SpeechVocabulary({len(self)} pieces)"

    def piece(self, index: int) -> str:
        return self.sp.id_to_piece(int(index))

    def pieces(self, text: str) -> list[str]:
        """The pieces of a transcript (``'▁'`` marks a word start), for display."""
        return self.sp.encode(normalize_transcript(text), out_type=str)

    def encode(self, text: str, *, append_eos: bool = True) -> list[int]:
        """Transcript -> piece ids (lower-cased first), with ``</s>`` unless ``append_eos=False``."""
        ids = self.sp.encode(normalize_transcript(text))
        return ids + [EOS] if append_eos else ids

    def decode(self, token_ids) -> str:
        """Model output ids -> lower-case words.

        Leading ``<s>``/``</s>`` are skipped, the sequence ends at the next ``</s>``, ``<pad>`` and
        ``<s>`` are dropped, then the pieces are joined (``'▁'`` becomes a space). An ``<unk>``
        becomes the text ``⁇``, which counts as a wrong word.
        """
        return self.sp.decode([i for i in strip_special(token_ids) if 0 <= i < len(self)])


def normalize_transcript(text: str) -> str:
    """Lower-case and collapse whitespace (LibriSpeech transcripts are upper-case, no punctuation)."""
    return " ".join(text.lower().split())
