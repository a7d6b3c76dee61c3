"""The speech data pipeline: the Hub code path on a parquet file with LibriSpeech's layout,
``--from-files`` on generated audio (8 and 16 kHz, mono and stereo), every bad input, re-runs,
reproducibility, and the prepared data set (frame batches, CMVN, collation, decoding)."""

from __future__ import annotations

import io
import json
import logging
import multiprocessing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
import torch

from b2t_lib.special_tokens import EOS, PAD
from b2t_lib.data import speech
from b2t_lib.data.audio import extract_features
from b2t_lib.data.speech import prepare_librispeech, prepare_speech_from_files
from b2t_lib.data.speech_dataset import load_speech_split, speech_manifest
from b2t_lib.data.speech_vocab import VocabularySizeError, train_sentencepiece
from b2t_lib.data.synthetic_speech import WORDS, synthesize, write_synthetic_speech
from b2t_lib.errors import run_command
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "data_scripts" / "prepare_librispeech.py"


def spoken(words: list[str], seed: int, rate: int = 16000, channels: int = 1) -> np.ndarray:
    return synthesize(words, np.random.default_rng(seed), rate, channels)


def flac(x: np.ndarray, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, x, rate, format="FLAC", subtype="PCM_16")
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------- the Hub path
HF_FEATURES = {
    "file": {"dtype": "string", "_type": "Value"},
    "audio": {"sampling_rate": 16000, "_type": "Audio"},
    "text": {"dtype": "string", "_type": "Value"},
    "speaker_id": {"dtype": "int64", "_type": "Value"},
    "chapter_id": {"dtype": "int64", "_type": "Value"},
    "id": {"dtype": "string", "_type": "Value"},
}


def write_librispeech_parquet(path: Path, utterances: list[tuple[str, np.ndarray]], speaker: int) -> None:
    """A parquet shard as on the Hub: columns file, audio {bytes: FLAC, path}, text (upper case),
    speaker_id, chapter_id, id; the `huggingface` schema metadata declares `audio` an Audio feature."""
    rows = []
    for i, (text, audio) in enumerate(utterances):
        uid = f"{speaker}-100-{i:04d}"
        rows.append(
            {
                "file": f"/cache/{uid}.flac",
                "audio": {"bytes": flac(audio), "path": f"{uid}.flac"},
                "text": text,
                "speaker_id": speaker,
                "chapter_id": 100,
                "id": uid,
            }
        )
    table = pa.Table.from_pylist(rows)
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": HF_FEATURES}})})
    pq.write_table(table, path)


def hub_corpus(root: Path) -> dict[str, list[str]]:
    rng = np.random.default_rng(3)

    def sentences(n, seed):
        word_lists = [[str(w) for w in rng.choice(WORDS, 3)] for _ in range(n)]
        return [(" ".join(words).upper(), spoken(words, seed + k)) for k, words in enumerate(word_lists)]

    train = sentences(10, 0)
    train.insert(2, ("", spoken(["red", "cat"], 50)))  # empty transcript
    train.insert(5, ("ONE", np.zeros(300, dtype=np.float32)))  # 300 samples: 0 frames
    train.insert(7, ("RED CAT " * 10, spoken(["red", "cat"] * 10, 51)))  # long: > max_train_frames
    dev = sentences(3, 100) + [("RED CAT " * 10, spoken(["red", "cat"] * 10, 52))]  # long, but not training
    test = sentences(3, 200)
    files = {}
    for hub_split, utts, speaker in (
        ("train.clean.100", train, 1),
        ("validation.clean", dev, 2),
        ("test.clean", test, 3),
    ):
        files[hub_split] = [str(root / f"{hub_split}-00000-of-00001.parquet")]
        write_librispeech_parquet(Path(files[hub_split][0]), utts, speaker)
    return files


@pytest.mark.slow
def test_hub_path_on_parquet_with_flac_bytes(tmp_path, caplog):
    files = hub_corpus(tmp_path)
    out = tmp_path / "prepared"
    splits = ["train.clean.100", "validation.clean", "test.clean"]
    options = dict(splits=splits, data_files=files, workers=1, max_train_frames=400)
    with pytest.raises(VocabularySizeError, match=r"the largest these transcripts support is \d+") as error:
        prepare_librispeech(out, vocab_size=10000, **options)
    largest = error.value.largest
    with caplog.at_level(logging.INFO, logger="b2t_lib.data"):
        prepare_librispeech(out, vocab_size=largest, **options)
    assert "step features-train_clean_100: up to date, skipping" in caplog.text  # restart: only the vocabulary
    assert "skipped parquet:train.clean.100 utterance 1-100-0002: empty transcript" in caplog.text
    manifest = speech_manifest(out)
    assert manifest["splits"] == ["train", "dev_clean", "test_clean"]
    assert manifest["parts"] == {"train": ["train_clean_100"], "dev_clean": ["dev_clean"], "test_clean": ["test_clean"]}
    assert (manifest["valid_splits"], manifest["test_splits"]) == (["dev_clean"], ["test_clean"])
    assert manifest["vocab_size"] == largest
    stats = manifest["stats"]
    assert stats["train_clean_100"]["utterances"] == 13 and stats["train_clean_100"]["kept"] == 10
    assert stats["train_clean_100"]["dropped"] == {"empty_text": 1, "short": 1, "long": 1}
    assert stats["dev_clean"]["kept"] == 4  # long utterances stay in dev
    report = json.loads((out / "work" / "reports" / "train_clean_100.json").read_text())
    assert {s["id"]: s["reason"] for s in report["skipped"]} == {
        "1-100-0002": "empty_text",
        "1-100-0005": "short",
        "1-100-0007": "long",
    }

    train = load_speech_split(out, "train")
    table = pq.read_table(files["train.clean.100"][0]).to_pylist()
    kept = [row for row in table if row["id"] not in ("1-100-0002", "1-100-0005", "1-100-0007")]
    assert len(train) == len(kept) == 10
    for i, row in enumerate(kept):
        assert train.utterance_id(i) == row["id"]
        assert train.transcript(i) == row["text"].lower()
        assert train.decode(train.targets[i]) == row["text"].lower()
        assert train.targets[i][-1] == EOS
        expected = extract_features(row["audio"]["bytes"]).astype(np.float16)
        assert np.array_equal(train.raw_features(i), expected)
    assert train.src_sizes.max() <= 400
    assert load_speech_split(out, "dev_clean").src_sizes.max() > 400


def test_the_default_hub_source_is_openslr_librispeech(tmp_path, monkeypatch):
    """Without data_files the loader asks `datasets` for openslr/librispeech_asr, config all, streaming."""
    import datasets

    shard = tmp_path / "shard.parquet"
    write_librispeech_parquet(shard, [("HELLO WORLD", spoken(["one"], 1))], speaker=9)
    calls = []
    real_load = datasets.load_dataset

    def fake_load(path, name=None, **kwargs):
        calls.append((path, name, kwargs))
        return real_load("parquet", data_files={kwargs["split"]: [str(shard)]}, split=kwargs["split"], streaming=True)

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    ((uid, audio, name, text),) = list(speech.iter_hub_split("test.other"))
    assert calls == [
        (
            "openslr/librispeech_asr",
            "all",
            {"split": "test.other", "revision": None, "streaming": True, "cache_dir": None},
        )
    ]
    assert (uid, text, name) == ("9-100-0000", "HELLO WORLD", "openslr/librispeech_asr:test.other utterance 9-100-0000")
    assert isinstance(audio, bytes) and audio[:4] == b"fLaC"
    assert speech.HUB_SPLITS["test.other"] == ("test_other", "test_other")
    assert sorted({split for split, _ in speech.HUB_SPLITS.values()}) == [
        "dev_clean",
        "dev_other",
        "test_clean",
        "test_other",
        "train",
    ]


def test_unknown_hub_split_and_no_training_split_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown LibriSpeech split"):
        prepare_librispeech(tmp_path, splits=["train.clean.50"])
    with pytest.raises(ValueError, match="no training part"):
        prepare_librispeech(tmp_path, splits=["test.clean"], data_files={"test.clean": []})


# ---------------------------------------------------------------------------------------------- --from-files
@pytest.fixture(scope="module")
def from_files(tmp_path_factory):
    """A generated corpus (half the files at 8 kHz, half stereo) prepared through the command line."""
    root = tmp_path_factory.mktemp("speech")
    raw, out = root / "raw", root / "prepared"
    write_synthetic_speech(raw, n_train=40, n_valid=6, n_test=6, seed=3, fraction_8k=0.5, fraction_stereo=0.5)
    lines = (raw / "test.tsv").read_text().splitlines()
    (raw / "test_other.tsv").write_text("\n".join(lines[:4]) + "\n")  # a second test split
    args = ["--from-files", str(raw), "--out-dir", str(out), "--vocab-size", "40", "--workers", "1"]
    assert load_script(SCRIPT).main(args) == 0
    return {"raw": raw, "out": out, "args": args}


@pytest.mark.slow
def test_from_files_reads_8k_16k_mono_and_stereo(from_files):
    raw, out = from_files["raw"], from_files["out"]
    rows = [line.split("\t") for line in (raw / "train.tsv").read_text().splitlines()[1:]]
    kinds = {(sf.info(raw / audio).samplerate, sf.info(raw / audio).channels) for audio, _ in rows}
    assert kinds == {(8000, 1), (8000, 2), (16000, 1), (16000, 2)}
    manifest = speech_manifest(out)
    assert manifest["splits"] == ["train", "valid", "test", "test_other"]
    assert (manifest["valid_splits"], manifest["test_splits"]) == (["valid"], ["test", "test_other"])
    assert manifest["stats"]["train"]["kept"] == 40 and manifest["vocab_size"] == 40
    train = load_speech_split(out, "train")
    for i, (audio, text) in enumerate(rows):
        assert train.utterance_id(i) == audio and train.transcript(i) == text.lower()
        assert np.array_equal(train.raw_features(i), extract_features(raw / audio).astype(np.float16))
        assert train.decode(train.targets[i]) == text.lower()
    # 1 s of audio at either rate gives the frame count of 1 s at 16 kHz
    for i, (audio, _) in enumerate(rows):
        info = sf.info(raw / audio)
        assert train.src_sizes[i] == 1 + (round(info.frames * 16000 / info.samplerate) - 400) // 160


@pytest.mark.slow
def test_prepared_split_batches_and_collation(from_files):
    train = load_speech_split(from_files["out"], "train")
    batches = train.batches(600, shuffle=True, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(len(train)))
    for b in batches:
        assert len(b) * max(int(train.src_sizes[i]) for i in b) <= 600  # frames, padding included
    indices = batches[0]
    batch = train.collate(indices)
    n, frames = len(indices), int(max(train.src_sizes[i] for i in indices))
    assert batch["features"].shape == (n, frames, 80) and batch["features"].dtype == torch.float32
    assert batch["src_lengths"].tolist() == [int(train.src_sizes[i]) for i in indices]
    for row, i in enumerate(indices):
        length = int(train.src_sizes[i])
        x = batch["features"][row, :length]
        assert torch.allclose(x.mean(dim=0), torch.zeros(80), atol=1e-4)  # utterance CMVN
        assert torch.all(batch["features"][row, length:] == 0)  # zero padding
        target = train.targets[i]
        assert batch["target"][row, : len(target)].tolist() == target.tolist()
        assert batch["prev_output_tokens"][row, 0] == EOS
        assert batch["prev_output_tokens"][row, 1 : len(target)].tolist() == target[:-1].tolist()
        assert torch.all(batch["target"][row, len(target) :] == PAD)
    assert batch["ntokens"] == sum(len(train.targets[i]) for i in indices)
    assert train.references() == [train.transcript(i) for i in range(len(train))]
    assert train.decode([EOS] + train.vocab.encode("RED  Cat")) == "red cat"


@pytest.mark.slow
def test_rerun_skips_and_repairs_damage(from_files, caplog):
    out, args = from_files["out"], from_files["args"]
    with caplog.at_level(logging.INFO, logger="b2t_lib.data"):
        assert load_script(SCRIPT).main(args) == 0
    assert "up to date, nothing to do" in caplog.text
    damaged = out / "valid.fbank.npy"
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="damaged"):
        load_speech_split(out, "valid")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="b2t_lib.data"):
        assert load_script(SCRIPT).main(args) == 0
    assert "step features-valid: running" in caplog.text
    for step in ("features-train", "vocabulary", "targets-train", "targets-valid", "features-test"):
        assert f"step {step}: up to date, skipping" in caplog.text
    assert damaged.read_bytes() == data
    assert len(load_speech_split(out, "valid")) == 6


@pytest.mark.slow
def test_preparation_is_reproducible_and_the_same_on_several_workers(from_files, tmp_path, monkeypatch):
    monkeypatch.setattr(speech, "PARALLEL_MIN_UTTERANCES", 0)  # use the process pool even for 40 files
    raw = from_files["raw"]
    again = prepare_speech_from_files(raw, tmp_path / "parallel", vocab_size=40, workers=2)
    first, second = speech_manifest(from_files["out"]), speech_manifest(again)
    assert second["files"] == first["files"]  # same bytes, SentencePiece model included


def test_one_preparation_starts_its_feature_workers_once_for_every_part(from_files, tmp_path, monkeypatch):
    # four parts (train, valid and two tests) on two workers: one pool, shared, closed at the end; the same bytes as one
    # process writes. Workers are forked here (the test's own function cannot be imported by spawned ones).
    monkeypatch.setattr(speech, "PARALLEL_MIN_UTTERANCES", 0)
    started, parts_on_workers = [], []

    class CountedPool(speech.ProcessPoolExecutor):
        def __init__(self, workers, mp_context=None, initializer=None):
            started.append(workers)
            super().__init__(workers, mp_context=multiprocessing.get_context("fork"), initializer=initializer)

    real_map = speech.ordered_parallel_map

    def watched_map(function, items, workers, *, pool=None, **kwargs):
        parts_on_workers.append((workers, pool))
        return real_map(function, items, workers, pool=pool, **kwargs)

    monkeypatch.setattr(speech, "ProcessPoolExecutor", CountedPool)
    monkeypatch.setattr(speech, "ordered_parallel_map", watched_map)
    out = prepare_speech_from_files(from_files["raw"], tmp_path / "shared", vocab_size=40, workers=2)
    assert started == [2], "one pool of two workers for the whole preparation"
    assert len(parts_on_workers) == 4 and {id(pool) for _, pool in parts_on_workers} == {id(parts_on_workers[0][1])}
    assert all(workers == 2 for workers, _ in parts_on_workers)
    assert speech_manifest(out)["files"] == speech_manifest(from_files["out"])["files"]
    assert parts_on_workers[0][1]._pool is None, "closed at the end"
    started.clear()
    prepare_speech_from_files(from_files["raw"], tmp_path / "shared", vocab_size=40, workers=2)
    assert started == [], "a prepared data set starts no worker"


# ---------------------------------------------------------------------------------------------- bad inputs
def small_corpus(root: Path, *, train_rows=None, header="audio\ttext") -> Path:
    """train/valid/test .tsv with a few generated utterances (extra ``train_rows`` appended)."""
    root.mkdir(parents=True, exist_ok=True)
    for s, split in enumerate(("train", "valid", "test")):
        lines = [header]
        for i in range(6 if split == "train" else 2):
            words = [WORDS[(3 * i + s) % len(WORDS)], WORDS[(5 * i + 1) % len(WORDS)]]
            sf.write(root / f"{split}{i}.wav", spoken(words, 10 * s + i), 16000, subtype="PCM_16")
            lines.append(f"{split}{i}.wav\t{' '.join(words)}")
        if split == "train":
            lines += train_rows or []
        (root / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def run_cli(raw: Path, out: Path, capsys, vocab_size: int = 26) -> tuple[int, str]:
    code = run_command(
        load_script(SCRIPT).main,
        ["--from-files", str(raw), "--out-dir", str(out), "--vocab-size", str(vocab_size), "--workers", "1"],
    )
    return code, capsys.readouterr().err


def test_missing_audio_file_is_an_error_naming_it(tmp_path, capsys):
    raw = small_corpus(tmp_path / "raw", train_rows=["gone/nothere.wav\tred cat"])
    code, err = run_cli(raw, tmp_path / "out", capsys)
    assert code == 2
    assert "train.tsv:8: gone/nothere.wav" in err and "do not exist" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_unreadable_audio_file_is_an_error_naming_it(tmp_path, capsys):
    raw = small_corpus(tmp_path / "raw", train_rows=["broken.wav\tred cat"])
    (raw / "broken.wav").write_bytes(b"this is not a wave file" * 20)
    code, err = run_cli(raw, tmp_path / "out", capsys)
    assert code == 2 and "cannot read audio file" in err and "broken.wav" in err


@pytest.mark.parametrize("header", ["path\ttext", "audio text", "audio\ttranscript", "audio\ttext\ttext"])
def test_wrong_header_is_an_error_naming_the_file(tmp_path, capsys, header):
    raw = small_corpus(tmp_path / "raw", header=header)
    code, err = run_cli(raw, tmp_path / "out", capsys)
    assert code == 2 and "error: wrong header" in err and "train.tsv:1)" in err and "'audio' and 'text'" in err


def test_a_row_with_the_wrong_number_of_fields_names_its_line(tmp_path, capsys):
    raw = small_corpus(tmp_path / "raw", train_rows=["train0.wav\tred\tcat"])
    code, err = run_cli(raw, tmp_path / "out", capsys)
    assert code == 2 and "error: 3 tab-separated fields" in err and "train.tsv:8)" in err


def test_missing_split_files_are_named(tmp_path, capsys):
    raw = small_corpus(tmp_path / "raw")
    (raw / "test.tsv").unlink()
    code, err = run_cli(raw, tmp_path / "out", capsys)
    assert code == 2 and "no test split" in err
    (raw / "valid.tsv").unlink()
    code, err = run_cli(raw, tmp_path / "out", capsys)
    assert code == 2 and "needs valid.tsv" in err


@pytest.mark.slow
def test_empty_transcript_and_too_short_audio_are_skipped_and_reported(tmp_path, capsys, caplog):
    raw = small_corpus(tmp_path / "raw", train_rows=["clips/short.wav\tup", "train1.wav\t   "])
    (raw / "clips").mkdir()
    sf.write(raw / "clips" / "short.wav", spoken(["up"], 1)[:600], 16000, subtype="PCM_16")  # 600 samples: 2 frames
    with caplog.at_level(logging.WARNING, logger="b2t_lib.data"):
        code, err = run_cli(raw, tmp_path / "out", capsys)
    assert code == 0, err
    assert "skipped" in caplog.text and "short.wav: audio too short (2 frames, fewer than 5)" in caplog.text
    assert "train1.wav: empty transcript" in caplog.text
    stats = speech_manifest(tmp_path / "out")["stats"]["train"]
    assert stats["utterances"] == 8 and stats["kept"] == 6
    assert stats["dropped"] == {"empty_text": 1, "short": 1, "long": 0}


def test_vocabulary_size_errors_say_what_the_corpus_supports():
    sentences = ["one two three", "four five six seven"] * 20
    with pytest.raises(VocabularySizeError, match=r"largest these transcripts support is (\d+)") as error:
        train_sentencepiece(sentences, 10000)
    model = train_sentencepiece(sentences, error.value.largest)  # the size it names works
    assert model == train_sentencepiece(sentences, error.value.largest)  # and training is deterministic
    with pytest.raises(ValueError, match=r"pass --vocab-size \d+ or more"):
        train_sentencepiece(sentences, 8)


def test_every_command_line_option_is_documented():
    parser = load_script(SCRIPT).build_parser()
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert {a.option_strings[0] for a in options} >= {
        "--from-files",
        "--splits",
        "--vocab-size",
        "--workers",
        "--out-dir",
    }
    for action in options:
        assert action.help and len(action.help) > 15, action.option_strings
    text = parser.format_help()
    for action in options:
        assert action.option_strings[0] in text
    assert "train.clean.100" in text and "openslr/librispeech_asr" in text


def test_ragged_appender_writes_matrices_of_unknown_count(tmp_path):
    """The streaming writer (b2t_lib.data.indexed.RaggedAppender) gives files RaggedArray reads."""
    from b2t_lib.data.indexed import RaggedAppender, RaggedArray

    rng = np.random.default_rng(0)
    rows = [rng.normal(size=(n, 80)) for n in (7, 0, 3, 120)]
    with RaggedAppender(tmp_path / "x.npy", tmp_path / "x.offsets.npy", np.float16, (80,)) as writer:
        for row in rows:
            writer.append(row)
        with pytest.raises(ValueError, match="row shape"):
            writer.append(np.zeros((2, 40)))
    array = RaggedArray(tmp_path / "x.npy", tmp_path / "x.offsets.npy")
    assert len(array) == 4 and array.sizes.tolist() == [7, 0, 3, 120] and array.data.shape == (130, 80)
    for got, row in zip((array[i] for i in range(4)), rows):
        assert np.array_equal(got, row.astype(np.float16))
    assert np.load(tmp_path / "x.npy").shape == (130, 80)  # a plain .npy file
    with RaggedAppender(tmp_path / "e.npy", tmp_path / "e.offsets.npy", np.float16, (80,)):
        pass
    assert len(RaggedArray(tmp_path / "e.npy", tmp_path / "e.offsets.npy")) == 0


def test_synthetic_test_sets_split_into_clean_and_a_noisier_other(tmp_path):
    """n_test_other writes test_clean (what test would hold) and test_other, spoken under more noise."""
    from b2t_lib.data.synthetic_speech import CLEAN_SNR_DB, OTHER_SNR_DB, synthetic_splits

    assert [s[0] for s in synthetic_splits(4, 2, 3)] == ["train", "valid", "test"]
    assert [s[0] for s in synthetic_splits(4, 2, 3, 2)] == ["train", "valid", "test_clean", "test_other"]
    assert OTHER_SNR_DB[0] < CLEAN_SNR_DB[0] and OTHER_SNR_DB[1] < CLEAN_SNR_DB[1]  # more noise
    plain = write_synthetic_speech(tmp_path / "plain", n_train=2, n_valid=1, n_test=3, seed=5)
    split = write_synthetic_speech(tmp_path / "split", n_train=2, n_valid=1, n_test=3, n_test_other=2, seed=5)
    assert sorted(p.name for p in split.glob("*.tsv")) == ["test_clean.tsv", "test_other.tsv", "train.tsv", "valid.tsv"]
    rows = lambda path: [line.split("\t") for line in path.read_text().splitlines()[1:]]  # noqa: E731
    assert [t for _, t in rows(plain / "test.tsv")] == [t for _, t in rows(split / "test_clean.tsv")]
    for (a, _), (b, _) in zip(rows(plain / "test.tsv"), rows(split / "test_clean.tsv")):
        assert (plain / a).read_bytes() == (split / b).read_bytes()
    assert len(rows(split / "test_other.tsv")) == 2
    # the same words and speaker: only the noise level differs, and it is what the SNR says
    words = ["three", "red", "dog"]
    quiet = synthesize(words, np.random.default_rng(0), snr_db=(60.0, 60.0))
    noisy = synthesize(words, np.random.default_rng(0), snr_db=(3.0, 3.0))
    clean = synthesize(words, np.random.default_rng(0), snr_db=(200.0, 200.0))

    def snr(x):
        x, s = x / np.abs(x).max(), clean / np.abs(clean).max()
        scale = (x @ s) / (s @ s)
        return 10 * np.log10(np.sum((scale * s) ** 2) / np.sum((x - scale * s) ** 2))

    assert 55 < snr(quiet) < 65 and 1 < snr(noisy) < 5


@pytest.mark.slow
def test_the_speech_loader_gives_what_tasks_use(from_files):
    """A speech split is a DecodableDataset of b2t_lib.data.protocol: frames as src_sizes, transcripts decoded."""
    from b2t_lib.data.protocol import Dataset, DecodableDataset

    test = load_speech_split(from_files["out"], "test")
    assert isinstance(test, Dataset) and isinstance(test, DecodableDataset)
    assert len(test.src_sizes) == len(test) == len(test.references())
    assert {"id", "target", "ntokens"} <= set(test.collate(test.batches(100_000, shuffle=False)[0]))
