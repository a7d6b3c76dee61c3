"""One launcher for every training cell and ``make course``: the same call trains at every scale.

::

    from b2t_lib.runs.launch import launch
    runs = {f"{v}_{n}L": TrainConfig.from_preset("mt", SCALE, variant=v, encoder_layers=n, decoder_layers=n)
            for v in ("post_ln", "pre_ln", "b2t") for n in (6, 18)}
    records = launch(runs, "06_machine_translation")    # {name: result.json record}, once all have ended

Each run trains in ``runs_root() / group / name`` (:mod:`.runs`: ``$B2T_RUNS``, else ``<repo>/runs``);
whatever ``save_dir`` the config had is replaced. A run whose ``result.json`` exists with the same
options is not trained again (its status may be ``completed``, ``stalled`` or ``diverged``: a failed
run is a result, not something to retry); a run with checkpoints but no result is resumed
(``--resume``, bitwise exact); a folder that holds a run with *other* options is refused with the list
of differences (``on_mismatch="retrain"`` deletes it and trains again: results cost GPU-hours, so this
never happens unasked).

* ``tiny``: the runs train in this machine's processes (:func:`.sweep.run_many`), ``workers`` at a time.
* ``small`` / ``full``: refused without a CUDA device (the scale switch's message) unless the config
  says ``device="cpu"``; then a plan with the estimated GPU-hours (:mod:`.cost`) is printed and a
  detached queue (:mod:`.queue`) prepares the data and starts each run as its own process, one per GPU
  (``torchrun`` over all visible GPUs at ``full``), queued when runs outnumber GPUs. Logs, checkpoints
  and launch records stay in the run folders; closing the notebook or restarting the kernel stops
  nothing. Calling ``launch`` again re-attaches: finished runs are skipped, running ones shown, those
  whose process died are resumed. Interrupting the cell only stops the waiting.

Progress: one bar per run (:mod:`.progress`), or plain-text lines under nbval and without a terminal.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from datetime import datetime
from pathlib import Path

from ..files import read_json, write_json_atomic
from ..presets import preset
from . import queue as q
from .cost import describe, estimate_gpu_hours, format_hours
from ..train.options import RESUMABLE_CHANGES, TrainConfig
from .progress import LaunchProgress
from .state import (
    QUEUE_DIR,
    TRAIN_LOG,
    RunStatus,
    check_name,
    config_differences,
    group_dir,
    group_statuses,
    log_tail,
    repo_root,
    runs_root,
    stored_config,
)
from .sweep import run_many
from ..config import ConfigError
from ..errors import UserError

__all__ = ["launch", "runs_root", "estimate_gpu_hours", "LaunchError"]


class LaunchError(UserError, RuntimeError):
    """Runs that could not be started or ended without a result; the message says which and where to look."""


def _resolve(cfg: TrainConfig, save_dir: Path) -> TrainConfig:
    """The config as the launcher trains it: its folder, no per-process bar, ``--resume``, and an absolute
    ``data`` path. A relative one is taken from the current folder, except the preset's own ``data/...``
    folder, which is taken from the repository root (where the command line, run from the root, puts it),
    so a notebook (run in ``notebooks/``), a terminal and ``make course`` share one copy of the data."""
    data = Path(cfg.data).expanduser()
    if not data.is_absolute():
        base = repo_root() if cfg.data == preset(cfg.task, cfg.scale).get("data") else Path.cwd()
        data = (base / data).resolve()
    return cfg.replace(save_dir=str(save_dir), data=str(data), progress_bar=False, resume=True)


def _check_folders(statuses: dict[str, RunStatus], configs: dict[str, TrainConfig], on_mismatch: str) -> None:
    """Refuse (or, with ``on_mismatch="retrain"``, clear) folders that hold a run with other options."""
    for name, status in statuses.items():
        if status.state == "new":
            continue
        stored = stored_config(status.dir)
        if stored is None:
            continue
        allowed = frozenset() if status.state == "finished" else RESUMABLE_CHANGES
        diffs = config_differences(stored, configs[name].to_dict(), allowed)
        if not diffs:
            continue
        where = f"{status.dir} ({status.describe()})"
        if status.state == "running":
            raise LaunchError(
                f"{where} is being trained right now with other options:\n  "
                + "\n  ".join(diffs)
                + f"\nWait for it, or stop it (pid {status.launch.get('pid')}), or use another name."
            )
        if on_mismatch != "retrain":
            raise LaunchError(
                f"{where} holds a run with other options:\n  "
                + "\n  ".join(diffs)
                + "\nIt is kept. Give this run another name, delete the folder, or call "
                "launch(..., on_mismatch='retrain') to delete it and train again."
            )
        shutil.rmtree(status.dir)
        statuses[name] = RunStatus(name, status.dir, "new")


def _prepare_data(configs) -> None:
    """Prepare each data folder the runs need once, before they start (parallel runs never race to make it)."""
    from ..train.registry import build_task

    seen = set()
    for cfg in configs:
        if (cfg.task, cfg.data) not in seen:
            seen.add((cfg.task, cfg.data))
            build_task(cfg).prepare_data()


def _default_devices(configs: list[TrainConfig], workers: int | None) -> list[str]:
    if all(c.scale == "tiny" or c.device == "cpu" for c in configs):
        return ["cpu"] * (workers or min(len(configs), os.cpu_count() or 1))
    gpus = q.visible_gpus()
    if any(c.scale == "full" for c in configs):
        return [",".join(gpus)]  # one run at a time on every GPU (torchrun)
    return gpus  # one run per GPU


def _print_plan(
    group: str, configs: dict[str, TrainConfig], statuses: dict[str, RunStatus], slots: list[dict], workers: int
) -> None:
    print(f"launch '{group}': {len(configs)} runs under {group_dir(group)}")
    total, measured = 0.0, None
    for name, cfg in configs.items():
        status = statuses[name]
        line = f"  {name:<16} {status.describe():<12}"
        if cfg.scale != "tiny":
            est = estimate_gpu_hours(cfg)
            left = 0.0 if status.state == "finished" else est.gpu_hours * (1 - status.update / cfg.max_update)
            total += left
            measured = est.throughput
            line += f" {describe(cfg)}" + (f" ({format_hours(left)} left)" if 0 < status.update else "")
        print(line)
    if measured is not None:
        print(
            f"  estimated GPU-hours still to spend: ~{format_hours(total)} ({measured.source}; an estimate "
            f"from the FLOP count, see b2t_lib.runs.cost)"
        )
    devices = ", ".join(s["name"] for s in slots)
    print(
        f"  devices: {devices}; {workers} run(s) at a time, the others queued; logs: <run>/{TRAIN_LOG}; "
        f"status from a terminal: python -m b2t_lib runs {group}"
    )


def _detached_message(group: str) -> str:
    return (
        f"Stopped waiting. The runs of '{group}' go on in the background (folders under "
        f"{group_dir(group)}; each has train.log and launch.json). Run the same cell again to re-attach: "
        f"finished runs are skipped, running ones shown, interrupted ones resumed. From a terminal: "
        f"`python -m b2t_lib runs {group}` (it lists the pids, should you want to stop a run)."
    )


def _failures(statuses: dict[str, RunStatus]) -> None:
    failed = [s for s in statuses.values() if s.state == "failed"]
    if failed:
        parts = [
            f"{s.name}: {s.describe()}\n    " + log_tail(s.dir / TRAIN_LOG).replace("\n", "\n    ") for s in failed
        ]
        raise LaunchError(
            f"{len(failed)} run(s) ended without a result (the others finished):\n"
            + "\n".join(parts)
            + "\nFix the cause and call launch again: it resumes them."
        )


def launch(
    runs: dict[str, TrainConfig],
    group: str,
    *,
    workers: int | None = None,
    devices: list[str] | None = None,
    detach: bool | None = None,
    wait: bool = True,
    progress: bool = True,
    progress_interval: float = 30.0,
    on_mismatch: str = "refuse",
    poll_interval: float = 1.0,
) -> dict[str, dict]:
    """Train ``runs`` (run name -> :class:`TrainConfig`) in ``runs_root()/group/<name>``; return each
    run's ``result.json`` record once all have ended (see the module docstring).

    Args:
        workers: runs at a time (tiny: processes, default one per core; detached: at most one per
            device slot, default every slot).
        devices: detached device slots: ``"cpu"`` or CUDA ids (``"0"``, ``"0,1"`` for one run on two
            GPUs through torchrun); default every visible GPU (small) or one slot of all of them (full).
        detach: force the detached path (True, e.g. tiny runs in a test) or the in-process one (False);
            default: detached unless every run is tiny.
        wait: False returns right after starting the queue, with the records of the runs already finished.
        progress: show bars or plain-text lines (``progress_interval``: seconds before the first line).
        on_mismatch: ``"refuse"`` a folder holding a run with other options, or ``"retrain"`` it.
        poll_interval: seconds between looks at the run folders.
    """
    if on_mismatch not in ("refuse", "retrain"):
        raise ConfigError(f"on_mismatch must be 'refuse' or 'retrain', got {on_mismatch!r}")
    if not runs:
        return {}
    folder = group_dir(group)
    configs = {check_name(name, "the run name"): _resolve(cfg, folder / name) for name, cfg in runs.items()}
    for cfg in configs.values():  # small/full need a GPU unless the config asks for the CPU itself
        cfg.check_hardware()
    detached = detach if detach is not None else any(c.scale != "tiny" for c in configs.values())
    statuses = group_statuses(group, list(configs))
    _check_folders(statuses, configs, on_mismatch)
    if not detached:
        return _train_here(group, configs, statuses, workers, progress, progress_interval, poll_interval)

    slots = q.make_slots(devices or _default_devices(list(configs.values()), workers))
    workers = min(workers or len(slots), len(slots))
    session = f"{datetime.now():%Y%m%dT%H%M%S}-{os.getpid()}-{secrets.token_hex(3)}"
    _print_plan(group, configs, statuses, slots, workers)
    if all(s.state == "finished" for s in statuses.values()):
        return {n: statuses[n].result for n in configs}  # nothing to start, no queue
    queue = folder / QUEUE_DIR
    write_json_atomic(
        queue / q.PLAN,
        {
            "version": 1,
            "group": group,
            "session": session,
            "created": q.now_iso(),
            "runs_root": str(runs_root()),
            "cwd": str(repo_root()),
            "slots": slots,
            "workers": workers,
            "runs": [{"name": name, "config": cfg.to_dict()} for name, cfg in configs.items()],
        },
    )
    return _wait(group, configs, session, wait, progress, progress_interval, poll_interval)


def _train_here(group, configs, statuses, workers, progress, progress_interval, poll_interval) -> dict[str, dict]:
    records = {n: s.result for n, s in statuses.items() if s.state == "finished"}
    running = [s for s in statuses.values() if s.state == "running"]
    if running:
        raise LaunchError(
            f"{running[0].dir} is being trained by process {running[0].launch.get('pid')}; "
            f"wait for it (launch re-attaches only to detached runs: pass detach=True)"
        )
    todo = {n: c for n, c in configs.items() if n not in records}
    _prepare_data(todo.values())
    print(
        f"launch '{group}': {len(todo)} to train here, {len(records)} finished already (kept) under {group_dir(group)}",
        flush=True,
    )
    display = (
        LaunchProgress({n: c.max_update for n, c in todo.items()}, interval=progress_interval, new_label="pending")
        if progress
        else None
    )

    def poll():
        display.show(group_statuses(group, list(todo)))

    try:
        done = run_many(list(todo.values()), workers, poll=poll if display else None, poll_interval=poll_interval)
    except KeyboardInterrupt:
        print(
            f"Stopped: the runs trained in this process were stopped; their checkpoints are kept in "
            f"{group_dir(group)} and the next launch resumes them.",
            flush=True,
        )
        raise
    finally:
        if display is not None:
            display.close()
    records.update(zip(todo, done))
    return {n: records[n] for n in configs}


def _wait(group, configs, session, wait, progress, progress_interval, poll_interval) -> dict[str, dict]:
    queue = group_dir(group) / QUEUE_DIR
    runner = None

    def ensure_runner():
        nonlocal runner
        alive = runner is not None and runner.poll() is None
        if not alive and not q.queue_alive(queue):
            runner = q.start_queue(queue)

    ensure_runner()
    names = list(configs)
    if not wait:
        statuses = group_statuses(group, names, session)
        return {n: s.result for n, s in statuses.items() if s.state == "finished"}
    display = (
        LaunchProgress({n: c.max_update for n, c in configs.items()}, interval=progress_interval, new_label="queued")
        if progress
        else None
    )
    try:
        while True:
            statuses = group_statuses(group, names, session)
            if display is not None:
                display.show(statuses)
            if all(s.ended for s in statuses.values()):
                break
            if (runner is None or runner.poll() is not None) and not q.queue_alive(queue):
                state = read_json(queue / q.STATE) or {}
                if state.get("session") == session and state.get("phase") == "failed":
                    raise LaunchError(
                        f"the queue of '{group}' stopped: {state.get('message')} (runs it had "
                        f"started go on). {queue / q.QUEUE_LOG} ends with:\n"
                        f"{log_tail(queue / q.QUEUE_LOG)}\nFix the cause and call launch again."
                    )
                if any(s.state in ("new", "interrupted") for s in statuses.values()):
                    ensure_runner()  # the runner ended or was killed before these started
            time.sleep(poll_interval)
    except KeyboardInterrupt:
        if display is not None:
            display.close()
            display = None
        print(_detached_message(group), flush=True)
        raise
    finally:
        if display is not None:
            display.close()
    _failures(statuses)
    return {n: statuses[n].result for n in names}
