r"""Miniature copies of the four real data sources, placed in the Hugging Face caches, for the rehearsal.

``make rehearse`` (``B2T_REHEARSAL=1``, :mod:`b2t_lib.scale`) runs the ``small`` and ``full`` scales on a
CPU. Their data preparation is the production code: the tasks' ``prepare_real`` and ``data_scripts/`` call
:func:`~b2t_lib.data.wmt.download_wmt14_en_de`, :func:`~b2t_lib.data.gigaword.fetch_gigaword_zip`,
:func:`~b2t_lib.data.lm.download_wikitext103` and :func:`~b2t_lib.data.speech.prepare_librispeech`, which
call ``datasets.load_dataset(...)`` and ``huggingface_hub.hf_hub_download(...)`` exactly as on a networked
machine. With ``HF_HUB_OFFLINE=1`` both libraries answer from their caches under ``HF_HOME``; this module
fills those caches with miniature copies that have the real repository ids, configs, split names,
columns, file names and audio encoding (the sizes: :data:`b2t_lib.presets.REHEARSAL_SOURCES`):

==========================================  =================================================================
what a download asks for                    the miniature copy
==========================================  =================================================================
``wmt/wmt14`` ``de-en``: train,             synthetic sentence pairs (:mod:`.synthetic`), column
validation (newstest2013), test (2014)      ``translation = {"de", "en"}``
``wmt/wmt16`` ``de-en``: validation, test   newstest2015, newstest2016 (same schema)
``lighteval/sacrebleu_manual``              configs ``wmt10_en-de``, ``wmt11_en-de``, ``wmt12_en-de``, split
                                            ``test`` (same schema)
``Harvard/gigaword`` ``data/ggw_data.zip``  a zip with ``org_data/{train,dev,test}.{src,tgt}.txt``: synthetic
                                            headlines (:mod:`.synthetic_headlines`), lower case, digits as
                                            ``#``, ``<unk>`` in train/dev and ``UNK`` in test, as released
``Salesforce/wikitext``                     column ``text``, one row per line of ``wiki.*.tokens``: blank rows
``wikitext-103-v1``: train/validation/test  ``""``, titles ``" = Title = \n"``, paragraphs ``" ... \n"``,
                                            rare words as ``<unk>`` (:mod:`.synthetic_lm`'s grammar)
``openslr/librispeech_asr`` ``all``         the seven splits with ``file``, ``audio`` (``{"bytes": FLAC,
(streamed)                                  "path"}``, 16 kHz, ``Audio`` feature), ``text`` (upper case),
                                            ``speaker_id``, ``chapter_id``, ``id``: synthetic speech
                                            (:mod:`.synthetic_speech`)
==========================================  =================================================================

How the caches are filled, with the libraries' own formats: each split is written as a parquet file with
the Hub's schema (features in the ``huggingface`` schema metadata, as the Hub's files carry them), then
``datasets``' own Parquet builder turns the files into its Arrow cache (what ``load_dataset`` does online
after downloading them), which is placed where an online load of that repository and config puts it,
``HF_HOME/datasets/<namespace>___<name>/<config>/0.0.0/<commit>/``; offline, ``load_dataset`` finds it there
("Using the latest cached version of the dataset"), streaming included. ``ggw_data.zip`` goes into the Hub
cache as ``hf_hub_download`` stores a file: ``blobs/<sha256>``, ``snapshots/<commit>/data/ggw_data.zip``
linking to it, ``refs/main`` naming the commit. Nothing else is redirected: no loader knows it is rehearsed.

Two miniature choices serve the recipes that the rehearsal keeps: LibriSpeech's transcripts are long
(30 words; the audio speaks only the first four) because SentencePiece can only build the recipe's 10,000
pieces from about 18,000 training words; BPE's 32,000 merges simply stop early on the small corpora.

``python -m b2t_lib.data.miniature HF_HOME`` builds them (idempotent: a second call checks a marker).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import random
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np

log = logging.getLogger("b2t_lib.data")

VERSION = 3  # bump when the content changes, so caches built by older code are rebuilt
MARKER = "b2t_miniature.json"
SEED = 7


def _commit(repo_id: str) -> str:
    """A fixed 40-hex 'commit' of the miniature repository ``repo_id`` (the caches are keyed by commit)."""
    return hashlib.sha1(f"b2t-miniature-{VERSION}-{repo_id}".encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- the caches
def _datasets_cache(hf_home: Path, staging: Path, repo_id: str, config: str, tables: dict, features) -> None:
    """Put ``tables`` ({split: pyarrow table}) into the ``datasets`` cache as ``load_dataset(repo_id, config)``
    would leave them online: parquet files with the Hub's names, converted by the Parquet builder."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets.naming import camelcase_to_snakecase
    from datasets.packaged_modules.parquet.parquet import Parquet

    namespace, name = repo_id.split("/")
    files = {}
    for split, columns in tables.items():
        path = staging / repo_id / config / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pydict(columns, schema=features.arrow_schema), path)
        files[split] = [str(path)]
    commit = _commit(repo_id)
    datasets.disable_progress_bars()
    builder = Parquet(
        cache_dir=str(staging / "build"),
        dataset_name=camelcase_to_snakecase(name),
        config_name=config,
        hash=commit,
        data_files=files,
    )
    builder.download_and_prepare()
    target = hf_home / "datasets" / f"{namespace}___{camelcase_to_snakecase(name)}" / config / "0.0.0" / commit
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(builder.cache_dir, target, ignore=shutil.ignore_patterns("*.lock"))


def _hub_file(hf_home: Path, repo_id: str, filename: str, data: bytes) -> None:
    """Store ``data`` as ``hf_hub_download(repo_id, filename, repo_type="dataset")`` stores a download."""
    repo = hf_home / "hub" / f"datasets--{repo_id.replace('/', '--')}"
    commit = _commit(repo_id)
    blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    link = repo / "snapshots" / commit / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)


# ---------------------------------------------------------------------------------------------- WMT
def _wmt(hf_home: Path, staging: Path, sizes: dict) -> None:
    from datasets import Features, Translation

    from .synthetic import generate_synthetic_pairs
    from .wmt import NEWSTEST_SOURCES

    features = Features({"translation": Translation(languages=["de", "en"])})
    seen: set[str] = set()
    years = sorted(sizes["newstest_lines"])
    pairs = {year: generate_synthetic_pairs(sizes["newstest_lines"][year], SEED, skip=seen) for year in years}
    train = generate_synthetic_pairs(sizes["train_min_pairs"], SEED, skip=seen)

    def rows(pairs_):
        return {"translation": [{"de": de, "en": en} for en, de in pairs_]}

    repos: dict[tuple[str, str], dict] = {("wmt/wmt14", "de-en"): {"train": rows(train)}}
    for year in years:
        repo, config, split = NEWSTEST_SOURCES[year][0]  # where a download looks first
        repos.setdefault((repo, config), {})[split] = rows(pairs[year])
    for (repo, config), tables in repos.items():
        _datasets_cache(hf_home, staging, repo, config, tables, features)


# ---------------------------------------------------------------------------------------------- Gigaword
def _gigaword(hf_home: Path, sizes: dict) -> None:
    from .gigaword import HUB_FILE, HUB_REPO, MEMBER_DIR
    from .synthetic_headlines import generate_headline_pairs

    rng = random.Random(SEED)
    seen: set[str] = set()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for split in ("test", "dev", "train"):
            unk = "UNK" if split == "test" else "<unk>"  # as released: the test set already writes UNK

            def mark(text: str) -> str:
                return " ".join(unk if rng.random() < 0.03 else word for word in text.split())

            pairs = [(mark(a), mark(h)) for a, h in generate_headline_pairs(sizes[split], SEED, skip=seen)]
            for side, index in (("src", 0), ("tgt", 1)):
                zf.writestr(f"{MEMBER_DIR}/{split}.{side}.txt", "".join(p[index] + "\n" for p in pairs))
    _hub_file(hf_home, HUB_REPO, HUB_FILE, archive.getvalue())


# ---------------------------------------------------------------------------------------------- WikiText-103
def wikitext_rows(sizes: dict) -> dict[str, list[str]]:
    """The miniature WikiText-103 rows per Hub split (``train``, ``validation``, ``test``), as the Hub
    stores ``wiki.*.tokens``: ``""`` for a blank line, ``" " + line + " \n"`` otherwise."""
    from collections import Counter

    from .synthetic_lm import SyntheticLMLexicon

    lexicon = SyntheticLMLexicon(SEED, n_nouns=240, n_adjectives=80, n_transitive=60, n_intransitive=30, n_adverbs=20)
    lines: dict[str, list[str]] = {}
    for split in ("test", "valid", "train"):
        rng = random.Random(f"miniature-wikitext-{split}")
        out: list[str] = []
        while len(out) < sizes["rows"][split]:
            out += lexicon.article(rng)
        lines[split] = out[: sizes["rows"][split]]
    counts = Counter(w for line in lines["train"] for w in line.split())
    keep = {w for w, c in counts.items() if c >= 2}  # rare words are <unk>, as in WikiText
    rows = {}
    for split, hub_split in (("train", "train"), ("valid", "validation"), ("test", "test")):
        mapped = [" ".join(w if w in keep else "<unk>" for w in line.split()) for line in lines[split]]
        rows[hub_split] = [f" {line} \n" if line else "" for line in mapped]
    words = {w for row in rows["train"] for w in row.split()}
    if len(words) + 1 != sizes["vocab"]:
        raise RuntimeError(
            f"the miniature WikiText-103 has {len(words)} distinct training words + end-of-line = "
            f"{len(words) + 1}, and presets.REHEARSAL_SOURCES['wikitext103']['vocab'] says "
            f"{sizes['vocab']}: update the one or the other"
        )
    return rows


def _wikitext(hf_home: Path, staging: Path, sizes: dict) -> None:
    from datasets import Features, Value

    from .lm import WIKITEXT103

    rows = wikitext_rows(sizes)
    _datasets_cache(
        hf_home,
        staging,
        WIKITEXT103[0],
        WIKITEXT103[1],
        {s: {"text": r} for s, r in rows.items()},
        Features({"text": Value("string")}),
    )


# ---------------------------------------------------------------------------------------------- LibriSpeech
def _pseudo_words(rng: random.Random, n: int) -> list[str]:
    onsets, vowels, codas = (
        "b d f g h k l m n p r s t v w z br st tr sh".split(),
        "a e i o u ai ea oo".split(),
        ["", "", "n", "r", "l", "s", "t", "m"],
    )
    words: set[str] = set()
    while len(words) < n:
        words.add(
            "".join(
                rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.choice((2, 3, 3, 4, 5)))
            )
        )
    return sorted(words)


def _librispeech(hf_home: Path, staging: Path, sizes: dict) -> None:
    import soundfile as sf
    from datasets import Audio, Features, Value

    from .audio import SAMPLE_RATE
    from .speech_sources import HUB_CONFIG, HUB_DATASET
    from .synthetic_speech import synthesize

    features = Features(
        {
            "file": Value("string"),
            "audio": Audio(sampling_rate=SAMPLE_RATE),
            "text": Value("string"),
            "speaker_id": Value("int64"),
            "chapter_id": Value("int64"),
            "id": Value("string"),
        }
    )
    rng = random.Random(SEED)
    lexicon = _pseudo_words(rng, 20000)
    tables = {}
    for k, split in enumerate(sizes):
        columns: dict[str, list] = {name: [] for name in features}
        speaker, chapter = 100 + 10 * k, 1000 + k
        for i in range(sizes[split]):
            words = [rng.choice(lexicon) for _ in range(30)]
            audio = io.BytesIO()
            sf.write(
                audio,
                synthesize(words[:4], np.random.default_rng([SEED, k, i]), SAMPLE_RATE),
                SAMPLE_RATE,
                format="FLAC",
            )
            uid = f"{speaker}-{chapter}-{i:04d}"
            for name, value in (
                ("file", f"{uid}.flac"),
                ("audio", {"bytes": audio.getvalue(), "path": f"{uid}.flac"}),
                ("text", " ".join(words).upper()),
                ("speaker_id", speaker),
                ("chapter_id", chapter),
                ("id", uid),
            ):
                columns[name].append(value)
        tables[split] = columns
    _datasets_cache(hf_home, staging, HUB_DATASET, HUB_CONFIG, tables, features)


# ---------------------------------------------------------------------------------------------- all of them
def build_miniature_sources(hf_home: str | Path) -> Path:
    """Fill the Hugging Face caches under ``hf_home`` with the four miniature sources; return ``hf_home``.

    A second call with the same sizes and :data:`VERSION` only reads the marker; otherwise the miniature
    repositories are rebuilt (other contents of the caches are left alone)."""
    from ..presets import REHEARSAL_SOURCES

    hf_home = Path(hf_home).resolve()
    wanted = {"version": VERSION, "sizes": json.loads(json.dumps(REHEARSAL_SOURCES))}
    marker = hf_home / MARKER
    try:
        if json.loads(marker.read_text()) == wanted:
            return hf_home
    except (OSError, ValueError):
        pass
    marker.unlink(missing_ok=True)
    for folder in ("datasets", "hub"):
        shutil.rmtree(hf_home / folder, ignore_errors=True)
    staging = hf_home / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _wmt(hf_home, staging, REHEARSAL_SOURCES["wmt14_en_de"])
    _gigaword(hf_home, REHEARSAL_SOURCES["gigaword"])
    _wikitext(hf_home, staging, REHEARSAL_SOURCES["wikitext103"])
    _librispeech(hf_home, staging, REHEARSAL_SOURCES["librispeech"])
    shutil.rmtree(staging)
    marker.write_text(json.dumps(wanted))  # last: the caches are complete
    log.info("miniature sources ready in %s", hf_home)
    return hf_home


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        from ..errors import UserError

        raise UserError(
            f"expected one argument, the folder the rehearsal sets as HF_HOME, got {args}",
            todo="run `python -m b2t_lib.data.miniature HF_HOME`",
        )
    print(build_miniature_sources(args[0]))
    return 0


if __name__ == "__main__":
    from ..errors import run_command

    raise SystemExit(run_command(main))
