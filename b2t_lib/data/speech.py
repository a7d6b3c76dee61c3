"""From LibriSpeech (or any transcribed audio) to features, transcripts and a vocabulary on disk.

The utterances come from the Hub (``openslr/librispeech_asr``, streamed) or from local ``.tsv``
files (:mod:`.speech_sources`); Hub splits map to the output splits of Table 5::

    train.clean.100 + train.clean.360 + train.other.500 -> train   (960 h; each a *part*)
    validation.clean -> dev_clean      validation.other -> dev_other
    test.clean       -> test_clean     test.other       -> test_other

and local files give ``train``, ``valid`` and one or more test splits.

Per utterance (:mod:`.audio`): mono, 16 kHz, x 2^15, 80-dim Kaldi fbank, stored as float16;
transcripts lower-cased. Filter as fairseq S2T (``filter_manifest_df``): drop utterances with
fewer than 5 frames, training utterances with more than 3000 frames (30 s), and empty
transcripts; every drop is counted (log, ``manifest.json``) and listed (``work/reports/``).
Utterance-level CMVN is applied when the features are loaded (:mod:`.speech_dataset`).

Steps (restartable, :mod:`.steps`: atomic outputs, records with digests; after a crash only
unfinished steps run again):

1. ``features-<part>``: features, lower-cased text and utterance ids of one part, computed on
   ``workers`` processes in order (``<part>.fbank.npy`` is a ``(frames, 80)`` float16 matrix, one
   row per 10 ms frame, utterances one after the other; ``<part>.fbank.offsets.npy`` gives where
   each starts, in frames: :mod:`.indexed`). A Hub part that fails midway starts again from its
   first utterance.
2. ``vocabulary``: SentencePiece unigram on the training transcripts (:mod:`.speech_vocab`).
3. ``targets-<part>``: piece ids + ``</s>`` of every kept utterance.
4. ``manifest.json``, written last: parameters, split -> parts, filter counts, hours, and the size
   and checksum of every file the loader reads.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from ..special_tokens import UNK

from .audio import FRAME_SHIFT_MS, NUM_MEL_BINS, SAMPLE_RATE, AudioError, extract_features
from .indexed import RaggedAppender, RaggedArray, token_dtype, write_ragged
from .speech_sources import (
    HUB_CONFIG,
    HUB_DATASET,
    HUB_SPLITS,
    Utterance,
    find_tsv_splits,
    iter_hub_split,
    librispeech_sizes,
    read_tsv_split,
)
from .speech_vocab import SpeechVocabulary, normalize_transcript, train_sentencepiece
from .inputs import InputError
from .steps import DataFormat, Preparation, clear_digest_cache, describe_file, file_digest, read_json
from .parallel import default_workers

log = logging.getLogger("b2t_lib.data")

FORMAT = "b2t-speech-v1"
SPEECH_DATA = DataFormat(
    FORMAT, "speech data set", "Run data_scripts/prepare_librispeech.py (or prepare_speech_from_files())"
)
PIPELINE_VERSION = 1  # bump when a step's algorithm changes its output
SPM_MODEL = "spm.model"
MIN_FRAMES = 5  # fairseq filter_manifest_df: min_n_frames
MAX_TRAIN_FRAMES = 3000  # fairseq filter_manifest_df: max_n_frames, training splits only
DEFAULT_VOCAB_SIZE = 10000

SPLIT_ORDER = ("train", "valid", "dev_clean", "dev_other")  # then test splits, sorted
SKIP_REASONS = {"empty_text": "empty transcript", "short": "audio too short", "long": "audio too long for training"}
LOGGED_SKIPS = 20  # per reason and part; the report lists all
# Below this many utterances (of a source of known size) one process is faster than starting
# workers (each imports torch: seconds); a short utterance costs about 1 ms.
PARALLEL_MIN_UTTERANCES = 5000


@dataclass
class Part:
    """One unit of feature extraction: a Hub split or a ``.tsv`` file, going into ``split``."""

    name: str
    split: str
    utterances: Callable[[], Iterable[Utterance]]
    params: dict
    inputs: list[Path] = field(default_factory=list)
    expected: int | None = None  # utterance count the source should have (Hub), for a warning
    size: int | None = None  # utterance count when known in advance (files)

    @property
    def is_train(self) -> bool:
        return self.split == "train"


# ---------------------------------------------------------------------------------------------- features
def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)  # one process per core; threads inside would oversubscribe


def featurize(utterance: Utterance, *, is_train: bool, min_frames: int, max_train_frames: int) -> tuple:
    """``(uid, name, status, features or error message, frames, text)``; status is ``'ok'``,
    ``'error'`` or a key of :data:`SKIP_REASONS`."""
    uid, audio, name, text = utterance
    text = normalize_transcript(text)
    if not text:
        return uid, name, "empty_text", None, 0, text
    try:
        features = extract_features(audio, name=name)  # (frames, 80) float32
    except AudioError as error:
        return uid, name, "error", str(error), 0, text
    frames = len(features)
    if frames < min_frames:
        return uid, name, "short", None, frames, text
    if is_train and frames > max_train_frames:
        return uid, name, "long", None, frames, text
    return uid, name, "ok", features.astype(np.float16), frames, text


class FeaturePool:
    """The feature workers of one preparation: ``workers`` spawned processes, started when a part first needs
    them and shared by every part after it, closed by :meth:`close` (or ``with``). A LibriSpeech preparation
    reads seven Hub splits; a pool per split would pay every worker's imports (torch: seconds) seven times."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def get(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
            )
        return self._pool

    def close(self) -> None:
        """Stop the workers (what they had queued is cancelled); their CPU time goes to the log."""
        if self._pool is None:
            return
        from .steps import _children_cpu

        before = _children_cpu()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None
        log.info("feature workers closed: %.2f s of CPU in %d workers", _children_cpu() - before, self.workers)

    def __enter__(self) -> "FeaturePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ordered_parallel_map(
    function: Callable,
    items: Iterable,
    workers: int,
    *,
    chunk_size: int = 32,
    pool: FeaturePool | None = None,
    **kwargs,
) -> Iterator:
    """``function(item, **kwargs)`` for every item, in order, on ``workers`` processes (those of ``pool`` when
    given: they stay up for the next call; otherwise a pool of this call's own).

    At most ``2 * workers`` chunks are in flight, so a stream (the Hub) is read only as fast as it
    is processed and memory stays bounded.
    """
    iterator = iter(items)
    chunks = iter(lambda: list(islice(iterator, chunk_size)), [])
    if workers <= 1:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # per-utterance tensors are small: threads only cost (10x on a busy machine)
        try:
            for chunk in chunks:
                yield from _apply_to_chunk(function, chunk, kwargs)
        finally:
            torch.set_num_threads(threads)
        return
    own = pool is None
    pool = FeaturePool(workers) if own else pool
    executor = pool.get()
    pending: deque = deque()
    try:
        for chunk in chunks:
            pending.append(executor.submit(_apply_to_chunk, function, chunk, kwargs))
            if len(pending) >= 2 * pool.workers:
                yield from pending.popleft().result()
        while pending:
            yield from pending.popleft().result()
    finally:
        for future in pending:  # stopped early (an error): what is queued is not needed
            future.cancel()
        if own:
            pool.close()


def _apply_to_chunk(function: Callable, chunk: list, kwargs: dict) -> list:
    return [function(item, **kwargs) for item in chunk]


def _extract_part(part: Part, outs: list[Path], *, pool: FeaturePool, min_frames: int, max_train_frames: int) -> None:
    """Step ``features-<part>``: write features, text, ids and the filter report of one part (on ``pool``'s
    workers, or in this process for a part known to be small)."""
    workers = pool.workers
    counts: Counter = Counter()
    skipped: list[dict] = []
    frames_kept = 0
    options = dict(is_train=part.is_train, min_frames=min_frames, max_train_frames=max_train_frames)
    if part.size is not None and part.size < PARALLEL_MIN_UTTERANCES:
        workers = 1
    with (
        RaggedAppender(outs[0], outs[1], np.float16, (NUM_MEL_BINS,)) as features,
        RaggedAppender(outs[2], outs[3], np.uint8) as texts,
        RaggedAppender(outs[4], outs[5], np.uint8) as uids,
    ):
        for uid, name, status, payload, frames, text in ordered_parallel_map(
            featurize, part.utterances(), workers, pool=pool, **options
        ):
            counts["utterances"] += 1
            if status == "error":
                raise AudioError(f"{payload} [{part.name}, utterance {uid}]")
            if status != "ok":
                counts[status] += 1
                skipped.append({"id": uid, "audio": name, "reason": status, "frames": frames})
                if counts[status] <= LOGGED_SKIPS:
                    limits = {
                        "short": f" ({frames} frames, fewer than {min_frames})",
                        "long": f" ({frames} frames, more than {max_train_frames})",
                    }
                    log.warning("%s: skipped %s: %s%s", part.name, name, SKIP_REASONS[status], limits.get(status, ""))
                continue
            features.append(payload)
            texts.append(text.encode("utf-8"))
            uids.append(uid.encode("utf-8"))
            frames_kept += frames
            counts["kept"] += 1
            if counts["utterances"] % 5000 == 0:
                log.info("%s: %d utterances", part.name, counts["utterances"])
    if part.expected is not None and counts["utterances"] != part.expected:
        log.warning(
            "%s: read %d utterances, LibriSpeech has %d; the Hub copy may have changed",
            part.name,
            counts["utterances"],
            part.expected,
        )
    report = {
        "utterances": counts["utterances"],
        "kept": counts["kept"],
        "dropped": {reason: counts[reason] for reason in SKIP_REASONS},
        "frames": frames_kept,
        "hours": round(frames_kept * FRAME_SHIFT_MS / 1000 / 3600, 4),
        "skipped": skipped,
    }
    dropped = ", ".join(f"{counts[r]} {SKIP_REASONS[r]}" for r in SKIP_REASONS)
    log.info(
        "%s: %d utterances, kept %d (%.2f h); dropped: %s",
        part.name,
        counts["utterances"],
        counts["kept"],
        report["hours"],
        dropped,
    )
    if counts["kept"] == 0:
        raise InputError(
            f"no utterance of {part.name} survived the filters ({dropped})", todo="check the audio and transcripts"
        )
    outs[6].write_text(json.dumps(report, indent=1), encoding="utf-8")


def part_files(out_dir: Path, part: str) -> dict[str, Path]:
    """The files the loader reads for one part."""
    return {
        kind: out_dir / f"{part}.{kind}.npy"
        for kind in ("fbank", "fbank.offsets", "text", "text.offsets", "ids", "ids.offsets", "tgt", "tgt.offsets")
    }


# ---------------------------------------------------------------------------------------------- pipeline
def _order_splits(splits: Iterable[str]) -> list[str]:
    splits = set(splits)
    first = [s for s in SPLIT_ORDER if s in splits]
    return first + sorted(splits - set(first))


def _prepare(
    out_dir: Path,
    parts: list[Part],
    source: dict,
    *,
    vocab_size: int,
    seed: int,
    workers: int | None,
    min_frames: int,
    max_train_frames: int,
    valid_splits: list[str],
    test_splits: list[str],
) -> Path:
    if not any(p.is_train for p in parts):
        raise InputError(
            "no training part selected", todo="add a training split: the vocabulary is trained on its transcripts"
        )
    p = dict(
        source=source,
        parts={part.name: part.split for part in parts},
        vocab_size=vocab_size,
        seed=seed,
        min_frames=min_frames,
        max_train_frames=max_train_frames,
        pipeline_version=PIPELINE_VERSION,
    )
    options = dict(vocab_size=vocab_size, seed=seed, min_frames=min_frames, max_train_frames=max_train_frames)
    with SPEECH_DATA.build(out_dir, p) as runner:
        if runner is not None:
            _build(runner, parts, p, workers=workers, valid_splits=valid_splits, test_splits=test_splits, **options)
    return out_dir


def _extract_parts(
    runner: Preparation,
    parts: list[Part],
    reports: dict[str, Path],
    *,
    pool: FeaturePool,
    min_frames: int,
    max_train_frames: int,
) -> None:
    """Step ``features-<part>`` of every part (a step already done is skipped, and starts no worker)."""
    out_dir = runner.root
    for part in parts:
        files = part_files(out_dir, part.name)
        step_params = dict(
            part.params,
            min_frames=min_frames,
            pipeline_version=PIPELINE_VERSION,
            **({"max_train_frames": max_train_frames} if part.is_train else {}),
        )
        outs = [files[k] for k in ("fbank", "fbank.offsets", "text", "text.offsets", "ids", "ids.offsets")]
        runner.run(
            f"features-{part.name}",
            step_params,
            part.inputs,
            outs + [reports[part.name]],
            lambda tmps, part=part: _extract_part(
                part, tmps, pool=pool, min_frames=min_frames, max_train_frames=max_train_frames
            ),
        )


def _build(
    runner: Preparation,
    parts: list[Part],
    p: dict,
    *,
    vocab_size: int,
    seed: int,
    workers: int | None,
    min_frames: int,
    max_train_frames: int,
    valid_splits: list[str],
    test_splits: list[str],
) -> None:
    """The steps of :func:`_prepare`, under ``runner.root`` (beside the data set's folder)."""
    out_dir = runner.root
    workers = workers or default_workers()
    reports = {part.name: out_dir / "work" / "reports" / f"{part.name}.json" for part in parts}

    with FeaturePool(workers) as pool:  # one set of workers for every part's features
        _extract_parts(runner, parts, reports, pool=pool, min_frames=min_frames, max_train_frames=max_train_frames)

    train_texts = [
        f
        for part in parts
        if part.is_train
        for f in (part_files(out_dir, part.name)["text"], part_files(out_dir, part.name)["text.offsets"])
    ]
    spm_path = out_dir / SPM_MODEL

    def build_vocabulary(outs: list[Path]) -> None:
        def sentences() -> Iterator[str]:
            for data, offsets in zip(train_texts[0::2], train_texts[1::2]):
                texts = RaggedArray(data, offsets)
                for i in range(len(texts)):
                    yield texts.text(i)

        outs[0].write_bytes(train_sentencepiece(sentences(), vocab_size, seed=seed))
        log.info("trained a SentencePiece unigram vocabulary of %d pieces", vocab_size)

    runner.run(
        "vocabulary",
        {"vocab_size": vocab_size, "seed": seed, "model_type": "unigram", "pipeline_version": PIPELINE_VERSION},
        train_texts,
        [spm_path],
        build_vocabulary,
    )
    vocabulary = SpeechVocabulary.load(spm_path)

    for part in parts:
        files = part_files(out_dir, part.name)

        def encode(outs: list[Path], files: dict = files) -> None:
            texts = RaggedArray(files["text"], files["text.offsets"])
            ids = [vocabulary.encode(texts.text(i)) for i in range(len(texts))]
            write_ragged(
                lambda: ids,
                np.array([len(x) for x in ids], dtype=np.int64),
                outs[0],
                outs[1],
                token_dtype(len(vocabulary)),
            )

        runner.run(
            f"targets-{part.name}",
            {},
            [spm_path, files["text"], files["text.offsets"]],
            [files["tgt"], files["tgt.offsets"]],
            encode,
        )

    runner.commit(_manifest(out_dir, p, parts, reports, vocabulary, valid_splits, test_splits))
    log.info("steps run: %s; skipped: %s", runner.ran or "none", runner.skipped or "none")


def _manifest(
    out_dir: Path,
    p: dict,
    parts: list[Part],
    reports: dict[str, Path],
    vocabulary: SpeechVocabulary,
    valid_splits: list[str],
    test_splits: list[str],
) -> dict:
    files = [out_dir / SPM_MODEL]
    stats = {}
    for part in parts:
        report = read_json(reports[part.name])
        paths = part_files(out_dir, part.name)
        files += list(paths.values())
        targets = RaggedArray(paths["tgt"], paths["tgt.offsets"])
        stats[part.name] = {k: report[k] for k in ("utterances", "kept", "dropped", "frames", "hours")}
        stats[part.name]["tokens"] = int(targets.sizes.sum())
        stats[part.name]["unk"] = int(np.count_nonzero(np.asarray(targets.data) == UNK))
    splits = _order_splits(part.split for part in parts)
    manifest = {
        "format": FORMAT,
        "params": p,
        "splits": splits,
        "parts": {s: [part.name for part in parts if part.split == s] for s in splits},
        "train_split": "train",
        "valid_splits": [s for s in valid_splits if s in splits],
        "test_splits": [s for s in test_splits if s in splits],
        "vocab_size": len(vocabulary),
        "spm_model": SPM_MODEL,
        "feature_dim": NUM_MEL_BINS,
        "feature_dtype": "float16",
        "sample_rate": SAMPLE_RATE,
        "frame_shift_ms": FRAME_SHIFT_MS,
        "cmvn": "utterance",
        "stats": stats,
        "files": {str(f.relative_to(out_dir)): describe_file(f) for f in files},
    }
    return manifest  # committed last: its presence means "ready"


def prepare_speech_from_files(
    raw_dir: str | Path,
    out_dir: str | Path,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    seed: int = 1,
    workers: int | None = None,
    min_frames: int = MIN_FRAMES,
    max_train_frames: int = MAX_TRAIN_FRAMES,
) -> Path:
    """Prepare ``raw_dir/{train,valid,<test>...}.tsv`` (module docstring) into ``out_dir``."""
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    clear_digest_cache()
    splits = find_tsv_splits(raw_dir)
    parts = []
    for split in splits:
        utterances = read_tsv_split(raw_dir, split)  # checks header and files before any work
        audio_files = sorted({Path(u[1]) for u in utterances})
        parts.append(
            Part(
                split,
                split,
                lambda u=utterances: u,
                {"source": "files", "split": split},
                [raw_dir / f"{split}.tsv", *audio_files],
                size=len(utterances),
            )
        )
    source = {
        "kind": "files",
        "digests": {
            str(path.relative_to(raw_dir)) if path.is_relative_to(raw_dir) else str(path): file_digest(path)
            for part in parts
            for path in part.inputs
        },
    }
    return _prepare(
        out_dir,
        parts,
        source,
        vocab_size=vocab_size,
        seed=seed,
        workers=workers,
        min_frames=min_frames,
        max_train_frames=max_train_frames,
        valid_splits=["valid"],
        test_splits=splits[2:],
    )


def prepare_librispeech(
    out_dir: str | Path,
    *,
    splits: Iterable[str] = tuple(HUB_SPLITS),
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    seed: int = 1,
    workers: int | None = None,
    dataset: str = HUB_DATASET,
    config: str = HUB_CONFIG,
    revision: str | None = None,
    data_files: dict[str, list[str]] | None = None,
    cache_dir: str | None = None,
    min_frames: int = MIN_FRAMES,
    max_train_frames: int = MAX_TRAIN_FRAMES,
) -> Path:
    """Stream the chosen LibriSpeech Hub ``splits`` (names of :data:`HUB_SPLITS`) into ``out_dir``.

    ``data_files`` maps Hub split names to local parquet files with the Hub's layout; given, the
    Hub is not contacted (tests, or a local mirror of the parquet shards).
    """
    out_dir = Path(out_dir)
    clear_digest_cache()
    splits = list(dict.fromkeys(splits))
    unknown = [s for s in splits if s not in HUB_SPLITS]
    if unknown:
        raise ValueError(f"unknown LibriSpeech split(s) {unknown}; choose from: {', '.join(HUB_SPLITS)}")
    if data_files is not None:
        absent = [s for s in splits if s not in data_files]
        if absent:
            raise ValueError(f"data_files has no files for split(s) {absent}")
    parts, sizes = [], librispeech_sizes()
    for hub_split in splits:
        split, name = HUB_SPLITS[hub_split]
        files = None if data_files is None else [str(f) for f in data_files[hub_split]]
        params = {"source": "hub", "dataset": dataset, "config": config, "revision": revision, "split": hub_split}
        parts.append(
            Part(
                name,
                split,
                lambda s=hub_split, f=files: iter_hub_split(
                    s, dataset=dataset, config=config, revision=revision, data_files=f, cache_dir=cache_dir
                ),
                params,
                [Path(f) for f in files] if files else [],
                expected=sizes[hub_split] if data_files is None and dataset == HUB_DATASET else None,
            )
        )
    source = {
        "kind": "hub",
        "dataset": dataset,
        "config": config,
        "revision": revision,
        "data_files": None if data_files is None else {s: [file_digest(f) for f in data_files[s]] for s in splits},
    }
    return _prepare(
        out_dir,
        parts,
        source,
        vocab_size=vocab_size,
        seed=seed,
        workers=workers,
        min_frames=min_frames,
        max_train_frames=max_train_frames,
        valid_splits=["dev_clean", "dev_other"],
        test_splits=["test_clean", "test_other"],
    )
