r"""A prepared speech split: memory-mapped features and targets, frame-based batches, collation.

A batch of :math:`B` utterances with :math:`T_i` feature frames and targets
:math:`y^{(i)} = (y_1, \dots, y_{U_i}, \texttt{</s>})` becomes

* ``features`` ``(B, T_max, 80)`` float32: each utterance's fbank after utterance-level CMVN
  (:func:`b2t_lib.data.audio.utterance_cmvn`), zero-padded after its :math:`T_i` frames
  (zero is also the mean after CMVN); ``src_lengths`` ``(B,)`` holds the :math:`T_i`;
* ``target`` / ``prev_output_tokens`` ``(B, U_max + 1)`` exactly as for translation
  (:mod:`.translation_dataset`): teacher forcing, the decoder input starts with ``</s>``.

Batches are frame-based, fairseq S2T's ``--max-tokens``: a batch's padded cost
:math:`B \cdot \max_i \max(T_i, U_i + 1) \le` ``max_tokens``; the frame count always dominates, so
the reference's ``--max-tokens 40000`` means 40,000 frames (400 s of audio) per batch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..special_tokens import EOS, PAD

from .audio import NUM_MEL_BINS, utterance_cmvn
from .batching import token_batches
from .indexed import RaggedArray
from .speech import SPEECH_DATA, SPM_MODEL, part_files
from .speech_vocab import SpeechVocabulary


def speech_manifest(data_dir: str | Path) -> dict:
    """The ``manifest.json`` of a prepared speech data set (splits, parts, filter counts, vocabulary size)."""
    return SPEECH_DATA.manifest(data_dir)


def load_speech_split(data_dir: str | Path, split: str, *, verify: bool | str = "sampled") -> "SpeechDataset":
    """Open one split (``'train'``, a validation or a test split) of a prepared speech data set.

    Its files are checked against the manifest first (:func:`.steps.verify_level`): by default their sizes and
    a digest of each file (of sampled blocks of a file over 256 MB); ``verify="full"`` hashes every byte
    (about one second per GB; LibriSpeech's features are about 55 GB, docs/data.md).
    """
    data_dir = Path(data_dir)

    def needed(manifest: dict) -> list[str]:
        return [SPM_MODEL] + [
            str(f.relative_to(data_dir))
            for part in manifest["parts"][split]
            for f in part_files(data_dir, part).values()
        ]

    return SpeechDataset(data_dir, split, SPEECH_DATA.open_split(data_dir, split, needed, verify=verify))


class _Parts:
    """Several :class:`RaggedArray` read as one (a split made of parts, e.g. LibriSpeech's 3 training sets)."""

    def __init__(self, arrays: list[RaggedArray]) -> None:
        self.arrays = arrays
        self.sizes = np.concatenate([a.sizes for a in arrays]) if arrays else np.zeros(0, dtype=np.int64)
        self.starts = np.cumsum([0] + [len(a) for a in arrays])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} rows")
        part = int(np.searchsorted(self.starts, i, side="right")) - 1
        return self.arrays[part][i - int(self.starts[part])]

    def text(self, i: int) -> str:
        return bytes(self[i]).decode("utf-8")


class SpeechDataset:
    """One split of a prepared speech data set; rows are read from memory-mapped files on demand."""

    def __init__(self, data_dir: Path, split: str, manifest: dict) -> None:
        self.data_dir, self.split, self.manifest = data_dir, split, manifest
        self.parts: list[str] = list(manifest["parts"][split])
        self.vocab = SpeechVocabulary.load(data_dir / SPM_MODEL)
        files = [part_files(data_dir, part) for part in self.parts]

        def parts(kind: str) -> _Parts:
            return _Parts([RaggedArray(f[kind], f[f"{kind}.offsets"]) for f in files])

        self.features, self.texts, self.ids, self.targets = parts("fbank"), parts("text"), parts("ids"), parts("tgt")
        if not len(self.features) == len(self.texts) == len(self.ids) == len(self.targets):
            raise ValueError(f"{data_dir}: the files of split {split!r} disagree in length; re-run the preparation")
        self.src_sizes: np.ndarray = self.features.sizes  # (n,) feature frames per utterance
        self.tgt_sizes: np.ndarray = self.targets.sizes  # (n,) target pieces per utterance, EOS included

    def __len__(self) -> int:
        return len(self.features)

    def __repr__(self) -> str:
        hours = self.src_sizes.sum() * self.manifest["frame_shift_ms"] / 1000 / 3600
        return f"SpeechDataset({self.split!r}, {len(self)} utterances, {hours:.2f} h, vocab {len(self.vocab)})"

    def raw_features(self, i: int) -> np.ndarray:
        """Stored fbank of utterance ``i``: ``(frames, 80)`` float16, before CMVN."""
        return self.features[i]

    def __getitem__(self, i: int) -> dict:
        return {
            "id": i,
            "features": utterance_cmvn(self.features[i]),  # (frames, 80)
            "target": torch.from_numpy(self.targets[i].astype(np.int64)),
        }  # (pieces + 1,)

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
        """Index batches with ``n_utterances * max(frames, target length) <= max_tokens`` (frames dominate);
        see :func:`b2t_lib.data.batching.token_batches`."""
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
        """Pad a batch into tensors (module docstring): ``features``, ``src_lengths``, ``target``,
        ``prev_output_tokens``, ``id``, ``ntokens``, ``nsentences``."""
        if len(indices) == 0:
            raise ValueError("cannot collate an empty batch")
        items = [self[i] for i in indices]
        batch_size = len(items)
        src_lengths = torch.tensor([len(item["features"]) for item in items], dtype=torch.long)
        tgt_lengths = [len(item["target"]) for item in items]
        features = torch.zeros(batch_size, int(src_lengths.max()), NUM_MEL_BINS)  # (B, T, 80)
        target = torch.full((batch_size, max(tgt_lengths)), PAD, dtype=torch.long)  # (B, U)
        prev_output_tokens = torch.full_like(target, PAD)  # (B, U)
        for row, item in enumerate(items):
            features[row, : len(item["features"])] = item["features"]
            t = item["target"]
            target[row, : len(t)] = t  # y_1 .. y_U, </s>
            prev_output_tokens[row, 0] = EOS  # </s>, y_1 .. y_U
            prev_output_tokens[row, 1 : len(t)] = t[:-1]
        return {
            "id": torch.tensor(indices, dtype=torch.long),  # (B,)
            "features": features,
            "src_lengths": src_lengths,  # (B,) frames
            "target": target,
            "prev_output_tokens": prev_output_tokens,
            "ntokens": int(sum(tgt_lengths)),
            "nsentences": batch_size,
        }

    def target_token_ids(self) -> np.ndarray:
        """Every target id of the split, utterance after utterance (pieces and ``</s>``), 1-D int64."""
        if not len(self):
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.asarray(a.data) for a in self.targets.arrays]).astype(np.int64)

    # ------------------------------------------------------------------ text
    def decode(self, token_ids) -> str:
        """Model output ids -> lower-case words (:meth:`SpeechVocabulary.decode`), as WER scores them."""
        return self.vocab.decode(token_ids)

    def references(self) -> list[str]:
        """The lower-cased transcripts of this split, aligned with the indices."""
        return [self.texts.text(i) for i in range(len(self))]

    def transcript(self, i: int) -> str:
        return self.texts.text(i)

    def utterance_id(self, i: int) -> str:
        """The utterance's id (LibriSpeech ``speaker-chapter-utterance``, or the audio path / ``id`` column)."""
        return self.ids.text(i)
