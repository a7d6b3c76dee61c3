"""Machine translation (Table 1): WMT En-De at small/full scale, the synthetic pair at tiny scale.

Both go through the same code: :mod:`b2t_lib.data` binarizes either into the same format, and
evaluation is the paper's (docs/methods.md §1.8): beam 4 with fairseq's length penalty (0.6 for
newstest2014, 1.0 for the other years), detokenized output, case-sensitive SacreBLEU per test
set and the average over the test sets.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from torch import nn

from ..metrics import corpus_bleu
from ..model import EncoderDecoder
from .task import Task, WrongData, register_task

logger = logging.getLogger(__name__)


def lenpen_for(split: str, lenpen: float, lenpen_other: float) -> float:
    """The README's rule: ``lenpen`` for newstest2014 (and for a task with one unnamed test set),
    ``lenpen_other`` for the other newstest years."""
    if "newstest" in split and "2014" not in split:
        return lenpen_other
    return lenpen


@register_task
class TranslationTask(Task):
    name = "mt"
    metric = "bleu"
    higher_is_better = True
    data_kind = "translation data"
    data_format = "b2t-translation-v1"  # b2t_lib.data.translation.FORMAT (Gigaword is prepared in it too)
    headlines = False  # whether this task reads article->headline data (prepare_gigaword.py's)

    @classmethod
    def reads(cls, manifest: dict) -> bool:
        """Translation data for the translation task, article->headline pairs for headline generation."""
        from ..data.summarization import ARTICLE, HEADLINE

        pair = (manifest.get("src_lang"), manifest.get("tgt_lang"))
        return super().reads(manifest) and (pair == (ARTICLE, HEADLINE)) == cls.headlines

    @classmethod
    def describe_data(cls, manifest: dict) -> str:
        return f"{manifest.get('src_lang')}->{manifest.get('tgt_lang')} data"

    # ---------------------------------------------------------------- data
    def prepare_synthetic(self, path: Path) -> Path:
        """Generate this task's synthetic data set (the tiny scale) into ``path``."""
        from ..data import prepare_synthetic_mt

        return prepare_synthetic_mt(path, n_train=self.cfg.synthetic_train_pairs, seed=0)

    def prepare_real(self, path: Path, **options) -> Path:
        """Download and prepare the real data set into ``path`` (WMT'14 En-De, as
        ``data_scripts/prepare_wmt14_en_de.py --out-dir PATH`` with ``options`` as its flags)."""
        from ..data import prepare_wmt14_en_de

        return prepare_wmt14_en_de(path, **options)

    def how_to_prepare(self, path: Path) -> str:
        """What to tell a user whose ``--data`` folder holds no prepared data set."""
        return (
            f"Prepare WMT En-De with `python data_scripts/prepare_wmt14_en_de.py --out-dir {path}` (add "
            f"--max-pairs N for the small scale), or pass --data to a prepared directory"
        )

    def load_datasets(self) -> None:
        from ..data import load_translation_split

        self.check_data()  # BLEU of headlines, ROUGE of German: refused
        path = self.data_dir()
        self.train_data = load_translation_split(path, "train")
        self.valid_data = load_translation_split(path, "valid")
        if len(self.train_data.dictionary) != len(self.valid_data.dictionary):
            raise WrongData(
                "the train and valid dictionaries differ", where=path, todo="prepare the data again into a new folder"
            )

    @property
    def dictionary(self):
        return self.train_data.dictionary

    def collate(self, split, indices):
        data = self.train_data if split == "train" else self.valid_data
        return data.collate(indices)

    def target_token_ids(self, split):
        """Every target id of ``split`` (each sentence's ids and its EOS), for the unigram baseline."""
        from ..data import load_translation_split

        data = {"train": self.train_data, "valid": self.valid_data}.get(split)
        data = data if data is not None else load_translation_split(self.data_dir(), split)
        return np.asarray(data.tgt.data)

    # ---------------------------------------------------------------- model
    def build_model(self) -> nn.Module:
        return EncoderDecoder(self.model_config())

    # ---------------------------------------------------------------- evaluation
    def translate(self, model, dataset, device, lenpen: float) -> list[str]:
        """Detokenized hypotheses for every sentence of ``dataset``, in corpus order (:meth:`Task.decode`)."""
        return self.decode(model, dataset, device, lambda batch: batch["src_tokens"].to(device), lenpen)

    def evaluate(self, model, device) -> dict:
        """Decode every test set (:meth:`translate`), score it (:meth:`score`), and lay the scores
        out for the paper's table (:meth:`metrics`); one sample per test set is kept."""
        from ..data import load_translation_split, test_split_names

        path = self.data_dir()
        model.eval()
        scores, samples = {}, {}
        for split in test_split_names(path):
            dataset = load_translation_split(path, split)
            hyps = self.translate(model, dataset, device, lenpen_for(split, self.cfg.lenpen, self.cfg.lenpen_other))
            refs = dataset.references()
            scores[split] = self.score(hyps, refs)
            samples[split] = {"source": dataset.source_text(0), "reference": refs[0], "hypothesis": hyps[0]}
        return {**self.metrics(scores), "samples": samples}

    def score(self, hypotheses: list[str], references: list[str]):
        """Case-sensitive SacreBLEU of detokenized output against the raw references (Table 1)."""
        return corpus_bleu(hypotheses, references)

    def metrics(self, scores: dict) -> dict:
        """Table 1's layout: BLEU per test set and their average."""
        average = round(sum(scores.values()) / len(scores), 2) if scores else float("nan")
        return {"bleu": scores, "bleu_avg": average}
