"""The launcher training for real: detached runs that outlive the process that launched them and resume
bitwise, the queue when runs outnumber devices, the small preset started detached on the CPU (the issue's
acceptance), the in-process tiny path, and the WMT preparation the small scale runs when its data is missing.

Every run is a 1L-1L model on 200 synthetic sentence pairs; the detached ones are real processes
(``python -m b2t_lib launch-queue`` and ``python -m b2t_lib train``), started in their own sessions."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from b2t_lib.data import prepare_synthetic_mt
from b2t_lib.train import TrainConfig, Trainer, list_checkpoints, load_checkpoint, read_log
from b2t_lib.train.checkpoint import newest_readable_checkpoint
from b2t_lib.runs import LaunchError, launch
from b2t_lib.runs.queue import queue_alive
from b2t_lib.files import read_json

pytestmark = pytest.mark.slow  # trains models in subprocesses

LAUNCHER = """
import json, signal, sys
# Ctrl-C raises KeyboardInterrupt, as in a notebook kernel; a parent that ignores SIGINT (a pytest-xdist worker)
# would otherwise pass the ignored disposition on to this process
signal.signal(signal.SIGINT, signal.default_int_handler)
from b2t_lib.train import TrainConfig
from b2t_lib.runs import launch
configs = {name: TrainConfig.from_dict(values) for name, values in json.load(open(sys.argv[1])).items()}
launch(configs, sys.argv[2], devices=["cpu", "cpu"], detach=True, poll_interval=0.2, progress_interval=0.5)
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepare_synthetic_mt(
        tmp_path_factory.mktemp("data") / "synthetic", n_train=200, n_valid=20, n_test=20, bpe_vocab_size=300, workers=1
    )


@pytest.fixture(scope="module")
def minimal_data(tmp_path_factory):
    """24 training pairs (one update of the small preset is then ~760 target tokens) and 4 test sentences."""
    return prepare_synthetic_mt(
        tmp_path_factory.mktemp("data") / "minimal", n_train=24, n_valid=4, n_test=4, bpe_vocab_size=120, workers=1
    )


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("B2T_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


def tiny(data_dir, **overrides):
    values = dict(
        data=str(data_dir),
        d_model=16,
        n_heads=2,
        d_ff=32,
        encoder_layers=1,
        decoder_layers=1,
        max_tokens=256,
        threads=1,
        eval_at_end=False,
        log_interval=1,
        valid_interval=10,
        save_interval=5,
        warmup_updates=5,
        max_update=20,
        dropout=0.2,
        word_dropout=0.1,
    )
    values.update(overrides)
    return TrainConfig.from_preset("mt", "tiny", **values)


def wait_for(condition, what: str, timeout: float = 240.0):
    end = time.time() + timeout
    while time.time() < end:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_killed_launcher_and_run_then_relaunch_skips_finished_and_resumes_bitwise(data_dir, runs, tmp_path, capsys):
    configs = {
        "short": tiny(data_dir),  # finishes while nobody waits
        # killed mid-run: long enough that it cannot end between the test's check and its kill on a busy machine
        "long": tiny(data_dir, variant="post_ln", max_update=300, save_interval=5, stall_deadline=0),
    }
    plan = tmp_path / "configs.json"
    plan.write_text(json.dumps({n: c.to_dict() for n, c in configs.items()}))
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    group = runs / "kill"
    with open(tmp_path / "launcher.out", "wb") as out:
        launcher = subprocess.Popen(
            [sys.executable, str(script), str(plan), "kill"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, TQDM_DISABLE="1"),
        )
    wait_for(lambda: all((group / n / "launch.json").is_file() for n in configs), "both runs to start")

    launcher.kill()  # the launching process dies mid-run ...
    launcher.wait()
    assert queue_alive(group / ".launch"), "the queue outlives the process that launched it"
    long_dir = group / "long"
    pid = read_json(long_dir / "launch.json")["pid"]
    wait_for(
        lambda: any(int(p.stem.split("_")[1]) >= 10 for p in list_checkpoints(long_dir)),
        "the long run's checkpoint of update 10",
    )
    os.kill(pid, signal.SIGKILL)  # ... and so does one of the runs
    wait_for(lambda: not queue_alive(group / ".launch"), "the queue to end")
    assert (group / "short" / "result.json").is_file(), "the other run went on to the end"
    assert not (long_dir / "result.json").exists(), "the long run was killed before its end"
    killed = read_json(long_dir / "launch.json")
    assert killed["exit_code"] == -signal.SIGKILL and killed["attempt"] == 1
    stopped_at = newest_readable_checkpoint(long_dir)[1]["trainer"]["num_updates"]  # what --resume reads
    assert 10 <= stopped_at < 300
    first_short = read_json(group / "short" / "result.json")

    records = launch(configs, "kill", devices=["cpu", "cpu"], detach=True, poll_interval=0.2, progress_interval=0.5)
    shown = capsys.readouterr().out
    print(shown)
    assert "short            completed" in shown and "long             interrupted" in shown  # the plan
    assert records["short"] == first_short  # skipped, not retrained
    assert read_json(group / "short" / "launch.json")["attempt"] == 1
    assert read_json(long_dir / "launch.json")["attempt"] == 2 and records["long"]["status"] == "completed"
    assert "resuming from" in (long_dir / "train.log").read_text()
    assert records["long"]["metrics"]["num_updates"] == 300

    reference = tmp_path / "uninterrupted"  # the same run, never stopped
    Trainer(configs["long"].replace(save_dir=str(reference), progress_bar=False)).train()
    a, b = load_checkpoint(reference / "checkpoint_last.pt"), load_checkpoint(long_dir / "checkpoint_last.pt")
    assert a["trainer"]["num_updates"] == b["trainer"]["num_updates"] == 300
    assert same_tensors(a["model"], b["model"])  # bitwise
    exp_avg = lambda s: [v["exp_avg"] for v in s["optimizer"]["state"].values()]  # noqa: E731
    assert all(torch.equal(x, y) for x, y in zip(exp_avg(a), exp_avg(b)))
    assert [e["loss"] for e in read_log(reference, "train")] == [e["loss"] for e in read_log(long_dir, "train")]
    print(
        f"killed the launcher, then the long run at update >= {stopped_at}; relaunched: resumed to 300, "
        f"bitwise equal to the uninterrupted run"
    )


def test_runs_beyond_the_devices_wait_in_the_queue(data_dir, runs):
    configs = {v: tiny(data_dir, variant=v) for v in ("post_ln", "pre_ln", "b2t")}
    records = launch(configs, "queue", devices=["cpu", "cpu"], detach=True, poll_interval=0.2, progress=False)
    assert all(r["status"] == "completed" for r in records.values())
    wait_for(lambda: not queue_alive(runs / "queue" / ".launch"), "the queue to record the last exit")
    starts = {n: read_json(runs / "queue" / n / "launch.json") for n in configs}
    spans = sorted((r["started_unix"], r["ended_unix"], r["device"]) for r in starts.values())
    events = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans], key=lambda x: (x[0], x[1]))
    running, most = 0, 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most == 2, "two devices: two runs at a time, never three"
    (s1, e1, d1), (s2, e2, d2), (s3, _, d3) = spans
    assert s2 < e1 and {d1, d2} == {"cpu0", "cpu1"}  # the first two together, one per device
    assert s3 >= min(e1, e2) and d3 in {d1, d2}  # the third when a device became free


def test_the_small_preset_runs_detached_on_the_cpu_shows_progress_and_completes(minimal_data, runs, capsys):
    """The launcher's acceptance test at small: the small preset's model (Transformer-base 6L-6L), its data pointed at
    a prepared tiny corpus, 2 updates of two accumulated 1024-token batches (the preset's 65K-token batch costs a
    CPU minutes and is the rehearsal's business), forced to the CPU; evaluation (beam 4) on its 4-sentence test set."""
    cfg = TrainConfig.from_preset(
        "mt",
        "small",
        device="cpu",
        data=str(minimal_data),
        max_update=2,
        log_interval=1,
        max_tokens=1024,
        tokens_per_update=2048,
        max_len_b=10,  # an untrained model writes up to the length limit: 10 tokens keep the beam search short
    )
    assert (cfg.model.d_model, cfg.model.encoder_layers, cfg.model.decoder_layers) == (512, 6, 6)
    try:
        records = launch({"b2t_6L": cfg}, "small_on_cpu", poll_interval=0.5, progress_interval=1)
        shown = capsys.readouterr().out
        record = records["b2t_6L"]
        assert record["status"] == "completed" and record["metrics"]["num_updates"] == 2
        assert "bleu_avg" in record["metrics"]  # evaluated at the end
        assert "mt small b2t 6L-6L, 2 updates x 2048 tokens" in shown and "GPU-hours" in shown
        assert "estimated" in shown or "measured" in shown
        assert "b2t_6L           running" in shown  # progress while it ran
        assert "b2t_6L           completed" in shown and "2/2 updates" in shown
        wait_for(lambda: not queue_alive(runs / "small_on_cpu" / ".launch"), "the queue to record the exit")
        started = read_json(runs / "small_on_cpu" / "b2t_6L" / "launch.json")
        print(
            f"small preset on the CPU: train {record['train_time_s']} s, wall {record['wall_time_s']} s "
            f"(train + evaluation), process started {started['started']}"
        )
        assert started["pid"] != os.getpid() and started["exit_code"] == 0 and started["device"] == "cpu0"
        # the detached run trains from its config file, the data the launcher wrote (not a re-parsed command line)
        config_file = runs / "small_on_cpu" / "b2t_6L" / "config.json"
        assert started["command"].endswith(f"-m b2t_lib train --config {config_file}")
        assert {k: read_json(config_file)[k] for k in ("task", "scale", "device")} == dict(
            task="mt", scale="small", device="cpu"
        )
    finally:  # its checkpoint holds Transformer-base and Adam's state: 0.5 GB
        for path in (runs / "small_on_cpu" / "b2t_6L").glob("checkpoint*.pt"):
            path.unlink()


def test_tiny_runs_train_here_then_are_skipped_refused_or_retrained(data_dir, runs, capsys):
    configs = {v: tiny(data_dir, variant=v) for v in ("post_ln", "b2t")}
    first = launch(configs, "here", workers=2, poll_interval=0.2, progress_interval=0.2)
    assert [r["status"] for r in first.values()] == ["completed", "completed"]
    assert "launch 'here': 2 to train here, 0 finished already" in capsys.readouterr().out
    mtime = (runs / "here" / "b2t" / "result.json").stat().st_mtime
    assert launch(configs, "here", workers=2) == first  # nothing trains again
    assert "launch 'here': 0 to train here, 2 finished already" in capsys.readouterr().out
    assert (runs / "here" / "b2t" / "result.json").stat().st_mtime == mtime
    changed = dict(configs, b2t=tiny(data_dir, variant="b2t", lr=1e-3))
    with pytest.raises(LaunchError, match="--lr: the run has 0.002, this launch asks for 0.001"):
        launch(changed, "here", workers=2)
    again = launch(changed, "here", workers=2, on_mismatch="retrain")
    assert again["post_ln"] == first["post_ln"] and again["b2t"]["config"]["lr"] == 1e-3


def test_the_translation_task_prepares_wmt_at_the_small_scale_through_the_data_script_s_function(tmp_path, monkeypatch):
    """No Hub here: the download is replaced by a writer of raw files; the rest is the real preparation with the
    small scale's options (a seeded 1M-pair subset, 32K merges), as data_scripts/prepare_wmt14_en_de.py runs it."""
    import b2t_lib.data.wmt as wmt
    from b2t_lib.data import generate_synthetic_pairs
    from b2t_lib.train.registry import build_task

    def fake_download(raw_dir, **_):
        raw_dir = Path(raw_dir)
        raw_dir.mkdir(parents=True, exist_ok=True)
        pairs = generate_synthetic_pairs(260, seed=3)
        for split, chunk in (("train", pairs[:200]), ("valid", pairs[200:230]), ("newstest2014", pairs[230:])):
            (raw_dir / f"{split}.en").write_text("".join(en + "\n" for en, _ in chunk))
            (raw_dir / f"{split}.de").write_text("".join(de + "\n" for _, de in chunk))
        return raw_dir

    monkeypatch.setattr(wmt, "download_wmt14_en_de", fake_download)
    data = tmp_path / "wmt14_en_de_1m"
    task = build_task(TrainConfig.from_preset("mt", "small", data=str(data)))
    assert task.prepare_data() == data
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["params"]["max_pairs"] == 1_000_000 and manifest["params"]["bpe_merges"] == 32000
    assert manifest["test_splits"] == ["newstest2014"] and (data / "raw" / "train.en").is_file()
    with pytest.raises(FileNotFoundError, match="prepare_wmt14_en_de.py"):  # tiny: never downloads
        build_task(
            TrainConfig.from_preset("mt", "tiny", data=str(tmp_path / "x"), synthetic_train_pairs=0)
        ).prepare_data()


def test_interrupting_the_wait_asks_nothing_and_stops_no_run(data_dir, runs, tmp_path):
    """A cell interrupt is a KeyboardInterrupt in the waiting process: it stops waiting, says so, the run goes on."""
    plan = tmp_path / "configs.json"
    # long enough (seconds even on an idle machine) that the run cannot end before the signal arrives, even when
    # this process is not scheduled for a while on a busy CI machine
    config = tiny(data_dir, max_update=1500, save_interval=500, stall_deadline=0)  # the rule is not under test
    plan.write_text(json.dumps({"one": config.to_dict()}))
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    launcher = subprocess.Popen(
        [sys.executable, str(script), str(plan), "interrupt"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, TQDM_DISABLE="1"),
    )
    run_dir = runs / "interrupt" / "one"
    wait_for(lambda: (run_dir / "launch.json").is_file(), "the run to start")
    assert not (run_dir / "result.json").is_file(), "the run ended before the test could interrupt the wait"
    launcher.send_signal(signal.SIGINT)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode != 0 and "KeyboardInterrupt" in out
    assert "Stopped waiting. The runs of 'interrupt' go on in the background" in out
    assert "Run the same cell again to re-attach" in out
    wait_for(lambda: (run_dir / "result.json").is_file(), "the run to end on its own")
    assert read_json(run_dir / "result.json")["status"] == "completed"
    assert read_json(run_dir / "launch.json")["attempt"] == 1  # never restarted
    wait_for(lambda: not queue_alive(runs / "interrupt" / ".launch"), "the queue to end")


def test_a_run_that_crashes_and_a_queue_that_cannot_prepare_the_data_are_reported(data_dir, runs, tmp_path):
    with pytest.raises(LaunchError) as error:  # a batch of 4 tokens holds no sentence: the trainer stops
        launch(
            {"crash": tiny(data_dir, max_tokens=4)},
            "crash",
            devices=["cpu"],
            detach=True,
            poll_interval=0.2,
            progress=False,
        )
    text = str(error.value)
    assert "1 run(s) ended without a result" in text and "crash: failed (exit code" in text
    assert "train.log" in text and "max_tokens" in text.replace("-", "_")  # the log's tail says why
    wait_for(lambda: not queue_alive(runs / "crash" / ".launch"), "the queue to end")

    missing = tiny(tmp_path / "no_data", synthetic_train_pairs=0)
    with pytest.raises(LaunchError, match="the queue of 'nodata' stopped: no prepared translation data at .*no_data"):
        launch({"x": missing}, "nodata", devices=["cpu"], detach=True, poll_interval=0.2, progress=False)
    assert not (runs / "nodata" / "x" / "launch.json").exists()  # nothing was started
