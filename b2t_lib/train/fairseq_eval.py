"""Evaluate a fairseq checkpoint (the authors' trained models, for one) with its own dictionary and BPE codes on the
course's prepared newstest2010-2016, decoded and scored as the official README does: Table 1's row, from their model.

The authors' README (takase/b2t_connection) averages the last 10 epoch checkpoints, decodes with
``generate.py --beam 4 --lenpen 0.6 --remove-bpe`` (lenpen 1.0 for every year but 2014), detokenizes with Moses'
``detokenizer.perl -l de`` and scores with SacreBLEU. Here, for each test set of a prepared WMT folder:

1. the raw source line (a prepared split keeps it) is Moses-normalized and tokenized by the course's pipeline
   (:func:`b2t_lib.data.text.tokenize_line`), split into the checkpoint's BPE pieces (its ``subword-nmt`` codes
   file) and mapped to ids by the checkpoint's source dictionary (``dict.en.txt``);
2. the model is built from the checkpoint's stored args (:func:`b2t_lib.fairseq_compat.load_fairseq_checkpoint`);
3. :meth:`b2t_lib.train.task.Task.decode` decodes (beam, length penalty and length limits of the MT presets, the
   same code that decodes the course's own runs); the ids go back through the checkpoint's target dictionary
   (``dict.de.txt``), BPE is removed and the Moses tokenization undone;
4. case-sensitive SacreBLEU against the raw references, as for the course's runs.

Step 1 is the one place where the result can depend on more than the checkpoint: the tokenizer must match the one
the checkpoint's training data went through. fairseq's ``scaling_nmt`` example (the data of the authors' README)
uses Google's preprocessed WMT'16 En-De, Moses-tokenized without aggressive hyphen splitting (the default here);
fairseq's ``prepare-wmt14en2de.sh`` splits hyphens (``--aggressive-dash-splits``).

``python -m b2t_lib evaluate --fairseq-checkpoint FILE --fairseq-dict DIR --bpe-codes FILE --data DIR`` calls
:func:`evaluate_fairseq_checkpoint` and prints the row beside the README's and the paper's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..data.bpe import BPE, remove_bpe
from ..data.dictionary import Dictionary
from ..data.text import moses_detokenize, tokenize_line
from ..fairseq_compat import load_fairseq_checkpoint
from ..errors import UserError
from ..files import CheckpointMismatch
from ..special_tokens import EOS, PAD, strip_special
from .distributed import resolve_device
from .mt_task import lenpen_for
from .options import TrainConfig
from .registry import build_task


class FairseqVocabulary:
    """A fairseq model's text interface: its BPE codes and its source and target dictionaries (``dict.{lang}.txt``
    as ``fairseq-preprocess`` writes them; with ``--joined-dictionary`` the two files are the same)."""

    def __init__(
        self,
        dict_dir: str | Path,
        bpe_codes: str | Path,
        src_lang: str = "en",
        tgt_lang: str = "de",
        aggressive_dash_splits: bool = False,
    ) -> None:
        files = {lang: Path(dict_dir) / f"dict.{lang}.txt" for lang in (src_lang, tgt_lang)}
        for path in [*files.values(), Path(bpe_codes)]:
            if not path.is_file():
                raise UserError(
                    "no such file",
                    where=path,
                    todo="give the folder of the checkpoint's dict.*.txt (--fairseq-dict) and its BPE codes "
                    "(--bpe-codes)",
                )
        self.source, self.target = Dictionary.load(files[src_lang]), Dictionary.load(files[tgt_lang])
        self.bpe = BPE.from_file(bpe_codes)
        self.src_lang, self.tgt_lang, self.aggressive_dash_splits = src_lang, tgt_lang, aggressive_dash_splits

    def encode(self, raw: str) -> list[int]:
        """A raw source line -> source ids and EOS (normalize, tokenize, BPE, dictionary)."""
        tokens = tokenize_line(raw, self.src_lang, "moses", aggressive_dash_splits=self.aggressive_dash_splits)
        return self.source.encode_line(self.bpe.apply(tokens)) + [EOS]

    def decode(self, token_ids) -> str:
        """Target ids -> detokenized text (``--remove-bpe``, then Moses' detokenizer), as SacreBLEU reads it."""
        return moses_detokenize(remove_bpe(self.target.string(strip_special(token_ids))), self.tgt_lang)


class ReencodedSplit:
    """A prepared test split read through another vocabulary: the raw sources encoded by ``vocab``, the raw
    references as they are. It has what :meth:`Task.decode` reads (``src_sizes``, ``collate``, ``decode``)."""

    def __init__(self, dataset, vocab: FairseqVocabulary) -> None:
        self.vocab = vocab
        self.sources = [vocab.encode(dataset.source_text(i)) for i in range(len(dataset))]
        self.src_sizes = np.array([len(s) for s in self.sources], dtype=np.int64)  # (n,) EOS included
        self.refs = dataset.references()

    def __len__(self) -> int:
        return len(self.sources)

    def collate(self, indices: list[int]) -> dict:
        rows = [self.sources[i] for i in indices]
        src_tokens = torch.full((len(rows), max(len(r) for r in rows)), PAD, dtype=torch.long)  # (B, S)
        for row, ids in enumerate(rows):
            src_tokens[row, : len(ids)] = torch.tensor(ids)
        return {
            "id": torch.tensor(indices),
            "src_tokens": src_tokens,
            "src_lengths": torch.tensor([len(r) for r in rows]),
        }

    def decode(self, token_ids) -> str:
        return self.vocab.decode(token_ids)


def evaluate_fairseq_checkpoint(
    checkpoint: str | Path,
    dict_dir: str | Path,
    bpe_codes: str | Path,
    data: str | Path,
    *,
    device: str = "auto",
    src_lang: str = "en",
    tgt_lang: str = "de",
    aggressive_dash_splits: bool = False,
    trust_checkpoint: bool = False,
    **eval_options,
) -> dict:
    """BLEU per test set of ``data`` (a prepared WMT folder), their average and every hypothesis, for a fairseq
    checkpoint read with its own dictionaries and BPE codes. ``eval_options`` change the decoding (``beam``,
    ``lenpen``, ``lenpen_other``, ``max_len_a``, ``max_len_b``, ``eval_batch_size``); the defaults are the paper's."""
    from ..data import load_translation_split, test_split_names

    given = {k: v for k, v in eval_options.items() if v is not None}
    cfg = TrainConfig.from_preset("mt", "full", data=str(data), **given)  # the paper's decoding options
    task = build_task(cfg)
    task.check_data()
    vocab = FairseqVocabulary(dict_dir, bpe_codes, src_lang, tgt_lang, aggressive_dash_splits)
    if not Path(checkpoint).is_file():
        raise UserError("no such file", where=checkpoint, todo="give the fairseq checkpoint (--fairseq-checkpoint)")
    model = load_fairseq_checkpoint(checkpoint, trust_checkpoint=trust_checkpoint)
    rows = model.cfg.vocab_size
    if not len(vocab.source) == len(vocab.target) == rows:
        raise CheckpointMismatch(
            f"the dictionaries have {len(vocab.source)} ({src_lang}) and {len(vocab.target)} ({tgt_lang}) symbols, the "
            f"checkpoint's embeddings {rows} rows: give the dict.*.txt the checkpoint was trained with"
        )
    dev = resolve_device(device)
    model.to(dev).eval()
    scores, hypotheses = {}, {}
    for split in test_split_names(data):
        view = ReencodedSplit(load_translation_split(data, split), vocab)
        lenpen = lenpen_for(split, cfg.lenpen, cfg.lenpen_other)
        hypotheses[split] = task.decode(model, view, dev, lambda batch: batch["src_tokens"].to(dev), lenpen)
        scores[split] = task.score(hypotheses[split], view.refs)
    return {
        **task.metrics(scores),
        "hypotheses": hypotheses,
        "eval_options": {k: getattr(cfg, k) for k in ("beam", "lenpen", "lenpen_other", "max_len_a", "max_len_b")},
    }
