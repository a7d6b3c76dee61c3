"""The distributed-equivalence check the translation, language-model and speech tests share: train a config
in two gloo processes on the CPU (update_freq 1 each) and in one process that accumulates the same total
batch (update_freq 2); the two runs must end with the same parameters."""

import os
import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp

from b2t_lib.train import TrainConfig, Trainer, load_checkpoint


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, values: dict) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank)
    )
    trainer = Trainer(TrainConfig.from_dict(values))
    assert trainer.env.world_size == 2
    trainer.train()
    torch.distributed.destroy_process_group()


def train_in_two_processes_and_in_one(make_config, tmp_path: Path) -> tuple[dict, dict]:
    """``make_config(save_dir, update_freq)`` builds the run (without dropout: two processes draw other masks
    than one). Returns the last checkpoints ``(two_processes, one_process)``, from ``tmp_path/ddp`` and
    ``tmp_path/single``."""
    values = make_config(tmp_path / "ddp", 1).to_dict()
    mp.spawn(_worker, args=(_free_port(), values), nprocs=2, join=True)
    Trainer(make_config(tmp_path / "single", 2)).train()
    ddp = load_checkpoint(tmp_path / "ddp" / "checkpoint_last.pt")
    single = load_checkpoint(tmp_path / "single" / "checkpoint_last.pt")
    assert ddp["train_config"]["world_size"] == 2 and len(ddp["rng"]) == 2
    return ddp, single
