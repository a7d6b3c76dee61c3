"""Training and evaluation for every task of the course (one trainer, one CLI).

::

    from b2t_lib.train import TrainConfig, Trainer, train, evaluate_run
    cfg = TrainConfig.from_preset("mt", "tiny", variant="b2t", save_dir="runs/b2t")
    record = train(cfg)            # result.json: status, metrics (BLEU), wall time, tokens/s
    # status: "completed", or "stalled" / "diverged" (the paper's "Training failed", see .failure)
"""
from ..loss import LossOutput, label_smoothed_nll_loss
from .checkpoint import (CheckpointMismatch, UnreadableCheckpoint, UntrustedCheckpoint, average_checkpoints,
                         list_checkpoints, load_checkpoint)
from .divergence import DivergenceMonitor
from .failure import FAILED_STATUSES, STATUSES, StallRule, failure_note, is_failed
from .evaluate import evaluate_run, load_trained_model
from .options import TrainConfig, option_defaults, option_fields
from .records import read_log, read_result
from .schedule import SCHEDULERS, LRSchedule
from .sweep import run_many
from .task import TASK_REGISTRY, Task, register_task
from .tasks import build_task, data_unigram_baseline
from .trainer import Trainer, train

__all__ = [
    "CheckpointMismatch", "UnreadableCheckpoint", "UntrustedCheckpoint", "average_checkpoints",
    "list_checkpoints", "load_checkpoint", "option_defaults", "option_fields",
    "DivergenceMonitor", "FAILED_STATUSES", "STATUSES", "StallRule", "failure_note", "is_failed", "evaluate_run", "load_trained_model", "LossOutput",
    "label_smoothed_nll_loss", "TrainConfig", "read_log", "read_result", "SCHEDULERS", "LRSchedule",
    "run_many", "TASK_REGISTRY", "Task", "build_task", "data_unigram_baseline", "register_task", "Trainer", "train",
]
