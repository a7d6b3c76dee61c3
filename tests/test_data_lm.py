"""Language-modeling data: WikiText-103 preparation (Hub layout and --from-files), the block dataset,
the unigram baseline and the synthetic tiny-scale corpus."""

from __future__ import annotations

import inspect
import logging
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from b2t_lib.special_tokens import EOS, PAD, UNK
from b2t_lib.data.dictionary import Dictionary
from b2t_lib.data.lm import WIKITEXT103, WIKITEXT103_VOCAB, download_wikitext103, prepare_lm_data, unigram_cross_entropy
from b2t_lib.data.lm_dataset import LMBlockDataset, lm_manifest, load_lm_split, unigram_baseline
from b2t_lib.data.synthetic_lm import generate_synthetic_lm_text, prepare_synthetic_lm
from b2t_lib.errors import run_command
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "data_scripts" / "prepare_wikitext103.py"
TRAIN = [
    " = Valkyria Chronicles = ",
    "",
    " The game was released in 2011 . ",
    " It sold well , and the game won .",
    "",
    " = = Reception = = ",
    "",
    "The <unk> praised the game and the music .",
    "the the game",
]
VALID = ["", " The game won . ", "the music <unk> ."]
TEST = [" = Sequel = ", "the game sold ."]


def _write_corpus(folder: Path, splits: dict[str, list[str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, lines in splits.items():
        (folder / f"{split}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return folder


# ---------------------------------------------------------------------- block dataset (fast)
def _blocks(stream, tokens_per_sample, context_window=0):
    return LMBlockDataset(np.asarray(stream), Dictionary(), tokens_per_sample, context_window=context_window)


def test_blocks_tile_the_stream_and_targets_are_inputs_shifted_by_one():
    stream = np.arange(10, 33)  # L = 23
    ds = _blocks(stream, 5)
    assert len(ds) == 5 and ds.sizes.tolist() == [5, 5, 5, 5, 3]
    targets = torch.cat([ds[b]["target"] for b in range(len(ds))])
    assert targets.tolist() == stream.tolist()  # every token is a target exactly once
    inputs = torch.cat([ds[b]["source"] for b in range(len(ds))])
    assert inputs.tolist() == [EOS] + stream[:-1].tolist()  # x_0 = </s>, then the stream shifted


def test_context_window_scores_every_token_once_with_history():
    stream = np.arange(10, 33)
    ds = _blocks(stream, 8, context_window=3)  # 5 new tokens per block, up to 3 of context
    assert ds.block_targets == 5 and max(ds.sizes) <= 8
    shifted = [EOS] + stream[:-1].tolist()
    scored = []
    for b in range(len(ds)):
        item = ds[b]
        keep = item["target"].ne(PAD)
        scored += item["target"][keep].tolist()
        first_target = b * 5
        context = min(3, first_target)  # block 0 has no history
        start, end = first_target - context, min(first_target + 5, len(stream))
        assert int((~keep).sum()) == context and bool(keep[context:].all())
        assert item["source"].tolist() == shifted[start:end]  # history + the block, shifted by one
        assert item["target"][context:].tolist() == stream[first_target:end].tolist()
    assert scored == stream.tolist()
    batch = ds.collate(list(range(len(ds))))
    assert batch["ntokens"] == len(stream) == ds.num_tokens
    with pytest.raises(ValueError, match="context_window"):
        _blocks(stream, 4, context_window=4)


def test_batches_are_deterministic_and_split_across_ranks():
    ds = _blocks(np.arange(4, 4 + 1000), 16)  # 63 blocks (the last has 8 tokens)
    a = ds.batches(64, seed=3, epoch=2)
    assert a == ds.batches(64, seed=3, epoch=2) and a != ds.batches(64, seed=3, epoch=3)
    assert sorted(i for batch in a for i in batch) == list(range(len(ds)))
    assert all(len(batch) * 16 <= 64 for batch in a)
    ranks = [ds.batches(64, seed=3, epoch=2, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])
    assert {i for r in ranks for batch in r for i in batch} == set(range(len(ds)))
    ordered = ds.batches(64, shuffle=False)
    assert ordered == ds.batches(64, shuffle=False, seed=9)
    batch = ds.collate(ordered[0])
    assert batch["tokens"].shape == batch["target"].shape and batch["tokens"].dtype == torch.long
    assert batch["ntokens"] == int(batch["target"].ne(PAD).sum()) and batch["nsentences"] == len(ordered[0])


def test_unigram_cross_entropy_by_hand():
    train = np.array([4, 4, 4, 5, EOS, EOS])
    valid = np.array([4, 5, 6, EOS])
    V = 8
    p = {w: (np.count_nonzero(train == w) + 1) / (len(train) + V) for w in range(V)}
    expected = -sum(math.log2(p[w]) for w in valid) / len(valid)
    assert unigram_cross_entropy(train, valid, V) == pytest.approx(expected)


def test_synthetic_text_is_deterministic_zipfian_and_wikitext_like():
    a = generate_synthetic_lm_text(train_tokens=30_000, valid_tokens=2000, test_tokens=2000, seed=0)
    assert a == generate_synthetic_lm_text(train_tokens=30_000, valid_tokens=2000, test_tokens=2000, seed=0)
    b = generate_synthetic_lm_text(train_tokens=30_000, valid_tokens=2000, test_tokens=2000, seed=1)
    assert a["train"] != b["train"]
    train = a["train"]
    assert train[0] == "" and train[1].startswith("= ") and train[1].endswith(" =")  # title line
    assert any(line.startswith("= = ") for line in train) and "" in train
    counts = Counter(w for line in train for w in line.split())
    assert all(c >= 3 for w, c in counts.items() if w != "<unk>")  # rare words -> <unk>
    assert counts["<unk>"] > 0
    ranked = [c for _, c in counts.most_common()]
    assert len(ranked) > 800 and sum(ranked[:10]) > 0.3 * sum(ranked)  # heavy head, long tail
    vocab = set(counts)
    assert all(w in vocab for line in a["valid"] for w in line.split())  # pre-mapped like WikiText


def test_cli_help_documents_every_option(capsys):
    cli = load_script(SCRIPT)
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    parser_options = {
        "--out-dir",
        "--raw-dir",
        "--from-files",
        "--parquet-dir",
        "--dataset",
        "--config",
        "--min-count",
        "--padding-factor",
        "--expected-vocab",
        "--no-checks",
        "--cache-dir",
    }
    for option in parser_options:
        assert option in text
    assert "Salesforce/wikitext" in text and "wikitext-103-v1" in text


def test_the_default_source_is_the_real_hub_dataset():
    defaults = inspect.signature(download_wikitext103).parameters
    assert (
        (defaults["dataset"].default, defaults["config"].default)
        == WIKITEXT103
        == ("Salesforce/wikitext", "wikitext-103-v1")
    )
    args = load_script(SCRIPT).parse_args([])
    assert (args.dataset, args.config, args.from_files, args.parquet_dir) == (*WIKITEXT103, None, None)


# ---------------------------------------------------------------------- the pipeline (slow)
@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    raw = _write_corpus(root / "raw", {"train": TRAIN, "valid": VALID, "test": TEST})
    args = ["--from-files", str(raw), "--out-dir", str(root / "out")]
    assert load_script(SCRIPT).main(args) == 0
    return {"raw": raw, "out": root / "out", "args": args}


@pytest.mark.slow
def test_from_files_builds_frequency_ordered_dictionary_and_streams(prepared):
    out = prepared["out"]
    dictionary = Dictionary.load(out / "dict.txt")
    assert dictionary.symbols[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    words = [w for line in TRAIN for w in line.split() if w != "<unk>"]
    counts = Counter(words)
    expected = sorted(counts, key=lambda w: (-counts[w], w))  # by count, ties alphabetical
    assert dictionary.symbols[4 : 4 + len(expected)] == expected
    assert dictionary.symbols[4 + len(expected) :] == [
        f"madeupword{i:04d}" for i in range(len(dictionary) - 4 - len(expected))
    ]
    assert len(dictionary) % 8 == 0
    manifest = lm_manifest(out)
    assert manifest["vocab_size"] == len(dictionary)
    assert manifest["vocabulary"]["word_types"] == len(counts) + 1  # <unk> is a training word here
    for split, lines in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        ds = load_lm_split(out, split, tokens_per_sample=4)
        expected_ids = [i for line in lines for i in [dictionary.index(w) for w in line.split()] + [EOS]]
        assert ds.stream.tolist() == expected_ids  # blank lines give a lone </s>
        assert manifest["stats"][split]["tokens"] == len(expected_ids)
        assert manifest["stats"][split]["lines"] == len(lines)
        batches = ds.batches(8, shuffle=False)
        assert sum(ds.collate(b)["ntokens"] for b in batches) == len(expected_ids)
    train_ids = load_lm_split(out, "train", tokens_per_sample=4).stream
    for split in ("valid", "test"):
        ids = load_lm_split(out, split, tokens_per_sample=4).stream
        bits = unigram_cross_entropy(train_ids, ids, len(dictionary))
        assert unigram_baseline(out, split)["bits_per_token"] == pytest.approx(bits, abs=1e-5)
        assert unigram_baseline(out, split)["ppl"] == pytest.approx(2**bits, rel=1e-5)


@pytest.mark.slow
def test_rerun_skips_and_damage_is_rebuilt(prepared, caplog):
    out, cli = prepared["out"], load_script(SCRIPT)
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    caplog.set_level(logging.INFO, logger="b2t_lib.data")
    assert cli.main(prepared["args"]) == 0
    assert "up to date, nothing to do" in caplog.text
    assert mtimes == {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}

    final = out / "valid.npy"
    good = final.read_bytes()
    damaged = bytearray(good)
    damaged[-1] ^= 0xFF  # same size, one byte changed
    final.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="checksum"):
        load_lm_split(out, "valid", tokens_per_sample=4)
    caplog.clear()
    assert cli.main(prepared["args"]) == 0
    assert "step binarize-valid: running" in caplog.text
    assert "step dictionary: up to date" in caplog.text and "step binarize-train: up to date" in caplog.text
    assert final.read_bytes() == good

    final.write_bytes(good[: len(good) // 2])  # truncated, and the run died before the manifest
    (out / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match="not a prepared"):
        load_lm_split(out, "valid", tokens_per_sample=4)
    caplog.clear()
    assert cli.main(prepared["args"]) == 0
    assert "step binarize-valid: running" in caplog.text and final.read_bytes() == good

    # a changed raw file invalidates what depends on it
    raw_test = prepared["raw"] / "test.txt"
    original = raw_test.read_text(encoding="utf-8")
    raw_test.write_text(original + "the game .\n", encoding="utf-8")
    caplog.clear()
    assert cli.main(prepared["args"]) == 0
    assert "step binarize-test: running" in caplog.text and "step binarize-valid: up to date" in caplog.text
    assert lm_manifest(out)["stats"]["test"]["lines"] == len(TEST) + 1
    raw_test.write_text(original, encoding="utf-8")
    assert cli.main(prepared["args"]) == 0


@pytest.mark.slow
def test_errors_name_the_file_and_line(tmp_path, capsys):
    good = {"train": ["the cat sat .", "the dog sat .", "a dog ."], "valid": ["the dog ."], "test": ["the dog sat ."]}
    # a missing split
    raw = _write_corpus(tmp_path / "missing", {k: v for k, v in good.items() if k != "test"})
    with pytest.raises(FileNotFoundError, match=r"test\.txt is missing"):
        prepare_lm_data(raw, tmp_path / "o1")
    # an empty file
    raw = _write_corpus(tmp_path / "empty", good)
    (raw / "valid.txt").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match=r"valid\.txt is empty"):
        prepare_lm_data(raw, tmp_path / "o2")
    # a valid/test word with nothing to map it to (no <unk> in training)
    raw = _write_corpus(tmp_path / "oov", {**good, "test": ["the dog sat .", "the zebra sat ."]})
    with pytest.raises(ValueError, match=r"the word 'zebra' is not in the training vocabulary.*test\.txt:2\)"):
        prepare_lm_data(raw, tmp_path / "o3")
    assert not (tmp_path / "o3" / "manifest.json").exists() and not (tmp_path / "o3" / "test.npy").exists()
    assert run_command(load_script(SCRIPT).main, ["--from-files", str(raw), "--out-dir", str(tmp_path / "o3")]) == 2
    assert "test.txt:2" in capsys.readouterr().err
    # ... with --min-count 2 training has <unk> ('cat' and 'a' are seen once), and the unknown word maps to it
    out = prepare_lm_data(raw, tmp_path / "o4", min_count=2)
    test = load_lm_split(out, "test", tokens_per_sample=8)
    dictionary = test.dictionary
    assert "cat" not in dictionary and "a" not in dictionary and "the" in dictionary
    assert test.stream.tolist()[-5:] == [
        dictionary.index("the"),
        UNK,
        dictionary.index("sat"),
        dictionary.index("."),
        EOS,
    ]
    assert lm_manifest(out)["vocabulary"]["train_unk"] == 2
    assert lm_manifest(out)["stats"]["train"]["unk"] == 2
    # a special symbol used as a word
    raw = _write_corpus(tmp_path / "special", {**good, "train": ["the cat", "a </s> b"]})
    with pytest.raises(ValueError, match=r"the word '</s>'.*train\.txt:2\)"):
        prepare_lm_data(raw, tmp_path / "o5")
    # the vocabulary check
    raw = _write_corpus(tmp_path / "count", good)
    with pytest.raises(ValueError, match="expected 267,735"):
        prepare_lm_data(raw, tmp_path / "o6", expected_vocab=WIKITEXT103_VOCAB)
    n_words = len({w for line in good["train"] for w in line.split()})
    assert prepare_lm_data(raw, tmp_path / "o6", expected_vocab=n_words + 1).is_dir()


def _write_parquet(folder: Path, splits: dict[str, list[str]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    for hub_split, rows in splits.items():
        pq.write_table(pa.table({"text": rows}), folder / f"{hub_split}-00000-of-00001.parquet")


# WikiText rows as the Hub stores them: non-blank rows keep a trailing "\n", blank rows are "".
HUB_ROWS = {
    "train": [""] + [line + "\n" for line in TRAIN[:4]] + ["", ""] + [line + "\n" for line in TRAIN[5:]],
    "validation": [line + "\n" if line else "" for line in VALID],
    "test": [line + "\n" if line else "" for line in TEST],
}


@pytest.mark.slow
def test_hub_layout_through_parquet_files(tmp_path, capsys):
    parquet = tmp_path / "wikitext-103-v1"
    _write_parquet(parquet, HUB_ROWS)
    out = tmp_path / "out"
    cli = load_script(SCRIPT)
    # the real WikiText-103 row counts are checked by default: a small copy is refused ...
    assert run_command(cli.main, ["--parquet-dir", str(parquet), "--out-dir", str(out)]) == 2
    assert "expected 1,801,350" in capsys.readouterr().err
    with pytest.raises(ValueError, match="expected 1,801,350"):
        download_wikitext103(
            tmp_path / "raw_checked", dataset="parquet", config=None, data_files=cli.parquet_files(parquet)
        )
    # ... and accepted with --no-checks
    assert cli.main(["--parquet-dir", str(parquet), "--out-dir", str(out), "--no-checks"]) == 0
    printed = capsys.readouterr().out
    assert "unigram baseline on valid" in printed and "end-of-line" in printed
    raw = out / "raw"
    for split, hub_split in (("train", "train"), ("valid", "validation"), ("test", "test")):
        lines = (raw / f"{split}.txt").read_text(encoding="utf-8").split("\n")[:-1]
        assert lines == [" ".join(row.split()) for row in HUB_ROWS[hub_split]]  # one line per row, blanks kept
    dictionary = Dictionary.load(out / "dict.txt")
    ds = load_lm_split(out, "train", tokens_per_sample=16)
    expected = [i for row in HUB_ROWS["train"] for i in [dictionary.index(w) for w in row.split()] + [EOS]]
    assert ds.stream.tolist() == expected
    assert int(np.count_nonzero(np.asarray(ds.stream) == EOS)) == len(HUB_ROWS["train"])


@pytest.mark.slow
def test_default_hub_call_goes_through_load_dataset(tmp_path, monkeypatch):
    """Without the network: the default call asks `datasets` for Salesforce/wikitext wikitext-103-v1
    (served here from the local parquet files) and checks the row counts."""
    import datasets

    parquet = tmp_path / "pq"
    _write_parquet(parquet, HUB_ROWS)
    real_load = datasets.load_dataset
    calls = []

    def fake_load(path, name=None, *, data_files=None, split=None, cache_dir=None):
        calls.append((path, name, split))
        files = {s: str(parquet / f"{s}-00000-of-00001.parquet") for s in HUB_ROWS}
        return real_load("parquet", data_files=files, split=split, cache_dir=str(tmp_path / "cache"))

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    counts = {"train": len(HUB_ROWS["train"]), "valid": len(VALID), "test": len(TEST)}
    raw = download_wikitext103(tmp_path / "raw", expected_rows=counts)
    assert calls == [("Salesforce/wikitext", "wikitext-103-v1", s) for s in ("train", "validation", "test")]
    assert (raw / "valid.txt").read_text(encoding="utf-8").split("\n")[:-1] == [" ".join(v.split()) for v in VALID]
    calls.clear()
    download_wikitext103(tmp_path / "raw", expected_rows=counts)  # finished steps are skipped
    assert calls == []


@pytest.mark.slow
def test_prepare_synthetic_lm_is_deterministic_with_meaningful_bands(tmp_path):
    kwargs = dict(train_tokens=60_000, valid_tokens=3000, test_tokens=3000)
    a = prepare_synthetic_lm(tmp_path / "a", seed=0, **kwargs)
    b = prepare_synthetic_lm(tmp_path / "b", seed=0, **kwargs)
    c = prepare_synthetic_lm(tmp_path / "c", seed=1, **kwargs)
    ma, mb, mc = (lm_manifest(p) for p in (a, b, c))
    assert ma["files"] == mb["files"] and ma["files"]["train.npy"] != mc["files"]["train.npy"]
    train = load_lm_split(a, "train", tokens_per_sample=128)
    assert len(train) > 400 and ma["vocab_size"] > 1000
    ids = np.asarray(train.stream)
    band_mass = [np.mean((ids >= lo) & (ids < hi)) for lo, hi in ((0, 200), (200, 1000), (1000, ma["vocab_size"]))]
    assert band_mass[0] > 0.6 and 0.05 < band_mass[1] < 0.35 and 0.01 < band_mass[2] < 0.2
    counts = np.bincount(ids, minlength=ma["vocab_size"])
    assert np.all(np.diff(counts[4 : ma["vocabulary"]["kept_types"] + 3]) <= 0)  # ids in frequency order
    assert 100 < ma["unigram"]["valid"]["ppl"] < 1000


@pytest.mark.slow
def test_the_lm_loader_gives_what_training_uses(prepared):
    """An LM split is a Dataset of b2t_lib.data.protocol (batches, collate); it is not decoded by search."""
    from b2t_lib.data.protocol import Dataset, DecodableDataset

    blocks = load_lm_split(prepared["out"], "valid", tokens_per_sample=8)
    assert isinstance(blocks, Dataset) and not isinstance(blocks, DecodableDataset)
    assert {"target", "ntokens"} <= set(blocks.collate(blocks.batches(64, shuffle=False)[0]))
