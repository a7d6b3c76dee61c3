"""Every implemented task, by name: the one task list (``--task``'s choices, the presets' keys are tested against
it). Importing this module registers them; a new task module is imported here (one line, in the paper's order)
and becomes a ``--task`` of the trainer and the command line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import ConfigError
from . import mt_task, summarization_task, lm_task, asr_task  # noqa: F401  (registers each task's name)
from .task import TASK_REGISTRY, Task

if TYPE_CHECKING:  # annotations only: the options import this module
    from .options import TrainConfig


def task_names() -> list[str]:
    """The registered tasks, in the paper's order."""
    return list(TASK_REGISTRY)


def task_class(name: str) -> type[Task]:
    """The class of task ``name``; a :class:`~b2t_lib.config.ConfigError` that lists the tasks for any other name."""
    if name not in TASK_REGISTRY:
        raise ConfigError(f"unknown task {name!r}; known tasks are: {', '.join(task_names())}")
    return TASK_REGISTRY[name]


def build_task(cfg: TrainConfig) -> Task:
    """The task object for ``cfg.task``."""
    return task_class(cfg.task)(cfg)
