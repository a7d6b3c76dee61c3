"""Exact resume (bitwise on CPU), refusal of foreign checkpoints, and divergence handling, on the
real MT task with the synthetic data and a 1L-1L model."""

import json

import pytest
import torch

from b2t_lib.data import prepare_synthetic_mt
from b2t_lib.train import CheckpointMismatch, TrainConfig, Trainer, list_checkpoints, load_checkpoint, read_log

pytestmark = pytest.mark.slow  # trains models


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepare_synthetic_mt(
        tmp_path_factory.mktemp("data") / "synthetic", n_train=200, n_valid=20, n_test=20, bpe_vocab_size=300, workers=1
    )


def tiny(data_dir, save_dir, **overrides):
    values = dict(
        data=str(data_dir),
        save_dir=str(save_dir),
        d_model=32,
        n_heads=2,
        d_ff=64,
        encoder_layers=1,
        decoder_layers=1,
        max_tokens=256,
        threads=1,
        progress_bar=False,
        eval_at_end=False,
        log_interval=1,
        valid_interval=5,
        save_interval=5,
        warmup_updates=5,
        dropout=0.2,
        word_dropout=0.1,
        attention_dropout=0.1,
    )
    values.update(overrides)
    return TrainConfig.from_preset("mt", "tiny", **values)


def run(cfg):
    return Trainer(cfg).train()


def test_resume_continues_bitwise(data_dir, tmp_path):
    # update_freq 2 and 2k = 24 updates cross an epoch boundary (the epoch has fewer batches).
    k = 12
    run(tiny(data_dir, tmp_path / "once", max_update=2 * k, update_freq=2))
    run(tiny(data_dir, tmp_path / "twice", max_update=k, update_freq=2))
    first_half = load_checkpoint(tmp_path / "twice" / "checkpoint_last.pt")["trainer"]
    run(tiny(data_dir, tmp_path / "twice", max_update=2 * k, update_freq=2, resume=True))

    once, twice = read_log(tmp_path / "once", "train"), read_log(tmp_path / "twice", "train")
    assert [e["update"] for e in twice] == list(range(1, 2 * k + 1))  # no duplicate lines
    assert [e["loss"] for e in once] == [e["loss"] for e in twice]  # exact, not approximate
    assert max(e["epoch"] for e in once) >= 1 and first_half["num_updates"] == k
    a = load_checkpoint(tmp_path / "once" / "checkpoint_last.pt")
    b = load_checkpoint(tmp_path / "twice" / "checkpoint_last.pt")
    assert all(torch.equal(a["model"][n], b["model"][n]) for n in a["model"])
    exp_avg = lambda s: [v["exp_avg"] for v in s["optimizer"]["state"].values()]  # noqa: E731
    assert all(torch.equal(x, y) for x, y in zip(exp_avg(a), exp_avg(b)))


def test_foreign_checkpoints_and_reused_save_dirs_are_refused(data_dir, tmp_path):
    run(tiny(data_dir, tmp_path / "run", max_update=5))
    with pytest.raises(CheckpointMismatch) as err:
        Trainer(tiny(data_dir, tmp_path / "run", max_update=10, encoder_layers=2, resume=True)).train()
    assert "--encoder-layers: checkpoint has 1, this run asks for 2" in str(err.value)
    with pytest.raises(FileExistsError, match="--resume"):
        Trainer(tiny(data_dir, tmp_path / "run", max_update=10)).train()


def test_divergence_stops_the_run_and_keeps_what_was_written(data_dir, tmp_path, caplog):
    save_dir = tmp_path / "diverge"
    cfg = tiny(
        data_dir,
        save_dir,
        variant="post_ln",
        lr=30.0,
        warmup_updates=2,
        max_update=200,
        save_interval=2,
        valid_interval=2,
        divergence_patience=3,
    )
    record = run(cfg)
    assert record["status"] == "diverged" and record["metrics"]["num_updates"] < 200
    assert "TRAINING DIVERGED" in caplog.text  # logged (logger b2t_lib.train.trainer)
    stored = json.loads((save_dir / "result.json").read_text())
    assert stored["status"] == "diverged" and stored["message"] == record["message"]
    saved = list_checkpoints(save_dir)
    assert saved, "checkpoints written before the divergence must be kept"
    last = load_checkpoint(saved[-1])
    assert last["trainer"]["num_updates"] < record["metrics"]["num_updates"]
    assert all(torch.isfinite(t).all() for t in last["model"].values() if t.is_floating_point())
    assert read_log(save_dir, "train"), "the log written before the divergence is kept"
