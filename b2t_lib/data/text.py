"""Moses text processing in pure Python (``sacremoses``) and corpus cleaning.

The WMT'14 En-De data of Vaswani et al., which the paper trains on, went through Moses scripts
(docs/data.md §2a). Their pure-Python equivalents in ``sacremoses``:

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

Headline generation (Gigaword, Rush et al. 2015) uses other tokenizers, chosen by name
(:data:`TOKENIZERS`, stored in the data set's manifest so that decoding matches):

* ``"none"`` -- the text is already tokenized (the Gigaword release): split on whitespace;
* ``"rush"`` -- raw text gets the Rush et al. normalization (:func:`rush_normalize`): Penn
  Treebank tokenization, lower case, every digit -> ``#``.
"""

from __future__ import annotations

import re
from functools import lru_cache


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
    return tokenizer.tokenize(
        text, aggressive_dash_splits=aggressive_dash_splits, escape=False, return_str=True
    ).strip()


def moses_detokenize(tokens: str | list[str], lang: str) -> str:
    """Moses-detokenize (``@-@`` and spaces around punctuation undone), no XML unescaping."""
    _, _, detokenizer = _moses(lang)
    if isinstance(tokens, str):
        tokens = tokens.split()
    return detokenizer.detokenize(tokens, unescape=False)


def keep_pair(
    src_tokens: int, tgt_tokens: int, *, min_len: int = 1, max_len: int | None = 80, max_ratio: float | None = 1.5
) -> bool:
    """``clean-corpus-n.perl``: both sides have ``min_len..max_len`` tokens and neither side is
    more than ``max_ratio`` times longer than the other.

    .. math:: \\text{keep} \\iff m \\le |x|, |y| \\le M \\;\\wedge\\; \\max(|x|/|y|, |y|/|x|) \\le r

    ``max_len=None`` drops the upper limit and ``max_ratio=None`` the ratio test (a headline is
    meant to be much shorter than its article).
    """
    if src_tokens < min_len or tgt_tokens < min_len:
        return False
    if max_len is not None and (src_tokens > max_len or tgt_tokens > max_len):
        return False
    if max_ratio is None:
        return True
    return src_tokens <= max_ratio * tgt_tokens and tgt_tokens <= max_ratio * src_tokens


# ---------------------------------------------------------------------- headline data
TOKENIZERS = ("moses", "none", "rush")
# Typographic quotes and dashes -> the ASCII forms the Penn Treebank rules know (they turn
# '"' into `` and '' and keep '--' as one token, as in the Gigaword release).
_PTB_PRE = str.maketrans(
    {
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u2013": "--",
        "\u2014": "--",
    }
)
_DIGIT = re.compile(r"\d")


@lru_cache(maxsize=None)
def _treebank():
    from nltk.tokenize import TreebankWordTokenizer  # pure regular expressions, no data download

    return TreebankWordTokenizer()


def digits_to_hash(text: str) -> str:
    """Every digit -> ``#`` (Rush et al.'s ``remove_digits``: ``7.07`` -> ``#.##``)."""
    return _DIGIT.sub("#", text)


def rush_normalize(line: str) -> str:
    """Raw text -> the form of the Gigaword headline data (Rush et al. 2015, docs/data.md §2b).

    Their data took the tokens of the Stanford (Penn Treebank style) parses of Annotated Gigaword,
    lower-cased them and replaced every digit by ``#``. Here: NLTK's ``TreebankWordTokenizer``
    (a port of the Penn Treebank tokenizer script, with brackets as ``-LRB-`` ...), then lower
    case, then digits -> ``#``::

        "Australia's deficit fell 7.07 billion (US) dollars."
        -> "australia 's deficit fell #.## billion -lrb- us -rrb- dollars ."

    The parser's tokenizer differs in rare cases (``AT&T`` stays one token there, two here).
    """
    tokens = _treebank().tokenize(line.translate(_PTB_PRE), convert_parentheses=True)
    return digits_to_hash(" ".join(tokens).lower())


def tokenize_line(line: str, lang: str, tokenizer: str = "moses", *, aggressive_dash_splits: bool = False) -> str:
    """One raw line -> space-separated tokens, by the named tokenizer (:data:`TOKENIZERS`)."""
    if tokenizer == "moses":
        return moses_tokenize(line, lang, aggressive_dash_splits=aggressive_dash_splits)
    if tokenizer == "none":
        return " ".join(line.split())
    if tokenizer == "rush":
        return rush_normalize(line)
    raise ValueError(f"unknown tokenizer {tokenizer!r}; known: {', '.join(TOKENIZERS)}")
