"""The launcher without training: where runs go, which folders it skips or refuses, the refusal at small/full
without a GPU, the command line it builds, the progress lines, and the GPU-hour estimator."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from b2t_lib import ScaleError
from b2t_lib.files import write_json_atomic
from b2t_lib.train import TrainConfig
from b2t_lib.runs.cost import (
    ASSUMED_MFU,
    TASK_SHAPES,
    estimate_gpu_hours,
    estimate_table,
    flops_per_update,
    measured_throughput,
)
from b2t_lib.runs.launch import LaunchError, launch, runs_root
from b2t_lib.runs.progress import LaunchProgress
from b2t_lib.errors import UserError
from b2t_lib.runs.queue import make_slots
from b2t_lib.runs.state import RunStatus, process_alive, process_token, repo_root, run_status

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("B2T_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


def tiny(tmp_path, **overrides):
    """A tiny config on a data folder that does not exist: training it would fail at once."""
    values = dict(
        data=str(tmp_path / "no_data"),
        synthetic_train_pairs=0,
        d_model=16,
        n_heads=2,
        d_ff=32,
        encoder_layers=1,
        decoder_layers=1,
        max_update=20,
    )
    values.update(overrides)
    return TrainConfig.from_preset("mt", "tiny", **values)


def fake_result(folder: Path, cfg: TrainConfig, status: str) -> dict:
    record = {
        "status": status,
        "config": cfg.replace(save_dir=str(folder)).to_dict(),
        "metrics": {"num_updates": 7, "valid_nll": 9.9},
    }
    write_json_atomic(folder / "result.json", record)
    return record


def test_runs_root_is_b2t_runs_or_the_repository_runs_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("B2T_RUNS", str(tmp_path / "elsewhere"))
    assert runs_root() == tmp_path / "elsewhere"
    monkeypatch.delenv("B2T_RUNS")
    assert runs_root() == ROOT / "runs" == repo_root() / "runs"


def test_finished_runs_are_returned_not_retrained_whatever_their_status(runs, tmp_path):
    cfgs = {"done": tiny(tmp_path), "stalled": tiny(tmp_path, lr=5e-4), "diverged": tiny(tmp_path, lr=3e-3)}
    stored = {
        name: fake_result(runs / "g" / name, cfg, "completed" if name == "done" else name) for name, cfg in cfgs.items()
    }
    # The data folder does not exist: any training would fail, so this returns only if nothing trains.
    assert launch(cfgs, "g", progress=False) == stored
    assert launch(cfgs, "g", detach=True, devices=["cpu"], progress=False) == stored  # detached: the same


def test_a_folder_holding_other_options_is_refused_with_the_differences(runs, tmp_path):
    fake_result(runs / "g" / "b2t", tiny(tmp_path), "completed")
    with pytest.raises(LaunchError) as error:
        launch({"b2t": tiny(tmp_path, lr=5e-4, encoder_layers=2)}, "g", progress=False)
    text = str(error.value)
    assert "--lr: the run has 0.002, this launch asks for 0.0005" in text
    assert "--encoder-layers: the run has 1, this launch asks for 2" in text
    assert "on_mismatch='retrain'" in text and (runs / "g" / "b2t" / "result.json").is_file()  # kept


def test_an_interrupted_run_may_change_what_resuming_allows_but_not_the_model(runs, tmp_path):
    folder = runs / "g" / "b2t"
    write_json_atomic(folder / "launch.json", {"pid": None, "config": tiny(tmp_path).to_dict()})
    assert run_status(folder).state == "interrupted"
    with pytest.raises(LaunchError, match="--d-model: the run has 16, this launch asks for 32"):
        launch({"b2t": tiny(tmp_path, d_model=32, max_update=40)}, "g", progress=False)
    with pytest.raises(FileNotFoundError, match="no prepared translation data"):  # accepted: it trains (and
        launch({"b2t": tiny(tmp_path, max_update=40)}, "g", workers=1, progress=False)  # fails on the data)


@pytest.mark.parametrize("scale", ["small", "full"])
def test_small_and_full_are_refused_without_a_gpu_and_nothing_is_written(runs, monkeypatch, scale):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ScaleError, match=f"B2T_SCALE={scale} needs a CUDA GPU") as error:
        launch({"b2t_6L": TrainConfig.from_preset("mt", scale)}, "refused")
    assert "set it to 'tiny'" in str(error.value)  # the scale switch's own message
    assert not (runs / "refused").exists()


def test_names_must_be_single_folders(runs, tmp_path):
    for bad in ("../x", "a/b", ".hidden", ""):
        with pytest.raises(ValueError, match="one folder name"):
            launch({bad: tiny(tmp_path)}, "g")
        with pytest.raises(ValueError, match="one folder name"):
            launch({"ok": tiny(tmp_path)}, bad)


@pytest.mark.parametrize(
    "make",
    [
        lambda: TrainConfig.from_preset(
            "mt",
            "tiny",
            variant="post_ln",
            d_model=32,
            n_heads=2,
            lr=1.5e-3,
            save_dir="/x/y",
            progress_bar=False,
            resume=True,
            word_dropout=0.1,
        ),
        lambda: TrainConfig.from_preset(
            "mt", "small", variant="tfixup", encoder_layers=18, decoder_layers=18, device="cpu"
        ),
        lambda: TrainConfig.from_preset(
            "mt", "full", "deep100", variant="b2t", encoder_layers=100, decoder_layers=100, eval_at_end=False
        ),
        lambda: TrainConfig.from_preset(
            "mt", "small", variant="deepnet", deepnet_encoder_beta_factor=1.15, update_freq=3, tokens_per_update=0
        ),
    ],
)
def test_a_detached_run_trains_exactly_its_config_file(make, tmp_path):
    """The queue writes each run's config as JSON (config.json) and starts ``train --config`` on it: the data
    round-trips exactly (tuples included), and the file admits no other option."""
    from b2t_lib.cli import _config_file
    from b2t_lib.runs.queue import run_command

    cfg = make()
    path = tmp_path / "config.json"
    write_json_atomic(path, cfg.to_dict())
    _, back = _config_file(["--config", str(path)])
    assert back.to_dict() == cfg.to_dict()
    assert run_command(path, {"nproc": 1})[-3:] == ["train", "--config", str(path)]
    assert "--nproc_per_node=2" in run_command(path, {"nproc": 2})
    with pytest.raises(UserError, match="unrecognized arguments: --lr 1"):
        _config_file(["--config", str(path), "--lr", "1"])


def test_device_slots():
    assert make_slots(["cpu", "cpu"]) == [
        {"name": "cpu0", "cuda": "", "nproc": 1},
        {"name": "cpu1", "cuda": "", "nproc": 1},
    ]
    assert make_slots(["0", "2,3"]) == [
        {"name": "gpu0", "cuda": "0", "nproc": 1},
        {"name": "gpu2,3", "cuda": "2,3", "nproc": 2},
    ]
    with pytest.raises(ValueError, match="twice"):
        make_slots(["1", "1"])


def test_a_dead_or_unreaped_process_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    token = process_token(child.pid)
    assert process_alive(child.pid, token)
    assert not process_alive(child.pid, "12345")  # a recycled pid: another start time
    child.kill()
    for _ in range(100):  # killed but not reaped: a zombie
        if not process_alive(child.pid, token):
            break
        import time

        time.sleep(0.05)
    assert not process_alive(child.pid, token)
    child.wait()
    assert not process_alive(child.pid, token)


def test_plain_progress_lines(tmp_path):
    lines = []

    class Out:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    display = LaunchProgress(
        {"b2t_18L": 20000, "post_ln_18L": 20000}, bars=False, interval=0, stream=Out(), new_label="queued"
    )
    statuses = {
        "b2t_18L": RunStatus("b2t_18L", tmp_path, "running", update=1200, loss=4.2311),
        "post_ln_18L": RunStatus("post_ln_18L", tmp_path, "new"),
    }
    display.show(statuses)
    display.close()  # the final block, always
    text = "".join(lines)
    assert "1 queued, 1 running" in text and "1200/20000" in text and "loss 4.231" in text and "ETA" in text
    assert text.count("post_ln_18L      queued") == 2


# ---------------------------------------------------------------------------------------------- cost
def test_flops_count_the_model_s_matrices(tmp_path):
    """The encoder/decoder terms of flops_per_update match the Linear weights of the real model."""
    from b2t_lib import EncoderDecoder, ModelConfig

    model_cfg = ModelConfig(vocab_size=104, d_model=32, n_heads=2, d_ff=64, encoder_layers=2, decoder_layers=3)
    model = EncoderDecoder(model_cfg)
    linear = {n: m.weight.numel() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    on_source = sum(
        v
        for n, v in linear.items()
        if n.startswith("encoder.") or ("encoder_attn." in n and n.split(".")[-1] in ("k_proj", "v_proj"))
    )
    on_target = sum(linear.values()) - on_source - linear.get("decoder.output_projection", 0)
    shape, tokens, d = TASK_SHAPES["mt"], 1000, 32
    expected = 3 * (
        2 * tokens * (on_source + on_target)  # matrices, 2 FLOPs per weight
        + tokens * 2 * 4 * d * shape.src_len  # encoder self-attention
        + tokens * 3 * (2 * d * shape.tgt_len + 4 * d * shape.src_len)  # decoder self + cross
        + tokens * 2 * d * shape.logits
    )  # output logits
    assert flops_per_update(model_cfg, tokens, "mt") == pytest.approx(expected, rel=1e-12)


def test_gpu_hours_use_the_measured_mfu_when_results_md_has_one(tmp_path):
    cfg = TrainConfig.from_preset("mt", "small", encoder_layers=6, decoder_layers=6)
    empty = tmp_path / "RESULTS.md"
    empty.write_text(
        "# Benchmark results\n<!-- gpu-throughput: rows below are read -->\n| date | GPU | peak bf16 "
        "TFLOPS | model | MFU | command |\n|---|---|---:|---|---:|---|\n"
    )
    assumed = estimate_gpu_hours(cfg, results_md=empty)
    assert not assumed.throughput.measured and assumed.throughput.mfu == ASSUMED_MFU
    assert "estimated" in str(assumed) and "assumed" in str(assumed)
    flops = cfg.max_update * flops_per_update(cfg.model, 65536, "mt")
    assert assumed.gpu_hours == pytest.approx(flops / (989e12 * ASSUMED_MFU) / 3600)
    measured = tmp_path / "measured.md"
    measured.write_text(
        empty.read_text() + "| 2026-12-01 | NVIDIA H200 | 989 | 6L-6L base | 40.0% | bench |\n"
        "| 2026-12-02 | NVIDIA H200 | 989 | 18L-18L base | 20% | bench |\n\nafter the table\n"
    )
    est = estimate_gpu_hours(cfg, results_md=measured)
    assert est.throughput.measured and est.throughput.mfu == pytest.approx(0.30)  # the median
    assert est.throughput.gpu == "NVIDIA H200" and "measured MFU" in str(est)
    assert measured_throughput(tmp_path / "missing.md") is None


def test_the_readme_cost_table_is_the_estimator_s():
    readme = (ROOT / "README.md").read_text()
    assert estimate_table() in readme, (
        "the README's cost table is out of date (presets or benchmarks/RESULTS.md changed): replace it with "
        "the output of `python -m b2t_lib estimate --table`"
    )


def test_estimate_command(capsys):
    from b2t_lib.cli import main

    assert (
        main(["estimate", "--task", "mt", "--scale", "full", "--encoder-layers", "18", "--decoder-layers", "18"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["tokens_per_update"] == 3584 * 128 and out["updates"] == 50000 and out["gpu_hours"] > 0


def test_the_progress_reader_skips_a_half_written_log_line(tmp_path):
    (tmp_path / "log.jsonl").write_text(
        '{"kind": "train", "update": 10, "loss": 5.5}\n'
        '{"kind": "valid", "update": 10, "valid_nll": 6.0}\n'
        '{"kind": "train", "upd'
    )
    status = run_status(tmp_path)
    assert (status.state, status.update, status.loss) == ("new", 10, 5.5)


def test_the_runs_command_lists_each_run_s_state(runs, tmp_path, capsys):
    from b2t_lib.cli import main

    fake_result(runs / "g" / "done", tiny(tmp_path), "diverged")
    write_json_atomic(runs / "g" / "cut" / "launch.json", {"pid": None, "config": tiny(tmp_path).to_dict()})
    assert main(["runs", "g"]) == 0
    out = capsys.readouterr().out
    assert "done             diverged" in out and "cut              interrupted" in out and "/20" in out
    assert main(["runs"]) == 0 and "done" in capsys.readouterr().out


def test_relative_data_paths(runs, tmp_path, monkeypatch):
    """A preset's own data folder lives in the repository root; any other relative path is the caller's."""
    from b2t_lib.runs.launch import _resolve

    monkeypatch.chdir(tmp_path)
    small = TrainConfig.from_preset("mt", "small")
    assert _resolve(small, tmp_path / "x").data == str(ROOT / "data" / "wmt14_en_de_1m")
    mine = TrainConfig.from_preset("mt", "tiny", data="../data/synthetic_mt")
    assert _resolve(mine, tmp_path / "x").data == str((tmp_path / ".." / "data" / "synthetic_mt").resolve())
