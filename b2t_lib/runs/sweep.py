"""Run several independent trainings side by side in this machine's processes (a notebook's 3 variants
x 2 depths on a 2-core CPU take half the wall time this way). The launcher
(:func:`b2t_lib.runs.launch.launch`) trains tiny runs through this; larger ones it starts detached.

Each run is an ordinary :class:`~b2t_lib.train.Trainer` in a fresh ``spawn`` process with its own
``threads`` setting (1 for the tiny presets), so runs do not fight over cores; results are the
runs' ``result.json`` records, in the order of ``configs``. Runs are independent: the same
config gives the same result alone or in a sweep.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from typing import Callable

from ..config import ConfigError
from ..train.options import TrainConfig


def _run_one(cfg: TrainConfig) -> dict:
    from ..train.trainer import Trainer  # imported in the child process

    return Trainer(cfg).train()


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End the pool's processes now (a training run does not stop on its own)."""
    if hasattr(pool, "terminate_workers"):  # Python >= 3.14
        pool.terminate_workers()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def run_many(
    configs: list[TrainConfig],
    workers: int | None = None,
    *,
    poll: Callable[[], None] | None = None,
    poll_interval: float = 2.0,
) -> list[dict]:
    """Train every config (``workers`` at a time, default: one per CPU core) and return their
    result records. ``workers=1`` trains them one after the other in this process.

    With several workers, ``poll()`` is called about every ``poll_interval`` seconds while they train
    (the launcher shows progress from it). The first run that raises stops the others and its error
    is raised here; so does a KeyboardInterrupt (what the runs wrote so far is kept: ``--resume``
    continues them).
    """
    if not configs:
        return []
    save_dirs = [c.save_dir for c in configs]
    if len(set(save_dirs)) != len(save_dirs):
        raise ConfigError(f"every run needs its own --save-dir; got {save_dirs}")
    workers = workers or min(len(configs), os.cpu_count() or 1)
    if workers == 1:
        return [_run_one(c) for c in configs]
    pool = ProcessPoolExecutor(max_workers=min(workers, len(configs)), mp_context=mp.get_context("spawn"))
    try:
        futures = [pool.submit(_run_one, c) for c in configs]
        while True:
            done, pending = wait(futures, timeout=poll_interval, return_when=FIRST_EXCEPTION)
            if poll is not None:
                poll()
            failed = [f for f in futures if f in done and f.exception() is not None]
            if failed:
                raise failed[0].exception()
            if not pending:
                break
        results = [f.result() for f in futures]
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)
    return results
