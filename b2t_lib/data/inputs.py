"""What the data pipelines read from disk, read one way: text files, names that become paths, and the errors.

* :func:`read_lines`: the lines of a UTF-8 text file, split on ``\\n`` only (a stray ``\\r`` or U+2028 cannot
  shift the alignment of parallel files), a byte-order mark removed from the first line (an editor's BOM would
  otherwise become part of the first word, and of the dictionary), and a byte that is not UTF-8 reported with
  its file, line and column (:func:`b2t_lib.errors.decode_error`).
* :func:`inside`: a name read from a file (a split or part name in ``manifest.json``, an audio path in a
  ``.tsv``) joined to its folder, or refused when it would lead out of it (``../x``, an absolute path).
* :class:`InputError`, :class:`MissingInputError`, :class:`SourceError`: the user errors of bad inputs (one
  line, exit code 2 under :func:`b2t_lib.errors.run_command`); they stay catchable as ``ValueError``,
  ``FileNotFoundError`` and ``RuntimeError``.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import Iterator

from ..errors import UserError, decode_error, located

BOM = "\ufeff"


class InputError(UserError, ValueError):
    """An input file (or a prepared data set) that cannot be used as it is; the message names it."""


class MissingInputError(UserError, FileNotFoundError):
    """An input file or folder that does not exist; the message says what is needed."""


class SourceError(UserError, RuntimeError):
    """A source that cannot be used (an archive of the wrong layout, a download that failed or changed); the
    message names it and what to use instead."""


def strip_bom(text: str) -> str:
    """``text`` without a leading byte-order mark."""
    return text[1:] if text.startswith(BOM) else text


def decode_line(path: str | os.PathLike, lineno: int, raw: bytes) -> str:
    """One line of ``path`` (bytes, without its newline) as text; a non-UTF-8 byte raises an :class:`InputError`
    naming ``path:lineno`` and the column."""
    if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        found = decode_error(path, raw, err)  # the column within this line
        raise InputError(found.what, where=located(path, lineno), todo=found.todo) from None


def read_lines(path: str | os.PathLike) -> Iterator[str]:
    """The lines of the UTF-8 file ``path`` without their ``\\n`` (module docstring); a last line without a
    newline counts as a line."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):  # binary lines: split on b"\n" only
            yield decode_line(path, lineno, raw[:-1] if raw.endswith(b"\n") else raw)


def inside(folder: str | os.PathLike, name: str, *, what: str, where: str | os.PathLike | None = None) -> Path:
    """``folder / name`` when ``name`` is a relative path that stays inside ``folder``; otherwise an
    :class:`InputError` (``what`` names the kind of name, ``where`` the file it was read from).

    The check is on the name itself: ``..`` that leads out, an absolute path, an empty name or a NUL byte is
    refused; a symbolic link that the user placed inside ``folder`` is followed like any file.
    """
    problem = None
    if not isinstance(name, str) or not name.strip():
        problem = f"the {what} {name!r} is not a name"
    elif "\x00" in name or os.path.isabs(name):
        problem = f"the {what} {name!r} is an absolute path"
    else:
        normal = os.path.normpath(name)
        if normal in (".", "..") or normal.startswith(".." + os.sep):
            problem = f"the {what} {name!r} leads out of {folder}"
    if problem:
        raise InputError(problem, where=where, todo=f"give a path inside {folder}")
    return Path(folder) / name
