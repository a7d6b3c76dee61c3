"""The one scale switch: ``B2T_SCALE`` = ``tiny`` | ``small`` | ``full``.

* ``tiny``  - CPU, seconds to minutes, synthetic data. What the tests and ``make test`` run.
* ``small`` - one CUDA GPU, real data (a subset), hours.
* ``full``  - the paper's configuration, several GPUs through ``torchrun``.

Everything that depends on the scale reads it through :func:`get_scale`; nothing else looks at
the environment variable.
"""
from __future__ import annotations

import os

SCALES = ("tiny", "small", "full")
ENV_VAR = "B2T_SCALE"


class ScaleError(RuntimeError):
    """The requested scale is unknown or cannot run on this machine."""


def get_scale(require_hardware: bool = True) -> str:
    """Return the scale selected by ``B2T_SCALE`` (default ``tiny``).

    ``small`` and ``full`` need a CUDA device; asking for them without one raises instead of
    starting a run that cannot finish. Pass ``require_hardware=False`` to only read the value
    (for example to print the command a GPU machine would run).
    """
    scale = os.environ.get(ENV_VAR, "tiny").strip().lower() or "tiny"
    if scale not in SCALES:
        raise ScaleError(f"{ENV_VAR}={scale!r} is not a scale; valid values are: {', '.join(SCALES)}")
    if require_hardware and scale != "tiny":
        require_cuda(scale)
    return scale


def require_cuda(scale: str) -> None:
    """Raise :class:`ScaleError` (the scale switch's message) when ``scale`` is ``small`` or ``full`` and no
    CUDA device is visible. The launcher (:mod:`b2t_lib.train.launch`) refuses through this too."""
    if scale == "tiny":
        return
    import torch

    if not torch.cuda.is_available():
        raise ScaleError(
            f"{ENV_VAR}={scale} needs a CUDA GPU (small: one GPU for hours, full: several GPUs "
            f"through torchrun), and this machine has none. Unset {ENV_VAR} or set it to 'tiny' "
            f"to run the CPU version."
        )


def main() -> int:
    """``python -m b2t_lib.scale``: print the scale ``make course`` will use (``tiny`` unless ``B2T_SCALE``
    asks for another: a course never starts GPU work unasked); exit 2 with the reason when ``B2T_SCALE``
    is unknown or asks for hardware this machine lacks."""
    import sys

    try:
        print(get_scale())
    except ScaleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
