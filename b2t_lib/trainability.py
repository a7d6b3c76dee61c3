r"""Beyond the paper: a *trainability map*. For each variant, train across depths and peak learning
rates and record whether training converges, stalls or diverges.

The paper reports single points of this map: Post-LN fails at 18L-18L (Table 1) while B2T and the
baselines train; DeepNet fails at 100L-100L with a small batch (Figure 10). The map asks the
question for every (variant, depth, learning rate) cell, with the one trainer of the course
(:mod:`b2t_lib.train`) and the task's preset for everything else.

Each cell ends with the trainer's own status (:mod:`b2t_lib.train.failure`, the same rule as every
run and table of the course):

* ``completed`` (the heatmap's legend says "trained"): the run's final validation NLL is clearly
  below the *unigram baseline*, the cross entropy of a model that knows only how often each target
  token occurs in the training data (:mod:`b2t_lib.data.unigram`): it has learned to use the
  context (the source sentence, the target prefix);
* ``stalled``: it is not ``stall_margin`` bits below that baseline, the plateau of a run that
  learned nothing beyond token frequencies;
* ``diverged``: the trainer stopped the run, because the loss or gradient became non-finite or
  the smoothed loss stayed above ``divergence_factor`` times its start
  (:class:`~b2t_lib.train.divergence.DivergenceMonitor`).

A cell is short, so the stall rule judges it at its end (``stall_deadline`` = ``max_update``);
the margin is the preset's (``stall_margin``), unless ``options`` set either.

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
import multiprocessing
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .config import ConfigError
from .files import write_json_atomic
from .presets import rehearsal_grid
from .scale import get_scale
from .train.failure import STATUSES  # noqa: F401  ("completed", "stalled", "diverged": the trainer's)
from .variants import VARIANTS

FORMAT_VERSION = 2  # 2: a cell's status is the trainer's (completed / stalled / diverged); 1 said "converged"


def cell_key(variant: str, layers: int, lr: float) -> tuple[str, int, float]:
    return (variant, int(layers), float(lr))


def cell_config(
    variant: str,
    layers: int,
    lr: float,
    max_update: int,
    options: dict,
    *,
    task: str = "mt",
    scale: str = "tiny",
    save_dir: str | Path = "runs/cell",
):
    """The :class:`~b2t_lib.train.TrainConfig` of one cell: the task's preset, the variant's own recipe
    if it has one (T-Fixup: no warmup, Appendix A.1), then ``options``, then the cell's settings."""
    from .presets import recipe as recipe_values
    from .train import TrainConfig

    recipe = VARIANTS[variant].recipe or None
    explicit = dict(options)
    if recipe and recipe_values(recipe).get("lr_scheduler") == "inverse_sqrt_nowarmup":
        explicit.pop("warmup_updates", None)  # T-Fixup trains without warmup
    explicit.update(
        variant=variant,
        encoder_layers=layers,
        decoder_layers=layers,
        lr=lr,
        max_update=max_update,
        save_dir=str(save_dir),
    )
    explicit.setdefault("valid_interval", max_update)
    explicit.setdefault("stall_deadline", max_update)  # a short cell is judged at its end
    explicit.setdefault("save_interval", max_update)
    explicit.setdefault("log_interval", max(1, max_update // 50))
    explicit.update(eval_at_end=False, progress_bar=False, keep_last=1, resume=False)
    return TrainConfig.from_preset(task, scale, recipe, **explicit)


def train_cell(
    variant: str, layers: int, lr: float, *, task: str, scale: str, max_update: int, options: dict, save_dir: Path
) -> dict:
    """Train one cell with the course's trainer; return its record (its status is the trainer's, curves included)."""
    from .train import train

    cfg = cell_config(variant, layers, lr, max_update, options, task=task, scale=scale, save_dir=save_dir)
    shutil.rmtree(save_dir, ignore_errors=True)  # a fresh run: an interrupted cell starts over
    started = time.time()
    record = train(cfg)  # a failed run (stalled, diverged) is in the record, and logged by the trainer
    return cell_record(variant, layers, lr, cfg, record, time.time() - started)


def cell_record(variant: str, layers: int, lr: float, cfg, record: dict, seconds: float) -> dict:
    """The map's entry for one trained cell: the trainer's ``record`` and the curves of its log."""
    from .train import read_log

    train_log, valid_log = read_log(cfg.save_dir, "train"), read_log(cfg.save_dir, "valid")
    return {
        "variant": variant,
        "layers": int(layers),
        "lr": float(lr),
        "recipe": cfg.recipe,
        "lr_scheduler": cfg.lr_scheduler,
        "warmup_updates": cfg.warmup_updates if cfg.lr_scheduler == "inverse_sqrt" else 0,
        "status": record["status"],
        "trainer_status": record["status"],  # the same (format 1 told them apart)
        "message": record.get("message", ""),
        "stall_rule": record.get("stall_rule"),
        "valid_nll": record["metrics"].get("valid_nll"),  # the last validation; None for a diverged run
        "updates": record["metrics"]["num_updates"],
        "seconds": round(seconds, 2),
        "data": cfg.data,
        "train_curve": [[e["update"], e["loss"]] for e in train_log],
        "valid_curve": [[e["update"], e["valid_nll"]] for e in valid_log],
    }


def run_trainability_map(
    variants,
    depths,
    lrs,
    out: str | Path | None = None,
    *,
    task: str = "mt",
    scale: str | None = None,
    max_update: int = 200,
    options: dict | None = None,
    work_dir: str | Path | None = None,
    keep_runs: bool = False,
    progress=None,
    workers: int = 1,
) -> dict:
    """Train every (variant, depth, lr) cell and return the map; write it to ``out`` after each cell.

    Args:
        variants, depths, lrs: the grid; a depth N means N encoder and N decoder layers.
        out: the JSON file. Cells it already holds are kept, not re-run; a file written with other
            settings (task, scale, max_update, options) or by an older format is refused rather than
            overwritten.
        scale: preset scale (default: ``B2T_SCALE``); every option not given comes from
            ``preset(task, scale)`` and, for T-Fixup, its ``tfixup`` recipe.
        max_update: updates per cell.
        options: further :class:`~b2t_lib.train.TrainConfig` options for every cell (``data``,
            ``synthetic_train_pairs``, ``d_model``, ``warmup_updates``, ``max_tokens``, ``threads``,
            ``device``, ``stall_margin`` ...). The data is the preset's (generated on first use at the
            tiny scale).

    The map records the stall rule's numbers once: ``unigram_baseline`` (bits per token),
    ``stall_margin`` and ``threshold`` = baseline - margin, the validation NLL a trained cell ends below.
        work_dir: where the runs go (default: a temporary folder); removed unless ``keep_runs``.
        progress: called with each finished cell record (for example ``print``).
        workers: cells trained at a time, each in its own spawned process (a cell's result does not depend on
            it). With more than one, ``out`` is written once they have all ended.
    """
    scale = scale or get_scale()
    depths, lrs = rehearsal_grid(depths, lrs, scale)  # under the rehearsal: the grid's corners only
    options = dict(options or {})
    if task != "mt":
        raise ConfigError(
            f"the trainability map is defined for the translation task (mt), not {task!r}: "
            f"its cells are N encoder and N decoder layers"
        )
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ConfigError(f"unknown variants {unknown}; known variants are: {', '.join(sorted(VARIANTS))}")
    if not variants or not depths or not lrs:
        raise ConfigError("the grid is empty: give at least one variant, one depth and one learning rate")
    if max_update < 1:
        raise ConfigError(f"max_update must be at least 1, got {max_update}")
    if workers < 1:
        raise ConfigError(f"workers must be at least 1 (cells trained at a time), got {workers}")
    settings = {"task": task, "scale": scale, "max_update": int(max_update), "options": options}
    result = {
        "version": FORMAT_VERSION,
        **settings,
        "unigram_baseline": None,
        "stall_margin": None,
        "threshold": None,
        "cells": [],
    }
    if out is not None and Path(out).is_file():
        previous = load_trainability(out)
        changed = sorted(k for k, v in settings.items() if previous.get(k) != v)
        if changed:
            raise ConfigError(
                f"{out} holds a map trained with other settings ({', '.join(changed)} differ); "
                f"pass another output file, or the same settings to resume it"
            )
        result = previous  # resume: keep the cells already trained with these settings

    temporary = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="trainability_")) if temporary else Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        done = {cell_key(c["variant"], c["layers"], c["lr"]) for c in result["cells"]}
        pending = [
            (variant, layers, lr)
            for variant in variants
            for layers in depths
            for lr in lrs
            if cell_key(variant, layers, lr) not in done
        ]

        def add(cell: dict) -> None:
            rule = cell["stall_rule"] or {}
            if result["threshold"] is None and rule.get("unigram_baseline") is not None:
                result["unigram_baseline"] = round(rule["unigram_baseline"], 4)
                result["stall_margin"] = rule["margin"]
                result["threshold"] = round(rule["unigram_baseline"] - rule["margin"], 4)
            result["cells"].append(cell)
            if not keep_runs:
                shutil.rmtree(work / f"{cell['variant']}_{cell['layers']}L_lr{cell['lr']:g}", ignore_errors=True)
            if out is not None:
                save_trainability(result, out)
            if progress is not None:
                progress(cell)

        if workers > 1 and len(pending) > 1:
            from .train import train

            configs = []
            for variant, layers, lr in pending:
                save_dir = work / f"{variant}_{layers}L_lr{lr:g}"
                shutil.rmtree(save_dir, ignore_errors=True)  # a fresh run: an interrupted cell starts over
                configs.append(
                    cell_config(variant, layers, lr, max_update, options, task=task, scale=scale, save_dir=save_dir)
                )
            started = time.time()
            # each cell in a fresh spawned process, as the launcher's sweeps run (the engine stays below them)
            with ProcessPoolExecutor(
                min(workers, len(configs)), mp_context=multiprocessing.get_context("spawn")
            ) as pool:
                records = list(pool.map(train, configs))
            seconds = (time.time() - started) * workers / len(configs)  # the mean wall time of a cell's process
            for (variant, layers, lr), cfg, record in zip(pending, configs, records, strict=True):
                add(cell_record(variant, layers, lr, cfg, record, seconds))
        else:
            for variant, layers, lr in pending:
                save_dir = work / f"{variant}_{layers}L_lr{lr:g}"
                add(
                    train_cell(
                        variant,
                        layers,
                        lr,
                        task=task,
                        scale=scale,
                        max_update=max_update,
                        options=options,
                        save_dir=save_dir,
                    )
                )
    finally:
        if temporary and not keep_runs:
            shutil.rmtree(work, ignore_errors=True)
    return result


def save_trainability(result: dict, path: str | Path) -> None:
    write_json_atomic(path, result, sort_keys=False)  # an interrupted write never leaves half a file


def load_trainability(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no trainability map at {path}; create one with `python -m b2t_lib trainability --out {path} ...`"
        )
    result = json.loads(path.read_text())
    if result.get("version") != FORMAT_VERSION or "cells" not in result:
        raise ConfigError(
            f"{path} is not a trainability map of format version {FORMAT_VERSION} (a map of "
            f"version 1 said 'converged' where the trainer now says 'completed'); train it again "
            f"into a new file"
        )
    return result


def status_grid(result: dict, variant: str) -> tuple[list[int], list[float], list[list[str | None]]]:
    """(depths, lrs, statuses[depth][lr]) of one variant; None where a cell was not run."""
    cells = [c for c in result["cells"] if c["variant"] == variant]
    depths = sorted({c["layers"] for c in result["cells"]})
    lrs = sorted({c["lr"] for c in result["cells"]})
    lookup = {(c["layers"], c["lr"]): c["status"] for c in cells}
    return depths, lrs, [[lookup.get((d, lr)) for lr in lrs] for d in depths]
