"""Chunks of a corpus through worker processes, results back in order.

The preparation steps whose work grows with the corpus (tokenization, BPE segmentation, binarization)
each turn one chunk of lines into one result that depends on nothing but those lines and some
read-only state (the merges, the dictionary). :func:`map_chunks` runs such a function over the
chunks on ``workers`` processes and yields the results in the corpus order, so the files written
from them are byte for byte those one process writes.

At most ``2 * workers`` chunks are in flight: the corpus is read as fast as the workers consume it,
never all at once (WMT'14 is 4.5M pairs). Workers are started with ``spawn``: they do not inherit
the parent's threads (torch's, a tokenizer's), so they cannot deadlock on a lock held at fork time;
each pays a few seconds of imports, which is why callers use one process below a size threshold.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from typing import Any, Callable, Iterable, Iterator


def default_workers() -> int:
    """The CPU cores this process may use (at most 32)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 32))


def chunks(items: Iterable, size: int) -> Iterator[list]:
    """``items`` in consecutive lists of ``size`` (the last one may be shorter)."""
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def map_chunks(
    function: Callable[[list], Any],
    items: Iterable,
    *,
    workers: int,
    chunk_size: int = 2000,
    initializer: Callable[..., None] | None = None,
    initargs: tuple = (),
    start_method: str = "spawn",
) -> Iterator[Any]:
    """``function(chunk)`` for every chunk of ``chunk_size`` items, in order, on ``workers`` processes.

    ``function`` and ``initializer`` must be module-level functions (the workers import them).
    ``initializer(*initargs)`` runs once per worker (with one worker: once, in this process) and
    typically loads the read-only state ``function`` uses into a module global. ``start_method``: see above
    (tests use ``fork`` to save the imports).
    """
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        for chunk in chunks(items, chunk_size):
            yield function(chunk)
        return
    with multiprocessing.get_context(start_method).Pool(workers, initializer, initargs) as pool:
        pending: deque = deque()
        for chunk in chunks(items, chunk_size):
            pending.append(pool.apply_async(function, (chunk,)))
            if len(pending) >= 2 * workers:  # bounded: read ahead only what the workers can take
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
