r"""When a run "failed to train": the statuses a run ends with, and the stall rule.

The paper prints "Training failed" for Post-LN at 18L-18L (Tables 1, 3, 4, 5; Figure 1 shows why:
its loss stays flat from the start). A run can fail in two ways, and ``result.json`` says which:

* ``"diverged"``: the loss or the gradient norm became non-finite, or the smoothed loss stayed far
  above its start (:class:`~b2t_lib.train.divergence.DivergenceMonitor`);
* ``"stalled"``: the run never left the plateau. Its validation NLL did not fall *clearly* below
  the unigram baseline :math:`H_1` of its data (the cross entropy of a model that knows only the
  training token frequencies, :mod:`b2t_lib.data.unigram`) by a deadline :math:`D` (updates):

  .. math:: \text{stalled} \iff \mathrm{NLL}_{\text{valid}}(u^*) \ge H_1 - m,
            \qquad u^* = \text{the first validation update} \ge D

  with the margin :math:`m` in bits (``stall_margin``) and :math:`D` = ``stall_deadline``. The
  preset of each task and scale gives both numbers, with the reason for each
  (:mod:`b2t_lib.presets`). The rule is judged once: a run below the bar at :math:`u^*` is never
  flagged later; a run that ends before the deadline is not judged (too short to tell); a
  deadline of 0 turns the rule off.

A run that completes its updates ends ``"completed"``. Both failures stop the run at once, keep
every checkpoint and the log written so far (a stalled run also saves a checkpoint at the point it
stopped: its weights are finite, so it can be inspected, evaluated or resumed), skip the test-set
evaluation, and make ``python -m b2t_lib train`` exit with code 3 (0 under torchrun: :mod:`b2t_lib.cli`).
Tables print both as the paper does, "Training failed", with the kind and its numbers in a footnote
(:func:`failure_note`).
"""

from __future__ import annotations

import math

COMPLETED, STALLED, DIVERGED = "completed", "stalled", "diverged"
STATUSES = (COMPLETED, STALLED, DIVERGED)
FAILED_STATUSES = (STALLED, DIVERGED)


def is_failed(status: str | None) -> bool:
    """Whether a run's status is one of the paper's "Training failed" (stalled or diverged)."""
    return status in FAILED_STATUSES


class StallRule:
    """The stall rule of one run: fed every validation NLL, it says when the run stalled.

    ``baseline`` is the unigram baseline in bits per token (None: the task has none, and the rule
    is off). Its state (whether and when the run was judged to have trained) goes into checkpoints,
    so a resumed run is never judged twice.
    """

    def __init__(self, margin: float, deadline: int, baseline: float | None):
        self.margin, self.deadline, self.baseline = float(margin), int(deadline), baseline
        self.passed: dict | None = None  # {"update", "valid_nll"} once the run was judged to train
        self.stalled: dict | None = None  # {"update", "valid_nll"} when it stalled

    @property
    def active(self) -> bool:
        return self.deadline > 0 and self.baseline is not None

    @property
    def bar(self) -> float | None:
        """The validation NLL (bits) a run must get below: :math:`H_1 - m`."""
        return None if self.baseline is None else self.baseline - self.margin

    def check(self, update: int, valid_nll: float) -> str | None:
        """Judge the validation NLL of ``update``; return a message when the run stalled, else None."""
        if not self.active or self.passed is not None or update < self.deadline:
            return None
        point = {"update": int(update), "valid_nll": float(valid_nll)}
        if math.isfinite(valid_nll) and valid_nll < self.bar:
            self.passed = point
            return None
        self.stalled = point
        return (
            f"validation NLL {valid_nll:.2f} bits at update {update} (the first validation at or after the "
            f"deadline, update {self.deadline}) is not below the unigram baseline {self.baseline:.2f} bits "
            f"minus the margin {self.margin:g} bits (= {self.bar:.2f}): the run never left the plateau"
        )

    def summary(self, num_updates: int) -> dict:
        """What ``result.json`` stores under ``"stall_rule"``: the numbers and the verdict
        (``"passed"``, ``"stalled"``, ``"not judged"`` for a run shorter than the deadline, ``"off"``)."""
        if not self.active:
            verdict = "off"
        elif self.stalled is not None:
            verdict = STALLED
        elif self.passed is not None:
            verdict = "passed"
        else:
            verdict = "not judged"
        out = {
            "verdict": verdict,
            "unigram_baseline": self.baseline,
            "margin": self.margin,
            "deadline": self.deadline,
            "bar": None if self.bar is None else round(self.bar, 6),
        }
        judged = self.stalled or self.passed
        if judged:
            out.update(judged_at=judged["update"], valid_nll=judged["valid_nll"])
        if verdict == "not judged":
            out["reason"] = f"the run ended at update {num_updates}, before the deadline (update {self.deadline})"
        elif verdict == "off":
            out["reason"] = "stall_deadline is 0" if self.deadline <= 0 else "the task has no unigram baseline"
        return out

    def state_dict(self) -> dict:
        # Only a passed verdict is kept: a stalled run that is resumed is judged again at its next
        # validation, with the resumed run's rule (``--stall-deadline 0`` trains it on regardless).
        return {"passed": self.passed}

    def load_state_dict(self, state: dict | None) -> None:
        self.passed = (state or {}).get("passed")
        self.stalled = None


def failure_note(record: dict) -> str | None:
    """The footnote of a failed run's "Training failed": its kind and its numbers, or None.

    ``"stalled: validation NLL 7.89 bits at update 400, unigram baseline 7.81 bits (margin 0.5;
    never left the plateau)"``; ``"diverged: the training loss became nan at update 37"``.
    """
    status = record.get("status")
    if status == STALLED:
        rule = record.get("stall_rule") or {}
        if rule.get("valid_nll") is not None and rule.get("unigram_baseline") is not None:
            return (
                f"stalled: validation NLL {rule['valid_nll']:.2f} bits at update {rule['judged_at']}, "
                f"unigram baseline {rule['unigram_baseline']:.2f} bits (margin {rule['margin']:g}; "
                f"never left the plateau)"
            )
        return f"stalled: {record.get('message') or 'never left the plateau'}"
    if status == DIVERGED:
        return f"diverged: {record.get('message') or 'the loss became non-finite or rose'}"
    return None
