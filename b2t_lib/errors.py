"""One error style for every command: a mistake in what the user gave ends in one line on stderr,

    error: <what happened> (<file>:<line> where there is one): <what to do>

and exit code 2, with no traceback; an internal bug still shows its traceback.

A missing third-party package (the command's environment lacks one of the course's dependencies) ends the same
way. A user error is any exception that derives from :class:`UserError` (the library's own error classes, such as
``ConfigError``, ``CheckpointMismatch``, ``AudioError``, ``HeadlineFileError``, do), raised anywhere below a
command. Every entry point (``python -m b2t_lib``, the four data scripts, the scripts ``make`` calls) wraps its
``main`` in :func:`run_command`, the one place that turns such an error into that line. A closed pipe
(``python -m b2t_lib preset mt | head``) ends quietly.

This module imports nothing from the library, so any module may raise a :class:`UserError`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A mistake in a command's input (an option, a file, a folder), not a bug of the library.

    ``what``: what happened; ``where``: the file (and line) it is about, if any; ``todo``: what to do about it.
    Subclasses that also derive from a built-in class (``ValueError``, ``FileNotFoundError``) stay catchable as it.
    """

    def __init__(self, what: str, *, where: str | os.PathLike | None = None, todo: str | None = None):
        self.what, self.where, self.todo = str(what), (None if where is None else str(where)), todo
        super().__init__(self.line())

    def line(self) -> str:
        """The message without the ``error:`` prefix: ``what (where): todo``."""
        text = self.what
        if self.where:
            text += f" ({self.where})"
        if self.todo:
            text += f": {self.todo}"
        return text

    def __str__(self) -> str:
        return self.line()


def located(path: str | os.PathLike, line: int | None = None) -> str:
    """``path:line`` (or only the path): the ``where`` of a message about one line of a file."""
    return f"{path}:{line}" if line is not None else str(path)


def decode_error(path: str | os.PathLike, data: bytes, err: UnicodeDecodeError) -> UserError:
    """The :class:`UserError` of a file that is not UTF-8: its line and column, counted from 1."""
    line = data.count(b"\n", 0, err.start) + 1
    column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
    return UserError(
        f"byte 0x{data[err.start]:02x} is not UTF-8 (column {column})",
        where=located(path, line),
        todo="re-encode the file as UTF-8 (for example `iconv -f latin1 -t utf-8`)",
    )


def message(err: BaseException) -> str:
    """The one line printed for a user error."""
    text = err.line() if isinstance(err, UserError) else str(err)
    return "error: " + " ".join(text.split())  # one line, whatever the message held


def missing_package(module: str) -> UserError:
    """The error of a third-party package that the environment lacks (a command's import found no module)."""
    return UserError(
        f"the Python package that provides `{module}` is not installed in this environment",
        todo="install the course's dependencies (`make setup`, or `pip install -e .` in your own environment)",
    )


def run_command(main: Callable[..., int | None], *args, **kwargs) -> int:
    """Call ``main(*args, **kwargs)``; return its exit code, or print a user error's one line and return 2.

    Anything else propagates with its traceback: it is a bug to report, not a mistake to correct.
    """
    try:
        code = main(*args, **kwargs)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
        return 0 if code is None else int(code)
    except UserError as err:
        print(message(err), file=sys.stderr)
        return EXIT_USER_ERROR
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] in ("b2t_lib", ""):
            raise  # a module of the library itself is missing: a bug (or a broken checkout), not the environment
        print(message(missing_package(err.name)), file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with the one error style: a bad option raises a :class:`UserError` (one line, exit code 2
    through :func:`run_command`) instead of printing the usage block."""

    def error(self, message: str):  # argparse's hook for every usage error
        raise UserError(message, todo=f"see `{self.prog} --help`")
