"""Running many trainings: the one launcher, the detached queue, run states, progress and cost estimates.

::

    from b2t_lib.runs import launch
    records = launch({"b2t_6L": cfg}, "my_group")   # trains in runs/my_group/b2t_6L, skips finished runs

The orchestration sits above the engine (:mod:`b2t_lib.train`): it builds configs, starts trainers (in this
process's workers at ``tiny``, detached processes at ``small``/``full``) and reads their folders; the engine never
imports it. Modules: :mod:`.launch` (``launch``), :mod:`.queue` (the detached queue runner), :mod:`.state` (a
run's state from its folder), :mod:`.progress` (bars), :mod:`.sweep` (runs side by side in this machine's
processes), :mod:`.cost` (FLOPs per update and estimated GPU-hours), :mod:`.seeds` (the same runs with other seeds,
and a verdict judged on each before the runs end).
"""

from .cost import estimate_gpu_hours
from .launch import LaunchError, launch
from .state import group_dir, runs_root

__all__ = ["LaunchError", "estimate_gpu_hours", "group_dir", "launch", "runs_root"]
