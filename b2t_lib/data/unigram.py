r"""The unigram baseline of a data set: the bar a model must get clearly below to have trained.

A model that ignores its input and its context and only knows how often each target token occurs
in the training data predicts every token with the same distribution, the add-one smoothed
training unigram. Its cross entropy on the validation targets (end-of-sentence included, as the
trainer's validation NLL counts them) is

.. math:: H = -\frac{1}{L}\sum_{t=1}^{L} \log_2 \frac{n(y_t) + 1}{N + V}

(:math:`n(w)` = training count of id :math:`w`, :math:`N` = training target tokens, :math:`V` =
dictionary entries, :math:`y_1 \dots y_L` the validation targets). A run whose validation NLL
stays near :math:`H` has learned nothing beyond token frequencies: "Training failed"
(:mod:`b2t_lib.train.failure`).

:func:`unigram_cross_entropy` is the one computation. The value is computed once per data set and
stored with it: data pipelines write it into their manifest at preparation
(``manifest["unigram"]["valid"]["bits_per_token"]``, translation, headline and LM data), and data
prepared before that existed gets it on first use, cached in :data:`CACHE_NAME` next to the
manifest (:func:`stored_unigram_baseline`, :func:`cached_unigram_baseline`). The cache records the
manifest's checksum, so data prepared again is measured again.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Callable

import numpy as np

from ..files import write_json_atomic
from .steps import MANIFEST, file_digest, read_json

log = logging.getLogger("b2t_lib.data")


CACHE_NAME = "unigram_baseline.json"


def unigram_cross_entropy(train_ids: np.ndarray, ids: np.ndarray, vocab_size: int) -> float:
    """Bits per token of ``ids`` under the add-one-smoothed unigram distribution of ``train_ids``
    over ``vocab_size`` entries (the formula of this module)."""
    train_ids = np.asarray(train_ids, dtype=np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) == 0:
        raise ValueError("the unigram baseline needs at least one validation token")
    counts = np.bincount(train_ids, minlength=vocab_size).astype(np.float64)  # (V,)
    if len(counts) > vocab_size:
        raise ValueError(f"training ids reach {len(counts) - 1}, beyond the dictionary's {vocab_size} entries")
    log2_p = np.log2(counts + 1.0) - math.log2(len(train_ids) + vocab_size)  # (V,)
    return float(-log2_p[ids].mean())


def unigram_record(bits: float) -> dict:
    """What a manifest stores for one split: ``{"bits_per_token", "ppl"}``."""
    return {"bits_per_token": round(bits, 6), "ppl": round(2.0**bits, 4)}


def stored_unigram_baseline(data_dir: str | Path) -> float | None:
    """The validation unigram baseline stored with ``data_dir`` (its manifest, else a cache that
    matches the manifest), or None when it has not been computed yet."""
    data_dir = Path(data_dir)
    manifest = read_json(data_dir / MANIFEST)
    if manifest is None:
        return None
    stored = (manifest.get("unigram") or {}).get("valid", {}).get("bits_per_token")
    if stored is not None:
        return float(stored)
    cache = read_json(data_dir / CACHE_NAME)
    if cache and cache.get("manifest_digest") == file_digest(data_dir / MANIFEST):
        return float(cache["valid"]["bits_per_token"])
    return None


def cached_unigram_baseline(data_dir: str | Path, compute: Callable[[], float]) -> float:
    """The stored baseline of ``data_dir``; else ``compute()`` it once and cache it next to the
    manifest (atomically; a folder that cannot be written only loses the cache, with a warning)."""
    data_dir = Path(data_dir)
    stored = stored_unigram_baseline(data_dir)
    if stored is not None:
        return stored
    bits = float(compute())
    if (data_dir / MANIFEST).is_file():
        cache = {"manifest_digest": file_digest(data_dir / MANIFEST), "valid": unigram_record(bits)}
        try:
            write_json_atomic(data_dir / CACHE_NAME, cache)
        except OSError as err:
            log.warning(
                "could not cache the unigram baseline in %s (%s); it is computed again next time",
                data_dir / CACHE_NAME,
                err,
            )
    return round(bits, 6)
