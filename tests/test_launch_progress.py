"""The launcher's progress display tells the truth at a glance: a failed run looks failed, a queued run's clock
starts when it starts training, and the bars line up whatever the run names. Bars are tqdm's text bars written to
a string (a fake clock stands in for time), the notebook's widgets where ipywidgets is installed."""

import io
import re
from pathlib import Path

import pytest
import tqdm.std

from b2t_lib.runs.progress import LaunchProgress
from b2t_lib.runs.state import RunStatus

RUN = Path("runs/group/run")


def status(state, update=0, loss=None, result=None, exit_code=None):
    launch = {} if exit_code is None else {"exit_code": exit_code}
    return RunStatus("run", RUN, state, result=result, launch=launch, update=update, loss=loss)


def finished(outcome, update):
    return status("finished", update, 8.1, result={"status": outcome})


@pytest.fixture
def clock(monkeypatch):
    """A fake clock for the display and tqdm (its text bars read ``tqdm.std.time``); tqdm's monitor thread off."""
    now = [1000.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: now[0])
    monkeypatch.setattr(tqdm.std.tqdm, "monitor_interval", 0)
    return now


def bars(totals):
    return LaunchProgress(totals, bars=True, stream=io.StringIO(), new_label="queued")


def test_a_stalled_or_crashed_run_looks_failed_and_a_completed_one_does_not(clock):
    display = bars({"post_ln_18L": 400, "b2t_18L": 400, "crash": 20})
    display.show(
        {
            "post_ln_18L": finished("stalled", 400),
            "b2t_18L": finished("completed", 400),
            "crash": status("failed", 3, exit_code=1),
        }
    )
    shown = {name: bar for name, bar in display._bars.items()}
    assert shown["post_ln_18L"].colour == "red" and "FAILED (stalled)" in str(shown["post_ln_18L"])
    assert shown["crash"].colour == "red" and "FAILED (exit code 1)" in str(shown["crash"])
    assert shown["b2t_18L"].colour == "green" and "FAILED" not in str(shown["b2t_18L"])
    display.close()

    text = LaunchProgress({"post_ln_18L": 400, "b2t_18L": 400}, bars=False, stream=io.StringIO())
    stalled, completed = (
        text.line("post_ln_18L", finished("stalled", 400)),
        text.line("b2t_18L", finished("completed", 400)),
    )
    assert "FAILED" in stalled and "(stalled)" in stalled and "FAILED" not in completed
    assert completed == "  b2t_18L          completed        400/400 updates  loss 8.100"  # as before
    assert stalled.index("400/400") == completed.index("400/400")  # the columns stay aligned


def test_a_queued_run_s_clock_starts_when_it_starts_training(clock):
    display = bars({"queued_run": 200})
    display.show({"queued_run": status("new")})
    clock[0] += 90  # 90 s in the queue
    display.show({"queued_run": status("new")})
    clock[0] += 10
    display.show({"queued_run": status("running", 0)})  # starts
    clock[0] += 30
    display.show({"queued_run": status("running", 40, 6.0)})
    bar = display._bars["queued_run"]
    assert bar.format_dict["elapsed"] == pytest.approx(30.0)
    assert "40/200 [00:30<02:00," in str(bar) and "1.33upd/s" in str(bar)  # 40 updates in 30 s, 160 to go
    clock[0] += 30
    display.show({"queued_run": finished("completed", 80)})
    clock[0] += 500  # the other runs go on: this run's clock stays stopped at its end
    display.show({"queued_run": finished("completed", 80)})
    assert bar.format_dict["elapsed"] == pytest.approx(60.0)
    display.close()
    assert "80/200 [01:00<" in display.bar_file.getvalue().splitlines()[-1]

    text = LaunchProgress({"queued_run": 200}, bars=False, interval=0, stream=io.StringIO(), clock=lambda: clock[0])
    assert "ETA" not in text.line("queued_run", status("new"))
    clock[0] += 100
    text.line("queued_run", status("running", 0))
    clock[0] += 30
    assert text.line("queued_run", status("running", 40)).endswith("ETA 0:02:00")


def test_bars_line_up_whatever_their_names_and_states(clock):
    names = {"b2t_18L": 400, "post_ln_18L_rescaled": 400, "x": 400}
    display = bars(names)
    display.show({"b2t_18L": status("running", 0), "post_ln_18L_rescaled": status("new"), "x": status("new")})
    clock[0] += 30
    display.show(
        {
            "b2t_18L": status("running", 100, 5.5),
            "post_ln_18L_rescaled": finished("diverged", 17),
            "x": status("new"),
        }
    )
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", str(bar)) for bar in display._bars.values()]  # no colour codes
    assert len({line.index("|") for line in shown}) == 1  # every description as wide as the longest name
    assert len({line.rindex("|") for line in shown}) == 1  # and the bars as wide
    assert len({len(line) for line in shown}) == 1, shown  # fixed-width numbers and state text
    display.close()


def test_notebook_bars_get_fixed_width_labels(monkeypatch, capsys):
    pytest.importorskip("ipywidgets")
    import tqdm.auto
    import tqdm.notebook

    monkeypatch.setattr(tqdm.auto, "tqdm", tqdm.notebook.tqdm)
    display = LaunchProgress({"b2t_18L": 400, "post_ln_18L_rescaled": 400}, bars=True, stream=io.StringIO())
    display.show({"b2t_18L": status("running", 10, 6.1), "post_ln_18L_rescaled": finished("stalled", 400)})
    layouts = [[child.layout.width for child in bar.container.children[::2]] for bar in display._bars.values()]
    assert layouts[0] == layouts[1] and all(width.endswith("ch") for width in layouts[0])
    assert display._bars["post_ln_18L_rescaled"].container.children[1].style.bar_color == "red"
    display.close()
    capsys.readouterr()  # outside a notebook the widgets print their text form
