"""Headline generation end to end on the synthetic headlines: the task shares MT's code, trains, decodes with
the documented settings, scores F1 ROUGE-1/2/L and lays the result out as the paper tables read it; the
command line trains and evaluates it; the presets carry Table 6 and the documented decoding."""

import inspect
import json

import pytest

from b2t_lib.cli import main
from b2t_lib.data import load_translation_split, prepare_synthetic_mt, prepare_synthetic_summarization
from b2t_lib.generate import beam_search
from b2t_lib.metrics import corpus_rouge
from b2t_lib.train.options import option_defaults
from b2t_lib.scale import SCALES
from b2t_lib.train import (
    TrainConfig,
    Trainer,
    average_checkpoints,
    build_task,
    evaluate_run,
    list_checkpoints,
    read_log,
)
from b2t_lib.train.mt_task import TranslationTask
from b2t_lib.train.summarization_task import SummarizationTask

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepare_synthetic_summarization(
        tmp_path_factory.mktemp("data") / "headlines", n_train=300, n_valid=20, n_test=20, bpe_vocab_size=200, workers=1
    )


def _small(data_dir, save_dir, **extra):
    values = dict(
        data=str(data_dir),
        save_dir=str(save_dir),
        variant="b2t",
        d_model=32,
        n_heads=2,
        d_ff=64,
        encoder_layers=1,
        decoder_layers=2,
        max_tokens=512,
        max_update=24,
        warmup_updates=4,
        lr=5e-3,
        threads=1,
        progress_bar=False,
        log_interval=4,
        valid_interval=8,
        save_interval=8,
        keep_last=3,
        average_last=2,
    )
    values.update(extra)
    return TrainConfig.from_preset("summarization", "tiny", **values)


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("run") / "b2t"
    return save_dir, Trainer(_small(data_dir, save_dir)).train()


# ---------------------------------------------------------------- the task (fast)
def test_the_task_is_translation_with_its_own_data_and_metric_only():
    """No copied code: the summarization task inherits MT's data loading, batching, model and decoding."""
    assert issubclass(SummarizationTask, TranslationTask)
    own = {name for name, value in vars(SummarizationTask).items() if inspect.isfunction(value)}
    assert own == {"prepare_synthetic", "prepare_real", "how_to_prepare", "score", "metrics"}
    assert build_task(TrainConfig.from_preset("summarization", "tiny")).metric == "rouge"


def test_metrics_lay_the_main_split_at_the_top_level():
    task = build_task(TrainConfig.from_preset("summarization", "tiny"))
    scores = {
        "test": {"rouge1": 38.4, "rouge2": 19.4, "rougeL": 35.7},
        "duc2004": {"rouge1": 30.0, "rouge2": 10.0, "rougeL": 25.0},
    }
    metrics = task.metrics(scores)
    assert metrics["rouge"] == scores
    assert {k: metrics[k] for k in ROUGE_KEYS} == scores["test"]  # the first test split is the main one
    assert task.score(["dog sees cat"], ["dog sees cat"]) == {k: 100.0 for k in ROUGE_KEYS}


def test_missing_data_says_how_to_prepare_gigaword(tmp_path):
    task = build_task(
        TrainConfig.from_preset("summarization", "tiny", data=str(tmp_path / "none"), synthetic_train_pairs=0)
    )
    with pytest.raises(FileNotFoundError, match="no prepared headline data at .*prepare_gigaword.py --out-dir"):
        task.prepare_data()


# ---------------------------------------------------------------- presets (fast)
def test_full_preset_is_table6s_summarization_column():
    p = option_defaults("summarization", "full")
    got = (p["d_model"], p["d_ff"], p["n_heads"], p["lr"], p["warmup_updates"], p["max_update"], p["max_tokens"])
    assert got == (512, 2048, 8, 1e-3, 4000, 50000, 3584)
    assert (p["lr_scheduler"], p["adam_beta1"], p["adam_beta2"], p["label_smoothing"]) == (
        "inverse_sqrt",
        0.9,
        0.98,
        0.1,
    )
    assert (p["encoder_layers"], p["decoder_layers"], p["data"]) == (6, 6, "data/gigaword")
    assert (p["average_last"], p["keep_last"]) == (10, 10)  # takase/control-length: last 10 averaged


@pytest.mark.parametrize("scale", SCALES)
def test_decoding_is_what_presets_py_documents(scale):
    """beam 5, lenpen 1.0, fairseq's length defaults: min_len 1 (beam_search's default), max_len_a 0, max_len_b 200."""
    cfg = TrainConfig.from_preset("summarization", scale)
    assert (cfg.beam, cfg.lenpen, cfg.lenpen_other, cfg.max_len_a, cfg.max_len_b) == (5, 1.0, 1.0, 0.0, 200)
    assert inspect.signature(beam_search).parameters["min_len"].default == 1
    source = inspect.getsource(__import__("b2t_lib.presets", fromlist=["_"]))
    assert "takase/control-length encdec/README.md" in source and "`--beam 5`" in source


def test_tiny_preset_is_the_measured_acceptance_setting():
    cfg = TrainConfig.from_preset("summarization", "tiny")
    m = cfg.model
    assert (m.d_model, m.encoder_layers, m.decoder_layers, m.variant) == (64, 6, 6, "b2t")
    assert (cfg.threads, cfg.max_update, cfg.synthetic_train_pairs) == (1, 800, 20000)  # benchmarks/RESULTS.md


# ---------------------------------------------------------------- training and evaluation (slow)
@pytest.mark.slow
def test_training_writes_rouge_on_the_test_split_as_the_tables_read_it(trained):
    save_dir, record = trained
    metrics = record["metrics"]
    assert record["status"] == "completed" and record["task"] == "summarization"
    assert metrics["num_updates"] == 24 and metrics["valid_nll"] > 0
    assert set(metrics["rouge"]) == {"test"}
    for key in ROUGE_KEYS:
        assert 0.0 <= metrics[key] <= 100.0 and metrics[key] == metrics["rouge"]["test"][key]
    assert "bleu" not in metrics
    log = read_log(save_dir, "train")
    assert log[-1]["loss"] < 0.9 * log[0]["loss"]
    stored = json.loads((save_dir / "result.json").read_text())
    assert stored["metrics"]["rouge"] == metrics["rouge"]


@pytest.mark.slow
def test_evaluation_decodes_with_the_preset_settings_and_scores_with_corpus_rouge(trained, data_dir):
    save_dir, record = trained
    cfg = TrainConfig.from_dict(record["config"])
    task = build_task(cfg)
    task.load_datasets()
    model = task.build_model()
    model.load_state_dict(average_checkpoints(list_checkpoints(save_dir)[-2:]))
    model.eval()
    test = load_translation_split(data_dir, "test")
    batch = test.collate(list(range(len(test))))
    hyps = beam_search(model, batch["src_tokens"], beam_size=5, len_penalty=1.0, max_len_a=0.0, max_len_b=200)
    texts = [test.decode(h) for h in hyps]
    assert task.translate(model, test, "cpu", lenpen=1.0) == texts  # the task's decoding, text for text
    assert record["metrics"]["samples"]["test"]["hypothesis"] == texts[0]
    expected = corpus_rouge(texts, test.references())
    assert {k: record["metrics"][k] for k in ROUGE_KEYS} == {k: round(v, 2) for k, v in expected.items()}
    # 24 updates leave the model far from any headline, so score a non-trivial output too: the first five
    # article tokens, the copy baseline of the synthetic task's documentation.
    copies = [" ".join(test.source_text(i).split()[:5]) for i in range(len(test))]
    scored = task.score(copies, test.references())
    assert scored == {k: round(v, 2) for k, v in corpus_rouge(copies, test.references()).items()}
    assert 5 < scored["rouge1"] < 60 and 0 < scored["rouge2"] < scored["rouge1"]


@pytest.mark.slow
def test_evaluate_run_scores_rouge_again_and_merges_it(trained):
    save_dir, record = trained
    again = evaluate_run(save_dir, device="cpu")
    assert again["rouge"] == record["metrics"]["rouge"]
    greedy = evaluate_run(save_dir, checkpoint=save_dir / "checkpoint_8.pt", beam=1, write=False)
    assert greedy["eval_options"]["beam"] == 1 and all(0 <= greedy[k] <= 100 for k in ROUGE_KEYS)


@pytest.mark.slow
def test_headline_and_translation_data_are_not_mixed_up(data_dir, tmp_path):
    mt_data = prepare_synthetic_mt(tmp_path / "mt", n_train=100, n_valid=10, n_test=10, bpe_vocab_size=200, workers=1)
    with pytest.raises(ValueError, match="holds en->de data, not the headline data"):
        Trainer(_small(mt_data, tmp_path / "a"))
    with pytest.raises(ValueError, match="holds article->headline data, not the translation data"):
        Trainer(TrainConfig.from_preset("mt", "tiny", data=str(data_dir), save_dir=str(tmp_path / "b")))


@pytest.mark.slow
def test_train_and_evaluate_from_the_command_line(data_dir, tmp_path, capsys):
    run = tmp_path / "cli"
    argv = [
        "train",
        "--task",
        "summarization",
        "--data",
        str(data_dir),
        "--save-dir",
        str(run),
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
        "--max-update",
        "4",
        "--warmup-updates",
        "2",
        "--save-interval",
        "4",
        "--valid-interval",
        "4",
        "--no-progress-bar",
    ]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "completed"
    assert set(printed["metrics"]["rouge"]) == {"test"} and all(k in printed["metrics"] for k in ROUGE_KEYS)
    assert main(["evaluate", "--save-dir", str(run), "--beam", "2"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["eval_options"]["beam"] == 2 and evaluated["eval_options"]["max_len_b"] == 200
    assert all(0 <= evaluated[k] <= 100 for k in ROUGE_KEYS)
    stored = json.loads((run / "result.json").read_text())
    assert stored["metrics"]["rouge1"] == evaluated["rouge1"]  # evaluate merged its scores in
    ours = "".join(f"{evaluated[k]:8.2f}" for k in ROUGE_KEYS)  # R-L as the table prints them
    for table in ("3", "9"):
        assert main(["table", "--table", table, str(run)]) == 0
        printed = capsys.readouterr().out
        assert "Enc-Dec: 1L-1L" in printed and f"  {'B2T connection (ours)':<26}{ours}\n" in printed
    assert main(["table", "--table", "1", str(run)]) == 0  # a summarization run is no Table 1 row
    assert "(ours)" not in capsys.readouterr().out
