"""The jobs of one ``run.py`` invocation that failed: the exit code says so, and a sweep's parent run
ends FAILED. Jobs (an analyzer that raised) and launchers (a job that died) report here; the command
line opens the list for the invocation (``collecting``)."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager


class Failures(list):
    """The failed jobs of one invocation, one line each."""


_FAILURES: contextvars.ContextVar[Failures | None] = contextvars.ContextVar("modelxray_failures", default=None)


def report_failure(what: str) -> None:
    """Record a failed job for this invocation (no-op outside one, e.g. the Python API)."""
    failures = _FAILURES.get()
    if failures is not None:
        failures.append(what)


def collecting_here() -> bool:
    """Whether this process collects its invocation's failures: the jobs of a sweep run in this
    process (Hydra's basic launcher), not in one a launcher started."""
    return _FAILURES.get() is not None


def failures_so_far() -> list[str]:
    """The failures reported in this invocation until now."""
    return list(_FAILURES.get() or [])


@contextmanager
def collecting() -> Iterator[Failures]:
    """The failures reported while the block runs."""
    failures = Failures()
    token = _FAILURES.set(failures)
    try:
        yield failures
    finally:
        _FAILURES.reset(token)
