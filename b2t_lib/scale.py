"""The one scale switch: ``B2T_SCALE`` = ``tiny`` | ``small`` | ``full``, and the rehearsal switch ``B2T_REHEARSAL``.

* ``tiny``  - CPU, seconds to minutes, synthetic data. What the tests and ``make test`` run.
* ``small`` - one CUDA GPU, real data (a subset), hours.
* ``full``  - the paper's configuration, several GPUs through ``torchrun``.

``B2T_REHEARSAL=1`` rehearses ``small`` and ``full`` on a CPU (``make rehearse``): the same code path, with
every run's sizes shrunk by one rule (:func:`b2t_lib.presets.rehearsal_sizes`), the real data loaders reading
miniature copies of the real sources (:mod:`b2t_lib.data.miniature`), and :data:`REHEARSAL_GPUS` CPU processes
standing in for GPUs (one run per "GPU" at ``small``, ``torchrun`` over all of them at ``full``, on gloo).

Everything that depends on the scale or the rehearsal reads it through :func:`get_scale` and
:func:`rehearsal`; nothing else looks at the environment variables.
"""

from __future__ import annotations

import os

from .errors import UserError, run_command

SCALES = ("tiny", "small", "full")
ENV_VAR = "B2T_SCALE"
REHEARSAL_VAR = "B2T_REHEARSAL"
REHEARSAL_GPUS = 2  # CPU processes that stand in for GPUs under the rehearsal


class ScaleError(UserError, RuntimeError):
    """The requested scale is unknown or cannot run on this machine."""


def rehearsal() -> bool:
    """True when ``B2T_REHEARSAL`` is set to 1 (or yes/true/on): ``small`` and ``full`` run on a CPU with every
    run's sizes shrunk, on miniature copies of the real data sources. Any other non-empty value is refused."""
    value = os.environ.get(REHEARSAL_VAR, "").strip().lower()
    if value in ("", "0", "no", "false", "off"):
        return False
    if value in ("1", "yes", "true", "on"):
        return True
    raise ScaleError(
        f"{REHEARSAL_VAR}={value!r} is not understood; set it to 1 to rehearse small/full on a CPU, or unset it"
    )


def get_scale(require_hardware: bool = True) -> str:
    """Return the scale selected by ``B2T_SCALE`` (default ``tiny``).

    ``small`` and ``full`` need a CUDA device (or the rehearsal); asking for them without one raises instead
    of starting a run that cannot finish. Pass ``require_hardware=False`` to only read the value (for
    example to print the command a GPU machine would run).
    """
    scale = os.environ.get(ENV_VAR, "tiny").strip().lower() or "tiny"
    if scale not in SCALES:
        raise ScaleError(f"{ENV_VAR}={scale!r} is not a scale; valid values are: {', '.join(SCALES)}")
    rehearsal()  # an unreadable B2T_REHEARSAL stops here too
    if require_hardware and scale != "tiny":
        require_cuda(scale)
    return scale


def require_cuda(scale: str) -> None:
    """Raise :class:`ScaleError` (the scale switch's message) when ``scale`` is ``small`` or ``full``, no
    CUDA device is visible and the rehearsal is off. The launcher and the trainer refuse through this too."""
    if scale == "tiny" or rehearsal():
        return
    import torch

    if not torch.cuda.is_available():
        raise ScaleError(
            f"{ENV_VAR}={scale} needs a CUDA GPU (small: one GPU for hours, full: several GPUs "
            f"through torchrun), and this machine has none. Unset {ENV_VAR} or set it to 'tiny' "
            f"to run the CPU version (or rehearse small/full on this CPU with `make rehearse`)."
        )


def cuda_devices() -> list[str]:
    """The CUDA ids runs may use, as ``CUDA_VISIBLE_DEVICES`` names them (its entries when it is set). Under
    the rehearsal without a GPU: :data:`REHEARSAL_GPUS` stand-in ids, whose runs train on the CPU."""
    import torch

    count = torch.cuda.device_count()
    if count == 0 and rehearsal():
        return [str(i) for i in range(REHEARSAL_GPUS)]
    listed = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def _print_scale() -> None:
    print(get_scale())


def main() -> int:
    """``python -m b2t_lib.scale``: print the scale ``make course`` will use (``tiny`` unless ``B2T_SCALE``
    asks for another: a course never starts GPU work unasked); when ``B2T_SCALE`` is unknown or asks for
    hardware this machine lacks, print one line ``error: ...`` and return 2 (:func:`~b2t_lib.errors.run_command`)."""
    return run_command(_print_scale)


if __name__ == "__main__":
    raise SystemExit(main())
