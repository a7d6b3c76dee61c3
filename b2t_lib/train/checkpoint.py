"""Checkpoints: written atomically, the last N and the best kept, checked against the run's config,
and averaged for decoding as the paper does (docs/methods.md §1.8: average the last 10).

Files in ``save_dir``: ``checkpoint_<update>.pt`` (numbered), ``checkpoint_last.pt`` and
``checkpoint_best.pt`` (hard links to numbered ones, so they cost no extra disk or time).

A checkpoint holds only tensors and plain Python values (numbers, strings, lists, tuples, dicts;
the random generators' states are stored in that form too), so it is read with
``torch.load(weights_only=True)``: loading a file cannot run code from it. A file that needs more
(for example one written by an older version of this library, with NumPy arrays inside) is refused
with a message; ``load_checkpoint(path, trust=True)`` reads it in full, for files you wrote yourself.

On disk the optimizer's moments are packed (:func:`pack_optimizer_state`): one flat tensor for all first moments,
one for all second moments and one for the step counts, where ``torch.optim``'s format has three tensors per
parameter. ``torch.save``/``torch.load`` pay per tensor, so a 100L-100L checkpoint (4,202 parameters) saves in
about a third of the time and loads in about 40 % (``benchmarks/RESULTS.md`` §10). :func:`load_checkpoint`
unpacks, so what it returns is in ``torch.optim``'s format, as are checkpoints written before the packing (which
it still reads).
"""

from __future__ import annotations

import math
import os
import pickle
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from ..files import (  # noqa: F401  (the checkpoint errors, re-exported)
    CheckpointMismatch,
    UnreadableCheckpoint,
    UntrustedCheckpoint,
    atomic_write,
    temporary_name,
)

_NUMBERED = re.compile(r"^checkpoint_(\d+)\.pt$")
# The object a safe load refused, as torch words it: "Unsupported global: GLOBAL functools.partial was not an
# allowed global" (a class or function outside the allowed list) or "Trying to load unsupported GLOBAL posix.system
# whose module posix is blocked" (a function of a module torch never allows, such as os).
_REFUSED_GLOBAL = re.compile(r"\bGLOBAL ([\w.]+)")


class MissingCheckpoint(UserError, FileNotFoundError):
    """No checkpoint where one was asked for (``--checkpoint``, a run folder without checkpoints)."""


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
    tmp = temporary_name(link)  # <name>.tmp-<pid>: a killed process's one is removed at the run's next start
    tmp.unlink(missing_ok=True)
    try:
        os.link(target, tmp)
    except OSError:
        shutil.copyfile(target, tmp)
    os.replace(tmp, link)


PACKED_OPTIMIZER = "adamw-moments-packed-1"  # the format tag of a packed optimizer state


def pack_optimizer_state(state_dict: dict) -> dict:
    """An AdamW ``state_dict`` (``torch.optim``'s format) with its per-parameter tensors packed into three: the steps
    ``(n,)``, the first moments and the second moments, each flattened and concatenated in the state's order. The
    values are copied exactly. A state that does not fit the layout (other keys, mixed dtypes or devices, a tensor
    that is not contiguous) is returned as it is."""
    state = state_dict.get("state", {})
    numbers = list(state)
    entries = [state[n] for n in numbers]
    steps = [e.get("step") for e in entries]
    moments = [e.get(k) for e in entries for k in ("exp_avg", "exp_avg_sq")]
    fits = (
        bool(entries)
        and all(set(e) == {"step", "exp_avg", "exp_avg_sq"} for e in entries)
        and all(torch.is_tensor(t) and t.dim() == 0 for t in steps)
        and all(torch.is_tensor(m) and m.is_contiguous() for m in moments)
        and all(e["exp_avg"].shape == e["exp_avg_sq"].shape for e in entries)
        and len({(t.dtype, t.device) for t in steps}) == 1
        and len({(m.dtype, m.device) for m in moments}) == 1
    )
    if not fits:
        return state_dict
    return {
        "packed": PACKED_OPTIMIZER,
        "param_groups": state_dict["param_groups"],
        "numbers": numbers,  # the parameters (their numbers in param_groups) that have a state
        "shapes": [list(e["exp_avg"].shape) for e in entries],
        "step": torch.stack([e["step"] for e in entries]),  # (n,)
        "exp_avg": torch.cat([e["exp_avg"].reshape(-1) for e in entries]),  # (sum of the parameters' sizes,)
        "exp_avg_sq": torch.cat([e["exp_avg_sq"].reshape(-1) for e in entries]),
    }


def unpack_optimizer_state(saved: dict) -> dict:
    """The inverse of :func:`pack_optimizer_state`: ``torch.optim``'s format (each tensor a view into the packed
    ones). A state that is not packed is returned as it is."""
    if not isinstance(saved, dict) or saved.get("packed") != PACKED_OPTIMIZER:
        return saved
    sizes = [math.prod(shape) for shape in saved["shapes"]]
    first, second = saved["exp_avg"].split(sizes), saved["exp_avg_sq"].split(sizes)
    state = {
        number: {"step": saved["step"][i], "exp_avg": first[i].view(shape), "exp_avg_sq": second[i].view(shape)}
        for i, (number, shape) in enumerate(zip(saved["numbers"], saved["shapes"], strict=True))
    }
    return {"state": state, "param_groups": saved["param_groups"]}


def save_checkpoint(
    state: dict, save_dir: Path, update: int, keep_last: int, is_best: bool, numbered: bool = True
) -> Path:
    """Write ``checkpoint_<update>.pt`` atomically (temporary file, fsync, rename), update the
    ``last``/``best`` links and delete numbered checkpoints beyond the last ``keep_last``.

    ``numbered=False`` writes ``checkpoint_last.pt`` only: a state to resume from that is not one of
    the checkpoints averaged for decoding (fairseq's last, mid-epoch state when it saves by epoch).
    """
    folder = Path(save_dir)
    path = numbered_path(folder, update) if numbered else folder / "checkpoint_last.pt"
    if isinstance(state.get("optimizer"), dict):
        state = {**state, "optimizer": pack_optimizer_state(state["optimizer"])}
    with atomic_write(path, "wb") as handle:  # replaces the name only: a file it was linked to is kept
        torch.save(state, handle)
    if numbered:
        _atomic_link(path, folder / "checkpoint_last.pt")
    if is_best:
        _atomic_link(path, folder / "checkpoint_best.pt")
    for old in list_checkpoints(folder)[:-keep_last]:
        old.unlink(missing_ok=True)
    return path


def holds_run(save_dir: Path) -> bool:
    """True when ``save_dir`` holds checkpoints of a run (numbered ones or ``checkpoint_last.pt``)."""
    return bool(list_checkpoints(save_dir)) or (Path(save_dir) / "checkpoint_last.pt").is_file()


def load_checkpoint(path: Path, trust: bool = False) -> dict:
    """Load a checkpoint on the CPU with ``torch.load(weights_only=True)``.

    Raises :class:`UnreadableCheckpoint` for a truncated or foreign file and
    :class:`UntrustedCheckpoint` for one that holds more than tensors and plain values;
    ``trust=True`` unpickles such a file in full (it can run code: only for files you trust).
    """
    path = Path(path)
    if not path.is_file():
        raise MissingCheckpoint("no checkpoint file", where=path, todo="pass the path of a checkpoint_<update>.pt")
    try:
        state = torch.load(path, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as err:
        found = None if trust else _REFUSED_GLOBAL.search(str(err))
        if found:  # a well-formed file that needs code to rebuild one of its objects
            raise UntrustedCheckpoint(
                f"{path} holds a {found.group(1)} object, which a safe load does not rebuild; if you wrote "
                f"this file yourself (e.g. with an older version of b2t_lib), load it with "
                f"load_checkpoint(path, trust=True)"
            ) from err
        raise UnreadableCheckpoint(
            f"{path} is not a readable checkpoint (its bytes are not a file torch.save wrote)"
        ) from err
    except Exception as err:  # truncated, corrupted or foreign file
        raise UnreadableCheckpoint(f"{path} is not a readable checkpoint ({_first_line(err)})") from err
    if isinstance(state, dict) and "optimizer" in state:
        state["optimizer"] = unpack_optimizer_state(state["optimizer"])
    return state


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def _update_number(path: Path) -> int:
    return int(_NUMBERED.match(path.name).group(1))


def _twin(path: Path, others: list[Path]) -> Path | None:
    """The file of ``others`` that ``path`` is a hard link to, if any."""
    for other in others:
        try:
            if os.path.samefile(path, other):
                return other
        except OSError:  # deleted since it was listed
            continue
    return None


def newest_readable_checkpoint(save_dir: Path) -> tuple[Path, dict, list[str]] | None:
    """The checkpoint of ``save_dir`` with the highest update that loads: ``(path, state, problems)``,
    where ``problems`` says why each newer file was skipped; None when the folder holds no checkpoint.

    ``checkpoint_last.pt`` is normally a hard link to the newest numbered file. It is not when a run was
    killed between writing ``checkpoint_<n>.pt`` and moving the link (the link then names an older
    update) or when the last state was saved without a number; so every file is ranked by its update and
    the numbered file is never passed over for an older ``checkpoint_last.pt``.
    Raises :class:`UnreadableCheckpoint` (naming every file) when none of them loads.
    """
    folder = Path(save_dir)
    numbered = list_checkpoints(folder)  # oldest first
    ranked = [(_update_number(p), 0, p, None) for p in numbered]  # (update, tie-break, path, state if loaded)
    problems = []
    last = folder / "checkpoint_last.pt"
    if last.is_file():
        twin = _twin(last, numbered)
        if twin is not None:  # the usual case: the same data as a numbered file, tried under its own name
            ranked = [(n, 1, last, None) if p == twin else (n, t, p, s) for n, t, p, s in ranked]
        else:  # a state of its own: its update is known only by reading it
            try:
                state = load_checkpoint(last)
                ranked.append((state["trainer"]["num_updates"], 1, last, state))
            except UnreadableCheckpoint as err:
                problems.append(str(err))
    if not ranked and not problems:
        return None
    for _, _, path, state in sorted(ranked, key=lambda r: (r[0], r[1]), reverse=True):
        try:
            return path, state if state is not None else load_checkpoint(path), problems
        except UnreadableCheckpoint as err:
            problems.append(str(err))
    raise UnreadableCheckpoint(
        f"no checkpoint in {folder} can be read:\n  "
        + "\n  ".join(problems)
        + "\nStart a new run in another --save-dir (or move these files away)."
    )


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
            raise CheckpointMismatch(
                f"{path} holds different parameters than {paths[0]}; only checkpoints of one run can be averaged"
            )
        for name, tensor in model.items():
            if tensor.is_floating_point():
                total[name] = total.get(name, 0) + tensor.double()
            else:
                total[name] = tensor
        last = model
    return {
        name: (t / len(paths)).to(last[name].dtype) if last[name].is_floating_point() else t
        for name, t in total.items()
    }


def capture_rng_state() -> dict:
    """The state of every random generator the training draws from, as tensors and plain values
    (so that a checkpoint loads with ``weights_only=True``)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),  # (version, tuple of ints, None or float)
        "numpy": (str(kind), torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # this process's device only (one GPU per process)
    return state


def restore_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.int64).astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
