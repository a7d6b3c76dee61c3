"""The ``Task`` abstraction: what differs between MT, summarization, LM and ASR.

The trainer knows nothing about text or audio. A task says how to get the data, how to build
the model, how to compute the loss of a batch and how to evaluate a trained model; everything
else (optimizer, schedule, batching into updates, DDP, AMP, checkpoints, divergence, logs) is
shared. A new task subclasses :class:`Task` and registers itself in :data:`TASK_REGISTRY`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn

from .loss import LossOutput, label_smoothed_nll_loss
from .options import TrainConfig


class Task(ABC):
    """One task's data, model, loss and evaluation."""

    name: str = ""
    metric: str = ""            # the headline test metric (``bleu``, ``rouge``, ``ppl``, ``wer``)
    higher_is_better: bool = True

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg

    # ---------------------------------------------------------------- data
    def prepare_data(self):
        """Generate or check the data on disk (run by one process while the others wait)."""

    @abstractmethod
    def load_datasets(self) -> None:
        """Load the training and validation data (every process)."""

    @abstractmethod
    def train_batches(self, epoch: int, rank: int, world_size: int) -> list[list[int]]:
        """This process's batches (lists of example indices) for ``epoch``; deterministic in
        (seed, epoch, rank, world_size), so a resumed run sees the same order."""

    @abstractmethod
    def valid_batches(self) -> list[list[int]]:
        """All validation batches (no shuffling)."""

    @abstractmethod
    def collate(self, split: str, indices: list[int]) -> dict:
        """One batch as a dict of tensors (``ntokens`` = non-padding target tokens)."""

    # ---------------------------------------------------------------- model and loss
    @abstractmethod
    def build_model(self) -> nn.Module:
        """A freshly initialized model for ``self.cfg`` (the caller seeds the RNGs first)."""

    @abstractmethod
    def model_config_dict(self) -> dict:
        """The model's configuration, stored in checkpoints to rebuild and to check resumes."""

    @abstractmethod
    def forward(self, model: nn.Module, batch: dict) -> torch.Tensor:
        """Logits (B, T, V) of ``batch``'s targets."""

    def loss(self, model: nn.Module, batch: dict) -> LossOutput:
        """Label-smoothed cross entropy summed over target tokens (methods_spec 3.3)."""
        logits = self.forward(model, batch)                 # (B, T, V)
        return label_smoothed_nll_loss(logits, batch["target"], self.cfg.label_smoothing)

    # ---------------------------------------------------------------- evaluation
    @abstractmethod
    def evaluate(self, model: nn.Module, device: torch.device) -> dict:
        """Test metrics of a trained model, laid out for the paper's table of this task."""


TASK_REGISTRY: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    TASK_REGISTRY[cls.name] = cls
    return cls


def build_task(cfg: TrainConfig) -> Task:
    """The task object for ``cfg.task``; a task with presets but no implementation yet is refused."""
    from . import mt_task  # noqa: F401  (registers "mt")

    if cfg.task not in TASK_REGISTRY:
        raise NotImplementedError(
            f"--task {cfg.task} has presets but no implementation yet; implemented tasks: "
            f"{', '.join(sorted(TASK_REGISTRY))}"
        )
    return TASK_REGISTRY[cfg.task](cfg)
