r"""Learning-rate schedules, as functions of the update number $t$ (so a resumed run needs only $t$).

``inverse_sqrt`` (fairseq, docs/methods.md §3.3): linear warmup from ``warmup_init_lr`` to the peak
``lr`` over $W$ updates, then decay with the inverse square root of the update number:

.. math::
    \eta_t = \eta_{init} + t\,\frac{\eta - \eta_{init}}{W} \quad (t < W), \qquad
    \eta_t = \eta\,\sqrt{W}/\sqrt{t} \quad (t \ge W)

``inverse_sqrt_nowarmup`` (T-Fixup, docs/methods.md §2.3): no warmup, decay period $P$:

.. math::
    \eta_t = \eta\,\sqrt{P / (P + t)}
"""

from __future__ import annotations

from ..config import ConfigError

import math

SCHEDULERS = ("inverse_sqrt", "inverse_sqrt_nowarmup")


class LRSchedule:
    """Sets the learning rate of an optimizer for update ``t`` (0 = the first update)."""

    def __init__(
        self,
        optimizer,
        name: str,
        lr: float,
        warmup_updates: int = 4000,
        warmup_init_lr: float = 1e-7,
        decay_period: int = 4000,
    ):
        if name not in SCHEDULERS:
            raise ConfigError(f"unknown lr scheduler {name!r}; choose one of {', '.join(SCHEDULERS)}")
        if lr <= 0:
            raise ConfigError(f"the peak learning rate must be positive, got {lr}")
        if name == "inverse_sqrt" and warmup_updates <= 0:
            raise ConfigError("inverse_sqrt needs --warmup-updates > 0; use inverse_sqrt_nowarmup for none")
        if name == "inverse_sqrt_nowarmup" and decay_period <= 0:
            raise ConfigError(f"--decay-period must be positive, got {decay_period}")
        self.optimizer = optimizer
        self.name = name
        self.lr = lr
        self.warmup_updates = warmup_updates
        self.warmup_init_lr = warmup_init_lr
        self.decay_period = decay_period

    def lr_at(self, t: int) -> float:
        """Learning rate used by update number ``t`` (0-based, as fairseq's ``num_updates``)."""
        if self.name == "inverse_sqrt_nowarmup":
            # eta_t = eta * sqrt(P / (P + t))
            return self.lr * math.sqrt(self.decay_period / (self.decay_period + t))
        w = self.warmup_updates
        if t < w:
            # eta_t = eta_init + t (eta - eta_init) / W
            return self.warmup_init_lr + t * (self.lr - self.warmup_init_lr) / w
        # eta_t = eta sqrt(W) / sqrt(t)
        return self.lr * math.sqrt(w) / math.sqrt(t)

    def step(self, t: int) -> float:
        """Set the optimizer's learning rate for update ``t`` and return it."""
        lr = self.lr_at(t)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr
