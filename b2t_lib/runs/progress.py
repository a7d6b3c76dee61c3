"""Live progress of launched runs, read from their folders: one bar per run (updates, loss, ETA), or a
plain-text block every so often where bars cannot be drawn.

Bars are ``tqdm.auto`` bars (notebook widgets in Jupyter, text bars in a terminal). Plain text is used
when ``TQDM_DISABLE`` is set (the tests and ``make course`` set it; nbval compares no widget) or when
the output is neither a notebook nor a terminal: a block of one line per run, first after
``interval`` seconds, then at growing intervals (doubling up to ``max_interval``), so that a run of
days leaves a readable log, and always once at the end. Everything is printed from the caller's
thread, between polls: nothing prints after the cell has ended.

What a glance must tell:

* a run that ended without a usable result (a ``stalled`` or ``diverged`` result, or a process that ``failed``)
  reads ``FAILED (...)`` and its bar is red; a completed one is green;
* a run's clock starts when it starts training (first seen running, or with updates), not at the launch: the
  rate :math:`(u - u_0)/(t - t_0)` and the ETA :math:`(U - u)/\text{rate}` leave out the time it waited in the
  queue (:math:`u_0, t_0`: its update and the time at that first sight, :math:`U` its ``max_update``); an ended
  run's clock stops at its end;
* the bars line up: every description is padded to the longest run name, the numbers and the state have
  fixed widths, and a notebook widget's two labels get fixed widths.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timedelta

from .state import TRAIN_LOG, RunStatus


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


FAILED = "FAILED"
BAR_COLOURS = {"completed": "green", "failed": "red"}
STATE_WIDTH = len("FAILED (exit code 137)")  # the widest state a bar shows: its postfix keeps this width
LOSS_WIDTH = len("loss 10.000")


def _eta(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    return str(timedelta(seconds=int(seconds)))


def failure(status: RunStatus) -> str | None:
    """Why a run that ended failed (``stalled``, ``diverged``, ``exit code 1``), or ``None`` for a run that completed
    or has not ended."""
    if status.state == "finished":
        outcome = str((status.result or {}).get("status", "finished"))
        return None if outcome in ("completed", "finished") else outcome
    if status.state == "failed":
        return f"exit code {status.launch.get('exit_code')}"
    return None


def training(status: RunStatus) -> bool:
    """The run trains now: its process is alive, or (no launch record) its log has updates."""
    return status.state == "running" or (status.state == "new" and status.update > 0)


class LaunchProgress:
    """Shows the runs ``totals`` (name -> max_update); call :meth:`show` with fresh statuses at every
    poll and :meth:`close` at the end. ``clock`` (``time.time``) is the plain-text lines' clock; the bars
    keep tqdm's own."""

    def __init__(
        self,
        totals: dict[str, int],
        *,
        bars: bool | None = None,
        interval: float = 30.0,
        max_interval: float = 600.0,
        stream=None,
        new_label: str = "new",
        clock=time.time,
    ):
        self.totals = dict(totals)
        self.bars = use_bars() if bars is None else bars
        self.interval, self.max_interval = interval, max_interval
        self.stream = stream or sys.stdout
        self.bar_file = stream  # the bars' file: tqdm's default (stderr, or the notebook) unless one is given
        self.clock = clock
        self._bars: dict = {}
        self._ended: dict[str, float] = {}  # name -> the bar's elapsed seconds when its run ended
        self._seen: dict[str, tuple[float, int]] = {}  # name -> (time, update) when first seen training
        self._next = self.clock() + interval
        self._last: dict[str, RunStatus] = {}
        self.new_label = new_label  # "queued" where a queue starts the new runs
        self.width = max([16, *map(len, self.totals)])  # the run-name column and the bars' descriptions

    # ------------------------------------------------------------------ shared
    def _label(self, status: RunStatus) -> str:
        """The state as a bar shows it: ``FAILED (stalled)`` for a failed run."""
        if status.state == "new":  # no launch record: queued, or training in this machine's processes
            return "training" if status.update > 0 else self.new_label
        why = failure(status)
        return f"{FAILED} ({why})" if why else status.describe()

    def _rate(self, name: str, status: RunStatus, now: float) -> float | None:
        """Updates per second since the run was first seen training; ``None`` before two sightings."""
        if not training(status):
            self._seen.pop(name, None)
            return None
        t0, u0 = self._seen.setdefault(name, (now, status.update))
        return (status.update - u0) / (now - t0) if status.update > u0 and now > t0 else None

    def line(self, name: str, status: RunStatus, now: float | None = None) -> str:
        """``name  state  update/total  loss  ETA`` for one run; a failed run reads ``FAILED`` in the state column
        and why at the end of its line."""
        now = self.clock() if now is None else now
        total = self.totals.get(name, 0)
        why = failure(status)
        state = FAILED if why else self._label(status)
        text = f"  {name:<{self.width}} {state:<12} {status.update:>7}/{total} updates"
        if status.loss is not None:
            text += f"  loss {status.loss:.3f}"
        rate = self._rate(name, status, now)
        if training(status):
            text += f"  ETA {_eta((total - status.update) / rate if rate else None)}"
        if why:
            text += f"  ({why}" + (f", see {status.dir / TRAIN_LOG})" if status.state == "failed" else ")")
        return text

    def show(self, statuses: dict[str, RunStatus], *, final: bool = False) -> None:
        self._last = statuses
        if self.bars:
            self._show_bars(statuses)
            return
        now = self.clock()
        if final or now >= self._next:
            counts: dict[str, int] = {}
            for s in statuses.values():
                state = FAILED if failure(s) else self._label(s) if s.state == "new" else s.state
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
    def _bar_format(self, digits: int) -> str:
        """tqdm's default layout with fixed-width numbers (``digits`` wide counts), so that the bars line up."""
        return (
            f"{{desc}}: {{percentage:3.0f}}%|{{bar}}| {{n_fmt:>{digits}}}/{{total_fmt:<{digits}}} "
            "[{elapsed:>5}<{remaining:<5}, {rate_fmt:>11}{postfix}]"
        )

    def _new_bar(self, name: str, status: RunStatus, position: int):
        from tqdm.auto import tqdm

        digits = len(str(max(self.totals.values(), default=0)))
        bar = tqdm(
            total=self.totals.get(name) or None,
            initial=status.update,
            desc=f"{name:<{self.width}}",
            unit="upd",
            position=position,
            leave=True,
            dynamic_ncols=True,
            bar_format=self._bar_format(digits),
            file=self.bar_file,
            disable=False,  # bars were chosen (use_bars reads TQDM_DISABLE); tqdm would read it again
        )
        counts = f" {'9' * digits}/{'9' * digits} [00:00:00<00:00:00, 99.99upd/s, "
        right = len(counts) + STATE_WIDTH + 2 + LOSS_WIDTH + 1
        fix_widget_widths(bar, left=round(1.2 * self.width) + 7, right=right + 2)  # 1.2: letters wider than digits
        return bar

    def _show_bars(self, statuses: dict[str, RunStatus]) -> None:
        for i, (name, s) in enumerate(statuses.items()):
            bar = self._bars.get(name)
            if bar is None:
                bar = self._bars[name] = self._new_bar(name, s, i)
            if s.ended and name in self._ended:
                hold_clock(bar, self._ended[name])  # drawn at its end; its clock stays stopped
                continue
            self._ended.pop(name, None)
            if training(s) and name not in self._seen:
                self._seen[name] = (self.clock(), s.update)
                start_clock(bar, s.update)
            elif not training(s) and not s.ended:
                self._seen.pop(name, None)
            if s.update > bar.n:
                bar.update(s.update - bar.n)
            if s.ended:
                bar.colour = BAR_COLOURS["failed" if failure(s) else "completed"]
            loss = "" if s.loss is None else f"loss {s.loss:.3f}"
            post = f"{self._label(s):<{STATE_WIDTH}}  {loss:<{LOSS_WIDTH}}"
            bar.set_postfix_str(post, refresh=True)
            if s.ended:
                self._ended[name] = bar.format_dict["elapsed"]

    def close(self) -> None:
        if self.bars:
            for name, bar in self._bars.items():
                if name in self._ended:  # the final rate is the run's own, not diluted by the others' time
                    hold_clock(bar, self._ended[name])
                bar.close()
            self._bars, self._ended = {}, {}
        elif self._last:
            self.show(self._last, final=True)
            self._last = {}


def start_clock(bar, update: int) -> None:
    """Restart a tqdm bar's clock now, counting from ``update``: its elapsed time, rate and ETA then leave out
    the time before (a queued run's wait). ``reset`` restarts the clock and the rate's averages; ``initial``
    is what tqdm subtracts from ``n`` for its average rate."""
    if bar.disable:
        return
    bar.reset()
    bar.initial = bar.n = bar.last_print_n = update
    bar.refresh()


def hold_clock(bar, elapsed: float) -> None:
    """Keep a tqdm bar's elapsed time at ``elapsed`` seconds (its run has ended): move its start, and its last
    print with it, as tqdm's ``unpause`` does, by the time that passed since."""
    if bar.disable:
        return
    shift = bar.format_dict["elapsed"] - elapsed
    bar.start_t += shift
    bar.last_print_t += shift


def fix_widget_widths(bar, left: int, right: int) -> None:
    """Give a notebook bar's two labels fixed widths (in ``ch``, the width of a digit), so that every bar starts
    and ends at the same place whatever its label says. tqdm.notebook lays a bar out as an ``HBox`` of an HTML
    label (description and percentage), the progress widget (``flex: 2``) and an HTML label (counts, times,
    postfix); a text bar (no ``container``) is left alone."""
    container = getattr(bar, "container", None)
    children = getattr(container, "children", ())
    if len(children) != 3:
        return
    for label, width in zip((children[0], children[2]), (left, right)):
        label.layout.width = f"{width}ch"
        label.layout.flex = "0 0 auto"
