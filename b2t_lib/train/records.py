"""What a run leaves behind besides checkpoints: ``log.jsonl`` (one JSON object per logged
update or validation) and ``result.json`` (one record per run: config, git revision, status,
final metrics, wall time, tokens/s). Tables and plots read only these two files.

``status`` is ``"completed"``, ``"stalled"`` or ``"diverged"``; the last two are the paper's
"Training failed" (:mod:`.failure`), with ``message`` saying why. ``stall_rule`` holds the stall
rule's numbers and verdict (unigram baseline, margin, deadline, the judged validation NLL).
``log.jsonl`` entries have ``kind`` ``"train"``, ``"valid"`` or ``"stall_rule"`` (the rule's verdict,
once per run).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

import torch

from ..files import atomic_write

LOG_NAME = "log.jsonl"
RESULT_NAME = "result.json"


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


def read_result(save_dir_or_file: Path) -> dict | None:
    """The run's ``result.json`` (a folder or the file itself), or None when there is none."""
    path = Path(save_dir_or_file)
    if path.is_dir():
        path = path / RESULT_NAME
    if not path.is_file():
        return None
    return json.loads(path.read_text())
