"""The ``lm`` task in the one trainer: blocks, adaptive loss, Table 4's perplexities, the context
window, the unigram baseline, refusals, and two gloo processes equal one process."""

import math

import numpy as np
import pytest
import torch

from b2t_lib import seed_everything
from b2t_lib.data.lm_dataset import lm_manifest
from b2t_lib.data.synthetic_lm import prepare_synthetic_lm
from b2t_lib.train import TrainConfig, Trainer, evaluate_run, read_log
from b2t_lib.train.registry import build_task
from ddp_check import train_in_two_processes_and_in_one

UPDATES = 6


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepare_synthetic_lm(
        tmp_path_factory.mktemp("data") / "lm", train_tokens=60_000, valid_tokens=3_000, test_tokens=3_000
    )


def config(data_dir, save_dir, **changes):
    values = dict(
        data=str(data_dir),
        save_dir=str(save_dir),
        d_model=32,
        n_heads=2,
        d_ff=64,
        decoder_layers=2,
        max_tokens=256,
        tokens_per_sample=64,
        context_window=32,
        max_update=150,
        warmup_updates=20,
        lr=5e-3,
        threads=1,
        progress_bar=False,
        log_interval=10,
        valid_interval=50,
        save_interval=150,
        eval_batch_size=16,
        device="cpu",
    )
    values.update(changes)
    return TrainConfig.from_preset("lm", "tiny", **values)


# ---------------------------------------------------------------- without training
def test_lm_presets_have_no_label_smoothing_and_the_wiki103_architecture():
    for scale in ("tiny", "small", "full"):
        cfg = TrainConfig.from_preset("lm", scale)
        m = cfg.model
        assert cfg.label_smoothing == 0.0 and m.encoder_layers == 0 and not m.decoder_final_norm
        assert m.adaptive_input and m.adaptive_softmax and m.tie_adaptive_weights and m.tie_adaptive_proj
        assert 0 < cfg.context_window < cfg.tokens_per_sample <= cfg.max_tokens
    full = TrainConfig.from_preset("lm", "full")
    assert full.model.adaptive_cutoff == (20000, 60000) and full.model.adaptive_factor == 4.0
    assert full.model.adaptive_softmax_dropout == 0.2
    assert (full.model.dropout, full.model.attention_dropout, full.model.activation_dropout) == (0.3, 0.1, 0.1)
    assert full.tokens_per_sample == 1024 and full.tokens_per_update == 1024 * 128


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(label_smoothing=0.1), "no label smoothing"),
        (dict(max_tokens=32), "cannot hold one block"),
        (dict(context_window=64), "--context-window must lie in"),
    ],
)
def test_the_task_refuses_what_it_cannot_do(changes, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        build_task(config(tmp_path / "data", tmp_path / "run", **changes))


def test_missing_data_says_how_to_prepare_wikitext(tmp_path):
    task = build_task(config(tmp_path / "nothing", tmp_path / "run", synthetic_train_pairs=0))
    with pytest.raises(FileNotFoundError, match="prepare_wikitext103.py"):
        task.prepare_data()


# ---------------------------------------------------------------- training (slow)
@pytest.mark.slow
def test_trained_lm_beats_the_unigram_model_and_reports_table4_perplexities(data_dir, tmp_path):
    record = Trainer(config(data_dir, tmp_path / "run")).train()
    assert record["status"] == "completed" and record["task"] == "lm"
    m = record["metrics"]
    manifest = lm_manifest(data_dir)
    unigram = manifest["unigram"]["valid"]
    # every token of each stream is scored once, and the perplexity is exp of the mean NLL
    for split in ("valid", "test"):
        p = m["perplexity"][split]
        assert p["tokens"] == manifest["stats"][split]["tokens"]
        assert p["ppl"] == pytest.approx(2 ** p["nll_bits"], rel=1e-5)
    assert m["valid_ppl"] == m["perplexity"]["valid"]["ppl"] and m["test_ppl"] == m["perplexity"]["test"]["ppl"]
    assert m["valid_ppl"] < 0.6 * unigram["ppl"]  # it learned more than word frequencies
    # the trainer's validation NLL (bits, blocks without context) is close to the evaluated one
    assert m["valid_nll"] == pytest.approx(m["perplexity"]["valid"]["nll_bits"], abs=0.15)
    valid = [e["valid_nll"] for e in read_log(tmp_path / "run", "valid")]
    assert valid[-1] < valid[0]
    assert set(m["samples"]["test"]) == {"prompt", "continuation", "reference"}
    assert len(m["samples"]["test"]["continuation"].split()) == 24
    task = build_task(config(data_dir, tmp_path / "run"))
    assert task.unigram_baseline() == unigram["bits_per_token"]
    ids = task.target_token_ids("valid")
    assert len(ids) == manifest["stats"]["valid"]["tokens"] and ids.dtype.kind in "iu"

    # the context window changes the evaluation, never the number of scored tokens
    plain = evaluate_run(tmp_path / "run", device="cpu", context_window=0)
    assert plain["perplexity"]["valid"]["tokens"] == m["perplexity"]["valid"]["tokens"]
    assert plain["context_window"] == 0 and plain["valid_ppl"] != m["valid_ppl"]
    assert math.isfinite(plain["valid_ppl"])


def _ddp_config(data_dir, save_dir, update_freq):
    # No dropout anywhere: two processes draw different masks than one process would.
    return config(
        data_dir,
        save_dir,
        update_freq=update_freq,
        dropout=0.0,
        adaptive_softmax_dropout=0.0,
        max_update=UPDATES,
        warmup_updates=2,
        log_interval=1,
        valid_interval=UPDATES,
        save_interval=UPDATES,
        eval_at_end=False,
    )


@pytest.mark.slow
def test_two_gloo_processes_match_one_process_with_the_adaptive_softmax(data_dir, tmp_path):
    """DDP without find_unused_parameters: every parameter, tied ones and the softmax read outside
    the wrapper's forward included, is synchronized, so the result equals one process."""
    ddp, single = train_in_two_processes_and_in_one(
        lambda save_dir, freq: _ddp_config(data_dir, save_dir, freq), tmp_path
    )
    for name, value in single["model"].items():
        torch.testing.assert_close(ddp["model"][name], value, rtol=1e-5, atol=1e-6, msg=name)
    cfg = _ddp_config(data_dir, tmp_path / "init", update_freq=1)  # the initial weights, as the trainer seeds
    task = build_task(cfg)
    task.load_datasets()
    seed_everything(cfg.seed)
    initial = task.build_model().state_dict()
    for name in (
        "decoder.adaptive_softmax.head.class_proj.weight",
        "decoder.embed_tokens.embeddings.2.0.weight",
        "decoder.embed_tokens.embeddings.1.1.weight",
    ):  # the softmax's own, a tied band, a tied projection
        assert not torch.equal(initial[name], ddp["model"][name]), name
    ddp_loss = [e["loss"] for e in read_log(tmp_path / "ddp", "train")]
    single_loss = [e["loss"] for e in read_log(tmp_path / "single", "train")]
    assert ddp_loss == pytest.approx(single_loss, rel=1e-5) and len(ddp_loss) == UPDATES
    assert np.std(ddp_loss) > 0
