"""Checkpoints: written atomically, the last N and the best kept, checked against the run's config,
and averaged for decoding as the paper does (methods_spec 1.8: average the last 10).

Files in ``save_dir``: ``checkpoint_<update>.pt`` (numbered), ``checkpoint_last.pt`` and
``checkpoint_best.pt`` (hard links to numbered ones, so they cost no extra disk or time).
"""
from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

_NUMBERED = re.compile(r"^checkpoint_(\d+)\.pt$")


class CheckpointMismatch(ValueError):
    """A checkpoint written by a different configuration than the one asked to resume it."""


def numbered_path(save_dir: Path, update: int) -> Path:
    return Path(save_dir) / f"checkpoint_{update}.pt"


def list_checkpoints(save_dir: Path) -> list[Path]:
    """Numbered checkpoints, oldest first."""
    folder = Path(save_dir)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NUMBERED.match(p.name))]
    return [p for _, p in sorted(found)]


def _atomic_link(target: Path, link: Path) -> None:
    """Point ``link`` at ``target``'s data (hard link; a copy where links are not supported)."""
    tmp = link.with_name(link.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(target, tmp)
    except OSError:
        shutil.copyfile(target, tmp)
    os.replace(tmp, link)


def save_checkpoint(state: dict, save_dir: Path, update: int, keep_last: int, is_best: bool) -> Path:
    """Write ``checkpoint_<update>.pt`` atomically (temporary file, fsync, rename), update the
    ``last``/``best`` links and delete numbered checkpoints beyond the last ``keep_last``."""
    folder = Path(save_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = numbered_path(folder, update)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _atomic_link(path, folder / "checkpoint_last.pt")
    if is_best:
        _atomic_link(path, folder / "checkpoint_best.pt")
    for old in list_checkpoints(folder)[:-keep_last]:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: Path) -> dict:
    """Load a checkpoint on the CPU. (It holds RNG states and config dicts, so it is unpickled in
    full: load only checkpoints you wrote or trust.)"""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # truncated or foreign file
        raise CheckpointMismatch(f"{path} is not a readable checkpoint ({err}); delete it or "
                                 f"resume from another one") from err


def check_compatible(saved: dict, current: dict, allowed: frozenset, what: str = "option") -> None:
    """Refuse to resume when options that shape the trajectory differ; name every difference."""
    diffs = []
    for key in sorted(set(saved) | set(current)):
        if key in allowed:
            continue
        a, b = saved.get(key, "<absent>"), current.get(key, "<absent>")
        if a != b:
            diffs.append(f"--{key.replace('_', '-')}: checkpoint has {a!r}, this run asks for {b!r}")
    if diffs:
        raise CheckpointMismatch(
            f"the checkpoint was written by a different configuration ({what}s differ):\n  "
            + "\n  ".join(diffs)
            + "\nResume with the checkpoint's settings, or start a new run in another --save-dir."
        )


def average_checkpoints(paths: list[Path]) -> dict:
    r"""Element-wise mean of the model weights of ``paths``: $\bar\theta = \frac1n\sum_i \theta_i$.

    Accumulated in float64 and cast back to each tensor's dtype; integer buffers come from the
    last checkpoint.
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    total: dict[str, torch.Tensor] = {}
    last = None
    for path in paths:
        model = load_checkpoint(path)["model"]
        if total and set(model) != set(total):
            raise CheckpointMismatch(f"{path} holds different parameters than {paths[0]}; "
                                     f"only checkpoints of one run can be averaged")
        for name, tensor in model.items():
            if tensor.is_floating_point():
                total[name] = total.get(name, 0) + tensor.double()
            else:
                total[name] = tensor
        last = model
    return {name: (t / len(paths)).to(last[name].dtype) if last[name].is_floating_point() else t
            for name, t in total.items()}


def capture_rng_state() -> dict:
    """The state of every random generator the training draws from."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()   # this process's device only (one GPU per process)
    return state


def restore_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
