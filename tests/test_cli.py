"""``python -m b2t_lib``: generated options with preset defaults, clear errors, train/evaluate/table."""

import json
import re
import subprocess
import sys

import pytest

from b2t_lib import ModelConfig
from b2t_lib.cli import EXIT_FAILED, build_train_parser, main
from b2t_lib.data import prepare_synthetic_mt
from b2t_lib.train.options import train_fields


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepare_synthetic_mt(
        tmp_path_factory.mktemp("data") / "synthetic", n_train=200, n_valid=20, n_test=20, bpe_vocab_size=300, workers=1
    )


def test_help_documents_every_option_with_the_presets_default():
    text = build_train_parser("mt", "full").format_help()
    for f in train_fields() + ModelConfig.settable_fields():  # the run's options and the whole model
        assert re.search("--" + f.name.replace("_", "-") + "[ ,]", text), f.name
    for name in ModelConfig.data_fields():  # the task sets these from its data
        assert not re.search("--" + name.replace("_", "-") + "[ ,]", text), name
    assert "--deepnet-encoder-beta-factor" in text and "--realformer-running-mean" in text
    assert "(default: 3584)" in text and "(default: 458752)" in text  # full MT preset
    tiny = build_train_parser("mt", "tiny").format_help()
    assert "(default: 'data/synthetic_mt')" in tiny


def test_help_runs_as_a_module():
    out = subprocess.run(
        [sys.executable, "-m", "b2t_lib", "train", "--scale", "full", "--recipe", "deep100", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "(default: 0.5)" in out.stdout  # deep100's dropout


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--no-such-option", "1"], "unrecognized arguments: --no-such-option"),
        (["train", "--update-freq", "2", "--tokens-per-update", "1000"], "give only one"),
        (
            ["train", "--lr-scheduler", "inverse_sqrt_nowarmup", "--decay-period", "10", "--warmup-updates", "5"],
            "--warmup-updates has no effect",
        ),
        (["train", "--task", "lm", "--label-smoothing", "0.1"], "the adaptive softmax loss has no label smoothing"),
        (["train", "--task", "lm", "--adaptive-cutoff", "9,x"], "expected comma-separated ints"),
        (["train", "--task", "lm", "--encoder-layers", "2"], "language model only"),
        (["evaluate"], "--save-dir"),
    ],
)
def test_bad_command_lines_exit_2_naming_the_problem(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv + (["--save-dir", str(tmp_path / "x"), "--device", "cpu"] if argv[0] == "train" else [])) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")  # one line, no usage block


def _train_args(data_dir, save_dir, *extra):
    return [
        "train",
        "--data",
        str(data_dir),
        "--save-dir",
        str(save_dir),
        "--d-model",
        "32",
        "--n-heads",
        "2",
        "--d-ff",
        "64",
        "--encoder-layers",
        "1",
        "--decoder-layers",
        "1",
        "--max-tokens",
        "256",
        "--threads",
        "1",
        "--no-progress-bar",
        "--log-interval",
        "1",
        "--valid-interval",
        "4",
        "--save-interval",
        "4",
        "--warmup-updates",
        "2",
        *extra,
    ]


@pytest.mark.slow
def test_train_evaluate_and_table_from_the_command_line(data_dir, tmp_path, capsys):
    run = tmp_path / "b2t"
    assert main(_train_args(data_dir, run, "--max-update", "4", "--beam", "1", "--max-len-b", "3")) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "completed" and "test" in printed["metrics"]["bleu"]
    assert main(["evaluate", "--save-dir", str(run), "--beam", "2", "--max-len-b", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["eval_options"]["beam"] == 2
    assert main(["table", "--table", "1", str(run)]) == 0
    assert "B2T connection (ours)" in capsys.readouterr().out
    assert main(["preset", "--task", "asr", "--scale", "full"]) == 0
    assert json.loads(capsys.readouterr().out)["max_update"] == 150000


@pytest.mark.slow
def test_language_model_train_evaluate_and_table_4_from_the_command_line(tmp_path, capsys):
    from b2t_lib.data.synthetic_lm import prepare_synthetic_lm

    data = prepare_synthetic_lm(tmp_path / "lm", train_tokens=20_000, valid_tokens=1_000, test_tokens=1_000)
    capsys.readouterr()
    run = tmp_path / "lm_b2t"
    assert (
        main(
            [
                "train",
                "--task",
                "lm",
                "--data",
                str(data),
                "--save-dir",
                str(run),
                "--d-model",
                "32",
                "--n-heads",
                "2",
                "--d-ff",
                "64",
                "--decoder-layers",
                "2",
                "--max-tokens",
                "128",
                "--tokens-per-sample",
                "64",
                "--context-window",
                "32",
                "--adaptive-cutoff",
                "100,400",
                "--max-update",
                "4",
                "--warmup-updates",
                "2",
                "--no-progress-bar",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "completed" and printed["metrics"]["context_window"] == 32
    assert printed["metrics"]["valid_ppl"] > 1 and printed["metrics"]["test_ppl"] > 1
    assert main(["evaluate", "--save-dir", str(run), "--context-window", "0"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["context_window"] == 0 and evaluated["eval_options"]["context_window"] == 0
    assert main(["table", "--table", "4", str(run)]) == 0
    table = capsys.readouterr().out
    assert "Dec: 2L" in table and "B2T connection (ours)" in table
    assert f"{evaluated['valid_ppl']:.2f}" in table  # evaluate updated result.json


@pytest.mark.slow
def test_a_diverged_run_exits_3_and_says_so(data_dir, tmp_path, capsys):
    code = main(
        _train_args(
            data_dir,
            tmp_path / "bad",
            "--variant",
            "post_ln",
            "--lr",
            "30",
            "--max-update",
            "50",
            "--divergence-patience",
            "3",
        )
    )
    assert code == EXIT_FAILED
    assert "TRAINING DIVERGED" in capsys.readouterr().err  # the CLI shows the library's log on stderr
    assert json.loads((tmp_path / "bad" / "result.json").read_text())["status"] == "diverged"
