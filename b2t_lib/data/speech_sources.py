"""Where the speech pipeline's utterances come from: LibriSpeech on the Hub, or local ``.tsv`` files.

Both give the same stream of :data:`Utterance` tuples ``(id, audio, name, text)``: ``audio`` is
the path or the bytes of an audio file, ``name`` what messages call it.

* **the Hub**: ``openslr/librispeech_asr`` config ``all`` (docs/data.md §1e), read with
  ``datasets`` in *streaming* mode (the 62 GB of parquet shards are never stored; each
  utterance's FLAC bytes go straight to feature extraction) after
  ``cast_column("audio", Audio(decode=False))`` (``datasets`` would need torchcodec to decode;
  :mod:`.audio` decodes the bytes with ``soundfile``). Hub splits map to the output splits of
  Table 5 (:data:`HUB_SPLITS`).
* **local files**: ``DIR/<split>.tsv`` with a header naming the tab-separated columns ``audio``
  (a path relative to ``DIR``) and ``text``; other columns are ignored, an ``id`` column names the
  utterances (default: the audio path). Splits ``train`` and ``valid`` are required, every other
  ``.tsv`` is a test split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ..errors import located
from .audio import AudioError
from .inputs import InputError, MissingInputError, inside, read_lines

HUB_DATASET = "openslr/librispeech_asr"
HUB_CONFIG = "all"
# Hub split -> (output split, part name). Table 5's columns are dev_clean ... test_other.
HUB_SPLITS = {
    "train.clean.100": ("train", "train_clean_100"),
    "train.clean.360": ("train", "train_clean_360"),
    "train.other.500": ("train", "train_other_500"),
    "validation.clean": ("dev_clean", "dev_clean"),
    "validation.other": ("dev_other", "dev_other"),
    "test.clean": ("test_clean", "test_clean"),
    "test.other": ("test_other", "test_other"),
}
HUB_SPLIT_SIZES = {
    "train.clean.100": 28539,
    "train.clean.360": 104014,
    "train.other.500": 148688,
    "validation.clean": 2703,
    "validation.other": 2864,
    "test.clean": 2620,
    "test.other": 2939,
}


def librispeech_sizes() -> dict[str, int]:
    """Utterances per Hub split: :data:`HUB_SPLIT_SIZES` (or, under the rehearsal, those of its miniature
    copy: :func:`b2t_lib.presets.source_sizes`). A different count is reported, not refused."""
    from ..presets import source_sizes

    return source_sizes("librispeech", dict(HUB_SPLIT_SIZES))


SMALL_HUB_SPLITS = ("train.clean.100", "validation.clean", "validation.other", "test.clean", "test.other")

# One utterance as the workers see it: (utterance id, audio path or bytes, name for messages, text).
Utterance = tuple[str, "str | bytes", str, str]


def find_tsv_splits(raw_dir: Path) -> list[str]:
    """``['train', 'valid', <test names sorted>]`` from the ``.tsv`` files in ``raw_dir``."""
    if not raw_dir.is_dir():
        raise MissingInputError(f"audio folder {raw_dir} does not exist", todo="give the folder of the .tsv files")
    names = {p.stem for p in raw_dir.glob("*.tsv")}
    for required in ("train", "valid"):
        if required not in names:
            raise MissingInputError(
                f"{raw_dir} needs {required}.tsv (found: {', '.join(sorted(names)) or 'no .tsv file'})",
                todo="add it, with a header naming the tab-separated columns 'audio' and 'text'",
            )
    tests = sorted(names - {"train", "valid"})
    if not tests:
        raise MissingInputError(
            f"{raw_dir} has no test split", todo="add e.g. test.tsv next to train.tsv and valid.tsv"
        )
    return ["train", "valid", *tests]


def read_tsv_split(raw_dir: Path, split: str) -> list[Utterance]:
    """The utterances listed in ``raw_dir/<split>.tsv``; a wrong header, a malformed row, an audio path that
    leads out of ``raw_dir`` or a missing audio file raises an :class:`~.inputs.InputError` that names the file
    and the line.

    The file is split on tabs and newlines only (no quoting, no limit on a transcript's length); a ``\\r``
    before the newline (a Windows line end) is dropped, a byte-order mark is removed."""
    path = raw_dir / f"{split}.tsv"
    rows = [line.removesuffix("\r").split("\t") for line in read_lines(path)]
    if not rows:
        raise InputError(f"{path} is empty", todo="it needs a header line 'audio<TAB>text' and one line per utterance")
    header = [name.strip() for name in rows[0]]
    if "audio" not in header or "text" not in header or len(set(header)) != len(header):
        raise InputError(
            f"wrong header {rows[0]!r}",
            where=located(path, 1),
            todo="the first line must name the tab-separated columns 'audio' and 'text' once each "
            "(e.g. 'audio<TAB>text')",
        )
    col = {name: i for i, name in enumerate(header)}
    utterances, missing = [], []
    for lineno, row in enumerate(rows[1:], start=2):
        if row == [""]:
            continue
        if len(row) != len(header):
            raise InputError(
                f"{len(row)} tab-separated fields, the header has {len(header)} ({', '.join(header)})",
                where=located(path, lineno),
                todo="a transcript may not contain a tab",
            )
        rel = row[col["audio"]].strip()
        if not rel:
            missing.append(f"{path.name}:{lineno}: (empty path)")
            continue
        audio = inside(raw_dir, rel, what="audio path", where=located(path, lineno))
        if not audio.is_file():
            missing.append(f"{path.name}:{lineno}: {rel}")
            continue
        uid = row[col["id"]] if "id" in col else rel
        utterances.append((uid, str(audio), str(audio), row[col["text"]]))
    if missing:
        shown = "; ".join(missing[:10]) + (f"; ... and {len(missing) - 10} more" if len(missing) > 10 else "")
        raise MissingInputError(
            f"{len(missing)} audio file(s) listed in {path} do not exist: {shown}",
            todo=f"paths are relative to {raw_dir}",
        )
    return utterances


def iter_hub_split(
    hub_split: str,
    *,
    dataset: str = HUB_DATASET,
    config: str = HUB_CONFIG,
    revision: str | None = None,
    data_files: list[str] | None = None,
    cache_dir: str | None = None,
) -> Iterator[Utterance]:
    """Stream the utterances of one LibriSpeech Hub split as FLAC bytes (never decoded by ``datasets``).

    ``data_files`` reads local parquet files with the Hub's column layout instead (tests, mirrors).
    """
    from datasets import Audio, load_dataset

    if data_files is not None:
        ds = load_dataset(
            "parquet", data_files={hub_split: list(data_files)}, split=hub_split, streaming=True, cache_dir=cache_dir
        )
    else:
        ds = load_dataset(dataset, config, split=hub_split, revision=revision, streaming=True, cache_dir=cache_dir)
    ds = ds.cast_column("audio", Audio(decode=False))
    for row in ds:
        audio = row["audio"] or {}
        uid = str(row.get("id") or audio.get("path") or row.get("file"))
        name = f"{dataset if data_files is None else 'parquet'}:{hub_split} utterance {uid}"
        data = audio.get("bytes")
        if data is None:
            local = audio.get("path")
            if not local or not Path(local).is_file():
                raise AudioError(f"{name} has no audio bytes and no readable file path ({local!r})")
            data = local
        yield uid, data, name, row["text"] or ""
