"""Two gloo processes on the CPU end with the same parameters as one process that accumulates the
same total batch (update_freq 2): the distributed path is the single-process path plus an all-reduce."""

import pytest
import torch

from b2t_lib.data import prepare_synthetic_mt
from b2t_lib.train import TrainConfig, read_log
from ddp_check import train_in_two_processes_and_in_one

pytestmark = pytest.mark.slow  # trains, in two processes

UPDATES = 6


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepare_synthetic_mt(
        tmp_path_factory.mktemp("data") / "synthetic", n_train=200, n_valid=20, n_test=20, bpe_vocab_size=300, workers=1
    )


def config(data_dir, save_dir, update_freq):
    # No dropout: two processes draw different dropout masks than one process would.
    return TrainConfig.from_preset(
        "mt",
        "tiny",
        data=str(data_dir),
        save_dir=str(save_dir),
        d_model=32,
        n_heads=2,
        d_ff=64,
        encoder_layers=1,
        decoder_layers=1,
        max_tokens=256,
        update_freq=update_freq,
        dropout=0.0,
        max_update=UPDATES,
        warmup_updates=2,
        lr=5e-3,
        threads=1,
        progress_bar=False,
        eval_at_end=False,
        log_interval=1,
        valid_interval=UPDATES,
        save_interval=UPDATES,
        device="cpu",
    )


def test_two_gloo_processes_match_one_process_with_the_same_total_batch(data_dir, tmp_path):
    ddp, single = train_in_two_processes_and_in_one(lambda save_dir, freq: config(data_dir, save_dir, freq), tmp_path)
    for name, value in single["model"].items():
        torch.testing.assert_close(ddp["model"][name], value, rtol=1e-5, atol=1e-6, msg=name)
    # the same per-update losses, and they are not trivially equal to the initial state
    ddp_loss = [e["loss"] for e in read_log(tmp_path / "ddp", "train")]
    single_loss = [e["loss"] for e in read_log(tmp_path / "single", "train")]
    assert ddp_loss == pytest.approx(single_loss, rel=1e-5) and len(ddp_loss) == UPDATES
    assert ddp_loss[-1] < ddp_loss[0]
