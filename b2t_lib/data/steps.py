"""Restartable pipeline steps: atomic outputs, checksums, step records, and data sets replaced only when complete.

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
inputs' digests changed or its record is gone). Temporary files that a killed step left
(``*.tmp-<pid>``) are removed when the next run starts.

Every pipeline (translation and headlines: :mod:`.translation`, language modeling: :mod:`.lm`, speech:
:mod:`.speech`) and its loader share one skeleton, :class:`DataFormat`: a folder is *ready* when its
``manifest.json`` (written last) names the format and the preparation's parameters and every file it lists
has the recorded size and checksum.

**Nothing already prepared is lost.** :meth:`DataFormat.build` never writes into the data set's folder while
it builds: the inputs are checked first, then the steps run in a sibling folder ``.<name>.partial`` (seeded
with hard links to the finished steps of the folder, so that only what changed is rebuilt), and only when
the new data set is complete, its manifest written, are its files moved into the folder, the manifest last:
the manifest is the commit point. A failed or interrupted preparation leaves the data set as it was (and the
partial build beside it, which the same command resumes); a crash during the moves is finished by the next
start. :meth:`DataFormat.open_split` checks a split's files before a loader reads them: every file it reads
must be listed in the manifest, every name in the manifest must stay inside the folder.

**What a check costs** (:data:`FULL`, :data:`SAMPLED`, docs/data.md): ``"full"`` hashes every byte (BLAKE2b);
``"sampled"``, the loaders' default, checks the size and hashes files up to :data:`FULL_DIGEST_BYTES` whole and
larger ones in :data:`SAMPLE_BLOCKS` evenly spaced blocks (about 4 MB per file), so a replaced, truncated or
partly overwritten file is caught at once, and a few flipped bytes are caught in every small file and in the
sampled blocks of a large one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import resource
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..files import read_json, remove_stale_temporaries, temporary_name, write_json_atomic  # noqa: F401
from .inputs import InputError, MissingInputError, inside

log = logging.getLogger("b2t_lib.data")

MANIFEST = "manifest.json"  # every prepared data set's manifest: written last, its presence means "ready"
FULL, SAMPLED = "full", "sampled"  # how thoroughly a loader checks the files it reads
FULL_DIGEST_BYTES = 256 << 20  # files up to this size are hashed whole even by the sampled check
SAMPLE_BLOCKS, SAMPLE_BLOCK_BYTES = 64, 64 << 10  # the sampled check of a larger file: 64 blocks of 64 KiB

_DIGEST_CACHE: dict[tuple, str] = {}


class DamagedDataError(InputError):
    """A prepared data set whose files do not match its manifest (or whose manifest is not one of ours)."""


class UnknownSplitError(InputError, KeyError):
    """A split that the prepared data set does not have; the message lists those it has."""


class MissingDataError(MissingInputError):
    """A folder that holds no prepared data set of the kind asked for; the message says how to make one."""


def clear_digest_cache() -> None:
    """Forget cached digests (called at the start of every pipeline run and every load)."""
    _DIGEST_CACHE.clear()


def _cached(kind: str, path: Path, compute: Callable[[Path], str]) -> str:
    st = path.stat()
    key = (kind, str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _DIGEST_CACHE:
        _DIGEST_CACHE[key] = compute(path)
    return _DIGEST_CACHE[key]


def file_digest(path: str | Path) -> str:
    """BLAKE2b (128-bit) hex digest of a file's bytes.

    Cached per (path, size, mtime, inode) within one run, so a file written by one step and read
    by the next is hashed once; :func:`clear_digest_cache` starts every run afresh.
    """

    def compute(path: Path) -> str:
        h = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    return _cached("full", Path(path), compute)


def sampled_digest(path: str | Path) -> str:
    """BLAKE2b digest of the size and :data:`SAMPLE_BLOCKS` evenly spaced blocks of a file (the first and the
    last included): what the sampled check compares, reading about 4 MB whatever the file's size."""

    def compute(path: Path) -> str:
        size = path.stat().st_size
        h = hashlib.blake2b(str(size).encode(), digest_size=16)
        last = max(size - SAMPLE_BLOCK_BYTES, 0)
        with open(path, "rb") as f:
            for i in range(SAMPLE_BLOCKS):
                f.seek(last * i // (SAMPLE_BLOCKS - 1))
                h.update(f.read(SAMPLE_BLOCK_BYTES))
        return h.hexdigest()

    return _cached("sampled", Path(path), compute)


def describe_file(path: Path) -> dict:
    """What a record or a manifest keeps of a file: its size, its digest and its sampled digest."""
    return {"size": path.stat().st_size, "digest": file_digest(path), "sample": sampled_digest(path)}


def verify_level(verify: bool | str) -> str:
    """:data:`FULL` or :data:`SAMPLED` from a loader's ``verify``: ``True`` or ``"full"`` hashes every byte;
    ``"sampled"`` (the default) or ``False`` is the cheap check (there is no size-only check: it let damaged
    bytes through)."""
    if verify in (True, FULL):
        return FULL
    if verify in (False, SAMPLED):
        return SAMPLED
    raise ValueError(f"verify must be {FULL!r}, {SAMPLED!r}, True or False, got {verify!r}")


def file_problem(path: Path, expected: dict, *, verify: bool | str = FULL) -> str | None:
    """Why ``path`` does not match its record (``None`` if it does); ``verify`` as in :func:`verify_level`."""
    if not path.is_file():
        return f"{path} is missing"
    size = path.stat().st_size
    if size != expected.get("size"):
        return f"{path} has {size} bytes, the record says {expected.get('size')} (truncated or partial write)"
    whole = verify_level(verify) == FULL or size <= FULL_DIGEST_BYTES or "sample" not in expected
    if (file_digest(path) if whole else sampled_digest(path)) != expected.get("digest" if whole else "sample"):
        return f"{path} has changed since it was written (checksum mismatch)"
    return None


def _checked_names(folder: Path, manifest: dict) -> dict:
    """``manifest`` once every split, part and file name in it stays inside ``folder`` (else an error that
    names the manifest): names read from disk are never joined to a folder unchecked."""
    where = folder / MANIFEST
    names = [
        (name, "split name") for key in ("splits", "test_splits", "valid_splits") for name in manifest.get(key, [])
    ]
    names += [(part, "part name") for parts in (manifest.get("parts") or {}).values() for part in parts]
    names += [(rel, "file name") for rel in manifest.get("files", {})]
    if not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("splits", []), list):
        raise DamagedDataError("the manifest has no list of files and splits", where=where, todo=_REPAIR)
    for name, what in names:
        inside(folder, name, what=what, where=where)
    return manifest


_REPAIR = "re-run the same preparation command; it detects the damage and rebuilds what is needed"


def manifest_problem(
    out_dir: Path,
    manifest_name: str,
    data_format: str,
    params: dict | None = None,
    *,
    verify: bool | str = FULL,
    only: list[str] | None = None,
) -> str | None:
    """Why ``out_dir`` is not a finished data set of ``data_format`` prepared with ``params``
    (``None`` if it is): its manifest must exist, name the format and the parameters, and every file it
    records (or each of ``only``, which must all be recorded) must have the recorded size and checksum."""
    manifest = read_json(out_dir / manifest_name)
    if manifest is None or manifest.get("format") != data_format:
        return (
            f"{out_dir / manifest_name} is missing, unreadable or not a {data_format} manifest "
            f"(preparation never finished)"
        )
    if params is not None and manifest.get("params") != params:
        return "the preparation parameters or the source files changed"
    try:
        files = _checked_names(out_dir, manifest)["files"]
    except InputError as error:
        return str(error)
    for rel in files if only is None else only:
        if rel not in files:
            return f"{out_dir / rel} is read but not listed in {out_dir / manifest_name}, so it cannot be checked"
        problem = file_problem(out_dir / rel, files[rel], verify=verify)
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
    """Runs named steps under ``work_dir/steps`` with the skip-or-rebuild protocol above.

    ``names_from`` (default ``root``) is the folder that the records name files relative to: a data set built
    beside its folder (:class:`Preparation`) names them as they will be named once it is moved in, so the
    records of both agree."""

    def __init__(self, root: Path, work_dir: Path, *, names_from: Path | None = None) -> None:
        self.root = root
        self.names_from = root if names_from is None else names_from
        self.records = work_dir / "steps"
        self.ran: list[str] = []  # names of steps that ran in this process (tests, logs)
        self.skipped: list[str] = []
        for tmp in remove_stale_temporaries(root, recursive=True):
            log.info("removed %s, left by a killed write", tmp)

    def _rel(self, path: Path) -> str:
        if Path(path).is_relative_to(self.root):
            return os.path.relpath(path, self.root)
        return os.path.relpath(path, self.names_from)

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
            raise MissingInputError(f"step {name} needs {missing[0]}, which does not exist")
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
        wall, cpu, workers_cpu = time.perf_counter(), time.process_time(), _children_cpu()
        with atomic_outputs(outputs) as tmps:
            build(tmps)
        wall, cpu, workers_cpu = time.perf_counter() - wall, time.process_time() - cpu, _children_cpu() - workers_cpu
        # The step's own process and its worker processes apart: the first is the part that more cores do not shorten.
        log.info("step %s: done in %.2f s (CPU %.2f s here, %.2f s in workers)", name, wall, cpu, workers_cpu)
        record = {
            "params": params,
            "inputs": {self._rel(p): file_digest(p) for p in inputs},
            "outputs": {self._rel(p): describe_file(p) for p in outputs},
        }
        write_json_atomic(record_path, record)
        self.ran.append(name)


class Preparation(StepRunner):
    """The steps of one data set built beside its folder ``out_dir``: write every output under :attr:`root`
    (the partial build), then :meth:`commit` the manifest, which moves the new data set into ``out_dir``."""

    def __init__(self, out_dir: Path, data_format: "DataFormat") -> None:
        self.out_dir, self.format = out_dir, data_format
        super().__init__(partial_folder(out_dir), partial_folder(out_dir) / "work", names_from=out_dir)
        self.committed = False

    def commit(self, manifest: dict) -> None:
        """Write ``manifest`` (its ``files`` relative to :attr:`root`) and replace the data set in ``out_dir``."""
        write_json_atomic(self.root / MANIFEST, manifest)
        _move_in(self.root, self.out_dir)
        self.committed = True


def _children_cpu() -> float:
    """CPU seconds of this process's finished (waited-for) child processes: a step's workers, once it closed them."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def partial_folder(out_dir: Path) -> Path:
    """Where the data set of ``out_dir`` is built before it replaces the one there: ``.<name>.partial`` beside
    it (on the same file system, so that moving the files in is a rename)."""
    out_dir = Path(out_dir).resolve()
    return out_dir.with_name(f".{out_dir.name}.partial")


def _move_in(partial: Path, out_dir: Path) -> None:
    """Move the complete data set in ``partial`` (its manifest written) into ``out_dir``, the manifest last.

    The old manifest goes first, so that a crash halfway leaves a folder that is not ready (never a mix that
    looks ready); the next start sees the manifest still in ``partial`` and finishes the moves."""
    (out_dir / MANIFEST).unlink(missing_ok=True)
    for path in sorted(partial.rglob("*")):
        if not path.is_file() or path.suffix == ".lock" or path == partial / MANIFEST:
            continue
        target = out_dir / path.relative_to(partial)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)  # a hard link to the same file stays behind, and goes with the folder
    os.replace(partial / MANIFEST, out_dir / MANIFEST)  # the commit point
    shutil.rmtree(partial, ignore_errors=True)


def _seed(partial: Path, out_dir: Path) -> None:
    """Hard-link into ``partial`` the outputs and records of the steps that ``out_dir`` finished (unless
    ``partial`` has a record of its own for the step, from an earlier try): a step whose parameters and inputs
    did not change is then skipped, and the files of ``out_dir`` are never written."""
    for record_path in sorted((out_dir / "work" / "steps").glob("*.json")):
        target = partial / "work" / "steps" / record_path.name
        record = read_json(record_path)
        if target.exists() or record is None or not isinstance(record.get("outputs"), dict):
            continue
        try:
            outputs = [rel for rel in record["outputs"] if inside(out_dir, rel, what="step output").is_file()]
        except InputError:
            continue  # not a record of this folder's steps: they run again
        if len(outputs) != len(record["outputs"]):
            continue
        try:
            for rel in [*outputs, os.path.relpath(record_path, out_dir)]:
                (partial / rel).parent.mkdir(parents=True, exist_ok=True)
                (partial / rel).unlink(missing_ok=True)
                os.link(out_dir / rel, partial / rel)
        except OSError as error:  # no hard links on this file system: the steps run again
            log.info("cannot link the finished steps of %s (%s); rebuilding them", out_dir, error)
            return


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` itself (no lock file is created)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@dataclass(frozen=True)
class DataFormat:
    """One kind of prepared data set: ``tag`` is its manifest's ``format``, ``kind`` what it is in messages
    ("translation data set"), ``how_to_prepare`` what to run to make one."""

    tag: str
    kind: str
    how_to_prepare: str

    def problem(
        self, out_dir: Path, params: dict | None = None, *, verify: bool | str = FULL, only: list[str] | None = None
    ) -> str | None:
        """Why ``out_dir`` is not a ready data set of this format prepared with ``params`` (``None`` if it is)."""
        return manifest_problem(Path(out_dir), MANIFEST, self.tag, params, verify=verify, only=only)

    @contextlib.contextmanager
    def build(
        self, out_dir: str | Path, params: dict, check_inputs: Callable[[], None] | None = None
    ) -> Iterator[Preparation | None]:
        """Prepare ``out_dir`` with ``params``: yields ``None`` when it is ready already; otherwise calls
        ``check_inputs()`` (which raises on a bad input before anything is built) and yields the
        :class:`Preparation` whose steps build the new data set beside ``out_dir``; the block ends with its
        :meth:`~Preparation.commit`. Until then ``out_dir`` is not changed (module docstring). One process at a
        time prepares a folder: a second one waits, then finds it ready."""
        out_dir = Path(out_dir)
        for tmp in remove_stale_temporaries(out_dir, recursive=True):
            log.info("removed %s, left by a killed write", tmp)
        if self.problem(out_dir, params) is None:
            log.info("%s is up to date, nothing to do", out_dir)
            yield None
            return
        if check_inputs is not None:
            check_inputs()
        partial = partial_folder(out_dir)
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            partial.mkdir(exist_ok=True)
        except OSError as error:
            raise InputError(
                f"cannot create {partial} beside the data set ({error.strerror})",
                where=out_dir,
                todo="choose an --out-dir inside a folder you can write to",
            ) from None
        with _folder_lock(out_dir):
            pending = read_json(partial / MANIFEST)
            if pending is not None and pending.get("format") == self.tag:
                log.info("finishing the interrupted replacement of %s", out_dir)
                _move_in(partial, out_dir)
            problem = self.problem(out_dir, params)
            if problem is None:
                log.info("%s is up to date, nothing to do", out_dir)
                yield None
                return
            log.info("preparing %s (%s), beside it in %s", out_dir, problem, partial)
            partial.mkdir(exist_ok=True)
            _seed(partial, out_dir)
            preparation = Preparation(out_dir, self)
            try:
                yield preparation
            except BaseException:
                log.warning(
                    "%s is unchanged; the partial preparation stays in %s (the same command resumes it)",
                    out_dir,
                    partial,
                )
                raise
            if not preparation.committed:
                raise RuntimeError(f"the preparation of {out_dir} ended without a manifest; this is a bug")

    def manifest(self, data_dir: str | Path) -> dict:
        """The manifest of the ready data set ``data_dir`` (its names checked); a :class:`MissingDataError`
        (a ``FileNotFoundError``) that says how to make one."""
        data_dir = Path(data_dir)
        manifest = read_json(data_dir / MANIFEST)
        if manifest is None or manifest.get("format") != self.tag:
            raise MissingDataError(
                f"{data_dir} is not a prepared {self.kind} (no readable {MANIFEST}): either it was never prepared "
                f"or the preparation did not finish",
                todo=f"{self.how_to_prepare} into that folder",
            )
        return _checked_names(data_dir, manifest)

    def open_split(
        self, data_dir: str | Path, split: str, needed: Callable[[dict], list[str]], *, verify: bool | str = SAMPLED
    ) -> dict:
        """The manifest of ``data_dir`` once ``split`` is one of its splits and the files ``needed(manifest)``
        (paths relative to ``data_dir``, each listed in the manifest) pass the check ``verify``
        (:func:`verify_level`; module docstring). Damaged data raises instead of being read."""
        data_dir = Path(data_dir)
        manifest = self.manifest(data_dir)
        if split not in manifest["splits"]:
            raise UnknownSplitError(
                f"{data_dir} has no split {split!r}", todo=f"choose one of: {', '.join(manifest['splits'])}"
            )
        clear_digest_cache()
        problem = self.problem(data_dir, verify=verify_level(verify), only=needed(manifest))
        if problem:
            raise DamagedDataError(f"{data_dir} is damaged: {problem}", todo=_REPAIR)
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
