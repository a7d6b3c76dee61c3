"""What every checker shares: the result object, the registry, calling the learner's code, and diagnosing a mismatch.

A checker compares the learner's answer with the reference on random inputs. When they differ it compares the
answer with a list of *known mistakes* (each computed from the same inputs) and names the first one that matches,
so the message says what is wrong, not only that something is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

SOLVED, NOT_SOLVED, WRONG = "solved", "not solved yet", "wrong"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check; its repr is one stable line, which is what a notebook cell shows."""

    exercise: str
    title: str
    status: str
    message: str = ""

    @property
    def solved(self) -> bool:
        return self.status == SOLVED

    def __repr__(self) -> str:
        text = f"Exercise {self.exercise} ({self.title}): {self.status}"
        return f"{text}. {self.message}" if self.message else text

    __str__ = __repr__


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    check: Callable[..., CheckResult]


EXERCISES: dict[str, Exercise] = {}


class Wrong(Exception):
    """Raised inside a checker: the answer is wrong, and the message says how."""


class _NotSolved(Exception):
    pass


def exercise(exercise_id: str, title: str):
    """Register a checker. It raises :class:`Wrong` for a wrong answer and returns a short note when it is right."""

    def decorate(check: Callable[..., str]) -> Callable[..., CheckResult]:
        if exercise_id in EXERCISES:
            raise ValueError(f"exercise {exercise_id} is registered twice")

        @functools.wraps(check)
        def run(*answers) -> CheckResult:
            try:
                with torch.random.fork_rng(devices=[]):  # the learner's random state is left as it was
                    note = check(*answers)
            except _NotSolved:
                return CheckResult(
                    exercise_id,
                    title,
                    NOT_SOLVED,
                    "Replace the `raise NotImplementedError` line with your answer and run the cell again",
                )
            except Wrong as wrong:
                return CheckResult(exercise_id, title, WRONG, str(wrong))
            return CheckResult(exercise_id, title, SOLVED, note or "")

        EXERCISES[exercise_id] = Exercise(exercise_id, title, run)
        return run

    return decorate


def call(fn: Callable, *args, what: str = "your function"):
    """Run the learner's code: a stub's NotImplementedError means 'not solved yet', any other error is an answer."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise _NotSolved() from None
    except Exception as error:  # the learner's bug, reported in one line
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise Wrong(f"{what} raised {type(error).__name__}: {first_line}") from None


def as_tensor(value, what: str) -> torch.Tensor:
    """The learner's answer as a float64 tensor (they may return a tensor, a numpy array, a list or a float)."""
    try:
        if isinstance(value, torch.Tensor):
            return value.detach().to(torch.float64)
        return torch.as_tensor(value, dtype=torch.float64)
    except Exception:
        raise Wrong(f"{what} must be a number or a tensor, got {type(value).__name__}") from None


def close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b.to(a.dtype), rtol=rtol, atol=atol))


def diagnose(
    got,
    expected: torch.Tensor,
    mistakes: Iterable[tuple[torch.Tensor, str]],
    what: str,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    hint: str = "",
) -> None:
    """Return if ``got`` matches ``expected``; else raise :class:`Wrong` naming the first matching known mistake."""
    got = as_tensor(got, what)
    expected = expected.detach().to(torch.float64)
    if got.shape != expected.shape:
        raise Wrong(f"{what} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    if not torch.isfinite(got).all():
        raise Wrong(f"{what} contains NaN or inf")
    if close(got, expected, rtol, atol):
        return
    for candidate, message in mistakes:
        if close(got, candidate.detach().to(torch.float64), rtol, atol):
            raise Wrong(message)
    largest = float((got - expected).abs().max())
    raise Wrong(f"{what} differs from the reference (largest difference {largest:.3g})" + (f"; {hint}" if hint else ""))


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def number(value) -> torch.Tensor:
    """A float64 tensor of a Python number or list (``torch.tensor`` would make it float32)."""
    return torch.tensor(value, dtype=torch.float64)
