"""Faults in what the data scripts read and write: nothing already prepared is lost, nothing read from disk is
trusted blindly, and every bad input ends in one line ``error: ... (file:line): what to do`` with exit code 2.

Each test prepares a tiny ``--from-files`` corpus (a few dozen lines, a few short WAV files) in well under a
second, breaks one thing and checks what the scripts and loaders make of it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from b2t_lib.data import load_translation_split, steps
from b2t_lib.data.audio import AudioError, read_audio
from b2t_lib.data.dictionary import Dictionary
from b2t_lib.data.inputs import InputError, inside, read_lines
from b2t_lib.data.lm import prepare_lm_data
from b2t_lib.data.lm_dataset import load_lm_split
from b2t_lib.data.speech_dataset import load_speech_split
from b2t_lib.data.speech_sources import read_tsv_split
from b2t_lib.data.synthetic import synthetic_splits
from b2t_lib.data.synthetic_speech import WORDS, synthesize
from b2t_lib.errors import run_command
from conftest import ROOT, data_script

MT_OPTIONS = ["--bpe-vocab-size", "120", "--workers", "1"]
SPEECH_OPTIONS = ["--vocab-size", "26", "--workers", "1"]


# ---------------------------------------------------------------------------------------------- corpora
def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def mt_corpus(raw: Path) -> Path:
    """train/valid/test.{en,de}: a hundred synthetic sentence pairs."""
    for split, pairs in synthetic_splits(n_train=100, n_valid=10, n_test=10, seed=5).items():
        write_lines(raw / f"{split}.en", [s for s, _ in pairs])
        write_lines(raw / f"{split}.de", [t for _, t in pairs])
    return raw


def lm_corpus(raw: Path) -> Path:
    """train/valid/test.txt of a few whitespace-tokenized lines."""
    write_lines(raw / "train.txt", ["the cat sat on the mat .", "", "a dog sat .", "the dog ran ."])
    write_lines(raw / "valid.txt", ["the dog sat ."])
    write_lines(raw / "test.txt", ["a cat ran ."])
    return raw


def speech_corpus(raw: Path) -> Path:
    """train/valid/test.tsv and their WAV files (six training utterances, two in each other split)."""
    raw.mkdir(parents=True, exist_ok=True)
    for s, split in enumerate(("train", "valid", "test")):
        lines = ["audio\ttext"]
        for i in range(6 if split == "train" else 2):
            words = [WORDS[(3 * i + s) % len(WORDS)], WORDS[(5 * i + 1) % len(WORDS)]]
            audio = synthesize(words, np.random.default_rng(10 * s + i), 16000, 1)
            sf.write(raw / f"{split}{i}.wav", audio, 16000, subtype="PCM_16")
            lines.append(f"{split}{i}.wav\t{' '.join(words)}")
        write_lines(raw / f"{split}.tsv", lines)
    return raw


SCRIPTS = {
    "mt": ("prepare_wmt14_en_de", mt_corpus, MT_OPTIONS),
    "lm": ("prepare_wikitext103", lm_corpus, []),
    "speech": ("prepare_librispeech", speech_corpus, SPEECH_OPTIONS),
}


@pytest.fixture(autouse=True)
def _no_library_log_on_stderr(monkeypatch):
    """Keep the progress lines that an earlier ``python -m b2t_lib`` call in this process routed to stderr out of
    what these tests read: they check the error line alone (the subprocess table in test_bad_inputs.py checks
    the whole stderr of each script)."""
    import logging

    monkeypatch.setattr(logging.getLogger("b2t_lib"), "handlers", [])


def prepare(kind: str, raw: Path, out: Path, capsys, *extra: str) -> tuple[int, str]:
    """Run the data script of ``kind`` on ``raw`` through :func:`run_command`: (exit code, stderr)."""
    name, _, options = SCRIPTS[kind]
    code = run_command(data_script(name).main, ["--from-files", str(raw), "--out-dir", str(out), *options, *extra])
    return code, capsys.readouterr().err


def prepared(kind: str, root: Path, capsys) -> tuple[Path, Path]:
    """A corpus of ``kind`` under ``root/raw`` and the data set prepared from it in ``root/out``."""
    raw, out = SCRIPTS[kind][1](root / "raw"), root / "out"
    code, err = prepare(kind, raw, out, capsys)
    assert code == 0, err
    return raw, out


def snapshot(folder: Path) -> dict:
    """Every file under ``folder``: its bytes' digest and its modification time."""
    return {
        str(p.relative_to(folder)): (hashlib.blake2b(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def loads(kind: str, out: Path) -> int:
    """The number of rows of the data set's test split (it opens, and its files pass the check)."""
    if kind == "mt":
        return len(load_translation_split(out, "test"))
    if kind == "lm":
        return len(load_lm_split(out, "test", tokens_per_sample=4))
    return len(load_speech_split(out, "test"))


def one_error_line(err: str) -> str:
    """The single ``error:`` line that a user error ends with (no traceback, nothing else)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------------------------- breakages
def not_utf8(path: Path, line: int) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] = b"caf\xe9 " + lines[line - 1]  # Latin-1, not UTF-8
    path.write_bytes(b"\n".join(lines))


def break_mt_utf8(raw: Path) -> str:
    not_utf8(raw / "train.de", 3)
    return "train.de:3)"


def break_mt_misaligned(raw: Path) -> str:
    lines = (raw / "valid.de").read_text().splitlines()
    write_lines(raw / "valid.de", lines[:-1])
    return "valid.en has 10 lines but"


def break_mt_empty(raw: Path) -> str:
    (raw / "test.de").write_text("")
    return "test.de is empty"


def break_mt_missing_split(raw: Path) -> str:
    (raw / "valid.en").unlink()
    return "has no valid split"


def break_mt_no_test(raw: Path) -> str:
    (raw / "test.en").unlink()
    (raw / "test.de").unlink()
    return "has no test set"


def break_lm_utf8(raw: Path) -> str:
    not_utf8(raw / "valid.txt", 1)
    return "valid.txt:1)"


def break_speech_utf8(raw: Path) -> str:
    not_utf8(raw / "train.tsv", 4)
    return "train.tsv:4)"


def break_speech_audio(raw: Path) -> str:
    (raw / "train2.wav").write_bytes(b"not a wave file" * 40)  # found only when its features are computed
    return "cannot read audio file"


BREAKAGES = [
    ("mt", break_mt_utf8),
    ("mt", break_mt_misaligned),
    ("mt", break_mt_empty),
    ("mt", break_mt_missing_split),
    ("mt", break_mt_no_test),
    ("lm", break_lm_utf8),
    ("speech", break_speech_utf8),
    ("speech", break_speech_audio),
]


@pytest.mark.parametrize("kind, breakage", BREAKAGES, ids=[b.__name__[6:] for _, b in BREAKAGES])
def test_a_failed_re_preparation_leaves_the_data_set_byte_identical(tmp_path, capsys, kind, breakage):
    raw, out = prepared(kind, tmp_path, capsys)
    rows, before = loads(kind, out), snapshot(out)
    bad = tmp_path / "bad"
    shutil.copytree(raw, bad)
    expected = breakage(bad)
    code, err = prepare(kind, bad, out, capsys)
    assert code == 2
    assert expected in one_error_line(err)
    assert snapshot(out) == before  # not one byte, not one file changed
    assert loads(kind, out) == rows


def test_a_non_utf8_byte_is_named_with_file_line_and_column(tmp_path, capsys):
    raw = mt_corpus(tmp_path / "raw")
    not_utf8(raw / "train.de", 3)
    code, err = prepare("mt", raw, tmp_path / "out", capsys)
    line = one_error_line(err)
    assert code == 2 and "byte 0xe9 is not UTF-8 (column 4)" in line and f"({raw / 'train.de'}:3)" in line
    assert "iconv" in line


@pytest.mark.slow  # two interpreters that import torch: seconds
def test_a_script_run_as_a_command_ends_in_one_line(tmp_path):
    """The scripts themselves (run as programs, a usage error and an input error): one line, exit code 2."""
    raw = lm_corpus(tmp_path / "raw")
    not_utf8(raw / "test.txt", 1)
    script = str(ROOT / "data_scripts" / "prepare_wikitext103.py")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for argv in (["--min-count", "-1"], ["--from-files", str(raw), "--out-dir", str(tmp_path / "out")]):
        done = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and done.stderr.strip().endswith(errors[0])


def test_a_successful_re_preparation_replaces_the_data_set_and_leaves_nothing_beside_it(tmp_path, capsys):
    raw, out = prepared("lm", tmp_path, capsys)
    assert "cat" in Dictionary.load(out / "dict.txt").symbols
    code, err = prepare("lm", raw, out, capsys, "--min-count", "2")
    assert code == 0, err
    assert "cat" not in Dictionary.load(out / "dict.txt").symbols and loads("lm", out) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "raw"]  # no partial build left


def test_a_crash_while_the_new_data_set_moves_in_is_finished_by_the_next_start(tmp_path, capsys, monkeypatch):
    raw, out = prepared("lm", tmp_path, capsys)
    real_move_in = steps._move_in

    def crash_halfway(partial: Path, out_dir: Path) -> None:
        (out_dir / steps.MANIFEST).unlink()
        os.replace(partial / "dict.txt", out_dir / "dict.txt")
        raise KeyboardInterrupt  # killed

    monkeypatch.setattr(steps, "_move_in", crash_halfway)
    with pytest.raises(KeyboardInterrupt):
        prepare_lm_data(raw, out, min_count=2)
    with pytest.raises(FileNotFoundError):  # no manifest: the folder is not ready, nothing half-new is read
        load_lm_split(out, "test", tokens_per_sample=4)
    monkeypatch.setattr(steps, "_move_in", real_move_in)
    prepare_lm_data(raw, out, min_count=2)
    assert "cat" not in Dictionary.load(out / "dict.txt").symbols and loads("lm", out) == 2
    assert not steps.partial_folder(out).exists()


# ---------------------------------------------------------------------------------------------- names from disk
def test_manifest_split_and_part_names_must_stay_inside_the_data_folder(tmp_path, capsys):
    _, out = prepared("speech", tmp_path, capsys)
    original = (out / steps.MANIFEST).read_text()
    manifest = json.loads(original)
    manifest["splits"].append("../../x")
    (out / steps.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"split name '\.\./\.\./x' leads out of"):
        load_speech_split(out, "../../x")
    manifest = json.loads(original)
    manifest["parts"]["test"] = ["/etc/passwd"]
    (out / steps.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"part name '/etc/passwd' is an absolute path"):
        load_speech_split(out, "test")
    manifest = json.loads(original)
    manifest["files"]["../../outside.npy"] = {"size": 1, "digest": "0"}
    (out / steps.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="leads out of"):
        load_speech_split(out, "test")


def test_a_translation_test_split_named_outside_the_folder_is_refused(tmp_path, capsys):
    _, out = prepared("mt", tmp_path, capsys)
    manifest = json.loads((out / steps.MANIFEST).read_text())
    manifest["splits"].append("../../x")
    manifest["test_splits"].append("../../x")
    (out / steps.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="leads out of"):
        load_translation_split(out, "../../x")


@pytest.mark.parametrize("path", ["../../../../etc/passwd", "/etc/passwd", "clips/../../x.wav"])
def test_tsv_audio_paths_must_stay_inside_the_tsv_folder(tmp_path, capsys, path):
    raw = speech_corpus(tmp_path / "raw")
    with open(raw / "train.tsv", "a", encoding="utf-8") as f:
        f.write(f"{path}\tred cat\n")
    code, err = prepare("speech", raw, tmp_path / "out", capsys)
    line = one_error_line(err)
    assert code == 2 and f"the audio path {path!r}" in line and "train.tsv:8)" in line


def test_inside_accepts_plain_relative_names(tmp_path):
    assert inside(tmp_path, "a/b.wav", what="audio path") == tmp_path / "a" / "b.wav"
    assert inside(tmp_path, "a/../b.wav", what="audio path") == tmp_path / "a/../b.wav"
    for bad in ("", "..", ".", "/x", "a/../../x", "x\x00"):
        with pytest.raises(InputError):
            inside(tmp_path, bad, what="name")


# ---------------------------------------------------------------------------------------------- verification
def flip_two_bytes(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    data[at + 1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_flipped_bytes_in_the_training_features_are_caught_by_the_cheap_check(tmp_path, capsys):
    _, out = prepared("speech", tmp_path, capsys)
    features = out / "train.fbank.npy"
    flip_two_bytes(features, features.stat().st_size // 2)
    for verify in (False, "sampled", True, "full"):  # False: what the speech task passes for its training split
        with pytest.raises(steps.DamagedDataError, match=r"train\.fbank\.npy has changed"):
            load_speech_split(out, "train", verify=verify)
    assert len(load_speech_split(out, "test")) == 2  # the other splits are not affected


def test_the_sampled_check_of_a_large_file_reads_blocks_and_the_full_check_every_byte(tmp_path, capsys, monkeypatch):
    _, out = prepared("lm", tmp_path, capsys)
    monkeypatch.setattr(steps, "FULL_DIGEST_BYTES", 0)  # every file counts as large
    monkeypatch.setattr(steps, "SAMPLE_BLOCK_BYTES", 8)
    stream = out / "train.npy"
    flip_two_bytes(stream, stream.stat().st_size - 2)  # in the last block: sampled
    with pytest.raises(steps.DamagedDataError, match="has changed"):
        load_lm_split(out, "train", tokens_per_sample=4)


def test_a_file_read_but_not_listed_in_the_manifest_is_refused(tmp_path, capsys):
    _, out = prepared("mt", tmp_path, capsys)
    manifest = json.loads((out / steps.MANIFEST).read_text())
    del manifest["files"]["bpe.codes"]
    (out / steps.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(steps.DamagedDataError, match=r"bpe\.codes is read but not listed"):
        load_translation_split(out, "test")


def test_every_loaded_file_has_a_sampled_digest_in_the_manifest(tmp_path, capsys):
    _, out = prepared("speech", tmp_path, capsys)
    files = json.loads((out / steps.MANIFEST).read_text())["files"]
    assert "train.fbank.npy" in files and "spm.model" in files
    assert all(set(entry) == {"size", "digest", "sample"} for entry in files.values())


# ---------------------------------------------------------------------------------------------- audio and text
def test_a_wav_shorter_than_its_header_says_is_refused_with_its_name(tmp_path, capsys):
    raw = speech_corpus(tmp_path / "raw")
    wav = raw / "train3.wav"
    data = wav.read_bytes()
    wav.write_bytes(data[: len(data) // 2])  # the header still announces every sample
    with pytest.raises(AudioError, match=r"train3\.wav is shorter than its header says"):
        read_audio(wav)
    with pytest.raises(AudioError, match="shorter than its header says"):
        read_audio(wav.read_bytes(), name="bytes")
    code, err = prepare("speech", raw, tmp_path / "out", capsys)
    assert code == 2 and "train3.wav is shorter than its header says" in one_error_line(err)


def test_a_byte_order_mark_is_stripped_by_every_text_reader(tmp_path, capsys):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfhello world\nsecond\n")
    assert list(read_lines(path)) == ["hello world", "second"]
    # headline pairs (Gigaword --from-files, already normalized)
    raw = tmp_path / "headlines"
    for split, n in (("train", 40), ("valid", 5), ("test", 5)):
        articles = [f"the {WORDS[i % 30]} man saw {WORDS[(i + 3) % 30]} birds today" for i in range(n)]
        headlines = [f"{WORDS[i % 30]} man sees birds" for i in range(n)]
        write_lines(raw / f"{split}.article", articles)
        write_lines(raw / f"{split}.headline", headlines)
    for name in ("train.article", "train.headline"):
        (raw / name).write_bytes(b"\xef\xbb\xbf" + (raw / name).read_bytes())
    args = ["--from-files", str(raw), "--out-dir", str(tmp_path / "h"), "--no-normalize", "--bpe-vocab-size", "80"]
    assert run_command(data_script("prepare_gigaword").main, [*args, "--workers", "1"]) == 0
    assert not [w for w in Dictionary.load(tmp_path / "h" / "dict.txt").symbols if "\ufeff" in w]
    # language-modeling text and speech transcripts
    raw = lm_corpus(tmp_path / "lm")
    (raw / "train.txt").write_bytes(b"\xef\xbb\xbf" + (raw / "train.txt").read_bytes())
    out = prepare_lm_data(raw, tmp_path / "lm_out")
    symbols = Dictionary.load(out / "dict.txt").symbols
    assert "the" in symbols and not [w for w in symbols if "\ufeff" in w]
    raw = speech_corpus(tmp_path / "speech")
    (raw / "valid.tsv").write_bytes(b"\xef\xbb\xbf" + (raw / "valid.tsv").read_bytes())
    assert [u[0] for u in read_tsv_split(raw, "valid")] == ["valid0.wav", "valid1.wav"]


def test_a_transcript_over_128_kb_is_read_whole(tmp_path):
    raw = speech_corpus(tmp_path / "raw")
    long_text = " ".join(["red"] * 50_000)  # 200 KB, over the csv module's field limit
    with open(raw / "train.tsv", "a", encoding="utf-8") as f:
        f.write(f"train0.wav\t{long_text}\r\n")  # and a Windows line end
    utterances = read_tsv_split(raw, "train")
    assert utterances[-1][3] == long_text


# ---------------------------------------------------------------------------------------------- temporaries
def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_temporary_files_of_a_killed_preparation_are_removed_on_the_next_start(tmp_path, capsys):
    raw, out = prepared("lm", tmp_path, capsys)
    pid = dead_pid()
    stale = [out / f"train.npy.tmp-{pid}", out / "work" / "steps" / f"dictionary.json.tmp-{pid}"]
    live = out / f"valid.npy.tmp-{os.getpid()}"  # a write still in progress is left alone
    for path in [*stale, live]:
        path.write_bytes(b"partial")
    code, err = prepare("lm", raw, out, capsys)
    assert code == 0, err
    assert not any(path.exists() for path in stale) and live.exists()
    live.unlink()


def test_two_preparations_of_one_folder_at_once_build_it_once(tmp_path, caplog):
    """The folder is locked while a data set is built beside it: the second preparation waits, then finds the
    first one's data set ready (threads hold separate locks, as two processes would)."""
    import logging
    import threading

    raw = lm_corpus(tmp_path / "raw")
    errors: list[BaseException] = []

    def prepare_once() -> None:
        try:
            prepare_lm_data(raw, tmp_path / "out")
        except BaseException as error:  # reported by the assertion below
            errors.append(error)

    with caplog.at_level(logging.INFO, logger="b2t_lib.data"):
        threads = [threading.Thread(target=prepare_once) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors
    assert caplog.text.count("step dictionary: running") == 1 and loads("lm", tmp_path / "out") == 2
