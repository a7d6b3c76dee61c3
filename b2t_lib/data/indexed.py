"""Memory-mapped ragged arrays: many variable-length sequences in two ``.npy`` files.

A split with sentences :math:`x^{(0)}, \\dots, x^{(n-1)}` is stored as

* ``<name>.npy``: all items concatenated, :math:`x^{(0)} \\Vert x^{(1)} \\Vert \\dots` (token ids as
  ``uint16`` when the vocabulary fits, else ``int32``; or UTF-8 bytes for raw text);
* ``<name>.offsets.npy``: ``int64`` offsets :math:`o` with :math:`x^{(i)} = \\text{data}[o_i:o_{i+1}]`.

Both are opened with ``np.load(mmap_mode="r")``: the operating system pages in only the rows a
batch touches, so a 4.5M-sentence training set costs no RAM up front, and ``.npy`` headers make a
truncated file fail loudly on open instead of returning garbage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import numpy as np


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def write_ragged(
    rows: Callable[[], Iterable[np.ndarray | list[int] | bytes]],
    lengths: np.ndarray,
    data_path: Path,
    offsets_path: Path,
    dtype: np.dtype,
) -> None:
    """Write rows of known ``lengths`` without holding them all in memory.

    ``rows`` is called once and must yield exactly ``len(lengths)`` rows of those lengths; the
    data file is pre-allocated from the lengths and filled row by row.
    """
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Written by file object, not by name: np.save would append '.npy' to temporary names.
    with open(offsets_path, "wb") as f:
        np.save(f, offsets)
    total = int(offsets[-1])
    data = np.lib.format.open_memmap(data_path, mode="w+", dtype=dtype, shape=(total,)) if total else None
    count = 0
    for i, row in enumerate(rows()):
        if i >= len(lengths):
            raise ValueError(f"more rows than the {len(lengths)} announced")
        row = np.frombuffer(row, dtype=np.uint8) if isinstance(row, bytes) else np.asarray(row, dtype=dtype)
        if len(row) != lengths[i]:
            raise ValueError(f"row {i} has length {len(row)}, announced {lengths[i]}")
        if total:
            data[offsets[i] : offsets[i + 1]] = row
        count += 1
    if count != len(lengths):
        raise ValueError(f"got {count} rows, announced {len(lengths)}")
    if data is not None:
        data.flush()
        del data
    else:  # an empty memmap cannot be created; an empty array says the same
        with open(data_path, "wb") as f:
            np.save(f, np.zeros(0, dtype=dtype))


class RaggedArray:
    """Read side of :func:`write_ragged`: ``len(a)``, ``a[i]`` -> 1-D numpy view, ``a.sizes``."""

    def __init__(self, data_path: Path, offsets_path: Path) -> None:
        try:
            self.data = np.load(data_path, mmap_mode="r")
            self.offsets = np.load(offsets_path, mmap_mode="r")
        except (ValueError, OSError, EOFError) as error:
            raise ValueError(
                f"cannot open {data_path} / {offsets_path} ({error}); the files are "
                f"damaged: re-run the data preparation to rebuild them"
            ) from error
        if len(self.offsets) == 0 or int(self.offsets[-1]) != len(self.data):
            raise ValueError(f"{offsets_path} does not match {data_path}; re-run the data preparation")
        self.sizes = np.diff(self.offsets).astype(np.int64)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} rows")
        return self.data[self.offsets[i] : self.offsets[i + 1]]

    def text(self, i: int) -> str:
        """Row ``i`` decoded as UTF-8 (for arrays that store raw text bytes)."""
        return bytes(self[i]).decode("utf-8")


class RaggedAppender:
    """Write side for rows whose number and lengths are not known in advance (a stream).

    Same files as :func:`write_ragged`, but rows are appended as they come, so a streamed data set
    is written in one pass without holding it. Rows may have a fixed trailing shape
    (``row_shape=(80,)``: each row is a ``(frames, 80)`` matrix; offsets then count frames).
    The ``.npy`` header is written first with a zero length and rewritten by :meth:`close` with
    the final one; numpy pads headers so that the length field can grow in place (the same
    header size for any row count), which :meth:`close` checks.
    """

    def __init__(self, data_path: Path, offsets_path: Path, dtype: np.dtype, row_shape: tuple[int, ...] = ()) -> None:
        self.data_path, self.offsets_path = Path(data_path), Path(offsets_path)
        self.dtype, self.row_shape = np.dtype(dtype), tuple(row_shape)
        self.lengths: list[int] = []
        self._file = open(self.data_path, "wb")
        self._write_header(0)
        self._data_start = self._file.tell()

    def _write_header(self, rows: int) -> None:
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": (rows, *self.row_shape),
        }
        np.lib.format.write_array_header_1_0(self._file, header)

    def append(self, row) -> None:
        row = np.frombuffer(row, dtype=np.uint8) if isinstance(row, bytes) else np.asarray(row, dtype=self.dtype)
        if row.shape[1:] != self.row_shape:
            raise ValueError(f"row of shape {row.shape} does not end in the row shape {self.row_shape}")
        self._file.write(np.ascontiguousarray(row, dtype=self.dtype).tobytes())
        self.lengths.append(len(row))

    def extend(self, lengths, flat) -> None:
        """Append many rows at once: ``flat`` holds them concatenated, ``lengths`` says where each ends (a
        chunk of a corpus encoded by a worker process arrives this way)."""
        flat = np.frombuffer(flat, dtype=np.uint8) if isinstance(flat, bytes) else np.asarray(flat, dtype=self.dtype)
        lengths = [int(n) for n in lengths]
        if flat.shape[1:] != self.row_shape or len(flat) != sum(lengths):
            raise ValueError(f"{len(lengths)} rows of {sum(lengths)} items in all, but {flat.shape} given")
        self._file.write(np.ascontiguousarray(flat, dtype=self.dtype).tobytes())
        self.lengths.extend(lengths)

    def close(self) -> None:
        """Finish the header and write the offsets; the files are then readable by :class:`RaggedArray`."""
        if self._file.closed:
            return
        self._file.seek(0)
        self._write_header(sum(self.lengths))
        if self._file.tell() != self._data_start:
            raise RuntimeError(f"the .npy header of {self.data_path} changed size; this is a bug")
        self._file.close()
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(np.asarray(self.lengths, dtype=np.int64), out=offsets[1:])
        with open(self.offsets_path, "wb") as f:
            np.save(f, offsets)

    def __enter__(self) -> "RaggedAppender":
        return self

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is None:
            self.close()
        else:
            self._file.close()
