"""Training and evaluation for every task of the course (one trainer, one CLI): the engine.

::

    from b2t_lib.train import TrainConfig, train
    cfg = TrainConfig.from_preset("mt", "tiny", variant="b2t", save_dir="runs/b2t")
    record = train(cfg)            # result.json: status, metrics (BLEU), wall time, tokens/s
    # status: "completed", or "stalled" / "diverged" (the paper's "Training failed", see .failure)

Running many runs, detached at small/full, is the orchestration's job (:mod:`b2t_lib.runs`: ``launch``), which
sits above this package and is never imported by it. The names below are imported on first use, so
``import b2t_lib.train`` loads no trainer until one is asked for.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "LossOutput": "..loss",
    "label_smoothed_nll_loss": "..loss",
    "CheckpointMismatch": ".checkpoint",
    "UnreadableCheckpoint": ".checkpoint",
    "UntrustedCheckpoint": ".checkpoint",
    "average_checkpoints": ".checkpoint",
    "list_checkpoints": ".checkpoint",
    "load_checkpoint": ".checkpoint",
    "DivergenceMonitor": ".divergence",
    "FAILED_STATUSES": ".failure",
    "STATUSES": ".failure",
    "StallRule": ".failure",
    "failure_note": ".failure",
    "is_failed": ".failure",
    "evaluate_run": ".evaluate",
    "load_trained_model": ".evaluate",
    "TrainConfig": ".options",
    "option_defaults": ".options",
    "option_fields": ".options",
    "read_log": ".records",
    "read_result": ".records",
    "ValidCurve": ".records",
    "valid_curve": ".records",
    "SCHEDULERS": ".schedule",
    "LRSchedule": ".schedule",
    "TASK_REGISTRY": ".task",
    "Task": ".task",
    "register_task": ".task",
    "build_task": ".registry",
    "task_names": ".registry",
    "Trainer": ".trainer",
    "train": ".trainer",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value
