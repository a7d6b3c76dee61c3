r"""Beyond the paper: a *trainability map*. For each variant, train across depths and peak learning
rates and record whether training converges, stalls or diverges.

The paper reports single points of this map: Post-LN fails at 18L-18L (Table 1) while B2T and the
baselines train; DeepNet fails at 100L-100L with a small batch (Figure 10). The map asks the
question for every (variant, depth, learning rate) cell, with the one trainer of the course
(:mod:`b2t_lib.train`) and the task's preset for everything else.

Each cell ends in one of three states:

* ``diverged``: the trainer stopped the run, because the loss or gradient became non-finite or
  the smoothed loss stayed above ``divergence_factor`` times its start
  (:class:`~b2t_lib.train.divergence.DivergenceMonitor`);
* ``converged``: the run completed and its final validation NLL beats the *unigram baseline*,
  the cross entropy of a model that knows only how often each target token occurs in the
  training data: :math:`H = -\frac{1}{|V_{tgt}|}\sum_{y\in\text{valid}}\log_2 \hat p(y)`, with
  :math:`\hat p` the add-one smoothed training frequencies. Below it, the model has learned to use
  the context (the source sentence, the target prefix);
* ``stalled``: the run completed but did not get below the unigram baseline.

The result is one JSON file, written after every cell, so an interrupted grid resumes where it
stopped (cells already in the file with the same settings are not run again). Command line
(:func:`b2t_lib.cli.cmd_trainability`)::

    python -m b2t_lib trainability --variants post_ln,pre_ln,b2t --depths 6,12,18,36 \
        --lrs 5e-4,1e-3,2e-3 --max-update 300 --out results/trainability_tiny.json
    # on a GPU machine, larger grids with the same command (and --device cuda, --scale small ...)

:func:`b2t_lib.plots.trainability.plot_trainability_map` draws the heatmap.
"""
from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from .files import write_json_atomic
from .scale import get_scale
from .variants import VARIANTS

STATUSES = ("converged", "stalled", "diverged")
FORMAT_VERSION = 1


def unigram_nll(data_dir: str | Path) -> float:
    """Bits per target token of the add-one smoothed unigram model of the training targets, on the
    validation targets (end-of-sentence included): the bar a converged model must beat."""
    from .data import load_translation_split

    train, valid = load_translation_split(data_dir, "train"), load_translation_split(data_dir, "valid")
    vocab = len(train.dictionary)
    counts = np.bincount(np.asarray(train.tgt.data, dtype=np.int64), minlength=vocab).astype(np.float64) + 1.0
    log_p = np.log2(counts / counts.sum())  # (vocab,) add-one smoothed unigram log-probabilities
    return float(-log_p[np.asarray(valid.tgt.data, dtype=np.int64)].mean())


def classify(status: str, valid_nll: float | None, threshold: float) -> str:
    """``diverged`` when the trainer said so, else ``converged`` below ``threshold`` bits, else ``stalled``."""
    if status == "diverged" or valid_nll is None or not math.isfinite(valid_nll):
        return "diverged"
    return "converged" if valid_nll < threshold else "stalled"


def cell_key(variant: str, layers: int, lr: float) -> tuple[str, int, float]:
    return (variant, int(layers), float(lr))


def cell_config(variant: str, layers: int, lr: float, max_update: int, options: dict, *, task: str = "mt",
                scale: str = "tiny", save_dir: str | Path = "runs/cell"):
    """The :class:`~b2t_lib.train.TrainConfig` of one cell: the task's preset, the variant's own recipe
    if it has one (T-Fixup: no warmup, Appendix A.1), then ``options``, then the cell's settings."""
    from .presets import recipe as recipe_values
    from .train import TrainConfig

    recipe = VARIANTS[variant].recipe or None
    explicit = dict(options)
    if recipe and recipe_values(recipe).get("lr_scheduler") == "inverse_sqrt_nowarmup":
        explicit.pop("warmup_updates", None)  # T-Fixup trains without warmup
    explicit.update(variant=variant, encoder_layers=layers, decoder_layers=layers, lr=lr,
                    max_update=max_update, save_dir=str(save_dir))
    explicit.setdefault("valid_interval", max_update)
    explicit.setdefault("save_interval", max_update)
    explicit.setdefault("log_interval", max(1, max_update // 50))
    explicit.update(eval_at_end=False, progress_bar=False, keep_last=1, resume=False)
    return TrainConfig.from_preset(task, scale, recipe, **explicit)


def train_cell(variant: str, layers: int, lr: float, *, task: str, scale: str, max_update: int,
               options: dict, save_dir: Path) -> dict:
    """Train one cell with the course's trainer; return its record (curves included, not yet classified)."""
    from .train import read_log, train

    cfg = cell_config(variant, layers, lr, max_update, options, task=task, scale=scale, save_dir=save_dir)
    shutil.rmtree(save_dir, ignore_errors=True)  # a fresh run: an interrupted cell starts over
    started = time.time()
    record = train(cfg)  # a divergence is in the record (and logged by the trainer)
    train_log, valid_log = read_log(save_dir, "train"), read_log(save_dir, "valid")
    valid_nll = valid_log[-1]["valid_nll"] if valid_log and record["status"] == "completed" else None
    return {
        "variant": variant, "layers": int(layers), "lr": float(lr), "recipe": cfg.recipe,
        "lr_scheduler": cfg.lr_scheduler,
        "warmup_updates": cfg.warmup_updates if cfg.lr_scheduler == "inverse_sqrt" else 0,
        "trainer_status": record["status"], "message": record.get("message", ""),
        "valid_nll": valid_nll, "updates": record["metrics"]["num_updates"],
        "seconds": round(time.time() - started, 2), "data": cfg.data,
        "train_curve": [[e["update"], e["loss"]] for e in train_log],
        "valid_curve": [[e["update"], e["valid_nll"]] for e in valid_log],
    }


def run_trainability_map(variants, depths, lrs, out: str | Path | None = None, *, task: str = "mt",
                         scale: str | None = None, max_update: int = 200, options: dict | None = None,
                         work_dir: str | Path | None = None, keep_runs: bool = False,
                         progress=None) -> dict:
    """Train every (variant, depth, lr) cell and return the map; write it to ``out`` after each cell.

    Args:
        variants, depths, lrs: the grid; a depth N means N encoder and N decoder layers.
        out: the JSON file. Cells it already holds are kept, not re-run; a file written with other
            settings (task, scale, max_update, options) is refused rather than overwritten.
        scale: preset scale (default: ``B2T_SCALE``); every option not given comes from
            ``preset(task, scale)`` and, for T-Fixup, its ``tfixup`` recipe.
        max_update: updates per cell.
        options: further :class:`~b2t_lib.train.TrainConfig` options for every cell (``data``,
            ``synthetic_train_pairs``, ``d_model``, ``warmup_updates``, ``max_tokens``, ``threads``,
            ``device`` ...). The data is the preset's (generated on first use at the tiny scale).
        work_dir: where the runs go (default: a temporary folder); removed unless ``keep_runs``.
        progress: called with each finished cell record (for example ``print``).
    """
    scale = scale or get_scale()
    options = dict(options or {})
    if task != "mt":
        raise ValueError(f"the trainability map is defined for the translation task (mt), not {task!r}: "
                         f"its convergence bar is the unigram NLL of the translation targets")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; known variants are: {', '.join(sorted(VARIANTS))}")
    if not variants or not depths or not lrs:
        raise ValueError("the grid is empty: give at least one variant, one depth and one learning rate")
    if max_update < 1:
        raise ValueError(f"max_update must be at least 1, got {max_update}")
    settings = {"task": task, "scale": scale, "max_update": int(max_update), "options": options}
    result = {"version": FORMAT_VERSION, **settings, "threshold": None, "cells": []}
    if out is not None and Path(out).is_file():
        previous = load_trainability(out)
        changed = sorted(k for k, v in settings.items() if previous.get(k) != v)
        if changed:
            raise ValueError(f"{out} holds a map trained with other settings ({', '.join(changed)} differ); "
                             f"pass another output file, or the same settings to resume it")
        result = previous  # resume: keep the cells already trained with these settings

    temporary = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="trainability_")) if temporary else Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        done = {cell_key(c["variant"], c["layers"], c["lr"]) for c in result["cells"]}
        for variant in variants:
            for layers in depths:
                for lr in lrs:
                    if cell_key(variant, layers, lr) in done:
                        continue
                    save_dir = work / f"{variant}_{layers}L_lr{lr:g}"
                    cell = train_cell(variant, layers, lr, task=task, scale=scale, max_update=max_update,
                                      options=options, save_dir=save_dir)
                    if result["threshold"] is None:  # the data exists now: the trainer prepared it
                        result["threshold"] = round(unigram_nll(cell["data"]), 4)
                    cell["status"] = classify(cell["trainer_status"], cell["valid_nll"], result["threshold"])
                    result["cells"].append(cell)
                    if not keep_runs:
                        shutil.rmtree(save_dir, ignore_errors=True)
                    if out is not None:
                        save_trainability(result, out)
                    if progress is not None:
                        progress(cell)
    finally:
        if temporary and not keep_runs:
            shutil.rmtree(work, ignore_errors=True)
    return result


def save_trainability(result: dict, path: str | Path) -> None:
    write_json_atomic(path, result, sort_keys=False)  # an interrupted write never leaves half a file


def load_trainability(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no trainability map at {path}; create one with `python -m b2t_lib "
                                f"trainability --out {path} ...`")
    result = json.loads(path.read_text())
    if result.get("version") != FORMAT_VERSION or "cells" not in result:
        raise ValueError(f"{path} is not a trainability map of format version {FORMAT_VERSION}")
    return result


def status_grid(result: dict, variant: str) -> tuple[list[int], list[float], list[list[str | None]]]:
    """(depths, lrs, statuses[depth][lr]) of one variant; None where a cell was not run."""
    cells = [c for c in result["cells"] if c["variant"] == variant]
    depths = sorted({c["layers"] for c in result["cells"]})
    lrs = sorted({c["lr"] for c in result["cells"]})
    lookup = {(c["layers"], c["lr"]): c["status"] for c in cells}
    return depths, lrs, [[lookup.get((d, lr)) for lr in lrs] for d in depths]
