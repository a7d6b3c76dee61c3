"""Restartable pipeline steps: atomic outputs, checksums and step records.

Every step of the data pipeline follows one protocol, so that an interrupted or corrupted run is
detected and rebuilt, never used:

1. the step writes each output to a temporary name next to its final name;
2. only when all outputs are complete are they renamed into place (``os.replace`` is atomic);
3. then, *last*, a record ``work/steps/<step>.json`` is written (itself atomically, with
   :func:`b2t_lib.files.write_json_atomic`) with the
   step's parameters, the digests of its inputs and the size and digest of every output.

On the next run a step is skipped only if its record exists, its parameters and input digests
are the same, and every output still has the recorded size and digest. A truncated file fails
the size check, a file changed in place fails the digest check, a crash before step 3 leaves no
record; in all three cases the step runs again (and so does every step after it, because its
inputs' digests changed or its record is gone).

Every pipeline (translation and headlines: :mod:`.translation`, language modeling: :mod:`.lm`, speech:
:mod:`.speech`) and its loader share one skeleton, :class:`DataFormat`: a folder is *ready* when its
``manifest.json`` (written last) names the format and the preparation's parameters and every file it lists
has the recorded size and checksum. :meth:`DataFormat.start` returns nothing for a ready folder, or drops the
manifest and hands out the :class:`StepRunner`; :meth:`DataFormat.open_split` checks a split's files before a
loader reads them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..files import read_json, temporary_name, write_json_atomic  # noqa: F401  (re-exported for the pipelines)

log = logging.getLogger("b2t_lib.data")

MANIFEST = "manifest.json"  # every prepared data set's manifest: written last, its presence means "ready"

_DIGEST_CACHE: dict[tuple, str] = {}


def clear_digest_cache() -> None:
    """Forget cached digests (called at the start of every pipeline run and every load)."""
    _DIGEST_CACHE.clear()


def file_digest(path: str | Path) -> str:
    """BLAKE2b (128-bit) hex digest of a file's bytes.

    Cached per (path, size, mtime, inode) within one run, so a file written by one step and read
    by the next is hashed once; :func:`clear_digest_cache` starts every run afresh.
    """
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _DIGEST_CACHE:
        h = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _DIGEST_CACHE[key] = h.hexdigest()
    return _DIGEST_CACHE[key]


def describe_file(path: Path) -> dict:
    return {"size": path.stat().st_size, "digest": file_digest(path)}


def file_problem(path: Path, expected: dict, *, check_digest: bool = True) -> str | None:
    """Why ``path`` does not match its record (``None`` if it does)."""
    if not path.is_file():
        return f"{path} is missing"
    size = path.stat().st_size
    if size != expected["size"]:
        return f"{path} has {size} bytes, the record says {expected['size']} (truncated or partial write)"
    if check_digest and file_digest(path) != expected["digest"]:
        return f"{path} has changed since it was written (checksum mismatch)"
    return None


def manifest_problem(
    out_dir: Path,
    manifest_name: str,
    data_format: str,
    params: dict | None = None,
    *,
    check_digest: bool = True,
    only: list[str] | None = None,
) -> str | None:
    """Why ``out_dir`` is not a finished data set of ``data_format`` prepared with ``params``
    (``None`` if it is): its manifest must exist, name the format and the parameters, and every file it
    records (or those in ``only``) must have the recorded size and checksum."""
    manifest = read_json(out_dir / manifest_name)
    if manifest is None or manifest.get("format") != data_format:
        return (
            f"{out_dir / manifest_name} is missing, unreadable or not a {data_format} manifest "
            f"(preparation never finished)"
        )
    if params is not None and manifest.get("params") != params:
        return "the preparation parameters or the source files changed"
    for rel, expected in manifest["files"].items():
        if only is None or rel in only:
            problem = file_problem(out_dir / rel, expected, check_digest=check_digest)
            if problem:
                return problem
    return None


@contextlib.contextmanager
def atomic_outputs(paths: list[Path]) -> Iterator[list[Path]]:
    """Yield temporary paths; rename them onto ``paths`` only if the block finishes."""
    tmps = [temporary_name(p) for p in paths]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield tmps
        for tmp, p in zip(tmps, paths):
            if not tmp.is_file():
                raise RuntimeError(f"the step did not write {p.name}; this is a bug in the step")
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        for tmp, p in zip(tmps, paths):
            os.replace(tmp, p)
    finally:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)


class StepRunner:
    """Runs named steps under ``work_dir/steps`` with the skip-or-rebuild protocol above."""

    def __init__(self, root: Path, work_dir: Path) -> None:
        self.root = root
        self.records = work_dir / "steps"
        self.ran: list[str] = []  # names of steps that ran in this process (tests, logs)
        self.skipped: list[str] = []

    def _rel(self, path: Path) -> str:
        return os.path.relpath(path, self.root)

    def is_done(self, name: str, params: dict, inputs: list[Path], outputs: list[Path]) -> bool:
        record = read_json(self.records / f"{name}.json")
        if record is None:
            return False
        if record.get("params") != params:
            log.info("step %s: parameters changed, rebuilding", name)
            return False
        if record.get("inputs") != {self._rel(p): file_digest(p) for p in inputs}:
            log.info("step %s: inputs changed, rebuilding", name)
            return False
        recorded = record.get("outputs", {})
        if set(recorded) != {self._rel(p) for p in outputs}:
            return False
        for p in outputs:
            problem = file_problem(p, recorded[self._rel(p)])
            if problem:
                log.warning("step %s: %s; rebuilding", name, problem)
                return False
        return True

    def run(
        self, name: str, params: dict, inputs: list[Path], outputs: list[Path], build: Callable[[list[Path]], None]
    ) -> None:
        """Skip step ``name`` if done; else call ``build(tmp_outputs)`` and record the result.

        The step holds a lock (``work_dir/steps/<name>.lock``, ``flock``) while it checks and builds, so two
        processes preparing the same folder at once (two notebooks, two test workers) do not build it
        twice: the second waits, then finds the step done."""
        missing = [p for p in inputs if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"step {name} needs {missing[0]}, which does not exist")
        self.records.mkdir(parents=True, exist_ok=True)
        with open(self.records / f"{name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            self._run_locked(name, params, inputs, outputs, build)

    def _run_locked(self, name, params, inputs, outputs, build) -> None:
        if self.is_done(name, params, inputs, outputs):
            log.info("step %s: up to date, skipping", name)
            self.skipped.append(name)
            return
        record_path = self.records / f"{name}.json"
        record_path.unlink(missing_ok=True)
        log.info("step %s: running", name)
        with atomic_outputs(outputs) as tmps:
            build(tmps)
        record = {
            "params": params,
            "inputs": {self._rel(p): file_digest(p) for p in inputs},
            "outputs": {self._rel(p): describe_file(p) for p in outputs},
        }
        write_json_atomic(record_path, record)
        self.ran.append(name)


@dataclass(frozen=True)
class DataFormat:
    """One kind of prepared data set: ``tag`` is its manifest's ``format``, ``kind`` what it is in messages
    ("translation data set"), ``how_to_prepare`` what to run to make one."""

    tag: str
    kind: str
    how_to_prepare: str

    def problem(
        self, out_dir: Path, params: dict | None = None, *, check_digest: bool = True, only: list[str] | None = None
    ) -> str | None:
        """Why ``out_dir`` is not a ready data set of this format prepared with ``params`` (``None`` if it is)."""
        return manifest_problem(Path(out_dir), MANIFEST, self.tag, params, check_digest=check_digest, only=only)

    def start(self, out_dir: Path, params: dict) -> StepRunner | None:
        """Begin preparing ``out_dir`` with ``params``: ``None`` when it is ready already; otherwise its manifest
        is removed (the folder is not ready until the last step writes a new one) and the runner of its steps
        (records under ``out_dir/work``) is returned."""
        problem = self.problem(out_dir, params)
        if problem is None:
            log.info("%s is up to date, nothing to do", out_dir)
            return None
        log.info("preparing %s (%s)", out_dir, problem)
        (out_dir / MANIFEST).unlink(missing_ok=True)
        return StepRunner(out_dir, out_dir / "work")

    def manifest(self, data_dir: str | Path) -> dict:
        """The manifest of the ready data set ``data_dir``; a FileNotFoundError that says how to make one."""
        data_dir = Path(data_dir)
        manifest = read_json(data_dir / MANIFEST)
        if manifest is None or manifest.get("format") != self.tag:
            raise FileNotFoundError(
                f"{data_dir} is not a prepared {self.kind} (no readable {MANIFEST}): either it was never prepared "
                f"or the preparation did not finish. {self.how_to_prepare} into that folder"
            )
        return manifest

    def open_split(
        self, data_dir: str | Path, split: str, needed: Callable[[dict], list[str]], *, verify: bool = True
    ) -> dict:
        """The manifest of ``data_dir`` once ``split`` is one of its splits and the files ``needed(manifest)``
        (paths relative to ``data_dir``) have their recorded sizes and, unless ``verify=False``, checksums
        (about one second per GB). Damaged data raises instead of being read."""
        data_dir = Path(data_dir)
        manifest = self.manifest(data_dir)
        if split not in manifest["splits"]:
            raise KeyError(f"{data_dir} has no split {split!r}; it has: {', '.join(manifest['splits'])}")
        clear_digest_cache()
        problem = self.problem(data_dir, check_digest=verify, only=needed(manifest))
        if problem:
            raise ValueError(
                f"{data_dir} is damaged: {problem}. Re-run the same preparation command; it detects "
                f"the damage and rebuilds what is needed"
            )
        return manifest


def parameter_defaults(function: Callable) -> dict:
    """The default of every parameter of ``function`` that has one: the data scripts take their options' defaults
    from the ``prepare_*`` function they call, so a default is decided once, in its signature."""
    import inspect

    return {
        name: p.default
        for name, p in inspect.signature(function).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
