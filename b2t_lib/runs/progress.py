"""Live progress of launched runs, read from their folders: one bar per run (updates, loss, ETA), or a
plain-text block every so often where bars cannot be drawn.

Bars are ``tqdm.auto`` bars (notebook widgets in Jupyter, text bars in a terminal). Plain text is used
when ``TQDM_DISABLE`` is set (the tests and ``make course`` set it; nbval compares no widget) or when
the output is neither a notebook nor a terminal: a block of one line per run, first after
``interval`` seconds, then at growing intervals (doubling up to ``max_interval``), so that a run of
days leaves a readable log, and always once at the end. Everything is printed from the caller's
thread, between polls: nothing prints after the cell has ended.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timedelta

from .state import RunStatus


def use_bars() -> bool:
    """tqdm bars when tqdm is enabled and the output is a notebook or a terminal."""
    if os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    try:
        from IPython import get_ipython

        if type(get_ipython()).__name__ == "ZMQInteractiveShell":
            return True
    except ImportError:
        pass
    return sys.stderr.isatty()


def _eta(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    return str(timedelta(seconds=int(seconds)))


class LaunchProgress:
    """Shows the runs ``totals`` (name -> max_update); call :meth:`show` with fresh statuses at every
    poll and :meth:`close` at the end."""

    def __init__(
        self,
        totals: dict[str, int],
        *,
        bars: bool | None = None,
        interval: float = 30.0,
        max_interval: float = 600.0,
        stream=None,
        new_label: str = "new",
    ):
        self.totals = dict(totals)
        self.bars = use_bars() if bars is None else bars
        self.interval, self.max_interval = interval, max_interval
        self.stream = stream or sys.stdout
        self._bars: dict = {}
        self._seen: dict[str, tuple[float, int]] = {}  # name -> (time, update) when first seen running
        self._next = time.time() + interval
        self._last: dict[str, RunStatus] = {}
        self.new_label = new_label  # "queued" where a queue starts the new runs

    # ------------------------------------------------------------------ shared
    def _label(self, status: RunStatus) -> str:
        if status.state == "new":  # no launch record: queued, or training in this machine's processes
            return "training" if status.update > 0 else self.new_label
        return status.describe()

    def _rate(self, name: str, status: RunStatus, now: float) -> float | None:
        if status.state != "running":
            self._seen.pop(name, None)
            return None
        t0, u0 = self._seen.setdefault(name, (now, status.update))
        return (status.update - u0) / (now - t0) if status.update > u0 and now > t0 else None

    def line(self, name: str, status: RunStatus, now: float | None = None) -> str:
        """``name  state  update/total  loss  ETA`` for one run."""
        now = time.time() if now is None else now
        total = self.totals.get(name, 0)
        state = self._label(status)
        text = f"  {name:<16} {state:<12} {status.update:>7}/{total} updates"
        if status.loss is not None:
            text += f"  loss {status.loss:.3f}"
        rate = self._rate(name, status, now)
        if status.state == "running":
            text += f"  ETA {_eta((total - status.update) / rate if rate else None)}"
        return text

    def show(self, statuses: dict[str, RunStatus], *, final: bool = False) -> None:
        self._last = statuses
        if self.bars:
            self._show_bars(statuses)
            return
        now = time.time()
        if final or now >= self._next:
            counts: dict[str, int] = {}
            for s in statuses.values():
                state = self._label(s) if s.state == "new" else s.state
                counts[state] = counts.get(state, 0) + 1
            summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
            lines = [f"[{datetime.now():%H:%M:%S}] {summary}"]
            lines += [self.line(name, s, now) for name, s in statuses.items()]
            print("\n".join(lines), file=self.stream, flush=True)
            self.interval = min(self.interval * 2, self.max_interval)
            self._next = now + self.interval
        else:
            for name, s in statuses.items():
                self._rate(name, s, now)  # start measuring the rate at the first sight

    # ------------------------------------------------------------------ bars
    def _show_bars(self, statuses: dict[str, RunStatus]) -> None:
        from tqdm.auto import tqdm

        for i, (name, s) in enumerate(statuses.items()):
            bar = self._bars.get(name)
            if bar is None:
                bar = self._bars[name] = tqdm(
                    total=self.totals.get(name) or None,
                    initial=s.update,
                    desc=name,
                    unit="upd",
                    position=i,
                    leave=True,
                    dynamic_ncols=True,
                )
            if s.update > bar.n:
                bar.update(s.update - bar.n)
            post = {"state": self._label(s) if s.state != "failed" else "failed"}
            if s.loss is not None:
                post["loss"] = f"{s.loss:.3f}"
            bar.set_postfix(post, refresh=True)

    def close(self) -> None:
        if self.bars:
            for bar in self._bars.values():
                bar.close()
            self._bars = {}
        elif self._last:
            self.show(self._last, final=True)
            self._last = {}
