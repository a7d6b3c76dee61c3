"""Nothing lost, nothing silent, one error style: ``python -m b2t_lib train/evaluate/preset`` refuse a bad input in
one ``error:`` line with exit code 2, before anything on disk changes; a run's temporary files and its state."""

import os
import subprocess
import sys

import pytest
import torch

from b2t_lib.cli import main
from b2t_lib.data import prepare_synthetic_mt
from b2t_lib.data.synthetic_lm import prepare_synthetic_lm
from b2t_lib.files import temporary_name
from b2t_lib.train import TrainConfig
from b2t_lib.train.checkpoint import UnreadableCheckpoint, UntrustedCheckpoint, load_checkpoint

from conftest import ROOT

TINY = ["--d-model", "16", "--n-heads", "2", "--d-ff", "32", "--encoder-layers", "1", "--decoder-layers", "1"]
QUICK = ["--max-update", "2", "--no-progress-bar", "--no-eval-at-end", "--threads", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def mt_data(tmp_path_factory):
    return prepare_synthetic_mt(
        tmp_path_factory.mktemp("data") / "mt", n_train=60, n_valid=8, n_test=8, bpe_vocab_size=200, workers=1
    )


@pytest.fixture(scope="module")
def lm_data(tmp_path_factory):
    return prepare_synthetic_lm(
        tmp_path_factory.mktemp("data") / "lm", train_tokens=5_000, valid_tokens=500, test_tokens=500
    )


def train(data, save_dir, *extra, task="mt"):
    return main(
        ["train", "--task", task, "--scale", "tiny", "--data", str(data), "--save-dir", str(save_dir)]
        + TINY
        + QUICK
        + list(extra)
    )


def one_error_line(capsys) -> str:
    """The one stderr line of a refused command (no traceback, no usage block)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_with_any_record_of_a_run_is_refused_without_resume(mt_data, tmp_path, capsys):
    """result.json and log.jsonl without a checkpoint are a run too: nothing is replaced."""
    run = tmp_path / "run"
    assert train(mt_data, run) == 0
    for checkpoint in run.glob("checkpoint_*.pt"):
        checkpoint.unlink()
    before = snapshot(run)
    capsys.readouterr()
    assert train(mt_data, run) == 2
    line = one_error_line(capsys)
    assert f"{run} already holds a run" in line and "result.json" in line and "pass --resume" in line
    assert snapshot(run) == before
    for record in ("log.jsonl", "config.json", "launch.json"):  # each alone, the launcher's files included
        other = tmp_path / record
        other.mkdir()
        (other / record).write_text("{}\n")
        assert train(mt_data, other) == 2 and record in one_error_line(capsys)
        assert [p.name for p in other.iterdir()] == [record]


def test_a_named_data_folder_without_a_manifest_is_refused_not_filled(tmp_path, capsys, monkeypatch):
    """Only the preset's own folder receives the synthetic corpus; a mistyped or half-prepared one is refused."""
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "synthetic_mtt"
    assert train(typo, tmp_path / "run") == 2
    line = one_error_line(capsys)
    assert f"no prepared translation data at {typo} (the folder does not exist)" in line
    assert "prepare_wmt14_en_de.py" in line and "leave out --data" in line
    assert not typo.exists() and not (tmp_path / "run").exists()
    half = tmp_path / "half"
    half.mkdir()
    (half / "train.en").write_text("an interrupted preparation\n")
    assert train(half, tmp_path / "run") == 2
    assert "no readable manifest.json" in one_error_line(capsys)
    assert [p.name for p in half.iterdir()] == ["train.en"]
    # The preset's value applies to the preset's own folder; asking for a corpus by name still makes one.
    assert TrainConfig.from_preset("mt", "tiny").synthetic_train_pairs > 0
    assert TrainConfig.from_preset("mt", "tiny", data="data/synthetic_mt").synthetic_train_pairs > 0
    assert TrainConfig.from_preset("mt", "tiny", data=str(ROOT / "data" / "synthetic_mt")).synthetic_train_pairs > 0
    assert TrainConfig.from_preset("mt", "tiny", data=str(typo)).synthetic_train_pairs == 0
    assert TrainConfig.from_preset("mt", "tiny").replace(data=str(typo)).synthetic_train_pairs == 0
    assert TrainConfig.from_preset("mt", "tiny", data=str(typo), synthetic_train_pairs=30).synthetic_train_pairs == 30


@pytest.mark.parametrize(
    "task, holder, advice", [("summarization", "mt", "prepare_gigaword.py"), ("mt", "lm", "wmt14")]
)
def test_another_tasks_data_is_named_and_never_advised_to_be_overwritten(
    task, holder, advice, mt_data, lm_data, tmp_path, capsys
):
    data = {"mt": mt_data, "lm": lm_data}[holder]
    before = snapshot(data)
    assert train(data, tmp_path / "run", task=task) == 2
    line = one_error_line(capsys)
    assert str(data) in line and f"it is data for --task {holder}" in line and advice in line
    assert f"--out-dir {data}" not in line and "src_lang" not in line
    assert snapshot(data) == before and not (tmp_path / "run").exists()


def test_a_save_dir_that_cannot_be_written_is_refused_before_the_model_is_built(mt_data, tmp_path, capsys, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("kept")
    for save_dir in (afile, afile / "run"):
        assert train(mt_data, save_dir) == 2
        assert f"{afile} is a file" in one_error_line(capsys)
    assert afile.read_text() == "kept"
    locked = tmp_path / "locked"
    locked.mkdir()
    built = []
    monkeypatch.setattr("b2t_lib.train.task.Task.prepare_data", lambda self: built.append(self))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(locked) else real_access(p, mode))
    assert train(mt_data, locked / "run") == 2  # (root may write anywhere: the check is what is tested)
    assert f"{locked} is not writable" in one_error_line(capsys)
    assert not built, "refused before any data or model"


def test_an_example_longer_than_max_tokens_names_itself_and_the_option(tmp_path, capsys):
    data = prepare_synthetic_mt(tmp_path / "mt", n_train=20, n_valid=4, n_test=4, bpe_vocab_size=120, workers=1)
    capsys.readouterr()  # the preparation's log
    assert train(data, tmp_path / "run", "--max-tokens", "8") == 2
    line = one_error_line(capsys)
    assert "more than max_tokens=8" in line and "example" in line and "raise --max-tokens" in line
    assert f"{data}, split train" in line


def test_evaluate_refuses_average_last_below_one(mt_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert train(mt_data, run) == 0
    before = (run / "result.json").read_bytes()
    for value in ("0", "-1"):
        assert main(["evaluate", "--save-dir", str(run), "--average-last", value]) == 2
        assert "--average-last: must be at least 1" in one_error_line(capsys)
    assert (run / "result.json").read_bytes() == before and not (run / "eval.json").exists()
    assert main(["evaluate", "--save-dir", str(tmp_path / "none")]) == 2
    assert "no checkpoints" in one_error_line(capsys)


def test_usage_errors_and_unknown_commands_are_one_line(capsys):
    assert main(["bogus"]) == 2 and "unknown command 'bogus'" in one_error_line(capsys)
    assert main(["preset", "--task", "nope"]) == 2 and "invalid choice" in one_error_line(capsys)
    assert main(["train", "--max-update", "0"]) == 2 and "must be at least 1" in one_error_line(capsys)
    assert main(["train", "--lr", "0", "--device", "cpu"]) == 2 and "--lr must be positive" in one_error_line(capsys)
    assert main(["train", "--config", "missing.json"]) == 2 and "missing.json" in one_error_line(capsys)


def test_an_internal_error_keeps_its_traceback(monkeypatch):
    """Only user errors become one line: a bug propagates (the interpreter prints its traceback)."""

    def broken(self, cfg):
        raise RuntimeError("a bug")

    monkeypatch.setattr("b2t_lib.train.trainer.Trainer.__init__", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["train", "--device", "cpu"])


def test_a_missing_third_party_package_is_one_line_and_a_missing_library_module_a_bug(capsys):
    """The GPU machine lacked sacremoses: the data step's import ends in one line naming it, not a traceback."""
    from b2t_lib.errors import run_command

    def needs(module):
        def command():
            __import__(module)

        return command

    assert run_command(needs("sacremoses_is_not_here")) == 2
    line = one_error_line(capsys)
    assert "`sacremoses_is_not_here` is not installed" in line and "make setup" in line
    with pytest.raises(ModuleNotFoundError):  # the library's own module: a broken checkout, shown in full
        run_command(needs("b2t_lib.no_such_module"))


def test_a_closed_pipe_ends_quietly():
    command = f"{sys.executable} -m b2t_lib preset --task mt --scale full | head -1"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.stdout == "{\n" and "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr
    assert out.returncode == 0


def test_a_checkpoint_holding_a_callable_is_untrusted_not_corrupted(tmp_path):
    for name, value in (("system", os.system), ("print", print)):
        path = tmp_path / f"{name}.pt"
        torch.save({"model": {}, "hook": value}, path)
        with pytest.raises(UntrustedCheckpoint, match="which a safe load does not rebuild"):
            load_checkpoint(path)
    good = tmp_path / "good.pt"
    torch.save({"model": {"w": torch.zeros(3)}}, good)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:40])
    with pytest.raises(UnreadableCheckpoint) as info:
        load_checkpoint(truncated)
    assert not isinstance(info.value, UntrustedCheckpoint)


def test_temporary_files_of_killed_writes_are_removed_at_the_next_start(mt_data, tmp_path):
    run = tmp_path / "run"
    assert train(mt_data, run) == 0
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = [
        run / f"checkpoint_2.pt.tmp-{dead.pid}",
        run / f"result.json.tmp-{dead.pid}",
        run / "checkpoint_last.pt.tmp",  # a link being moved, by an older version
    ]
    for path in stale:
        path.write_bytes(b"half")
    live = temporary_name(run / "other.json")  # this process's: kept
    live.write_text("mine")
    assert train(mt_data, run, "--resume", "--max-update", "3") == 0
    assert not any(p.exists() for p in stale) and live.exists()


def test_a_run_finishing_its_evaluation_is_running_not_interrupted(mt_data, tmp_path):
    """Between the last update and result.json the trainer's process record says it is alive: the run is
    running while that process lives (also with no launch record: a run trained in this machine's processes),
    interrupted once it has ended."""
    from b2t_lib.runs.state import run_status
    from b2t_lib.train import records

    run = tmp_path / "run"
    assert train(mt_data, run, "--save-interval", "1") == 0
    assert records.read_process(run) == {**records.read_process(run), "phase": "finishing", "pid": os.getpid()}
    (run / "result.json").unlink()  # as between the final checkpoint and the result
    code = f"import time; from b2t_lib.train import records; records.write_process({str(run)!r}, 'finishing', 2)"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-c", code + "; print('ok', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout.readline().strip() == "ok"
        assert run_status(run).state == "running"
    finally:
        child.kill()
        child.wait()
    assert run_status(run).state == "interrupted"  # its process ended without a result: resumable


def test_a_run_stopped_by_an_exception_is_interrupted_while_its_process_lives_on(mt_data, tmp_path, monkeypatch):
    """A notebook kernel (or a pool worker) that trained a run outlives it: the run is not "running" then."""
    from b2t_lib.runs.state import run_status
    from b2t_lib.train import Trainer, records

    cfg = TrainConfig.from_preset(
        "mt",
        "tiny",
        data=str(mt_data),
        save_dir=str(tmp_path / "run"),
        d_model=16,
        n_heads=2,
        d_ff=32,
        encoder_layers=1,
        decoder_layers=1,
        max_update=4,
        save_interval=1,
        progress_bar=False,
        eval_at_end=False,
        threads=1,
        device="cpu",
    )
    trainer = Trainer(cfg)
    real_step, steps = trainer.train_step, []

    def step(group):
        if len(steps) == 2:
            assert run_status(tmp_path / "run").state == "running"  # mid-run, trained in this process
            raise KeyboardInterrupt
        steps.append(group)
        return real_step(group)

    monkeypatch.setattr(trainer, "train_step", step)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert records.read_process(tmp_path / "run")["phase"] == "stopped"
    assert run_status(tmp_path / "run").state == "interrupted"
