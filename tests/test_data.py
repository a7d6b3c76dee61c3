"""The MT data pipeline end to end: ``prepare_wmt14_en_de.py --from-files`` on a small generated
corpus, re-runs that skip or repair, and the prepared data set (batching, collation, decoding)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from b2t_lib.special_tokens import BOS, EOS, PAD, UNK
from b2t_lib.data import load_translation_split, prepare_synthetic_mt, test_split_names
from b2t_lib.data.synthetic import synthetic_splits
from b2t_lib.data.text import moses_detokenize, moses_tokenize
from conftest import load_script

pytestmark = pytest.mark.slow  # runs the data pipeline

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "data_scripts" / "prepare_wmt14_en_de.py"
# Lines that Moses normalization and tokenization really change (quotes, apostrophes, hyphens,
# currency, unicode dashes); repeated in train so all their characters are in the BPE alphabet.
SPECIAL = [
    (
        'The "old" dog\'s well-known house costs $3.50 \u2013 really?',
        "Das \u201ealte\u201c Haus kostet 3,50 $ \u2013 wirklich?",
    ),
    ("It's a mother-in-law's (big) car, isn't it?", "Es ist das (gro\u00dfe) Auto der Schwieger-Mutter, nicht?"),
]

# Training pairs that clean-corpus-n (1-80 tokens, ratio <= 1.5) must drop.
BAD_PAIRS = [
    ("The dog sleeps.", ""),
    ("The big red dog sees a small cat today.", "Hund."),
    (" ".join(["dog"] * 85) + ".", " ".join(["Hund"] * 85) + "."),
]


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Raw files train/valid/test/newstest2099.{en,de} and the data set prepared from them."""
    root = tmp_path_factory.mktemp("mt")
    raw, out = root / "raw", root / "prepared"
    raw.mkdir()
    splits = synthetic_splits(n_train=1200, n_valid=60, n_test=60, seed=7)
    splits["train"] += SPECIAL * 20 + BAD_PAIRS
    splits["test"] += SPECIAL
    splits["newstest2099"] = splits["valid"][:30]
    for split, pairs in splits.items():
        _write(raw / f"{split}.en", [s for s, _ in pairs])
        _write(raw / f"{split}.de", [t for _, t in pairs])
    args = ["--from-files", str(raw), "--out-dir", str(out), "--bpe-vocab-size", "400", "--workers", "1"]
    assert load_script(SCRIPT).main(args) == 0
    return {"raw": raw, "out": out, "args": args, "splits": splits}


def test_from_files_produces_all_splits_and_round_trips_text(corpus):
    out = corpus["out"]
    assert test_split_names(out) == ["newstest2099", "test"]
    test = load_translation_split(out, "test")
    raw_de = corpus["splits"]["test"]
    assert len(test) == len(raw_de) and test.references() == [t for _, t in raw_de]
    assert [test.source_text(i) for i in range(len(test))] == [s for s, _ in raw_de]
    assert test.src_sizes.dtype.kind == "i" and (test.tgt_sizes >= 2).all()
    checked = 0
    for i, (src, tgt) in enumerate(raw_de):
        ids = test.encode(tgt, "de")
        assert ids == test.tgt[i].tolist()  # encode() is the pipeline that made the data
        if UNK in ids:  # a BPE piece never seen in training
            continue
        expected = moses_detokenize(moses_tokenize(tgt, "de"), "de")
        assert test.decode(ids) == expected
        assert test.decode(test.encode(src), "en") == moses_detokenize(moses_tokenize(src, "en"), "en")
        checked += 1
    assert checked >= 0.9 * len(raw_de)
    # The special lines: normalization changed them, and decode gives the normalized form.
    i = len(raw_de) - 2
    decoded = test.decode(test.tgt[i])
    assert decoded != raw_de[i][1] and '"alte"' in decoded and "\u201e" not in decoded and "\u2013" not in decoded
    # BPE really splits words at this vocabulary size.
    pieces = test.dictionary.string(test.tgt[0].tolist())
    assert "@@" in pieces


def test_training_split_is_cleaned_and_bpe_is_joint(corpus):
    train = load_translation_split(corpus["out"], "train")
    assert len(train) == len(corpus["splits"]["train"]) - len(BAD_PAIRS)
    kept = {train.source_text(i) for i in range(len(train))}
    assert not kept & {src for src, _ in BAD_PAIRS}
    valid = load_translation_split(corpus["out"], "valid")  # only training data is cleaned
    assert len(valid) == len(corpus["splits"]["valid"])
    symbols = set(train.dictionary.symbols)
    assert any(s.startswith("Der") or s.startswith("Die") for s in symbols)  # German pieces
    assert any(s.startswith("the") for s in symbols)  # and English ones
    assert len(train.dictionary) % 8 == 0


def test_rerun_skips_everything(corpus, caplog):
    out = corpus["out"]
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    caplog.set_level(logging.INFO, logger="b2t_lib.data")
    assert load_script(SCRIPT).main(corpus["args"]) == 0
    assert "up to date, nothing to do" in caplog.text
    assert mtimes == {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    # Also as a real command line, as a user runs it.
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *corpus["args"]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stderr


def test_damaged_outputs_are_detected_and_rebuilt(corpus, caplog):
    out = corpus["out"]
    final = out / "train.de.npy"
    good = final.read_bytes()
    caplog.set_level(logging.INFO, logger="b2t_lib.data")

    # 1. A truncated binary: the loader refuses it, a re-run rebuilds only that step.
    final.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="damaged"):
        load_translation_split(out, "train")
    caplog.clear()
    assert load_script(SCRIPT).main(corpus["args"]) == 0
    assert "step binarize-train: running" in caplog.text
    assert "step tokenize-train: up to date" in caplog.text and "step bpe-learn: up to date" in caplog.text
    assert final.read_bytes() == good

    # 2. Same size, one byte changed (a checksum catches it, a size check would not).
    damaged = bytearray(good)
    damaged[-1] ^= 0xFF
    final.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="checksum"):
        load_translation_split(out, "train")
    caplog.clear()
    load_script(SCRIPT).main(corpus["args"])
    assert "step binarize-train: running" in caplog.text and final.read_bytes() == good

    # 3. A damaged intermediate file: its step reruns; the identical result lets later steps skip.
    seg = out / "work" / "bpe" / "train.en"
    seg.write_text(seg.read_text(encoding="utf-8").replace("@@", "##", 1), encoding="utf-8")
    (out / "manifest.json").unlink()  # as if a run had died before finishing
    caplog.clear()
    load_script(SCRIPT).main(corpus["args"])
    assert "step bpe-apply-train: running" in caplog.text
    assert "step binarize-train: up to date" in caplog.text
    assert load_translation_split(out, "train") is not None


def test_max_pairs_takes_a_seeded_subset(corpus, tmp_path):
    cli = load_script(SCRIPT)
    args = ["--from-files", str(corpus["raw"]), "--bpe-vocab-size", "400", "--max-pairs", "300", "--workers", "1"]
    cli.main(args + ["--out-dir", str(tmp_path / "a")])
    cli.main(args + ["--out-dir", str(tmp_path / "b"), "--seed", "1"])
    a, b = (load_translation_split(tmp_path / name, "train") for name in "ab")
    assert 300 - len(BAD_PAIRS) <= len(a) <= 300  # subset first, then cleaning
    train_raw = set(corpus["splits"]["train"])
    pairs_a = [(a.source_text(i), a.target_text(i)) for i in range(len(a))]
    pairs_b = [(b.source_text(i), b.target_text(i)) for i in range(len(b))]
    assert set(pairs_a) <= train_raw and set(pairs_b) <= train_raw and pairs_a != pairs_b
    assert len(load_translation_split(tmp_path / "a", "test")) == len(corpus["splits"]["test"])  # tests untouched


def test_collate_pads_right_and_shifts_the_decoder_input(corpus):
    ds = load_translation_split(corpus["out"], "valid")
    indices = ds.batches(200, shuffle=False)[-1][:3] + [0]
    batch = ds.collate(indices)
    B = len(indices)
    S, T = int(ds.src_sizes[indices].max()), int(ds.tgt_sizes[indices].max())
    assert batch["src_tokens"].shape == (B, S) and batch["target"].shape == (B, T)
    assert batch["prev_output_tokens"].shape == (B, T) and batch["src_tokens"].dtype == torch.long
    assert batch["id"].tolist() == indices and batch["nsentences"] == B
    assert batch["src_lengths"].tolist() == ds.src_sizes[indices].tolist()
    assert batch["ntokens"] == int((batch["target"] != PAD).sum()) == int(ds.tgt_sizes[indices].sum())
    for row, i in enumerate(indices):
        n_src, n_tgt = int(ds.src_sizes[i]), int(ds.tgt_sizes[i])
        assert batch["src_tokens"][row, n_src - 1] == EOS and (batch["src_tokens"][row, n_src:] == PAD).all()
        assert batch["target"][row, n_tgt - 1] == EOS and (batch["target"][row, n_tgt:] == PAD).all()
        assert batch["target"][row, :n_tgt].tolist() == ds.tgt[i].tolist()
        prev = batch["prev_output_tokens"][row]
        assert prev[0] == EOS and prev[1:n_tgt].tolist() == batch["target"][row, : n_tgt - 1].tolist()
        assert (prev[n_tgt:] == PAD).all()
        assert EOS not in batch["src_tokens"][row, : n_src - 1].tolist()


def test_decode_strips_specials_and_stops_at_eos(corpus):
    ds = load_translation_split(corpus["out"], "test")
    ids = ds.tgt[0].tolist()  # ends with EOS
    text = ds.references()[0]
    assert ds.decode(ids) == text
    assert ds.decode(torch.tensor([EOS, *ids, PAD, PAD])) == text  # fairseq hypothesis layout
    assert ds.decode([BOS, *ids[:-1], EOS, *ids[:3]]) == text  # garbage after EOS ignored
    assert ds.decode([]) == ""


def test_dataset_batches_follow_the_token_rule(corpus):
    ds = load_translation_split(corpus["out"], "train")
    batches = ds.batches(300, seed=1, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(len(ds)))
    assert all(len(b) * max(ds.src_sizes[b].max(), ds.tgt_sizes[b].max()) <= 300 for b in batches)
    assert ds.batches(300, seed=1, epoch=0) == batches != ds.batches(300, seed=1, epoch=1)


def test_load_errors_say_what_to_do(tmp_path, corpus):
    with pytest.raises(FileNotFoundError, match="prepare"):
        load_translation_split(tmp_path, "train")
    with pytest.raises(KeyError, match="newstest2099"):
        load_translation_split(corpus["out"], "newstest2014")


def test_prepare_synthetic_mt_is_deterministic(tmp_path):
    a = prepare_synthetic_mt(tmp_path / "a", n_train=400, n_valid=20, n_test=20, seed=5, bpe_vocab_size=300)
    b = prepare_synthetic_mt(tmp_path / "b", n_train=400, n_valid=20, n_test=20, seed=5, bpe_vocab_size=300)
    for name in ("train.en.npy", "train.de.npy", "test.de.raw.npy", "dict.txt", "bpe.codes"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert test_split_names(a) == ["test"]
    ds = load_translation_split(a, "test")
    assert len(ds) == 20 and ds.decode(ds.tgt[0]) == ds.references()[0]


def test_the_translation_loader_gives_what_tasks_use(corpus):
    """The written interface (b2t_lib.data.protocol): batches and collate for training, and for decoding
    src_sizes, decode and references."""
    from b2t_lib.data.protocol import Dataset, DecodableDataset

    test = load_translation_split(corpus["out"], "test")
    assert isinstance(test, Dataset) and isinstance(test, DecodableDataset)
    batch = test.collate(test.batches(200, shuffle=False)[0])
    assert {"id", "target", "ntokens"} <= set(batch) and len(test.src_sizes) == len(test) == len(test.references())
