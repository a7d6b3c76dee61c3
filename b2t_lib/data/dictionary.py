"""A fairseq-compatible token dictionary (``dict.txt``).

fairseq's dictionary puts four special symbols first, ``<s>=0, <pad>=1, </s>=2, <unk>=3``
(:mod:`b2t_lib.special_tokens`), and then every other symbol sorted by descending training count, ties
broken alphabetically. ``fairseq-preprocess`` pads the size to a multiple of 8 with dummy symbols
``madeupword0000``, ``madeupword0001``, ... so the embedding matrix has GPU-friendly shapes.

The file format is one ``symbol count`` pair per line, specials *not* listed. A dictionary saved
here loads in fairseq, and a fairseq ``dict.txt`` loads here with the same ids, so fairseq
checkpoints can be scored with this code.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

from ..special_tokens import BOS, EOS, PAD, SPECIAL_TOKENS, UNK, SpecialIds


class Dictionary(SpecialIds):
    """Maps symbols (BPE pieces) to integer ids and back."""

    def __init__(self) -> None:
        self.symbols: list[str] = []
        self.counts: list[int] = []
        self.indices: dict[str, int] = {}
        for symbol in SPECIAL_TOKENS:
            self.add_symbol(symbol, 0)
        self.nspecial = len(SPECIAL_TOKENS)
        assert (self.indices["<s>"], self.indices["<pad>"], self.indices["</s>"], self.indices["<unk>"]) == (
            BOS,
            PAD,
            EOS,
            UNK,
        )

    # ------------------------------------------------------------------ lookup
    def __len__(self) -> int:
        return len(self.symbols)

    def __getitem__(self, index: int) -> str:
        return self.symbols[index] if 0 <= index < len(self.symbols) else self.symbols[UNK]

    def __contains__(self, symbol: str) -> bool:
        return symbol in self.indices

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dictionary) and self.symbols == other.symbols

    def index(self, symbol: str) -> int:
        """Id of ``symbol``; ``<unk>`` for a symbol never seen in training."""
        return self.indices.get(symbol, UNK)

    def encode_line(self, line: str) -> list[int]:
        """Whitespace-split ``line`` (already tokenized and BPE-segmented) into ids, without EOS."""
        return [self.indices.get(symbol, UNK) for symbol in line.split()]

    def string(self, ids: Iterable[int]) -> str:
        """Ids back to a space-joined symbol string (specials included as text)."""
        return " ".join(self[int(i)] for i in ids)

    # ------------------------------------------------------------------ building
    def add_symbol(self, symbol: str, n: int = 1) -> int:
        if symbol in self.indices:
            index = self.indices[symbol]
            self.counts[index] += n
            return index
        if not symbol or any(ch.isspace() for ch in symbol):
            raise ValueError(f"dictionary symbols must be non-empty and contain no whitespace, got {symbol!r}")
        self.indices[symbol] = len(self.symbols)
        self.symbols.append(symbol)
        self.counts.append(n)
        return self.indices[symbol]

    @classmethod
    def build(cls, counts: Counter, *, threshold: int = 0, nwords: int = -1, padding_factor: int = 8) -> "Dictionary":
        """A dictionary from symbol counts, finalized like ``fairseq-preprocess``.

        ``threshold`` drops symbols seen fewer times, ``nwords`` keeps at most that many symbols
        (specials included, -1 = all), ``padding_factor`` pads ``len(dictionary)`` to a multiple.
        """
        dictionary = cls()
        counts = Counter({s: c for s, c in counts.items() if s not in SPECIAL_TOKENS})
        # Descending count, then alphabetical, so the result does not depend on counting order.
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        budget = len(ordered) if nwords < 0 else max(nwords - dictionary.nspecial, 0)
        for symbol, count in ordered[:budget]:
            if count >= threshold:
                dictionary.add_symbol(symbol, count)
        dictionary.pad_to_multiple(padding_factor)
        return dictionary

    def pad_to_multiple(self, padding_factor: int) -> None:
        """Append ``madeupwordNNNN`` symbols (count 0) until the size is a multiple."""
        if padding_factor > 1:
            i = 0
            while len(self) % padding_factor != 0:
                self.add_symbol(f"madeupword{i:04d}", 0)
                i += 1

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        """Write fairseq's ``dict.txt``: ``symbol count`` per line, specials left out."""
        lines = [f"{s} {c}\n" for s, c in zip(self.symbols[self.nspecial :], self.counts[self.nspecial :])]
        Path(path).write_text("".join(lines), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "Dictionary":
        """Read a ``dict.txt`` written by :meth:`save` or by ``fairseq-preprocess``."""
        dictionary = cls()
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"dictionary file {path} does not exist; prepare the data first")
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            parts = line.rstrip().rsplit(" ", 1)
            flag_overwrite = False
            if len(parts) == 2 and parts[1] == "#fairseq:overwrite":  # fairseq's optional flag
                parts = parts[0].rsplit(" ", 1)
                flag_overwrite = True
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise ValueError(f"{path}:{lineno}: expected 'symbol count', got {line!r}")
            symbol, count = parts[0], int(parts[1])
            if symbol in dictionary:
                if not flag_overwrite:
                    raise ValueError(f"{path}:{lineno}: duplicate symbol {symbol!r}")
                dictionary.counts[dictionary.index(symbol)] = count
                continue
            dictionary.add_symbol(symbol, count)
        return dictionary
