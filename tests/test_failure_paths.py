"""Failure paths a user meets: an unknown B2T_SCALE, a save directory that holds a run, a
truncated checkpoint on --resume, and checkpoints that must load without running code from the file."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from b2t_lib.cli import main
from b2t_lib.scale import ScaleError, get_scale
from b2t_lib.train import TrainConfig, Trainer, UnreadableCheckpoint, UntrustedCheckpoint, load_checkpoint
from b2t_lib.train.checkpoint import capture_rng_state, newest_readable_checkpoint, restore_rng_state, save_checkpoint

VALID = "valid values are: tiny, small, full"


# ------------------------------------------------------------------ B2T_SCALE=huge
@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--save-dir", "x", "--device", "cpu"],
        ["preset"],
        ["evaluate", "--save-dir", "x"],
        ["table"],
        ["trainability", "--out", "x.json"],
        ["train", "--help"],
        [],
    ],
)
def test_an_unknown_scale_is_refused_by_every_command(argv, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("B2T_SCALE", "huge")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "B2T_SCALE='huge' is not a scale" in err and VALID in err and "Traceback" not in err
    assert not any(tmp_path.iterdir()), "nothing was started"


def test_an_unknown_scale_stops_make_course_and_the_notebooks(monkeypatch):
    env = {**os.environ, "B2T_SCALE": "huge"}
    out = subprocess.run([sys.executable, "-m", "b2t_lib.scale"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and VALID in out.stderr and out.stdout == "" and "Traceback" not in out.stderr
    monkeypatch.setenv("B2T_SCALE", "huge")
    with pytest.raises(ScaleError, match=VALID):  # notebooks call get_scale() in their first cell
        get_scale()


# ------------------------------------------------------------------ a save directory that holds a run
def test_a_save_dir_with_a_run_is_a_one_line_error_with_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint_10.pt").write_bytes(b"a finished run")
    assert main(["train", "--save-dir", str(run), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        f"error: {run} already holds a run (checkpoint_10.pt): pass --resume to continue it, "
        "or choose another --save-dir"
    ]
    assert not (tmp_path / "data").exists(), "refused before any data was prepared"


# ------------------------------------------------------------------ safe loading
def test_checkpoints_load_with_weights_only_and_restore_every_generator(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = {
        "model": {"w": torch.ones(2)},
        "rng": [capture_rng_state()],
        "train_config": {"lr": 1e-3, "x": "y"},
        "trainer": {"num_updates": 3, "best_valid": None, "monitor": {"first_losses": [1.0]}},
    }
    expected = (random.random(), np.random.rand(), torch.rand(1))
    save_checkpoint(state, tmp_path, 3, keep_last=1, is_best=True)
    loaded = torch.load(tmp_path / "checkpoint_3.pt", weights_only=True)  # plain torch: no code is run
    restore_rng_state(loaded["rng"][0])
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])


def test_a_checkpoint_that_needs_code_is_refused_unless_trusted(tmp_path):
    path = tmp_path / "checkpoint_1.pt"
    torch.save({"model": {}, "extra": np.zeros(3)}, path)  # a NumPy array needs NumPy's code to rebuild
    with pytest.raises(UntrustedCheckpoint, match=r"load_checkpoint\(path, trust=True\)"):
        load_checkpoint(path)
    assert load_checkpoint(path, trust=True)["extra"].shape == (3,)


def test_no_readable_checkpoint_is_an_error_naming_every_file(tmp_path):
    assert newest_readable_checkpoint(tmp_path) is None  # an empty folder: nothing to resume
    for name in ("checkpoint_5.pt", "checkpoint_10.pt", "checkpoint_last.pt"):
        (tmp_path / name).write_bytes(b"\x00" * 10)
    with pytest.raises(UnreadableCheckpoint) as err:
        newest_readable_checkpoint(tmp_path)
    assert all(name in str(err.value) for name in ("checkpoint_5.pt", "checkpoint_10.pt", "checkpoint_last.pt"))


def test_the_newest_update_wins_over_a_stale_last_link(tmp_path):
    """A run killed after writing checkpoint_10.pt but before moving checkpoint_last.pt (a race CI met):
    --resume must continue from update 10, not from the update 5 the link still names; a last state saved
    without a number (newer than every numbered file) still comes first."""

    def state(update):
        return {"trainer": {"num_updates": update}, "model": {"w": torch.full((2,), float(update))}}

    save_checkpoint(state(5), tmp_path, 5, keep_last=3, is_best=False)
    torch.save(state(10), tmp_path / "checkpoint_10.pt")  # update 10 written, the link not moved (killed)
    assert os.path.samefile(tmp_path / "checkpoint_last.pt", tmp_path / "checkpoint_5.pt")
    path, loaded, problems = newest_readable_checkpoint(tmp_path)
    assert path.name == "checkpoint_10.pt" and loaded["trainer"]["num_updates"] == 10 and not problems

    save_checkpoint(state(12), tmp_path, 12, keep_last=3, is_best=False, numbered=False)  # mid-epoch state
    path, loaded, _ = newest_readable_checkpoint(tmp_path)
    assert path.name == "checkpoint_last.pt" and loaded["trainer"]["num_updates"] == 12

    save_checkpoint(state(15), tmp_path, 15, keep_last=3, is_best=False)  # the normal case: a hard link
    path, loaded, _ = newest_readable_checkpoint(tmp_path)
    assert path.name == "checkpoint_last.pt" and loaded["trainer"]["num_updates"] == 15


# ------------------------------------------------------------------ a truncated checkpoint_last.pt
@pytest.mark.slow
def test_a_truncated_last_checkpoint_resumes_from_the_newest_readable_one(tmp_path, caplog):
    from b2t_lib.data import prepare_synthetic_mt

    data = prepare_synthetic_mt(tmp_path / "data", n_train=120, n_valid=10, n_test=10, bpe_vocab_size=200, workers=1)

    def config(**extra):
        values = dict(
            data=str(data),
            save_dir=str(tmp_path / "run"),
            d_model=16,
            n_heads=2,
            d_ff=32,
            encoder_layers=1,
            decoder_layers=1,
            max_tokens=256,
            threads=1,
            progress_bar=False,
            eval_at_end=False,
            log_interval=1,
            valid_interval=5,
            save_interval=5,
            warmup_updates=2,
            max_update=10,
        )
        return TrainConfig.from_preset("mt", "tiny", **{**values, **extra})

    Trainer(config()).train()
    run = tmp_path / "run"
    straight = load_checkpoint(run / "checkpoint_10.pt")
    assert torch.load(run / "checkpoint_10.pt", weights_only=True)["trainer"]["num_updates"] == 10
    size = (run / "checkpoint_last.pt").stat().st_size
    with open(run / "checkpoint_last.pt", "r+b") as handle:  # a crash mid-copy, a full disk ...
        handle.truncate(size // 3)  # (checkpoint_10.pt is the same file: a hard link)

    with caplog.at_level("INFO", logger="b2t_lib.train"):
        Trainer(config(resume=True)).train()
    assert "resuming from" in caplog.text and "checkpoint_5.pt (update 5)" in caplog.text
    assert "checkpoint_last.pt is not a readable checkpoint" in caplog.text  # says why
    resumed = load_checkpoint(run / "checkpoint_10.pt")
    for name, value in straight["model"].items():  # and continues exactly where checkpoint 5 left off
        assert torch.equal(resumed["model"][name], value), name

    for path in run.glob("checkpoint_*.pt"):  # nothing readable is left: an error, never a silent restart
        path.write_bytes(b"")
    log_before = (run / "log.jsonl").read_text()
    with pytest.raises(UnreadableCheckpoint, match="no checkpoint in"):
        Trainer(config(resume=True, max_update=15)).train()
    assert (run / "log.jsonl").read_text() == log_before
