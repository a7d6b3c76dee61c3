"""Run several independent trainings side by side, one process each (a notebook's 3 variants x 2
depths on a 2-core CPU take half the wall time this way).

Each run is an ordinary :class:`~b2t_lib.train.Trainer` in a fresh ``spawn`` process with its own
``threads`` setting (1 for the tiny presets), so runs do not fight over cores; results are the
runs' ``result.json`` records, in the order of ``configs``. Runs are independent: the same
config gives the same result alone or in a sweep.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor

from .options import TrainConfig


def _run_one(cfg: TrainConfig) -> dict:
    from .trainer import Trainer   # imported in the child process

    return Trainer(cfg).train()


def run_many(configs: list[TrainConfig], workers: int | None = None) -> list[dict]:
    """Train every config (``workers`` at a time, default: one per CPU core) and return their
    result records. ``workers=1`` trains them one after the other in this process."""
    if not configs:
        return []
    save_dirs = [c.save_dir for c in configs]
    if len(set(save_dirs)) != len(save_dirs):
        raise ValueError(f"every run needs its own --save-dir; got {save_dirs}")
    workers = workers or min(len(configs), os.cpu_count() or 1)
    if workers == 1:
        return [_run_one(c) for c in configs]
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        return list(pool.map(_run_one, configs))
