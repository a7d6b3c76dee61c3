r"""Speech recognition (Table 5): LibriSpeech at small/full scale, the synthetic spoken-word corpus at tiny.

Both go through the same code: :mod:`b2t_lib.data.speech` prepares either into the same format
(80-dim fbank, utterance CMVN at loading, SentencePiece targets), and the model is the S2T
Transformer of Wang et al. (2020) (docs/methods.md §3.5): :class:`~b2t_lib.model.EncoderDecoder` with
``encoder_input="speech"``, i.e. the Conv1d subsampler (time / 4) and SpecAugment in front of the
encoder layers of any registered variant.

Training follows the fairseq S2T LibriSpeech recipe: batches of at most ``--max-tokens`` *frames*
(40,000 frames = 400 s of audio per GPU), cross entropy without label smoothing (the recipe passes
no ``--label-smoothing``), validation loss on every validation split (``dev_clean`` and
``dev_other``, fairseq's ``--valid-subset dev-clean,dev-other``).

Evaluation is the recipe's too: the last 10 checkpoints averaged (the trainer), beam 5, length
penalty 1, and fairseq-generate's default length limit ``max_len_a=0, max_len_b=200`` (the S2T
example passes neither; with ``src_len`` counted in frames, a text-style ``max_len_a`` would allow
thousands of tokens). Hypotheses are decoded from SentencePiece pieces to lower-case words and
scored with ``jiwer`` per split (:func:`b2t_lib.metrics.word_error_rate`):

.. math:: \mathrm{WER} = 100 \cdot \frac{S + D + I}{N_{\text{reference words}}}

``metrics["wer"]`` maps every evaluated split (the validation splits, then the test splits) to its
WER in percent; for LibriSpeech these are Table 5's ``dev_clean``, ``dev_other``, ``test_clean``,
``test_other``. The synthetic corpus has ``valid``, ``test_clean`` and a noisier ``test_other``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import nn

from ..model import EncoderDecoder
from ..speech_input import SpeechSource
from ..metrics import wer_counts
from ..config import ConfigError
from .task import Task, WrongData, register_task

# The tiny scale's synthetic corpus (generated into --data when it is missing): utterances per split.
SYNTHETIC_VALID, SYNTHETIC_TEST, SYNTHETIC_TEST_OTHER = 100, 100, 100
SYNTHETIC_VOCAB_SIZE = 48


class _Splits:
    """Several prepared splits read as one (LibriSpeech's validation = dev_clean + dev_other): indices
    run over the splits one after the other; a batch never mixes splits."""

    def __init__(self, datasets: list) -> None:
        self.datasets = datasets
        self.starts = np.cumsum([0] + [len(d) for d in datasets])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def batches(self, max_tokens: int, **kwargs) -> list[list[int]]:
        return [
            [int(self.starts[k]) + i for i in batch]
            for k, dataset in enumerate(self.datasets)
            for batch in dataset.batches(max_tokens, **kwargs)
        ]

    def collate(self, indices: list[int]) -> dict:
        k = int(np.searchsorted(self.starts, indices[0], side="right")) - 1
        local = [i - int(self.starts[k]) for i in indices]
        if not all(0 <= i < len(self.datasets[k]) for i in local):
            raise ValueError("a validation batch mixes splits")
        return self.datasets[k].collate(local)

    def target_token_ids(self) -> np.ndarray:
        return np.concatenate([d.target_token_ids() for d in self.datasets])


@register_task
class SpeechRecognitionTask(Task):
    name = "asr"
    metric = "wer"
    higher_is_better = False

    def __init__(self, cfg):
        super().__init__(cfg)
        self.manifest: dict = {}

    @classmethod
    def check_config(cls, cfg) -> None:
        """Speech recognition reads audio features (the S2T front end)."""
        if cfg.model.encoder_input != "speech":
            raise ConfigError(
                f"--task asr needs --encoder-input speech (got {cfg.model.encoder_input!r}): speech "
                f"recognition reads audio features"
            )

    # ---------------------------------------------------------------- data
    data_kind = "speech data"
    data_format = "b2t-speech-v1"  # b2t_lib.data.speech.FORMAT

    def prepare_synthetic(self, path: Path) -> Path:
        """The synthetic spoken-word corpus (tiny scale; finished steps are reused)."""
        from ..data.synthetic_speech import prepare_synthetic_asr

        return prepare_synthetic_asr(
            path,
            n_train=self.cfg.synthetic_train_pairs,
            n_valid=SYNTHETIC_VALID,
            n_test=SYNTHETIC_TEST,
            n_test_other=SYNTHETIC_TEST_OTHER,
            seed=1,
            vocab_size=SYNTHETIC_VOCAB_SIZE,
            workers=1,
        )

    def prepare_real(self, path: Path, **options) -> Path:
        """Stream LibriSpeech from the Hub into ``path`` (``options``: the splits), as
        ``data_scripts/prepare_librispeech.py --out-dir PATH`` does."""
        from ..data.speech import prepare_librispeech

        return prepare_librispeech(path, **options)

    def how_to_prepare(self, path: Path) -> str:
        return (
            f"Prepare LibriSpeech with `python data_scripts/prepare_librispeech.py --out-dir {path}` (the small "
            f"scale: add --splits train.clean.100 validation.clean validation.other test.clean test.other), or "
            f"your own audio with --from-files DIR, or pass --data to a prepared directory"
        )

    def load_datasets(self) -> None:
        from ..data.speech_dataset import load_speech_split, speech_manifest

        self.check_data()
        path = self.data_dir()
        self.manifest = speech_manifest(path)
        # The training features of LibriSpeech are ~55 GB: check their sizes, not their checksums.
        self.train_data = load_speech_split(path, self.manifest["train_split"], verify=False)
        valid = self.manifest["valid_splits"]
        if not valid:
            raise WrongData(
                "the speech data has no validation split",
                where=path,
                todo="prepare it with one (dev_clean/dev_other, or valid.tsv with --from-files) into a new folder",
            )
        self.valid_data = _Splits([load_speech_split(path, split) for split in valid])

    @property
    def dictionary(self):
        """The SentencePiece vocabulary (``len()`` is the model's vocabulary size)."""
        return self.train_data.vocab

    def model_fields_from_data(self) -> dict:
        return {"vocab_size": len(self.dictionary), "input_features": int(self.manifest["feature_dim"])}

    def collate(self, split, indices):
        return (self.train_data if split == "train" else self.valid_data).collate(indices)

    def target_token_ids(self, split: str) -> np.ndarray:
        """Every target id of ``split`` (pieces and each utterance's ``</s>``), 1-D: ``"train"``, ``"valid"``
        (all validation splits together) or a split's own name. For the unigram baseline."""
        if split == "train":
            return self.train_data.target_token_ids()
        if split == "valid":
            return self.valid_data.target_token_ids()
        from ..data.speech_dataset import load_speech_split

        return load_speech_split(self.data_dir(), split).target_token_ids()

    # ---------------------------------------------------------------- model
    def build_model(self) -> nn.Module:
        return EncoderDecoder(self.model_config())

    # ---------------------------------------------------------------- evaluation
    def eval_splits(self) -> list[str]:
        """The splits scored at the end: validation splits, then test splits (Table 5's order for LibriSpeech)."""
        return list(self.manifest["valid_splits"]) + list(self.manifest["test_splits"])

    def transcribe(self, model, dataset, device) -> list[str]:
        """Lower-case word hypotheses for every utterance of ``dataset``, in corpus order (:meth:`Task.decode`:
        beam search over batches of ``eval_batch_size`` utterances of similar length)."""
        return self.decode(
            model,
            dataset,
            device,
            lambda batch: SpeechSource(batch["features"], batch["src_lengths"]).to(device),
            self.cfg.lenpen,
        )

    def evaluate(self, model, device) -> dict:
        """WER (percent, jiwer, lower-cased words) of every validation and test split (Table 5), with
        the error counts and one sample per split."""
        from ..data.speech_dataset import load_speech_split

        model.eval()
        wer, details, samples = {}, {}, {}
        for split in self.eval_splits():
            dataset = load_speech_split(self.data_dir(), split)
            hyps = self.transcribe(model, dataset, device)
            refs = dataset.references()
            counts = wer_counts(refs, hyps)
            wer[split] = round(counts["wer"], 2)
            details[split] = {k: v for k, v in counts.items() if k != "wer"}
            samples[split] = {"id": dataset.utterance_id(0), "reference": refs[0], "hypothesis": hyps[0]}
        return {"wer": wer, "wer_counts": details, "samples": samples}
