"""Files: the one way the library writes a file that must never be seen half-written, the one JSON reader, and
the errors of the checkpoint files it reads.

:func:`atomic_write` writes to a temporary file next to the target (its name carries the process
id, so two processes never share one), flushes and ``fsync``\\ s it, renames it onto the target
(``os.replace`` is atomic on POSIX and Windows) and finally ``fsync``\\ s the folder so that the
rename itself survives a crash. A reader therefore sees the old file or the new one, never a mix;
an exception inside the ``with`` block leaves the old file untouched and removes the temporary.

Checkpoints (:mod:`b2t_lib.train.checkpoint`), run records (:mod:`b2t_lib.train.records`), the
data pipeline's step records and manifests (:mod:`b2t_lib.data.steps`) and trainability maps all
go through it; :func:`read_json` reads them back.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
from pathlib import Path
from typing import IO, Iterator
from .errors import UserError


class CheckpointMismatch(UserError, ValueError):
    """A checkpoint that does not fit what it is loaded into: another run's configuration (``--resume``), another
    model, or a fairseq checkpoint b2t_lib cannot build; the message names each difference."""


class UnreadableCheckpoint(CheckpointMismatch):
    """A checkpoint file that cannot be read: truncated, corrupted, or not a checkpoint at all."""


class UntrustedCheckpoint(CheckpointMismatch, pickle.UnpicklingError):
    """A checkpoint that holds objects a safe (``weights_only``) load refuses to rebuild, since unpickling them could
    run code from the file; the message names them and how to load a file one trusts."""


def read_json(path: str | Path) -> dict | None:
    """The JSON object in ``path``; None when the file is missing, unreadable, not JSON or not an object (every
    writer goes through :func:`write_json_atomic`, so a file is never half-written)."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, not UTF-8, not JSON
        return None
    return value if isinstance(value, dict) else None


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file for writing; on a clean exit make it ``path`` (flush, fsync, rename).

    ``mode`` is ``"w"`` (text) or ``"wb"`` (bytes, e.g. ``torch.save(state, handle)``).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes whole files: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        with open(tmp, mode, encoding=None if mode == "wb" else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def temporary_name(path: Path) -> Path:
    """Where :func:`atomic_write` (and the data steps) write ``path`` before the rename: ``<name>.tmp-<pid>``."""
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def remove_stale_temporaries(folder: str | Path, recursive: bool = False) -> list[Path]:
    """Delete the ``*.tmp-<pid>`` files that a killed write left in ``folder`` (and below, if ``recursive``): those
    whose process no longer runs. A live process's temporary file is kept. Returns the removed paths."""
    folder, removed = Path(folder), []
    if not folder.is_dir():
        return removed
    for tmp in folder.rglob("*.tmp-*") if recursive else folder.glob("*.tmp-*"):
        pid = tmp.name.rsplit(".tmp-", 1)[1]
        if not pid.isdigit() or not tmp.is_file() or _process_alive(int(pid)):
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def process_token(pid: int) -> str | None:
    """A token that identifies the process ``pid`` (its start time in clock ticks, from ``/proc``), so a
    recycled pid is not taken for the process that was recorded; None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        if Path("/proc/self/stat").exists():
            return None  # Linux: no such process
        try:  # elsewhere: the pid alone
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "?"
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (command) "
    if fields[0] in ("Z", "X"):  # ended, not yet reaped
        return None
    return fields[19]  # field 22 of stat: start time


def process_alive(pid: int | None, token: str | None) -> bool:
    """Whether the process ``pid`` recorded with ``token`` (:func:`process_token`) still runs."""
    if not pid:
        return False
    now = process_token(int(pid))
    return now is not None and (token in (None, "?") or now in ("?", token))


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_json_atomic(path: str | Path, value, *, indent: int = 1, sort_keys: bool = True) -> None:
    """Write ``value`` as JSON (with a final newline) through :func:`atomic_write`."""
    with atomic_write(path) as handle:
        json.dump(value, handle, indent=indent, sort_keys=sort_keys)
        handle.write("\n")


def _fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
