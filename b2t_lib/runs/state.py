"""Where launched runs live and what state each one is in, read from its folder alone.

Layout (``runs_root()`` is ``$B2T_RUNS``, else ``<repository>/runs``)::

    runs/<group>/<name>/          the run's save_dir: checkpoints, log.jsonl, result.json (the trainer's)
                        train.log     stdout and stderr of its process(es), appended at every start
                        launch.json   the launch record: pid, command, start time, device, session, exit code
    runs/<group>/.launch/         the group's queue: plan.json, state.json, queue.log, lock

A run is, in this order:

* ``finished``: its ``result.json`` exists (status ``completed``, ``stalled`` or ``diverged``: a
  failed run is a result too and is not trained again);
* ``running``: its launch record, or the trainer's own process record (``process.json``: a run trained in this
  machine's processes, or one finishing its evaluation), names a process that is still alive;
* ``failed``: its process, started for the current launch session, ended without a ``result.json``
  (a crash, or a kill): not retried in that session, resumed by the next ``launch`` call;
* ``interrupted``: it has checkpoints or a launch record but no live process: resumed (``--resume``);
* ``new``: nothing there yet.

Everything here reads files and ``/proc``; nothing keeps state in memory, so a notebook kernel, a
terminal and the queue runner all see the same thing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ConfigError
from ..files import process_alive, process_token, read_json  # noqa: F401  (process_token: re-exported)
from ..train.checkpoint import holds_run
from ..train.records import LAUNCH_RECORD, LOG_NAME, RESULT_NAME, RUN_CONFIG, TRAIN_LOG, trainer_at_work  # noqa: F401

FINISHED = ("completed", "stalled", "diverged")
QUEUE_DIR = ".launch"
# Options the launcher sets itself and that do not change what a run computes.
LAUNCHER_OWNED = frozenset({"save_dir", "resume", "progress_bar", "threads"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$")


def repo_root() -> Path:
    """The repository root (the folder holding ``pyproject.toml`` above this package), or the current
    folder when the package is installed elsewhere."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


def runs_root() -> Path:
    """``$B2T_RUNS`` when set, else ``<repository root>/runs``."""
    value = os.environ.get("B2T_RUNS", "").strip()
    return Path(value).expanduser().resolve() if value else repo_root() / "runs"


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{what} {name!r} must be one folder name: letters, digits and _ . + = - "
            f"(not starting with a dot or a dash)"
        )
    return name


def group_dir(group: str) -> Path:
    return runs_root() / check_name(group, "the group")


# ---------------------------------------------------------------------------------------------- processes
# process_token(pid) identifies a process (its start time), process_alive(pid, token) checks it: files.py has them.


# ---------------------------------------------------------------------------------------------- configs
def config_differences(stored: dict, requested: dict, allowed: frozenset = frozenset()) -> list[str]:
    """``--option: the run has X, this launch asks for Y`` for every option that differs."""
    diffs = []
    for key in sorted(set(stored) | set(requested)):
        if key in allowed or key in LAUNCHER_OWNED or key == "world_size":
            continue
        a, b = stored.get(key, "<absent>"), requested.get(key, "<absent>")
        if isinstance(a, list):
            a = tuple(a)
        if isinstance(b, list):
            b = tuple(b)
        if a != b:
            diffs.append(f"--{key.replace('_', '-')}: the run has {a!r}, this launch asks for {b!r}")
    return diffs


def stored_config(run_dir: Path) -> dict | None:
    """The options a run folder was started with: its ``result.json``, else its launch record, else its
    newest checkpoint (read lazily with ``mmap``: only the small config entry is touched)."""
    for name in (RESULT_NAME, LAUNCH_RECORD):
        record = read_json(run_dir / name)
        if record and isinstance(record.get("config"), dict):
            return record["config"]
    last = run_dir / "checkpoint_last.pt"
    if last.is_file():
        import torch

        try:
            return torch.load(last, map_location="cpu", weights_only=True, mmap=True)["train_config"]
        except Exception:  # unreadable: the trainer's resume says which file and why
            return None
    return None


# ---------------------------------------------------------------------------------------------- state
@dataclass
class RunStatus:
    """One run folder's state (see the module docstring) and what the progress display needs."""

    name: str
    dir: Path
    state: str
    result: dict | None = None
    launch: dict = field(default_factory=dict)
    process: dict = field(default_factory=dict)  # the trainer's process record (pid, phase)
    update: int = 0
    loss: float | None = None

    @property
    def ended(self) -> bool:
        return self.state in ("finished", "failed")

    def describe(self) -> str:
        if self.state == "finished":
            return str(self.result.get("status", "finished"))
        if self.state == "failed":
            code = self.launch.get("exit_code")
            return f"failed (exit code {code}), see {self.dir / TRAIN_LOG}"
        return self.state


def last_train_entry(log_path: Path, tail_bytes: int = 65536) -> dict | None:
    """The last ``train`` line of a ``log.jsonl`` that a run may be appending to right now (a half-written
    last line is skipped); only the file's tail is read."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - tail_bytes))
            lines = handle.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("kind") == "train" and "update" in entry:
            return entry
    return None


def run_status(run_dir: Path, session: str | None = None, name: str | None = None) -> RunStatus:
    """The state of the run in ``run_dir``; ``session`` is the current launch session (a process that
    ended without a result in it is ``failed``, in an older one ``interrupted``)."""
    run_dir = Path(run_dir)
    status = RunStatus(name or run_dir.name, run_dir, "new")
    status.launch = read_json(run_dir / LAUNCH_RECORD) or {}
    last = last_train_entry(run_dir / LOG_NAME)
    if last is not None:
        status.update, status.loss = int(last["update"]), float(last["loss"])
    result = read_json(run_dir / RESULT_NAME)
    if result is not None and "status" in result:
        status.state, status.result = "finished", result
        status.update = int(result.get("metrics", {}).get("num_updates", status.update))
    elif process_alive(status.launch.get("pid"), status.launch.get("token")):
        status.state = "running"
    elif (trainer := trainer_at_work(run_dir)) is not None:
        status.state, status.process = "running", trainer  # trained here, or evaluating after its last update
    elif status.launch.get("exit_code") is not None and session is not None and status.launch.get("session") == session:
        status.state = "failed"
    elif status.launch or holds_run(run_dir):
        status.state = "interrupted"
    return status


def group_statuses(group: str, names=None, session: str | None = None) -> dict[str, RunStatus]:
    """Every run of ``group`` (or the ``names`` given), by name."""
    folder = group_dir(group)
    if names is None:
        names = (
            sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            if folder.is_dir()
            else []
        )
    return {n: run_status(folder / n, session, n) for n in names}


def busy_devices(root: Path | None = None) -> set[str]:
    """The device slots that live launched processes use, over every group of ``runs_root()``."""
    busy = set()
    for record_path in (root or runs_root()).glob(f"*/*/{LAUNCH_RECORD}"):
        record = read_json(record_path)
        if record and record.get("device") and process_alive(record.get("pid"), record.get("token")):
            busy.add(record["device"])
    return busy


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} does not exist)"
    return "\n".join(text[-lines:])
