r"""Verdicts that survive a seed: the same runs again with other seeds, and a run's validation NLL at an update.

A chapter's central claim ("at 18L-18L Post-LN fails, Pre-LN and B2T train") is a statement about a setting, not
about one random initialization and one data order. One seed can mislead both ways: a seed on which Post-LN
happens to stay on the plateau a little longer, or one on which B2T leaves it a little later. The chapters
therefore train their deep runs with three seeds and count how many agree:

::

    from b2t_lib.runs import launch
    from b2t_lib.runs.seeds import judge_seeds, seeds_group, with_seeds

    more = with_seeds(runs, seeds=(2, 3))              # {"post_ln_18L_seed2": cfg(seed=2), ...}
    launch(more, seeds_group(group))                   # in "<group>_seeds"
    verdicts = judge_seeds(group, (1, 2, 3), at=300, fails="post_ln_18L", trains=["pre_ln_18L", "b2t_18L"], ...)

The seed (``TrainConfig.seed``) sets the initial weights, the order of the training batches and the dropout
masks; everything else stays. The extra runs skip the test-set evaluation (``eval_at_end=False``): a verdict
reads only the validation NLL of their log.

A verdict is judged at an update *before* the run's end (:func:`valid_nll_at`), with a margin, so that a run
that is merely slow to start is not mistaken for one that trains, and the rest of the run shows whether the
verdict lasts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..train import TrainConfig, read_log
from ..train.records import read_result
from .state import group_dir


def seeds_group(group: str) -> str:
    """The launcher group that holds the other seeds of ``group``'s runs (so that tables of ``group`` stay one
    row per setting)."""
    return f"{group}_seeds"


def seed_name(name: str, seed: int) -> str:
    """The run name of ``name`` trained with ``seed``: ``<name>_seed<seed>``."""
    return f"{name}_seed{seed}"


def with_seeds(
    runs: dict[str, TrainConfig],
    seeds: Iterable[int],
    *,
    until: dict[str, int] | None = None,
    valid_interval: int | None = None,
) -> dict[str, TrainConfig]:
    """Each run of ``runs`` once per seed of ``seeds``, named :func:`seed_name`; identical but for the seed,
    and not evaluated on the test sets at the end (the verdicts read the validation NLL).

    Two savings that change no number a verdict reads: ``until`` (run name -> update) stops a run there instead of
    at its ``max_update`` (a run that should train is read only at the judgment update; the schedule does not depend
    on ``max_update``, so the updates before are the same), and ``valid_interval`` validates less often (validation
    draws no random numbers, so training is the same; keep it a divisor of the judgment update, the stall deadline
    and the end, so that the verdict's points are validated)."""
    until = until or {}
    unknown = sorted(set(until) - set(runs))
    if unknown:
        raise ValueError(f"with_seeds: until names runs that are not given: {', '.join(unknown)}")
    out = {}
    for seed in seeds:
        for name, cfg in runs.items():
            changes = dict(seed=int(seed), eval_at_end=False)
            if name in until:
                changes["max_update"] = min(int(until[name]), cfg.max_update)
            if valid_interval:
                changes["valid_interval"] = int(valid_interval)
            out[seed_name(name, seed)] = cfg.replace(**changes)
    return out


def valid_nll_at(log: list[dict], update: int) -> float:
    """The validation NLL (bits per token) of the first validation at or after ``update`` in a run's log
    (:func:`b2t_lib.train.read_log`); nan when the run has none there (it stopped earlier: a stalled run ends at
    its deadline, a diverged one when it diverged). The stall rule reads the NLL at the same point."""
    for entry in log:
        if entry.get("kind") == "valid" and entry["update"] >= update:
            return float(entry["valid_nll"])
    return math.nan


def valid_curve(log: list[dict], start: int = 0) -> list[float]:
    """The validation NLL of every validation at or after update ``start``, in order."""
    return [float(e["valid_nll"]) for e in log if e.get("kind") == "valid" and e["update"] >= start]


def seed_folder(group: str, name: str, seed: int, first_seed: int = 1) -> Path:
    """The folder of run ``name`` with ``seed``: the chapter's own run (``group/name``) for ``first_seed``, the
    extra run (``<group>_seeds/<name>_seed<seed>``) otherwise."""
    if seed == first_seed:
        return group_dir(group) / name
    return group_dir(seeds_group(group)) / seed_name(name, seed)


@dataclass(frozen=True)
class SeedVerdict:
    """One seed's verdict on "``fails`` does not train, every run of ``trains`` does"."""

    seed: int
    at: dict[str, float]  # run name -> validation NLL at the judgment update (bits)
    fail_end: float  # the failing run's last validation NLL
    fail_drop: float  # how far the failing run's NLL fell from the judgment update to its end (bits)
    holds: bool


def judge_seed(
    logs: dict[str, list[dict]],
    seed: int,
    *,
    at: int,
    fails: str,
    trains: Iterable[str],
    fail_above: float,
    train_below: float,
    max_drop: float | None,
) -> SeedVerdict:
    r"""Judge one seed's runs (run name -> log) at update ``at``, before the runs end:

    * every run of ``trains`` has a validation NLL below ``train_below`` there;
    * the run ``fails`` is above ``fail_above`` there *and* at its last validation, and fell by less than
      ``max_drop`` bits in between: it is on a plateau, not slowly leaving it. ``max_drop=None`` leaves the fall
      unjudged, for a setting where the failing run may start to leave its plateau before the end on some seeds
      and CPUs: the verdict is then "still above ``fail_above`` at the end", not "flat".

    A run without a validation at or after ``at`` (it stopped earlier) breaks the verdict, whichever side it is on:
    the chapters judge no later than the stall deadline, where a stalled run stops, so a missing point there means
    the run diverged or crashed, and the log cannot tell which. Read the status (:func:`seed_statuses`) for that.
    """
    trains = list(trains)
    nll = {name: valid_nll_at(logs[name], at) for name in [fails, *trains]}
    tail = valid_curve(logs[fails], at)
    fail_end = tail[-1] if tail else math.nan
    fail_drop = (tail[0] - min(tail)) if tail else math.nan
    holds = (
        all(nll[name] < train_below for name in trains)  # nan compares False: a run without the point fails
        and nll[fails] > fail_above
        and fail_end > fail_above
        and (max_drop is None or fail_drop < max_drop)
    )
    return SeedVerdict(seed, nll, fail_end, fail_drop, holds)


def agreement(verdicts: dict[int, SeedVerdict]) -> str:
    """``"k of n seeds"``: how many seeds' verdicts agree with the claim."""
    return f"{sum(v.holds for v in verdicts.values())} of {len(verdicts)} seeds"


def seed_statuses(group: str, name: str, seeds: Iterable[int]) -> dict[int, str | None]:
    """The status (``completed``, ``stalled``, ``diverged``) of run ``name`` for every seed; None where it has no
    ``result.json``."""
    return {seed: (read_result(seed_folder(group, name, seed)) or {}).get("status") for seed in seeds}


def judge_seeds(group: str, seeds: Iterable[int], **rule) -> dict[int, SeedVerdict]:
    """:func:`judge_seed` for every seed of the runs named in ``rule`` (``fails``, ``trains``), read from their
    folders (:func:`seed_folder`)."""
    names = [rule["fails"], *rule["trains"]]
    return {seed: judge_seed({n: read_log(seed_folder(group, n, seed)) for n in names}, seed, **rule) for seed in seeds}
