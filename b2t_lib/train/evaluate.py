"""Evaluate a trained run: rebuild its model from a checkpoint, average the last N checkpoints as
the paper decodes (docs/methods.md §1.8), and compute the task's test metrics (BLEU for MT, ROUGE for
summarization, perplexity for the language model).

``python -m b2t_lib evaluate --save-dir DIR`` calls :func:`evaluate_run`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..config import ConfigError
from ..files import write_json_atomic
from . import records
from .checkpoint import MissingCheckpoint, average_checkpoints, list_checkpoints, load_checkpoint
from .distributed import resolve_device
from .options import TrainConfig
from .registry import build_task

EVAL_OPTIONS = (
    "beam",
    "lenpen",
    "lenpen_other",
    "max_len_a",
    "max_len_b",
    "eval_batch_size",
    "average_last",
    "data",
    "context_window",
)


def evaluate_run(
    save_dir: str | Path, checkpoint: str | Path | None = None, device: str = "auto", write: bool = True, **overrides
) -> dict:
    """Test metrics of the run in ``save_dir``.

    ``checkpoint`` picks one file (no averaging); otherwise the last ``average_last`` numbered
    checkpoints are averaged. ``overrides`` may change only evaluation options (beam, lenpen, ...).
    The metrics are written to ``save_dir/eval.json`` and merged into ``result.json``.
    """
    save_dir = Path(save_dir)
    bad = sorted(set(overrides) - set(EVAL_OPTIONS))
    if bad:
        raise ConfigError(f"evaluate cannot change {', '.join(bad)}; only {', '.join(EVAL_OPTIONS)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    if given.get("average_last", 1) < 1:  # 0 or -1 would slice to every checkpoint, or all but the oldest
        raise ConfigError(f"--average-last must be at least 1, got {given['average_last']}")
    if checkpoint is not None:
        paths = [Path(checkpoint)]
    else:
        paths = list_checkpoints(save_dir)
        if not paths and (save_dir / "checkpoint_last.pt").is_file():  # saved by epoch, no epoch ended yet
            paths = [save_dir / "checkpoint_last.pt"]
        if not paths:
            raise MissingCheckpoint("no checkpoints", where=save_dir, todo="train first, or pass --checkpoint FILE")
    state = load_checkpoint(paths[-1])
    values = dict(state["train_config"])
    values.update(given)
    cfg = TrainConfig.from_dict(values)
    cfg.check(set(given))  # the evaluation options given, as training checks them
    if checkpoint is None:
        paths = paths[-cfg.average_last :]
    task = build_task(cfg)
    task.load_datasets()
    dev = resolve_device(device)
    model = task.build_model().to(dev)
    model.load_state_dict(average_checkpoints(paths) if len(paths) > 1 else state["model"])
    metrics = task.evaluate(model, dev)
    metrics["averaged_checkpoints"] = [p.name for p in paths]
    metrics["eval_options"] = {k: getattr(cfg, k) for k in EVAL_OPTIONS}
    if write:
        write_json_atomic(save_dir / "eval.json", metrics)
        result = records.read_result(save_dir)
        if result is not None:
            result.setdefault("metrics", {}).update({k: v for k, v in metrics.items() if k not in ("eval_options",)})
            write_json_atomic(save_dir / records.RESULT_NAME, result)
    return metrics


@torch.no_grad()
def load_trained_model(save_dir: str | Path, which: str = "last"):
    """(model, task) of a run, from ``checkpoint_<which>.pt``, for notebooks that inspect models."""
    state = load_checkpoint(Path(save_dir) / f"checkpoint_{which}.pt")
    cfg = TrainConfig.from_dict(state["train_config"])
    task = build_task(cfg)
    task.load_datasets()
    model = task.build_model()
    model.load_state_dict(state["model"])
    return model.eval(), task
