"""Headline data: ``prepare_gigaword.py`` on a small zip with the real Gigaword member layout (the
real download code path, with ``hf_hub_download`` standing in for the Hub), ``--from-files`` on a
small generated corpus, and every bad input, which must fail with its file and line and leave an
already prepared data set untouched."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from b2t_lib.special_tokens import UNK
from b2t_lib.data import gigaword, load_translation_split, test_split_names
from b2t_lib.data.translation import _count_lines
from b2t_lib.data.summarization import HeadlineFileError, check_headline_files
from b2t_lib.data.synthetic_headlines import headline_splits
from b2t_lib.data.text import keep_pair, rush_normalize, tokenize_line
from b2t_lib.errors import run_command
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "data_scripts" / "prepare_gigaword.py"
SMALL = {"train": 400, "dev": 40, "test": 30}  # pairs per split of the small archive


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _snapshot(folder: Path) -> dict:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


# ---------------------------------------------------------------------------------------- the zip
def _gigaword_like_pairs() -> dict[str, list[tuple[str, str]]]:
    """Gigaword-shaped pairs (tokenized, lower case, '#' digits) with Rush's '<unk>' in train/dev,
    'UNK' in test, and stray spaces that the extraction strips."""
    splits = headline_splits(n_train=SMALL["train"], n_valid=SMALL["dev"], n_test=SMALL["test"], seed=11)
    out = {}
    for theirs, ours in (("train", "train"), ("dev", "valid"), ("test", "test")):
        unk = "UNK" if theirs == "test" else "<unk>"
        pairs = []
        for i, (article, headline) in enumerate(splits[ours]):
            if i % 7 == 0:
                article = article.replace(" the ", f" the {unk} ", 1)
                headline = f"{unk} {headline}"
            if i % 5 == 0:
                article, headline = f"  {article} ", f" {headline}  "
            pairs.append((article, headline))
        out[theirs] = pairs
    return out


def _make_zip(path: Path, pairs: dict, prefix: str = "org_data/") -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(prefix, "")  # the folder entry
        for split, rows in pairs.items():
            archive.writestr(f"{prefix}{split}.src.txt", "".join(a + "\n" for a, _ in rows))
            archive.writestr(f"{prefix}{split}.tgt.txt", "".join(h + "\n" for _, h in rows))
    return path


@pytest.fixture(scope="module")
def gigaword_run(tmp_path_factory):
    """The script's main(), download path: hf_hub_download serves a small zip of the real layout."""
    root = tmp_path_factory.mktemp("gigaword")
    pairs = _gigaword_like_pairs()
    archive = _make_zip(root / "ggw_data.zip", pairs)
    calls = []

    def fake_hf_hub_download(repo_id, filename, *, repo_type=None, cache_dir=None):
        calls.append((repo_id, filename, repo_type))
        return str(archive)

    with pytest.MonkeyPatch.context() as mp:
        import huggingface_hub

        mp.setattr(huggingface_hub, "hf_hub_download", fake_hf_hub_download)
        mp.setattr(gigaword, "GIGAWORD_PAIRS", SMALL)  # the count check stays on
        out = root / "prepared"
        assert load_script(SCRIPT).main(["--out-dir", str(out), "--bpe-vocab-size", "300"]) == 0
    return {"out": out, "pairs": pairs, "calls": calls, "zip": archive}


@pytest.mark.slow
def test_download_path_reads_the_hub_zip_and_prepares_all_splits(gigaword_run):
    out, pairs = gigaword_run["out"], gigaword_run["pairs"]
    assert gigaword_run["calls"] == [("Harvard/gigaword", "data/ggw_data.zip", "dataset")]
    raw = out / "raw"
    # Extraction as the dataset script: stripped lines, '<unk>' -> 'UNK' in train and dev.
    train_articles = (raw / "train.article").read_text().splitlines()
    assert train_articles == [a.strip().replace("<unk>", "UNK") for a, _ in pairs["train"]]
    assert (raw / "valid.headline").read_text().splitlines() == [
        h.strip().replace("<unk>", "UNK") for _, h in pairs["dev"]
    ]
    assert "<unk>" not in (raw / "valid.article").read_text() and "UNK" in (raw / "test.headline").read_text()

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"] == "none" and manifest["references"] == "tokenized"
    assert manifest["params"]["max_ratio"] is None and manifest["params"]["max_len"] is None
    assert (manifest["src_lang"], manifest["tgt_lang"]) == ("article", "headline")
    assert test_split_names(out) == ["test"]
    # No pair is dropped: headlines are far shorter than articles, the MT ratio filter is off.
    train = load_translation_split(out, "train")
    assert len(train) == SMALL["train"]
    assert all(train.src_sizes[i] > 1.5 * train.tgt_sizes[i] for i in range(20))
    # Joint BPE: one dictionary with pieces of both sides, words really split.
    assert "@@" in train.dictionary.string(train.src[0].tolist())

    test = load_translation_split(out, "test")
    references = [h.strip() for _, h in pairs["test"]]
    assert test.references() == references
    assert [test.source_text(i) for i in range(len(test))] == [a.strip() for a, _ in pairs["test"]]
    checked = 0
    for i, reference in enumerate(references):
        ids = test.tgt[i].tolist()
        assert test.encode(reference, "headline") == ids  # encode() is the pipeline
        if UNK not in ids:
            assert test.decode(ids) == reference  # BPE removed, no Moses detokenization
            checked += 1
    assert checked >= 0.8 * len(references)


@pytest.mark.slow
def test_download_path_rerun_skips_everything(gigaword_run, caplog, monkeypatch):
    out = gigaword_run["out"]
    before = _snapshot(out)
    monkeypatch.setattr(gigaword, "GIGAWORD_PAIRS", SMALL)
    caplog.set_level(logging.INFO, logger="b2t_lib.data")
    args = ["--out-dir", str(out), "--bpe-vocab-size", "300", "--zip", str(gigaword_run["zip"])]
    assert load_script(SCRIPT).main(args) == 0
    assert "nothing to do" in caplog.text and "extract-train: up to date" in caplog.text
    assert _snapshot(out) == before


def test_real_counts_are_checked_and_a_mismatch_names_what_was_found(tmp_path):
    archive = _make_zip(tmp_path / "ggw_data.zip", _gigaword_like_pairs())
    with pytest.raises(
        RuntimeError,
        match=r"train split has .*org_data/train.src.txt: 400 lines.*"
        r"expected 3,803,957 pairs",
    ):
        gigaword.extract_gigaword(archive, tmp_path / "raw")
    assert not (tmp_path / "raw" / "train.article").exists()  # nothing half-written is left
    assert gigaword.GIGAWORD_PAIRS == {"train": 3_803_957, "dev": 189_651, "test": 1_951}
    # Skipping the check is explicit (for archives of your own).
    raw = gigaword.extract_gigaword(archive, tmp_path / "raw", check_counts=False)
    assert _count_lines(raw / "test.headline") == SMALL["test"]


def test_wrong_member_layout_is_reported_with_the_members_found(tmp_path):
    pairs = _gigaword_like_pairs()
    archive = _make_zip(tmp_path / "flat.zip", pairs, prefix="data/")
    with pytest.raises(
        RuntimeError,
        match=r"expected layout org_data/\{train,dev,test\}.*missing: "
        r"org_data/train.src.txt.*holds: data/, data/train.src.txt",
    ):
        gigaword.extract_gigaword(archive, tmp_path / "raw")
    # One leading folder above org_data/ is accepted.
    nested = _make_zip(tmp_path / "nested.zip", pairs, prefix="ggw_data/org_data/")
    assert gigaword.gigaword_members(zipfile.ZipFile(nested).namelist())["dev.tgt"] == "ggw_data/org_data/dev.tgt.txt"
    (tmp_path / "broken.zip").write_bytes(b"not a zip")
    with pytest.raises(RuntimeError, match="not a zip archive"):
        gigaword.extract_gigaword(tmp_path / "broken.zip", tmp_path / "raw2")


def test_hub_failure_says_what_to_do(monkeypatch, tmp_path):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise ConnectionError("huggingface.co is not reachable")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(RuntimeError, match=r"ConnectionError(.|\n)*--zip PATH(.|\n)*--from-files"):
        gigaword.download_gigaword(tmp_path / "raw")


# ------------------------------------------------------------------------------ --from-files
RAW_SPECIAL = [
    (
        "Australia's current account deficit shrank by a record 7.07 billion dollars (6.04 billion US) "
        "in the June quarter, figures released Monday showed.",
        "Australian current account deficit narrows sharply",
    ),
    (
        "\u201cWe won't stop,\u201d the Mayor of New York said on Tuesday \u2013 again.",
        "Mayor says \u201cwon't stop\u201d",
    ),
]


def _raw_text(text: str, rng: random.Random) -> str:
    """A generated (normalized) line turned into raw text: capitals, real digits, a final period."""
    words = ["".join(str(rng.randint(1, 9)) if c == "#" else c for c in w) for w in text.split()]
    raw = " ".join(words).replace(" ,", ",").replace(" .", ".")
    return raw[0].upper() + raw[1:]


def _raw_corpus(folder: Path) -> dict[str, list[tuple[str, str]]]:
    rng = random.Random(5)
    splits = headline_splits(n_train=300, n_valid=30, n_test=25, seed=3)
    splits["duc2004"] = splits["valid"][:10]
    raw = {name: [(_raw_text(a, rng), _raw_text(h, rng)) for a, h in pairs] for name, pairs in splits.items()}
    raw["train"] += RAW_SPECIAL * 10
    raw["test"] += RAW_SPECIAL
    folder.mkdir(parents=True, exist_ok=True)
    for name, pairs in raw.items():
        _write(folder / f"{name}.article", [a for a, _ in pairs])
        _write(folder / f"{name}.headline", [h for _, h in pairs])
    return raw


@pytest.fixture(scope="module")
def files_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("headline_files")
    raw = _raw_corpus(root / "raw")
    args = [
        "--from-files",
        str(root / "raw"),
        "--out-dir",
        str(root / "prepared"),
        "--bpe-vocab-size",
        "300",
        "--workers",
        "1",
    ]
    assert load_script(SCRIPT).main(args) == 0
    return {"root": root, "raw": raw, "out": root / "prepared", "args": args}


@pytest.mark.slow
def test_from_files_normalizes_raw_text_like_rush(files_run):
    out, raw = files_run["out"], files_run["raw"]
    assert test_split_names(out) == ["duc2004", "test"]
    test = load_translation_split(out, "test")
    assert test.tokenizer == "rush"
    references = test.references()
    assert references == [rush_normalize(h) for _, h in raw["test"]]
    assert references[-2] == "australian current account deficit narrows sharply"
    assert test.source_text(len(test) - 2) == (
        "australia 's current account deficit shrank by a record #.## billion "
        "dollars -lrb- #.## billion us -rrb- in the june quarter , figures "
        "released monday showed ."
    )
    assert references[-1] == "mayor says `` wo n't stop ''"
    assert all(r == r.lower() and not any(c.isdigit() for c in r) for r in references)
    assert any("#" in r for r in references)
    for i, (article, headline) in enumerate(raw["test"]):
        assert test.encode(article) == test.src[i].tolist()  # raw text -> the stored ids
        ids = test.tgt[i].tolist()
        if UNK not in ids:
            assert test.decode(ids) == references[i]
    assert len(load_translation_split(out, "train")) == len(raw["train"])  # nothing filtered


@pytest.mark.slow
def test_from_files_rerun_skips_everything_as_a_command_line(files_run):
    out = files_run["out"]
    before = _snapshot(out)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *files_run["args"]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stderr
    assert _snapshot(out) == before


@pytest.mark.slow
def test_no_normalize_keeps_the_text_as_given(files_run, tmp_path):
    out = tmp_path / "plain"
    args = [
        "--from-files",
        str(files_run["root"] / "raw"),
        "--out-dir",
        str(out),
        "--bpe-vocab-size",
        "300",
        "--no-normalize",
    ]
    assert load_script(SCRIPT).main(args) == 0
    test = load_translation_split(out, "test")
    assert test.tokenizer == "none"
    assert test.references() == [" ".join(h.split()) for _, h in files_run["raw"]["test"]]
    assert test.references()[-2] == "Australian current account deficit narrows sharply"


def _break_misaligned(raw: Path) -> str:
    lines = (raw / "valid.headline").read_text().splitlines()
    _write(raw / "valid.headline", lines[:-1])
    return (
        rf"valid.article has {len(lines)} lines but .*valid.headline has {len(lines) - 1} lines: the files must "
        rf"be aligned line by line \(line {len(lines)} of .*valid.article has no partner\)"
    )


def _break_empty(raw: Path) -> str:
    (raw / "test.headline").write_text("")
    return r"test.headline is empty"


def _break_missing_valid(raw: Path) -> str:
    (raw / "valid.article").unlink()
    (raw / "valid.headline").unlink()
    return r"has no valid split: add valid.article and valid.headline"


def _break_partner(raw: Path) -> str:
    (raw / "duc2004.headline").unlink()
    return r"duc2004.article has no partner .*duc2004.headline"


def _break_no_test(raw: Path) -> str:
    for name in ("test", "duc2004"):
        for side in ("article", "headline"):
            (raw / f"{name}.{side}").unlink()
    return r"has no test split"


def _break_utf8(raw: Path) -> str:
    lines = (raw / "train.article").read_bytes().split(b"\n")
    lines[2] = b"Caf\xe9 " + lines[2]  # Latin-1, not UTF-8
    (raw / "train.article").write_bytes(b"\n".join(lines))
    return r"train.article, line 3: not UTF-8 \(byte 0xe9 at column 4\)"


def _break_blank(raw: Path) -> str:
    lines = (raw / "train.headline").read_text().splitlines()
    lines[4] = "   "
    _write(raw / "train.headline", lines)
    return r"train.headline, line 5 is blank"


@pytest.mark.slow
@pytest.mark.parametrize(
    "breakage",
    [_break_misaligned, _break_empty, _break_missing_valid, _break_partner, _break_no_test, _break_utf8, _break_blank],
    ids=["misaligned", "empty", "missing-split", "no-partner", "no-test", "not-utf8", "blank"],
)
def test_bad_inputs_fail_with_file_and_line_and_leave_prepared_data_untouched(files_run, tmp_path, capsys, breakage):
    bad = tmp_path / "bad"
    shutil.copytree(files_run["root"] / "raw", bad)
    expected = breakage(bad)
    out = files_run["out"]
    before = _snapshot(out)
    args = ["--from-files", str(bad), "--out-dir", str(out), "--bpe-vocab-size", "300", "--workers", "1"]
    assert run_command(load_script(SCRIPT).main, args) == 2
    message = capsys.readouterr().err
    assert "cannot prepare headline data" in message
    assert re.search(expected, message), message
    assert _snapshot(out) == before  # the prepared data set was not touched
    assert len(load_translation_split(out, "test")) == len(files_run["raw"]["test"])


def test_check_headline_files_lists_every_problem(tmp_path):
    _write(tmp_path / "train.article", ["a b c", "d e f"])
    _write(tmp_path / "train.headline", ["a", ""])
    _write(tmp_path / "valid.article", ["a b c"])
    _write(tmp_path / "valid.headline", ["a", "b"])
    (tmp_path / "test.article").write_bytes(b"ok\n\xff\xfe\n")
    _write(tmp_path / "test.headline", ["x", "y"])
    _write(tmp_path / "extra.headline", ["z"])
    with pytest.raises(HeadlineFileError) as info:
        check_headline_files(tmp_path)
    message = str(info.value)
    for expected in (
        "extra.headline has no partner",
        "train.headline, line 2 is blank",
        "valid.article has 1 line but",
        "line 2 of",
        "test.article, line 2: not UTF-8 (byte 0xff",
    ):
        assert expected in message, message
    with pytest.raises(HeadlineFileError, match="is not a folder"):
        check_headline_files(tmp_path / "nowhere")


# ------------------------------------------------------------------------------ text units
def test_rush_normalize_makes_gigaword_style_tokens():
    assert (
        rush_normalize("Australia's deficit fell 7.07 billion (US) dollars.")
        == "australia 's deficit fell #.## billion -lrb- us -rrb- dollars ."
    )
    assert rush_normalize("It isn't \u201cover\u201d \u2013 yet") == "it is n't `` over '' -- yet"
    assert tokenize_line("  already   tokenized  text ", "en", "none") == "already tokenized text"
    with pytest.raises(ValueError, match="unknown tokenizer"):
        tokenize_line("x", "en", "spacy")


def test_cleaning_limits_can_be_switched_off():
    assert not keep_pair(30, 6)  # MT: ratio above 1.5
    assert keep_pair(30, 6, max_ratio=None)
    assert not keep_pair(120, 6, max_ratio=None) and keep_pair(120, 6, max_ratio=None, max_len=None)
    assert not keep_pair(0, 6, max_ratio=None, max_len=None)  # an empty side never passes


def test_line_count_includes_an_unterminated_last_line(tmp_path):
    (tmp_path / "a").write_text("x\ny\nz")
    (tmp_path / "b").write_text("x\ny\nz\n")
    (tmp_path / "c").write_text("")
    assert [_count_lines(tmp_path / n) for n in "abc"] == [3, 3, 0]
