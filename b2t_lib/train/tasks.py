"""Every implemented task, by name. Importing this module registers them; a new task module is
imported here (one line) and becomes a ``--task`` of the trainer and the command line."""
from __future__ import annotations

from . import asr_task, lm_task, mt_task, summarization_task  # noqa: F401  (registers each task's name)
from .options import TrainConfig
from .task import TASK_REGISTRY, Task


def build_task(cfg: TrainConfig) -> Task:
    """The task object for ``cfg.task``; a task with presets but no implementation yet is refused."""
    if cfg.task not in TASK_REGISTRY:
        raise NotImplementedError(
            f"--task {cfg.task} has presets but no implementation yet; implemented tasks: "
            f"{', '.join(sorted(TASK_REGISTRY))}"
        )
    return TASK_REGISTRY[cfg.task](cfg)
