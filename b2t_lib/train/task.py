"""The ``Task`` abstraction: what differs between MT, summarization, LM and ASR.

The trainer knows nothing about text or audio. A task says how to get the data, how to build
the model, how to compute the loss of a batch and how to evaluate a trained model; everything
else (optimizer, schedule, batching into updates, DDP, AMP, checkpoints, divergence, logs) is
shared. A new task subclasses :class:`Task`, registers itself in :data:`TASK_REGISTRY`
(``@register_task``) and is imported by :mod:`b2t_lib.train.registry`.

The model a task builds is described by ``self.cfg.model`` (a :class:`~b2t_lib.config.ModelConfig`,
every option the user set); :meth:`Task.model_config` adds what only the data knows (the fields
marked ``from_data``: the vocabulary size, ...). A task never copies model options by hand, so a new
ModelConfig field reaches every task's model unchanged.

Every task also gives the bar of the "Training failed" rule (:mod:`.failure`):
:meth:`Task.unigram_baseline`, computed from two hooks, :meth:`Task.target_token_ids` and
:meth:`Task.target_vocab_size`, and stored with the data.
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch
from torch import nn

from ..config import ConfigError, ModelConfig
from ..data.protocol import DecodableDataset
from ..data.steps import MANIFEST
from ..errors import UserError
from ..loss import LossOutput, label_smoothed_nll_loss
from ..model import forward_batch

if TYPE_CHECKING:  # annotations only: the options read the task registry (TrainConfig.check)
    from .options import TrainConfig

logger = logging.getLogger(__name__)


def resolved_path(path: str | Path) -> Path:
    """``path`` absolute, with ``~`` and links resolved (to compare two names of one folder)."""
    return Path(path).expanduser().resolve()


def is_preset_data(task: str, scale: str, values: dict) -> bool:
    """Whether ``values["data"]`` is the preset's own data folder (as the preset writes it, or the same folder
    reached from the current folder or from the repository root, where the launcher and the notebooks put it)."""
    from ..presets import preset

    own = preset(task, scale).get("data")
    if not own or not values.get("data"):
        return False
    if values["data"] == own:
        return True
    here = Path(__file__).resolve().parents[2]  # the repository root, where the command line runs
    return resolved_path(values["data"]) in {resolved_path(own), (here / own).resolve()}


class MissingData(UserError, FileNotFoundError):
    """A ``--data`` folder that holds no finished data set; the message says how to prepare one."""


class WrongData(UserError, ValueError):
    """A ``--data`` folder that holds a data set of another task (its manifest says which); the message names it."""


class Task(ABC):
    """One task's data, model, loss and evaluation."""

    name: str = ""
    metric: str = ""  # the headline test metric (``bleu``, ``rouge``, ``ppl``, ``wer``)
    higher_is_better: bool = True

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.train_data = None  # set by load_datasets()
        self.valid_data = None

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """Refuse a config whose model or batch this task cannot train (a ValueError that names the options);
        :meth:`TrainConfig.check` calls it, so a launcher refuses such a run before it starts. Every task but
        speech recognition reads tokens."""
        if cfg.model.encoder_input != "tokens":
            raise ConfigError(
                f"--task {cls.name} needs --encoder-input tokens (got {cfg.model.encoder_input!r}): "
                f"only speech recognition reads audio features"
            )

    # ---------------------------------------------------------------- data
    data_kind: str = "data"  # what the task reads, for messages ("translation data", ...)
    data_format: str = ""  # the ``format`` its data's manifest names (b2t_lib.data: FORMAT of each pipeline)

    @classmethod
    def reads(cls, manifest: dict) -> bool:
        """Whether this task reads the data set of ``manifest`` (a prepared folder's ``manifest.json``)."""
        return bool(cls.data_format) and manifest.get("format") == cls.data_format

    def data_dir(self) -> Path:
        return Path(self.cfg.data)

    def check_data(self) -> None:
        """Refuse a ``--data`` folder without a finished data set, or whose manifest names another task's data (or a
        format no task reads), before anything is loaded: the message says which task it is for, and never advises
        preparing into it. Every task's :meth:`load_datasets` starts here."""
        from ..files import read_json

        path = self.data_dir()
        manifest = read_json(path / MANIFEST)
        if manifest is None:
            raise self.missing_data(path)
        if self.reads(manifest):
            return
        owners = [name for name, cls in TASK_REGISTRY.items() if cls.reads(manifest)]
        held = TASK_REGISTRY[owners[0]].describe_data(manifest) if owners else f"{manifest.get('format')!r} data"
        raise WrongData(
            f"{path} holds {held}, not the {self.data_kind} that --task {self.name} reads"
            + (f"; it is data for --task {owners[0]}" if owners else ", which no task reads"),
            todo=(f"pass --task {owners[0]} to train on it, or " if owners else "")
            + f"pass --data a folder of {self.data_kind}; this folder is left as it is (to make one elsewhere: "
            + self.how_to_prepare(Path("<another folder>"))
            + ")",
        )

    @classmethod
    def describe_data(cls, manifest: dict) -> str:
        """What the data set of ``manifest`` holds, for messages (a manifest this task reads)."""
        return cls.data_kind

    def prepare_data(self) -> Path:
        """The data directory, ready to load (run by one process while the others wait).

        A folder with a finished preparation (its ``manifest.json``) is used as it is, if it holds this task's
        data (:meth:`check_data`). Otherwise the tiny presets generate their synthetic data set
        (``synthetic_train_pairs`` > 0, :meth:`prepare_synthetic`): the preset's value does so only in the preset's
        own data folder (:meth:`TrainConfig.from_preset`), so a mistyped or half-prepared ``--data`` folder is
        refused, not filled. At the small and full scale the real data set is downloaded and prepared into the
        folder (:meth:`prepare_real` with the options of ``presets.DATA_PREPARATION``, what the task's
        ``data_scripts/`` command does; restartable, finished steps are kept); anything else is refused with the
        command that prepares it (:meth:`how_to_prepare`).
        """
        from ..presets import DATA_PREPARATION

        path = self.data_dir()
        if (path / MANIFEST).is_file():
            self.check_data()
            return path
        if self.cfg.synthetic_train_pairs > 0:
            return self.prepare_synthetic(path)
        options = DATA_PREPARATION.get((self.name, self.cfg.scale))
        if options is None:
            raise self.missing_data(path)
        logger.info(
            "no prepared data at %s: downloading and preparing the %s (%s scale: %s)",
            path,
            self.data_kind,
            self.cfg.scale,
            options or "the whole data set",
        )
        return self.prepare_real(path, **options)

    def missing_data(self, path: Path) -> MissingData:
        """The error of a ``--data`` folder without a finished data set: what is there, and how to prepare one."""
        from ..presets import preset, preset_tasks

        if not path.exists():
            state = "the folder does not exist"
        else:
            state = f"it has no readable {MANIFEST}: no preparation finished"
        todo = self.how_to_prepare(path)
        own = preset(self.name, self.cfg.scale).get("data") if self.name in preset_tasks() else None
        if self.cfg.scale == "tiny" and own and not is_preset_data(self.name, self.cfg.scale, {"data": str(path)}):
            todo += f"; or leave out --data to train on the synthetic {self.data_kind} generated into {own}"
        return MissingData(f"no prepared {self.data_kind} at {path} ({state})", todo=todo)

    def prepare_synthetic(self, path: Path) -> Path:
        """Generate the task's synthetic data set (the tiny scale) into ``path``."""
        raise self.missing_data(path)

    def prepare_real(self, path: Path, **options) -> Path:
        """Download and prepare the task's real data set into ``path``."""
        raise self.missing_data(path)

    def how_to_prepare(self, path: Path) -> str:
        """What to tell a user whose ``--data`` folder holds no prepared data set (``path``: where to prepare it)."""
        return "Pass --data to a prepared directory"

    @abstractmethod
    def load_datasets(self) -> None:
        """Load the training and validation data (every process) into ``self.train_data`` and
        ``self.valid_data``."""

    def train_batches(self, epoch: int, rank: int, world_size: int) -> list[list[int]]:
        """This process's batches (lists of example indices) for ``epoch``, at most ``max_tokens`` tokens
        (frames for speech) each; deterministic in (seed, epoch, rank, world_size), so a resumed run
        sees the same order."""
        with self._batch_errors("train"):
            return self.train_data.batches(
                self.cfg.max_tokens, shuffle=True, seed=self.cfg.seed, epoch=epoch, rank=rank, world_size=world_size
            )

    def valid_batches(self) -> list[list[int]]:
        """All validation batches (no shuffling)."""
        with self._batch_errors("valid"):
            return self.valid_data.batches(
                self.cfg.max_tokens, shuffle=False, seed=self.cfg.seed, epoch=0, rank=0, world_size=1
            )

    @contextlib.contextmanager
    def _batch_errors(self, split: str):
        """An example too long for ``--max-tokens`` is named with its split and data folder."""
        from ..data.batching import BatchSizeError

        try:
            yield
        except BatchSizeError as err:
            if err.where:
                raise
            what, todo = err.what, err.todo
            if todo is None and ": " in what:  # "example i has n tokens ...: raise --max-tokens or ..."
                what, todo = what.rsplit(": ", 1)
            raise BatchSizeError(what, where=f"{self.data_dir()}, split {split}", todo=todo) from None

    @abstractmethod
    def collate(self, split: str, indices: list[int]) -> dict:
        """One batch as a dict of tensors (``ntokens`` = non-padding target tokens)."""

    # ---------------------------------------------------------------- the unigram baseline
    def target_token_ids(self, split: str) -> np.ndarray:
        """Every target id of ``split`` (``"train"``, ``"valid"``), 1-D, as the loss counts them
        (end-of-sentence included, no padding). A task implements it to get :meth:`unigram_baseline`."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement target_token_ids(split), so it has no unigram baseline"
        )

    def target_vocab_size(self) -> int:
        """Entries of the target dictionary (the add-one smoothing's V). Default: ``len(self.dictionary)``."""
        return len(self.dictionary)

    def unigram_baseline(self) -> float:
        r"""Bits per target token of the add-one smoothed unigram model of the training targets on
        the validation targets (:func:`b2t_lib.data.unigram.unigram_cross_entropy`).

        Read from the data's manifest when the preparation stored it; otherwise computed once from
        :meth:`target_token_ids` and cached next to the manifest of ``cfg.data``.
        """
        from ..data.unigram import cached_unigram_baseline, unigram_cross_entropy

        def compute() -> float:
            if self.train_data is None:  # not stored with the data (prepared by older code): read the data
                self.load_datasets()
            return unigram_cross_entropy(
                self.target_token_ids("train"), self.target_token_ids("valid"), self.target_vocab_size()
            )

        return cached_unigram_baseline(Path(self.cfg.data), compute)

    # ---------------------------------------------------------------- decoding
    @torch.no_grad()
    def decode(
        self,
        model: nn.Module,
        dataset: DecodableDataset,
        device: torch.device,
        source: Callable[[dict], object],
        len_penalty: float,
    ) -> list[str]:
        """The decoded text of every example of ``dataset`` (:class:`~b2t_lib.data.protocol.DecodableDataset`: it
        has ``src_sizes``, ``collate`` and ``decode``), in corpus order: batches of ``eval_batch_size``
        examples of similar source length, beam search (greedy when ``beam`` is 1) within the preset's length
        limits; ``source(batch)`` is the model's input for a collated batch (token ids, or speech features)."""
        from ..generate import beam_search, greedy_search

        c = self.cfg
        model.eval()
        order = sorted(range(len(dataset)), key=lambda i: int(dataset.src_sizes[i]))
        hyps: dict[int, str] = {}
        for start in range(0, len(order), c.eval_batch_size):
            batch = dataset.collate(order[start : start + c.eval_batch_size])
            src = source(batch)
            if c.beam > 1:
                out = beam_search(
                    model, src, beam_size=c.beam, len_penalty=len_penalty, max_len_a=c.max_len_a, max_len_b=c.max_len_b
                )
            else:
                out = greedy_search(model, src, max_len_a=c.max_len_a, max_len_b=c.max_len_b)
            for i, tokens in zip(batch["id"].tolist(), out):
                hyps[i] = dataset.decode(tokens.tolist())
        return [hyps[i] for i in range(len(dataset))]

    # ---------------------------------------------------------------- model and loss
    def model_config(self) -> ModelConfig:
        """The run's :class:`~b2t_lib.config.ModelConfig` with the fields the data decides filled in.

        Stored in checkpoints and ``result.json``; a resumed run must rebuild the same one.
        """
        from_data = self.model_fields_from_data()
        not_data = sorted(set(from_data) - set(ModelConfig.data_fields()))
        if not_data:
            raise TypeError(
                f"{type(self).__name__}.model_fields_from_data sets {not_data}, which the user "
                f"sets; only {ModelConfig.data_fields()} come from the data"
            )
        return self.cfg.model.replace(**from_data)

    def model_fields_from_data(self) -> dict:
        """The ``from_data`` ModelConfig fields for this task's data (after :meth:`load_datasets`).

        Default: the vocabulary size of ``self.dictionary``; the special token ids are fairseq's.
        """
        return {"vocab_size": len(self.dictionary)}

    @abstractmethod
    def build_model(self) -> nn.Module:
        """A freshly initialized model of :meth:`model_config` (the caller seeds the RNGs first)."""

    def forward(self, model: nn.Module, batch: dict) -> torch.Tensor:
        """Logits (B, T, V) of ``batch``'s targets (``model`` may be wrapped in DDP or torch.compile)."""
        return forward_batch(model, batch)

    def loss(self, model: nn.Module, batch: dict) -> LossOutput:
        """Label-smoothed cross entropy summed over target tokens (docs/methods.md §3.3)."""
        logits = self.forward(model, batch)  # (B, T, V)
        return label_smoothed_nll_loss(logits, batch["target"], self.cfg.label_smoothing)

    # ---------------------------------------------------------------- evaluation
    @abstractmethod
    def evaluate(self, model: nn.Module, device: torch.device) -> dict:
        """Test metrics of a trained model, laid out for the paper's table of this task."""


TASK_REGISTRY: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    TASK_REGISTRY[cls.name] = cls
    return cls
