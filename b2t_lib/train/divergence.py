r"""Divergence detection: one of the two ways a run fails to train (``"diverged"``; the other is
``"stalled"``, a run that never leaves the plateau: :mod:`.failure`, which also says what both do).

Two signals stop a run as diverged:

* a non-finite loss or gradient norm (fp32/bf16; with fp16 the gradient scaler skips such steps);
* a smoothed loss that stays far above where it started. With $\ell_0$ the mean loss of the first
  ``warmup`` updates (by default the first update alone: its loss is computed before any step,
  at the initialization) and $\bar\ell_t$ an exponential moving average,

  .. math::  \bar\ell_t = (1-\alpha)\,\bar\ell_{t-1} + \alpha\,\ell_t ,

  the run diverged when $\bar\ell_t > f\,\ell_0$ for ``patience`` consecutive updates.
"""

from __future__ import annotations

import math


class DivergenceMonitor:
    def __init__(self, factor: float = 1.5, patience: int = 200, warmup: int = 1, alpha: float = 0.1):
        self.factor, self.patience, self.warmup, self.alpha = factor, patience, warmup, alpha
        self.first_losses: list[float] = []
        self.smoothed: float | None = None
        self.above = 0

    @property
    def start(self) -> float | None:
        return sum(self.first_losses) / len(self.first_losses) if self.first_losses else None

    def update(self, update: int, loss: float, grad_norm: float) -> str | None:
        """Feed one update's loss; return a message when the run diverged, else None."""
        if not math.isfinite(loss):
            return f"the training loss became {loss} at update {update}"
        if not math.isfinite(grad_norm):
            return f"the gradient norm became {grad_norm} at update {update}"
        if len(self.first_losses) < self.warmup:
            self.first_losses.append(loss)
        # EMA: l_bar_t = (1 - alpha) l_bar_{t-1} + alpha l_t
        self.smoothed = loss if self.smoothed is None else (1 - self.alpha) * self.smoothed + self.alpha * loss
        if len(self.first_losses) >= self.warmup and self.smoothed > self.factor * self.start:
            self.above += 1
        else:
            self.above = 0
        if self.above >= self.patience:
            return (
                f"the smoothed training loss stayed above {self.factor} x its starting value "
                f"({self.smoothed:.3f} > {self.factor} x {self.start:.3f}) for {self.patience} "
                f"updates, until update {update}"
            )
        return None

    def state_dict(self) -> dict:
        return {"first_losses": list(self.first_losses), "smoothed": self.smoothed, "above": self.above}

    def load_state_dict(self, state: dict) -> None:
        self.first_losses = list(state["first_losses"])
        self.smoothed = state["smoothed"]
        self.above = state["above"]
