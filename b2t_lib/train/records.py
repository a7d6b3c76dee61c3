"""What a run leaves behind besides checkpoints: ``log.jsonl`` (one JSON object per logged
update or validation) and ``result.json`` (one record per run: config, git revision, status,
final metrics, wall time, tokens/s). Tables and plots read only these two files.

``status`` is ``"completed"``, ``"stalled"`` or ``"diverged"``; the last two are the paper's
"Training failed" (:mod:`.failure`), with ``message`` saying why. ``stall_rule`` holds the stall
rule's numbers and verdict (unigram baseline, margin, deadline, the judged validation NLL).
``log.jsonl`` entries have ``kind`` ``"train"``, ``"valid"`` or ``"stall_rule"`` (the rule's verdict,
once per run).

``process.json`` says which process trains the run (pid and its start-time token) and in which phase
(``training``, then ``finishing``: the last update is done, the test sets are being evaluated; ``stopped`` when
an exception ended it), so that a run is never taken for an interrupted one while its process is still at
work. A launched run also has the launcher's ``config.json``, ``launch.json`` and ``train.log``
(:mod:`b2t_lib.runs`). Any of these files means the folder holds a run (:func:`run_records`): a new run is not
started there without ``--resume``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

from ..files import atomic_write, process_alive, process_token, read_json, write_json_atomic

LOG_NAME = "log.jsonl"
RESULT_NAME = "result.json"
PROCESS_RECORD = "process.json"  # the trainer's process and its phase
RUN_CONFIG = "config.json"  # a detached run's whole config, which its process trains from (the launcher's)
LAUNCH_RECORD = "launch.json"  # the launcher's record of the process it started
TRAIN_LOG = "train.log"  # the output of a launched run's process
RUN_RECORDS = (RESULT_NAME, LOG_NAME, PROCESS_RECORD, RUN_CONFIG, LAUNCH_RECORD, TRAIN_LOG)


def run_records(save_dir: Path) -> list[str]:
    """The names of the records of a run that ``save_dir`` holds: checkpoints (``checkpoint_*.pt``) and the files
    of :data:`RUN_RECORDS`; empty for a new or an empty folder."""
    folder = Path(save_dir)
    if not folder.is_dir():
        return []
    checkpoints = sorted(p.name for p in folder.glob("checkpoint_*.pt"))
    return checkpoints + [name for name in RUN_RECORDS if (folder / name).exists()]


TRAINING, FINISHING, STOPPED = "training", "finishing", "stopped"  # the phases of PROCESS_RECORD


def write_process(save_dir: Path, phase: str, update: int) -> None:
    """Record this process as the run's trainer, in ``phase``: :data:`TRAINING`, :data:`FINISHING` (the last
    update is done; evaluating, then writing result.json) or :data:`STOPPED` (an exception ended the training
    while the process lives on)."""
    pid = os.getpid()
    record = {"pid": pid, "token": process_token(pid), "phase": phase, "update": update}
    write_json_atomic(Path(save_dir) / PROCESS_RECORD, record)


def read_process(save_dir: Path) -> dict:
    """The run's :data:`PROCESS_RECORD` (empty when there is none)."""
    return read_json(Path(save_dir) / PROCESS_RECORD) or {}


def trainer_at_work(save_dir: Path) -> dict | None:
    """The process record of the live process that trains (or finishes) the run in ``save_dir``, or None."""
    record = read_process(save_dir)
    if record.get("phase") in (TRAINING, FINISHING) and process_alive(record.get("pid"), record.get("token")):
        return record
    return None


def git_revision() -> str:
    """The repository's commit hash, or ``"unknown"`` outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def environment() -> dict:
    """Hardware and library versions, so a number can be traced to where it was measured."""
    info = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    return info


def append_log(save_dir: Path, entry: dict) -> None:
    path = Path(save_dir) / LOG_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")


def truncate_log(save_dir: Path, after_update: int) -> None:
    """Drop log lines past ``after_update`` (written after the checkpoint a run resumes from)."""
    path = Path(save_dir) / LOG_NAME
    if not path.is_file():
        return
    kept = [
        line
        for line in path.read_text().splitlines()
        if line.strip() and json.loads(line).get("update", 0) <= after_update
    ]
    with atomic_write(path) as handle:
        handle.write("".join(line + "\n" for line in kept))


def read_log(save_dir: Path, kind: str | None = None) -> list[dict]:
    """Entries of ``log.jsonl``; ``kind`` = ``"train"`` or ``"valid"`` selects one sort."""
    path = Path(save_dir) / LOG_NAME
    if not path.is_file():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in entries if kind is None or e.get("kind") == kind]


@dataclass(frozen=True)
class ValidCurve:
    """A run's validation NLL (bits per token) against updates, and where it was lowest: what Figure 8 plots
    and Figure 9 summarizes. ``rise`` is how far the last value lies above the best (0 while it still falls)."""

    points: tuple[tuple[int, float], ...]

    @property
    def best(self) -> float:
        return min(nll for _, nll in self.points)

    @property
    def best_update(self) -> int:
        return min(self.points, key=lambda point: point[1])[0]  # the first update at the lowest value

    @property
    def last(self) -> float:
        return self.points[-1][1]

    @property
    def rise(self) -> float:
        return self.last - self.best


def valid_curve(save_dir: Path) -> ValidCurve:
    """The validation curve of the run in ``save_dir``, from its ``log.jsonl``; an error if it never validated."""
    points = tuple((e["update"], e["valid_nll"]) for e in read_log(save_dir, "valid") if "valid_nll" in e)
    if not points:
        raise ValueError(f"{save_dir} has no validation entries in {LOG_NAME}: the run has not validated yet")
    return ValidCurve(points)


def read_result(save_dir_or_file: Path) -> dict | None:
    """The run's ``result.json`` (a folder or the file itself), or None when there is none."""
    path = Path(save_dir_or_file)
    if path.is_dir():
        path = path / RESULT_NAME
    if not path.is_file():
        return None
    return json.loads(path.read_text())
