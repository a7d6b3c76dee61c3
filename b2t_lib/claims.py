"""What a chapter's runs show, checked: :func:`claim` is the notebooks' assert for measured results.

A course notebook states what its training runs show ("18L-18L Post-LN stalls, Pre-LN and B2T train") and
checks it. Where the check runs decides what a failing claim means:

* at the ``tiny`` scale every claim was measured on the chapter's CPU settings, and the notebook is a test
  (``make test``): a claim that stops holding raises :class:`ClaimFailed` (an ``AssertionError``) and fails it;
* at ``small`` and ``full`` the same cells test the paper's claims on your runs: a claim that does not hold is
  a finding, not a crash. It is printed (``does NOT hold at this scale: ...``) and kept in :func:`claims`, and
  the notebook goes on to its tables and figures. Under the rehearsal (small/full on a CPU with every size
  shrunk, ``make rehearse``) most claims do not hold, and say so: the rehearsal proves the code path, not the
  results.

Invariants that hold at every scale (a table has its sections, a run used the stored baseline) stay plain
``assert`` statements.
"""

from __future__ import annotations

from dataclasses import dataclass

from .scale import get_scale, rehearsal


class ClaimFailed(AssertionError):
    """A claim measured at the tiny scale no longer holds."""


@dataclass(frozen=True)
class Claim:
    statement: str  # what the runs should show, in words
    holds: bool
    scale: str
    detail: str  # the measured values, for the message


_CLAIMS: list[Claim] = []


def claim(holds: bool, statement: str, detail: object = None) -> bool:
    """Check that ``holds`` (a measured result agrees with ``statement``); return it.

    ``tiny``: raise :class:`ClaimFailed` when it does not. ``small``/``full``: print whether it holds (with
    ``detail``, the measured values) and go on. Every call is recorded (:func:`claims`).
    """
    scale = get_scale(require_hardware=False)
    record = Claim(statement, bool(holds), scale, "" if detail is None else str(detail))
    _CLAIMS.append(record)
    measured = f" (measured: {record.detail})" if record.detail else ""
    if scale == "tiny":
        if not record.holds:
            raise ClaimFailed(f"{statement}{measured}")
    else:
        note = " [a rehearsal: every size shrunk, the data miniature]" if rehearsal() and not record.holds else ""
        print(f"{'holds' if record.holds else 'does NOT hold at this scale'}: {statement}{measured}{note}")
    return record.holds


def claims() -> list[Claim]:
    """Every claim checked in this process, in order."""
    return list(_CLAIMS)
