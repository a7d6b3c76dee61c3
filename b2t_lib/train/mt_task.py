"""Machine translation (Table 1): WMT En-De at small/full scale, the synthetic pair at tiny scale.

Both go through the same code: :mod:`b2t_lib.data` binarizes either into the same format, and
evaluation is the paper's (methods_spec 1.8): beam 4 with fairseq's length penalty (0.6 for
newstest2014, 1.0 for the other years), detokenized output, case-sensitive SacreBLEU per test
set and the average over the test sets.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import sacrebleu
import torch
from torch import nn

from ..generate import beam_search, greedy_search
from ..model import EncoderDecoder
from .task import Task, register_task


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

    def __init__(self, cfg):
        super().__init__(cfg)
        self.train_data = None
        self.valid_data = None

    # ---------------------------------------------------------------- data
    def data_dir(self) -> Path:
        return Path(self.cfg.data)

    def prepare_data(self) -> Path:
        """The data directory. A folder without a finished preparation (no manifest) is generated
        as the synthetic task when ``synthetic_train_pairs`` > 0 (finished steps are reused);
        otherwise the user is told how to prepare WMT. Called by one process; the others wait."""
        from ..data import prepare_synthetic_mt
        from ..data.prepare import MANIFEST

        path = self.data_dir()
        if (path / MANIFEST).is_file():
            return path
        if self.cfg.synthetic_train_pairs > 0:
            return prepare_synthetic_mt(path, n_train=self.cfg.synthetic_train_pairs, seed=0)
        raise FileNotFoundError(
            f"no prepared translation data at {path}. Prepare WMT En-De with "
            f"`python data_scripts/prepare_wmt14_en_de.py --out-dir {path}` (add --max-pairs N for the "
            f"small scale), or pass --data to a prepared directory"
        )

    def load_datasets(self) -> None:
        from ..data import load_translation_split

        path = self.data_dir()
        self.train_data = load_translation_split(path, "train")
        self.valid_data = load_translation_split(path, "valid")
        if len(self.train_data.dictionary) != len(self.valid_data.dictionary):
            raise ValueError(f"train and valid dictionaries of {path} differ; re-run the data preparation")

    @property
    def dictionary(self):
        return self.train_data.dictionary

    def train_batches(self, epoch, rank, world_size):
        return self.train_data.batches(self.cfg.max_tokens, shuffle=True, seed=self.cfg.seed,
                                       epoch=epoch, rank=rank, world_size=world_size)

    def valid_batches(self):
        return self.valid_data.batches(self.cfg.max_tokens, shuffle=False, seed=self.cfg.seed,
                                       epoch=0, rank=0, world_size=1)

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
    @torch.no_grad()
    def translate(self, model, dataset, device, lenpen: float) -> list[str]:
        """Detokenized hypotheses for every sentence of ``dataset``, in corpus order."""
        c = self.cfg
        order = sorted(range(len(dataset)), key=lambda i: dataset.src_sizes[i]) \
            if hasattr(dataset, "src_sizes") else list(range(len(dataset)))
        hyps: dict[int, str] = {}
        for start in range(0, len(order), c.eval_batch_size):
            batch = dataset.collate(order[start:start + c.eval_batch_size])
            src = batch["src_tokens"].to(device)                       # (B, S)
            if c.beam > 1:
                out = beam_search(model, src, beam_size=c.beam, len_penalty=lenpen,
                                  max_len_a=c.max_len_a, max_len_b=c.max_len_b)
            else:
                out = greedy_search(model, src, max_len_a=c.max_len_a, max_len_b=c.max_len_b)
            for sid, tokens in zip(batch["id"].tolist(), out):
                hyps[sid] = dataset.decode(tokens.tolist())
        return [hyps[i] for i in range(len(dataset))]

    def evaluate(self, model, device) -> dict:
        """Case-sensitive detokenized SacreBLEU on every test set and their average (Table 1)."""
        from ..data import load_translation_split, test_split_names

        path = self.data_dir()
        model.eval()
        scores, samples = {}, {}
        for split in test_split_names(path):
            dataset = load_translation_split(path, split)
            hyps = self.translate(model, dataset, device,
                                  lenpen_for(split, self.cfg.lenpen, self.cfg.lenpen_other))
            refs = dataset.references()
            scores[split] = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
            samples[split] = {"source": dataset.source_text(0), "reference": refs[0], "hypothesis": hyps[0]}
        average = round(sum(scores.values()) / len(scores), 2) if scores else float("nan")
        return {"bleu": scores, "bleu_avg": average, "samples": samples}
