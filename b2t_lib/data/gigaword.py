"""Download the Gigaword headline data of Rush et al. (2015) as plain text (needs the network).

Source (docs/data.md §1c): the Hub dataset ``Harvard/gigaword`` holds a loading script, which
``datasets`` >= 4 no longer runs, and the archive ``data/ggw_data.zip`` (578 MB) that the script
reads. We fetch the archive with ``huggingface_hub.hf_hub_download`` and read it with
``zipfile`` exactly as the script does:

* members ``org_data/{train,dev,test}.{src,tgt}.txt``: ``src`` = the first sentence of a news
  article, ``tgt`` = its headline, one example per line, already tokenized, lower-cased, digits
  replaced by ``#`` and rare words by ``<unk>`` (docs/data.md §2b);
* every line is stripped, and in train and dev ``<unk>`` becomes ``UNK`` (the test set already
  writes ``UNK``), so that the unknown-word token looks the same everywhere;
* 3,803,957 / 189,651 / 1,951 pairs (train / dev / test); the counts and the member layout are
  checked, and a mismatch stops the run with what was found.

Files written to ``raw_dir``: ``train``, ``valid`` (the dev split) and ``test``, each as
``<split>.article`` and ``<split>.headline``, atomically and recorded like every pipeline step,
so a re-run skips them.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

from .inputs import MissingInputError, SourceError, decode_line
from .steps import StepRunner
from .summarization import ARTICLE, HEADLINE

log = logging.getLogger("b2t_lib.data")

HUB_REPO = "Harvard/gigaword"
HUB_FILE = "data/ggw_data.zip"
MEMBER_DIR = "org_data"
# Rush et al.'s split name -> ours, and the number of pairs each must have.
SPLITS = {"train": "train", "dev": "valid", "test": "test"}
GIGAWORD_PAIRS = {"train": 3_803_957, "dev": 189_651, "test": 1_951}


def gigaword_sizes() -> dict[str, int]:
    """The pairs per split a download must find: :data:`GIGAWORD_PAIRS` (or, under the rehearsal, those of
    its miniature copy: :func:`b2t_lib.presets.source_sizes`)."""
    from ..presets import source_sizes

    return source_sizes("gigaword", dict(GIGAWORD_PAIRS))


def fetch_gigaword_zip(cache_dir: str | None = None) -> Path:
    """Path of ``ggw_data.zip`` in the Hugging Face cache, downloaded if needed (578 MB)."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(HUB_REPO, HUB_FILE, repo_type="dataset", cache_dir=cache_dir))
    except Exception as error:  # offline, proxy, moved file: say what to do instead
        raise SourceError(
            f"could not download {HUB_FILE} of the Hub dataset {HUB_REPO}: {type(error).__name__}: {error}\n"
            f"On a machine without Hub access, copy ggw_data.zip from a networked machine and pass "
            f"--zip PATH, or prepare your own pairs with --from-files"
        ) from error


def gigaword_members(names: list[str]) -> dict[str, str]:
    """``{'train.src': member, ...}`` for the six ``org_data/<split>.<side>.txt`` members.

    The members may sit under one leading folder (``ggw_data/org_data/...``); anything else, or a
    missing member, raises with the layout that was found.
    """
    wanted = [f"{split}.{side}" for split in SPLITS for side in ("src", "tgt")]
    found: dict[str, list[str]] = {key: [] for key in wanted}
    for name in names:
        parts = name.split("/")
        if len(parts) >= 2 and parts[-2] == MEMBER_DIR and parts[-1].endswith(".txt") and len(parts) <= 3:
            key = parts[-1][: -len(".txt")]
            if key in found:
                found[key].append(name)
    missing = [key for key in wanted if not found[key]]
    doubled = [key for key in wanted if len(found[key]) > 1]
    if missing or doubled:
        shown = ", ".join(names[:30]) + (f", ... ({len(names)} members)" if len(names) > 30 else "")
        raise SourceError(
            f"the Gigaword archive does not have the expected layout {MEMBER_DIR}/{{train,dev,test}}.{{src,tgt}}.txt"
            + (f"; missing: {', '.join(f'{MEMBER_DIR}/{k}.txt' for k in missing)}" if missing else "")
            + (f"; more than one copy of: {', '.join(doubled)}" if doubled else "")
            + f". The archive holds: {shown or 'nothing'}"
        )
    return {key: found[key][0] for key in wanted}


def _read_member(archive: zipfile.ZipFile, member: str, replace_unk: bool):
    """Stripped lines of one member, ``<unk>`` -> ``UNK`` if asked, as the dataset script does."""
    with archive.open(member) as f:
        for number, raw in enumerate(f, start=1):  # binary lines, split on b"\n" only
            line = decode_line(member, number, raw.rstrip(b"\n")).strip()  # UTF-8, a BOM removed
            # One example per line: no line-break character may survive inside the text.
            yield " ".join(line.replace("<unk>", "UNK").split()) if replace_unk else " ".join(line.split())


def extract_gigaword(
    zip_path: str | Path,
    raw_dir: str | Path,
    *,
    check_counts: bool = True,
    expected_pairs: dict[str, int] | None = None,
) -> Path:
    """Write ``raw_dir/{train,valid,test}.{article,headline}`` from ``ggw_data.zip``.

    Each split must have ``expected_pairs[split]`` pairs (``{'train': n, 'dev': n, 'test': n}``;
    default :func:`gigaword_sizes`, the release's counts); ``check_counts=False`` skips that check
    (only for archives you built yourself). Each split is one recorded step: a re-run with the
    same archive skips it.
    """
    zip_path, raw_dir = Path(zip_path), Path(raw_dir)
    if check_counts and expected_pairs is None:
        expected_pairs = gigaword_sizes()
    if not check_counts:
        expected_pairs = None
    if not zip_path.is_file():
        raise MissingInputError(f"{zip_path} does not exist", todo="give the path of ggw_data.zip")
    try:
        with zipfile.ZipFile(zip_path) as archive:
            members = gigaword_members(archive.namelist())
    except zipfile.BadZipFile as error:
        raise SourceError(f"{zip_path} is not a zip archive ({error}); delete it and download it again") from error
    runner = StepRunner(raw_dir, raw_dir / ".steps")
    for theirs, ours in SPLITS.items():
        expected = None if expected_pairs is None else expected_pairs[theirs]

        def build(outs: list[Path], theirs: str = theirs, expected: int | None = expected) -> None:
            counts = {}
            with zipfile.ZipFile(zip_path) as archive:
                for side, out in zip(("src", "tgt"), outs):
                    member = members[f"{theirs}.{side}"]
                    n = 0
                    with open(out, "w", encoding="utf-8", newline="\n") as f:
                        for line in _read_member(archive, member, replace_unk=theirs != "test"):
                            f.write(line + "\n")
                            n += 1
                    counts[member] = n
            found = ", ".join(f"{m}: {n:,} lines" for m, n in counts.items())
            if len(set(counts.values())) != 1:
                raise SourceError(
                    f"the {theirs} article and headline files of {zip_path} differ in length "
                    f"({found}); the archive is damaged"
                )
            if expected is not None and expected not in counts.values():
                raise SourceError(
                    f"{zip_path}: the {theirs} split has {found}, expected {expected:,} pairs "
                    f"(Rush et al.'s release); the archive on the Hub changed or is incomplete"
                )
            log.info("gigaword %s: %d pairs -> %s", theirs, next(iter(counts.values())), ours)

        runner.run(
            f"extract-{ours}",
            {"source": f"{HUB_REPO}/{HUB_FILE}", "member": theirs, "pairs": expected},
            [zip_path],
            [raw_dir / f"{ours}.{ARTICLE}", raw_dir / f"{ours}.{HEADLINE}"],
            build,
        )
    return raw_dir


def download_gigaword(
    raw_dir: str | Path,
    *,
    zip_path: str | Path | None = None,
    cache_dir: str | None = None,
    check_counts: bool = True,
    expected_pairs: dict[str, int] | None = None,
) -> Path:
    """Fetch ``ggw_data.zip`` from the Hub (unless ``zip_path`` is given) and extract it into
    ``raw_dir`` (:func:`extract_gigaword`, which checks the layout and the pair counts). About
    1 GB of text; returns ``raw_dir``."""
    archive = Path(zip_path) if zip_path is not None else fetch_gigaword_zip(cache_dir)
    return extract_gigaword(archive, raw_dir, check_counts=check_counts, expected_pairs=expected_pairs)
