"""Speech recognition end to end on a small synthetic spoken-word corpus: the ``asr`` task in the one
trainer (frame batches, SpecAugment in training only), beam search, SentencePiece decoding, WER with
jiwer per split; the command line; two DDP processes; the unigram hook."""

import json

import numpy as np
import pytest
import torch

from b2t_lib.cli import main
from b2t_lib.special_tokens import EOS
from b2t_lib.data.speech_dataset import load_speech_split, speech_manifest
from b2t_lib.data.synthetic_speech import prepare_synthetic_asr
from b2t_lib.generate import beam_search
from b2t_lib.speech_input import SpecAugment, SpeechSource
from b2t_lib.train import TrainConfig, Trainer, build_task, read_log
from b2t_lib.metrics import word_error_rate
from ddp_check import train_in_two_processes_and_in_one

pytestmark = pytest.mark.slow  # prepares audio and trains


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepare_synthetic_asr(
        tmp_path_factory.mktemp("data") / "asr",
        n_train=60,
        n_valid=8,
        n_test=8,
        n_test_other=8,
        vocab_size=40,
        workers=1,
    )


def small(data_dir, save_dir, **overrides) -> TrainConfig:
    values = dict(
        data=str(data_dir),
        save_dir=str(save_dir),
        d_model=32,
        n_heads=2,
        d_ff=64,
        encoder_layers=2,
        decoder_layers=1,
        conv_channels=32,
        max_tokens=1500,
        max_update=6,
        warmup_updates=2,
        lr=5e-3,
        threads=1,
        progress_bar=False,
        log_interval=1,
        valid_interval=3,
        save_interval=3,
        keep_last=2,
        average_last=2,
        beam=2,
        max_len_b=12,
        eval_batch_size=5,
    )
    values.update(overrides)
    return TrainConfig.from_preset("asr", "tiny", **values)


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("run") / "b2t"
    return save_dir, Trainer(small(data_dir, save_dir)).train()


def test_training_writes_a_record_with_the_wer_of_every_split(trained):
    save_dir, record = trained
    assert record["status"] == "completed" and record["metrics"]["num_updates"] == 6
    stored = json.loads((save_dir / "result.json").read_text())
    assert stored["task"] == "asr" and stored["model_config"]["encoder_input"] == "speech"
    assert stored["model_config"]["input_features"] == 80 and stored["model_config"]["vocab_size"] == 40
    wer = stored["metrics"]["wer"]
    assert list(record["metrics"]["wer"]) == ["valid", "test_clean", "test_other"]  # validation, then tests
    assert wer == record["metrics"]["wer"]
    assert all(isinstance(v, float) and v >= 0 for v in wer.values())
    assert stored["metrics"]["averaged_checkpoints"] == ["checkpoint_3.pt", "checkpoint_6.pt"]
    log = read_log(save_dir, "train")
    assert len(log) == 6 and log[-1]["loss"] < log[0]["loss"]
    # --max-tokens counts frames: every training batch's padded frames fit in it
    task = build_task(TrainConfig.from_dict(stored["config"]))
    task.load_datasets()
    for batch in task.train_batches(0, 0, 1):
        assert len(batch) * max(int(task.train_data.src_sizes[i]) for i in batch) <= 1500


def test_wer_is_jiwer_on_the_decoded_beam_output_of_the_averaged_model(trained, data_dir):
    save_dir, record = trained
    from b2t_lib.train import average_checkpoints, list_checkpoints

    task = build_task(TrainConfig.from_dict(record["config"]))
    task.load_datasets()
    model = task.build_model()
    model.load_state_dict(average_checkpoints(list_checkpoints(save_dir)[-2:]))
    model.eval()
    for split in ("test_clean", "test_other"):
        test = load_speech_split(data_dir, split)
        batch = test.collate(list(range(len(test))))
        hyps = beam_search(
            model,
            SpeechSource(batch["features"], batch["src_lengths"]),
            beam_size=2,
            len_penalty=1.0,
            max_len_a=0.0,
            max_len_b=12,
        )
        texts = [test.decode(h) for h in hyps]
        expected = round(word_error_rate(test.references(), texts), 2)
        assert record["metrics"]["wer"][split] == pytest.approx(expected, abs=0.01)
        counts = record["metrics"]["wer_counts"][split]
        assert counts["reference_words"] == sum(len(r.split()) for r in test.references())
    assert (
        record["metrics"]["samples"]["test_clean"]["reference"]
        == load_speech_split(data_dir, "test_clean").references()[0]
    )


def test_spec_augment_masks_training_batches_only(data_dir, tmp_path, monkeypatch):
    """Through the trainer: every training batch is masked, validation and test batches never are."""
    calls = []
    original = SpecAugment.forward

    def recording(self, features, lengths):
        out = original(self, features, lengths)
        calls.append((self.training, out is features, bool((out != features).any())))
        return out

    monkeypatch.setattr(SpecAugment, "forward", recording)
    record = Trainer(
        small(
            data_dir,
            tmp_path / "run",
            max_update=3,
            valid_interval=2,
            save_interval=3,
            average_last=1,
            beam=1,
            max_len_b=4,
            specaug_time_width=5,
        )
    ).train()
    assert record["status"] == "completed"
    training = [c for c in calls if c[0]]
    evaluation = [c for c in calls if not c[0]]
    assert len(training) == 3  # one batch per update (update_freq 1)
    assert all(changed for _, _, changed in training)  # masks applied
    # validation at updates 2 and 3 and WER on 3 splits: the features reach the model untouched
    assert len(evaluation) > 3 and all(same and not changed for _, same, changed in evaluation)


def test_the_unigram_hook_gives_every_target_id_of_a_split(data_dir, trained):
    _, record = trained
    task = build_task(TrainConfig.from_dict(record["config"]))
    task.load_datasets()
    manifest = speech_manifest(data_dir)
    train = task.target_token_ids("train")
    assert train.ndim == 1 and train.dtype == np.int64 and len(train) == manifest["stats"]["train"]["tokens"]
    assert int((train == EOS).sum()) == manifest["stats"]["train"]["kept"]  # one </s> per utterance
    assert train.min() >= 0 and train.max() < len(task.dictionary) == 40
    dataset = load_speech_split(data_dir, "train")
    assert train.tolist() == [int(t) for i in range(len(dataset)) for t in dataset.targets[i]]
    valid = task.target_token_ids("valid")
    assert valid.tolist() == [int(t) for i in range(8) for t in load_speech_split(data_dir, "valid").targets[i]]
    assert len(task.target_token_ids("test_other")) == manifest["stats"]["test_other"]["tokens"]
    # the base class's unigram baseline (the "Training failed" bar) from these hooks, cached with the data
    from b2t_lib.data.unigram import stored_unigram_baseline, unigram_cross_entropy

    bits = task.unigram_baseline()
    assert bits == pytest.approx(unigram_cross_entropy(train, valid, 40), abs=1e-6) and 3.0 < bits < 6.0
    assert stored_unigram_baseline(data_dir) == pytest.approx(bits, abs=1e-6)


def test_train_evaluate_and_table_5_from_the_command_line(data_dir, tmp_path, capsys):
    run = tmp_path / "b2t"
    args = [
        "train",
        "--task",
        "asr",
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
        "2",
        "--decoder-layers",
        "1",
        "--conv-channels",
        "32",
        "--max-update",
        "2",
        "--warmup-updates",
        "1",
        "--threads",
        "1",
        "--no-progress-bar",
        "--beam",
        "1",
        "--max-len-b",
        "4",
        "--save-interval",
        "2",
    ]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "completed" and set(printed["metrics"]["wer"]) == {"valid", "test_clean", "test_other"}
    assert main(["evaluate", "--save-dir", str(run), "--beam", "2", "--max-len-b", "4"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["eval_options"]["beam"] == 2 and "test_other" in evaluated["wer"]
    assert main(["table", "--table", "5", str(run)]) == 0
    table = capsys.readouterr().out
    assert "Table 5: Word error rates on LibriSpeech" in table and "B2T connection (ours)" in table
    header = next(line for line in table.splitlines() if line.startswith("Method"))
    ours = next(line for line in table.splitlines() if "B2T connection (ours)" in line)
    column = header.index("Test other") + len("Test other")  # right-aligned under its header
    assert ours[column - 6 : column] == f"{evaluated['wer']['test_other']:6.2f}"  # the evaluated WER


def test_missing_data_is_generated_at_tiny_scale_or_explained(tmp_path, monkeypatch):
    from b2t_lib.train import asr_task

    with pytest.raises(FileNotFoundError, match="prepare_librispeech.py"):
        build_task(
            TrainConfig.from_preset("asr", "tiny", data=str(tmp_path / "none"), synthetic_train_pairs=0)
        ).prepare_data()
    for name, value in (
        ("SYNTHETIC_VALID", 3),
        ("SYNTHETIC_TEST", 3),
        ("SYNTHETIC_TEST_OTHER", 3),
        ("SYNTHETIC_VOCAB_SIZE", 36),
    ):
        monkeypatch.setattr(asr_task, name, value)
    task = build_task(TrainConfig.from_preset("asr", "tiny", data=str(tmp_path / "gen"), synthetic_train_pairs=30))
    task.prepare_data()
    manifest = speech_manifest(tmp_path / "gen")
    assert manifest["valid_splits"] == ["valid"] and manifest["test_splits"] == ["test_clean", "test_other"]
    assert manifest["stats"]["train"]["kept"] == 30 and manifest["vocab_size"] == 36


# ---------------------------------------------------------------------------------------------- DDP
def _ddp_config(data_dir, save_dir, update_freq):
    # No dropout and no SpecAugment: two processes draw other masks than one process would.
    return small(
        data_dir,
        save_dir,
        update_freq=update_freq,
        dropout=0.0,
        specaug_freq_masks=0,
        specaug_time_masks=0,
        max_update=3,
        eval_at_end=False,
        valid_interval=3,
        save_interval=3,
        device="cpu",
        max_tokens=800,
    )


def test_two_gloo_processes_train_the_speech_model_as_one_process(data_dir, tmp_path):
    """DDP fails on a parameter without a gradient: the speech model has no unused encoder embedding."""
    ddp, single = train_in_two_processes_and_in_one(
        lambda save_dir, freq: _ddp_config(data_dir, save_dir, freq), tmp_path
    )
    for name, value in single["model"].items():
        torch.testing.assert_close(ddp["model"][name], value, rtol=1e-4, atol=1e-5, msg=name)
