"""The one way the library writes a file that must never be seen half-written.

:func:`atomic_write` writes to a temporary file next to the target (its name carries the process
id, so two processes never share one), flushes and ``fsync``\\ s it, renames it onto the target
(``os.replace`` is atomic on POSIX and Windows) and finally ``fsync``\\ s the folder so that the
rename itself survives a crash. A reader therefore sees the old file or the new one, never a mix;
an exception inside the ``with`` block leaves the old file untouched and removes the temporary.

Checkpoints (:mod:`b2t_lib.train.checkpoint`), run records (:mod:`b2t_lib.train.records`), the
data pipeline's step records and manifests (:mod:`b2t_lib.data.steps`) and trainability maps all
go through it.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file for writing; on a clean exit make it ``path`` (flush, fsync, rename).

    ``mode`` is ``"w"`` (text) or ``"wb"`` (bytes, e.g. ``torch.save(state, handle)``).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes whole files: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, mode, encoding=None if mode == "wb" else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


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
