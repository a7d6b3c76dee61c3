r"""Language modeling (Table 4): WikiText-103 at small/full scale, the synthetic corpus at tiny scale.

Both go through the same code (:mod:`b2t_lib.data.lm` prepares either into one format):

* **Training** cuts the training stream into contiguous blocks of ``tokens_per_sample`` tokens that
  ignore line and article boundaries (fairseq ``--sample-break-mode none``,
  :class:`~b2t_lib.data.lm_dataset.LMBlockDataset`); every block predicts its tokens from the same
  tokens shifted right by one.
* **Loss**: the summed negative log-likelihood :math:`-\sum_t \log p(y_t \mid y_{<t})` over the
  target tokens, with no label smoothing (fairseq's ``adaptive_loss`` has none; the presets set
  ``label_smoothing=0``). With the adaptive softmax it is computed from the hidden states band by
  band (:meth:`b2t_lib.adaptive.AdaptiveSoftmax.loss`): no (tokens, V) logits are built, which at
  WikiText-103's :math:`V \approx 267\mathrm{K}` is what makes training affordable. The trainer's
  validation NLL is this loss in bits per token on the validation blocks (no context window).
* **Evaluation** (Table 4): perplexity :math:`\mathrm{PPL} = \exp(\mathrm{NLL}/L)` over *every*
  token of the valid and test streams (``</s>`` included), each scored exactly once. With
  ``context_window`` :math:`C > 0` each evaluation block of :math:`T` = ``tokens_per_sample`` tokens
  scores only its last :math:`T - C` tokens; the first :math:`C` are context from the previous
  block (fairseq ``eval_lm --context-window``, ``LMContextWindowDataset``), so every token but the
  first few sees at least :math:`C` tokens of history. The B2T code's ``eval_lm`` keeps the training
  ``tokens_per_sample`` and subtracts ``--context-window`` from it; the paper does not say which
  window it used. The presets follow fairseq's adaptive-input README of that time (``--context-window
  2560`` at ``tokens_per_sample`` 3072, i.e. 512 new tokens per block): at the paper's
  ``tokens_per_sample`` 1024 that is :math:`C = 512` (see README "Language modeling").
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..config import ConfigError
from ..special_tokens import PAD
from ..loss import LossOutput, label_smoothed_nll_loss
from ..model import LanguageModel, unwrap_model
from .task import Task, register_task

SAMPLE_PROMPT, SAMPLE_TOKENS = 16, 24  # the greedy continuation stored with the metrics


@register_task
class LanguageModelingTask(Task):
    name = "lm"
    metric = "ppl"
    higher_is_better = False

    @classmethod
    def check_config(cls, cfg) -> None:
        """A decoder-only model whose blocks fit a batch; the adaptive softmax without label smoothing."""
        super().check_config(cfg)
        model = cfg.model
        if model.encoder_layers != 0:
            raise ConfigError(
                f"--task lm trains a decoder-only model: set --encoder-layers 0 (got {model.encoder_layers})"
            )
        if model.adaptive_softmax and cfg.label_smoothing > 0:
            raise ConfigError(
                f"the adaptive softmax loss has no label smoothing (fairseq's adaptive_loss); "
                f"pass --label-smoothing 0 (got {cfg.label_smoothing}) or --no-adaptive-softmax"
            )
        if cfg.max_tokens < cfg.tokens_per_sample:
            raise ConfigError(
                f"--max-tokens {cfg.max_tokens} cannot hold one block of --tokens-per-sample "
                f"{cfg.tokens_per_sample}; raise --max-tokens or lower --tokens-per-sample"
            )

    # ---------------------------------------------------------------- data
    data_kind = "language-modeling data"
    data_format = "b2t-lm-v1"  # b2t_lib.data.lm.FORMAT

    def prepare_synthetic(self, path: Path) -> Path:
        """The synthetic corpus (``synthetic_train_pairs`` counts training tokens here)."""
        from ..data.synthetic_lm import prepare_synthetic_lm

        return prepare_synthetic_lm(path, train_tokens=self.cfg.synthetic_train_pairs)

    def prepare_real(self, path: Path, **options) -> Path:
        """Download WikiText-103 into ``path/raw`` and prepare it into ``path`` (checked against its
        published sizes), as ``data_scripts/prepare_wikitext103.py --out-dir PATH`` does."""
        from ..data.lm import download_wikitext103, prepare_lm_data, wikitext103_sizes

        raw_dir = download_wikitext103(path / "raw")
        return prepare_lm_data(raw_dir, path, expected_vocab=wikitext103_sizes()["vocab"], **options)

    def how_to_prepare(self, path: Path) -> str:
        return (
            f"Prepare WikiText-103 with `python data_scripts/prepare_wikitext103.py --out-dir {path}` (or "
            f"--from-files DIR for your own tokenized corpus), or pass --data to a prepared directory"
        )

    def load_datasets(self) -> None:
        from ..data.lm_dataset import load_lm_split

        self.check_data()
        path, length = self.data_dir(), self.cfg.tokens_per_sample
        self.train_data = load_lm_split(path, "train", tokens_per_sample=length)
        self.valid_data = load_lm_split(path, "valid", tokens_per_sample=length)

    @property
    def dictionary(self):
        return self.train_data.dictionary

    def collate(self, split, indices):
        data = self.train_data if split == "train" else self.valid_data
        return lm_batch(data, indices)

    def target_token_ids(self, split: str) -> np.ndarray:
        """Every target id of ``split``: its whole token stream (each token is a target once). The
        unigram baseline (:meth:`Task.unigram_baseline`) is read from the data's manifest, which
        stores it from these streams at preparation."""
        from ..data.lm import split_files
        from ..data.indexed import RaggedArray

        return np.asarray(RaggedArray(*split_files(self.data_dir(), split)).data)

    # ---------------------------------------------------------------- model and loss
    def build_model(self) -> nn.Module:
        return LanguageModel(self.model_config())

    def loss(self, model: nn.Module, batch: dict) -> LossOutput:
        """Summed NLL of the block targets (nats). The adaptive softmax scores each target in its own
        band only (no full logits); a full softmax uses the label-smoothed loss (0 in the presets)."""
        tokens, target = batch["prev_output_tokens"], batch["target"]  # (B, T) each
        lm = unwrap_model(model)
        if lm.decoder.adaptive_softmax is None:
            return label_smoothed_nll_loss(model(tokens), target, self.cfg.label_smoothing)
        # The forward pass goes through ``model`` (DDP/compile wrapper); the softmax reads its output.
        features = model(tokens, features_only=True)  # (B, T, d_model)
        nll, ntokens = lm.decoder.adaptive_softmax.loss(features, target, ignore_index=PAD)
        return LossOutput(loss=nll, nll=nll.detach(), ntokens=ntokens)

    # ---------------------------------------------------------------- evaluation
    @torch.no_grad()
    def perplexity(self, model: nn.Module, split: str, device: torch.device) -> dict:
        """``{"ppl", "nll_bits", "tokens"}`` of ``split`` with blocks of ``tokens_per_sample`` and
        ``context_window`` tokens of unscored context; every token of the stream is scored once."""
        from ..data.lm_dataset import load_lm_split

        c = self.cfg
        data = load_lm_split(
            self.data_dir(), split, tokens_per_sample=c.tokens_per_sample, context_window=c.context_window
        )
        model.eval()
        nll = torch.zeros((), dtype=torch.float64, device=device)
        scored = 0
        for start in range(0, len(data), c.eval_batch_size):
            batch = lm_batch(data, list(range(start, min(start + c.eval_batch_size, len(data)))))
            tokens, target = batch["prev_output_tokens"].to(device), batch["target"].to(device)
            log_p = model.target_log_prob(model(tokens, features_only=True), target)  # (B, T) fp32
            keep = target.ne(PAD)
            nll -= log_p.masked_fill(~keep, 0.0).sum().double()
            scored += int(keep.sum())
        if scored != data.num_tokens:
            raise RuntimeError(
                f"scored {scored} tokens of the {split} stream, which has {data.num_tokens}; "
                f"every token must be scored exactly once"
            )
        mean = float(nll) / scored  # nats per token
        return {"ppl": round(math.exp(mean), 4), "nll_bits": round(mean / math.log(2), 6), "tokens": scored}

    def evaluate(self, model, device) -> dict:
        """Table 4: perplexity on the validation and test streams, and one greedy continuation."""
        results = {split: self.perplexity(model, split, device) for split in ("valid", "test")}
        return {
            "valid_ppl": results["valid"]["ppl"],
            "test_ppl": results["test"]["ppl"],
            "perplexity": results,
            "context_window": self.cfg.context_window,
            "tokens_per_sample": self.cfg.tokens_per_sample,
            "samples": {"test": self.greedy_sample(model, device)},
        }

    @torch.no_grad()
    def greedy_sample(self, model, device) -> dict:
        """The first ``SAMPLE_PROMPT`` test tokens and the model's greedy continuation, as text."""
        from ..data.lm_dataset import load_lm_split
        from ..generate import lm_greedy_continuation

        data = load_lm_split(self.data_dir(), "test", tokens_per_sample=SAMPLE_PROMPT, verify=False)
        first = data[0]  # source: </s> x_1 .. x_15, target: x_1 .. x_16
        prefix = torch.cat([first["source"][:1], first["target"]])[None]  # (1, 1 + SAMPLE_PROMPT)
        out = lm_greedy_continuation(model, prefix.to(device), SAMPLE_TOKENS)[0].cpu()
        following = data[1]["target"][:SAMPLE_TOKENS] if len(data) > 1 else first["target"][:0]
        words = data.dictionary
        return {
            "prompt": words.string(first["target"].tolist()),
            "continuation": words.string(out.tolist()),
            "reference": words.string(following.tolist()),
        }


def lm_batch(data, indices: list[int]) -> dict:
    """A block batch in the model's input names: ``prev_output_tokens`` (the input, (B, T)) and
    ``target`` (B, T), ``<pad>`` where nothing is scored."""
    batch = data.collate(indices)
    batch["prev_output_tokens"] = batch.pop("tokens")
    return batch
