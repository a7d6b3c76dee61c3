"""Moses text processing in pure Python (``sacremoses``) and corpus cleaning.

The WMT'14 En-De data of Vaswani et al., which the paper trains on, went through Moses scripts
(data_sources.md 2a). Their pure-Python equivalents in ``sacremoses``:

* ``normalize-punctuation.perl`` + ``remove-non-printing-char.perl``
  -> ``MosesPunctNormalizer(lang, pre_replace_unicode_punct=True, post_remove_control_chars=True)``
* ``tokenizer.perl -l lang`` -> ``MosesTokenizer(lang).tokenize(..., escape=False)``; ``-a``
  (split hyphens into ``@-@``) is optional: Google's data (the paper's) did not use it, fairseq's
  ``prepare-wmt14en2de.sh`` does.
* ``clean-corpus-n.perl -ratio 1.5 1 80`` (training data only) -> :func:`keep_pair`.
* ``detokenizer.perl`` -> ``MosesDetokenizer(lang)``, used before SacreBLEU.

We tokenize with ``escape=False``: Moses' XML escaping (``&amp;``, ``&#124;``) only protects its
factor separator ``|``, which nothing here uses, and skipping it keeps the detokenized output
comparable with the raw references.
"""
from __future__ import annotations

import multiprocessing
import os
from functools import lru_cache
from typing import Iterable, Iterator

# Characters Python or other tools may treat as line breaks; inside a corpus line they would
# break the one-example-per-line alignment of the files, so they become spaces.
_LINE_BREAKS = str.maketrans({c: " " for c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def clean_raw_line(line: str) -> str:
    """A raw corpus line without its newline and with no inner line-break characters."""
    return line.rstrip("\n").translate(_LINE_BREAKS).strip()


@lru_cache(maxsize=None)
def _moses(lang: str):
    from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer

    normalizer = MosesPunctNormalizer(lang, pre_replace_unicode_punct=True, post_remove_control_chars=True)
    return normalizer, MosesTokenizer(lang), MosesDetokenizer(lang)


def moses_tokenize(line: str, lang: str, *, aggressive_dash_splits: bool = False) -> str:
    """Normalize punctuation, then Moses-tokenize: raw text -> space-separated tokens."""
    normalizer, tokenizer, _ = _moses(lang)
    text = normalizer.normalize(line)
    return tokenizer.tokenize(text, aggressive_dash_splits=aggressive_dash_splits,
                              escape=False, return_str=True).strip()


def moses_detokenize(tokens: str | list[str], lang: str) -> str:
    """Moses-detokenize (``@-@`` and spaces around punctuation undone), no XML unescaping."""
    _, _, detokenizer = _moses(lang)
    if isinstance(tokens, str):
        tokens = tokens.split()
    return detokenizer.detokenize(tokens, unescape=False)


def keep_pair(src_tokens: int, tgt_tokens: int, *, min_len: int = 1, max_len: int = 80,
              max_ratio: float = 1.5) -> bool:
    """``clean-corpus-n.perl``: both sides have ``min_len..max_len`` tokens and neither side is
    more than ``max_ratio`` times longer than the other.

    .. math:: \\text{keep} \\iff m \\le |x|, |y| \\le M \\;\\wedge\\; \\max(|x|/|y|, |y|/|x|) \\le r
    """
    if not (min_len <= src_tokens <= max_len and min_len <= tgt_tokens <= max_len):
        return False
    return src_tokens <= max_ratio * tgt_tokens and tgt_tokens <= max_ratio * src_tokens


def _tokenize_chunk(args: tuple) -> list[tuple[str, str]]:
    pairs, src_lang, tgt_lang, aggressive = args
    return [(moses_tokenize(s, src_lang, aggressive_dash_splits=aggressive),
             moses_tokenize(t, tgt_lang, aggressive_dash_splits=aggressive)) for s, t in pairs]


def _chunks(pairs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    chunk: list[tuple[str, str]] = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def default_workers() -> int:
    """The CPU cores this process may use (at most 32)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 32))


def tokenize_pairs(pairs: Iterable[tuple[str, str]], src_lang: str, tgt_lang: str, *,
                   aggressive_dash_splits: bool = False, workers: int = 1, chunk_size: int = 2000,
                   start_method: str = "spawn") -> Iterator[tuple[str, str]]:
    """Moses-tokenize (source, target) pairs, in order, on ``workers`` processes.

    sacremoses normalizes and tokenizes roughly 5,000 short lines per second per core, so
    WMT's 9M lines take about 30 CPU-minutes; the pool divides that by the number of cores.
    """
    chunks = ((chunk, src_lang, tgt_lang, aggressive_dash_splits) for chunk in _chunks(pairs, chunk_size))
    if workers <= 1:
        for args in chunks:
            yield from _tokenize_chunk(args)
        return
    # 'spawn' does not inherit the parent's threads (torch, tokenizers), so it cannot deadlock;
    # it costs a few seconds of imports per worker, nothing next to WMT's 30 CPU-minutes.
    with multiprocessing.get_context(start_method).Pool(workers) as pool:
        for tokenized in pool.imap(_tokenize_chunk, chunks, chunksize=1):
            yield from tokenized
