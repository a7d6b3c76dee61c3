r"""Headline generation (Tables 3 and 9): Gigaword at small/full scale, the synthetic headlines at tiny scale.

A headline is generated from the first sentence of a news article (Rush et al. 2015), so the task
is translation from "article" to "headline": the same encoder-decoder, the same data format
(:mod:`b2t_lib.data` prepares Gigaword and the synthetic task with the WMT pipeline), the same
token batches and the same beam search. :class:`SummarizationTask` is therefore a
:class:`~b2t_lib.train.mt_task.TranslationTask` that differs in three places only:

* its data: :func:`~b2t_lib.data.prepare_synthetic_summarization` at the tiny scale, Gigaword
  otherwise (downloaded by :meth:`SummarizationTask.prepare_real`, as ``data_scripts/prepare_gigaword.py``);
* its decoding settings (presets): beam 5, length penalty 1.0 and fairseq's length defaults
  (``min_len`` 1, ``max_len_a`` 0, ``max_len_b`` 200); see the comment in :mod:`b2t_lib.presets`;
* its metric: F1 of ROUGE-1, ROUGE-2 and ROUGE-L (:func:`b2t_lib.metrics.corpus_rouge`,
  ``rouge-score``, no stemming), the mean over the test examples times 100,

.. math:: \text{R-N} = \frac{100}{|D|} \sum_{(h, r) \in D} F_N(h, r),

of the tokenized hypotheses against the tokenized references (``UNK`` included, as every
published Gigaword evaluation). ``result.json`` holds ``"rouge": {split: {"rouge1", "rouge2",
"rougeL"}}`` and, for the main test split (the first), ``rouge1``, ``rouge2`` and ``rougeL`` at the
top level: the layout the paper tables read (:func:`b2t_lib.paper_tables.row_from_result`).
"""

from __future__ import annotations

from pathlib import Path

from ..metrics import ROUGE_TYPES, corpus_rouge
from .mt_task import TranslationTask
from .task import register_task


@register_task
class SummarizationTask(TranslationTask):
    name = "summarization"
    metric = "rouge"
    higher_is_better = True
    data_kind = "headline data"
    headlines = True

    # ---------------------------------------------------------------- data
    def prepare_synthetic(self, path: Path) -> Path:
        """The synthetic headline task (:mod:`b2t_lib.data.synthetic_headlines`), Gigaword-shaped."""
        from ..data import prepare_synthetic_summarization

        return prepare_synthetic_summarization(path, n_train=self.cfg.synthetic_train_pairs, seed=0)

    def prepare_real(self, path: Path, **options) -> Path:
        """Download Gigaword (Rush et al.'s release) into ``path/raw`` and prepare it into ``path``, as
        ``data_scripts/prepare_gigaword.py --out-dir PATH`` does with ``options`` as its flags."""
        from ..data import download_gigaword, prepare_summarization_data

        raw_dir = download_gigaword(path / "raw")
        # Our own extraction, checked against the release's counts: no second file check.
        return prepare_summarization_data(raw_dir, path, tokenizer="none", check_files=False, **options)

    def how_to_prepare(self, path: Path) -> str:
        return (
            f"Prepare Gigaword (Rush et al. 2015) with `python data_scripts/prepare_gigaword.py --out-dir "
            f"{path}` (add --max-pairs 500000 for the small scale; --from-files DIR for pairs of your own), "
            f"or pass --data to a prepared directory"
        )

    # ---------------------------------------------------------------- evaluation
    def score(self, hypotheses: list[str], references: list[str]) -> dict[str, float]:
        """F1 ROUGE-1, ROUGE-2 and ROUGE-L (x 100, two decimals) of tokenized headlines."""
        return {name: round(value, 2) for name, value in corpus_rouge(hypotheses, references).items()}

    def metrics(self, scores: dict) -> dict:
        """Table 3's layout: ROUGE per test split, and the main (first) test split's at the top level."""
        main = next(iter(scores.values()), {})
        return {"rouge": scores, **{name: main.get(name, float("nan")) for name in ROUGE_TYPES}}
