"""Timers the benchmarks' wrappers put around a modelxray process's own functions (``bench_grokking``,
``bench_default_run``): each labelled phase's seconds, summed over its calls, in ``phases``. The
wrapper runs ``run.py`` in the same process, so the timers cost microseconds and change nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

phases: dict[str, float] = {}


def add(label: str, seconds: float) -> None:
    phases[label] = phases.get(label, 0.0) + seconds


def timing(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    """``fn`` with its seconds added to ``phases[label]`` at each call."""

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            add(label, time.perf_counter() - t)

    return timed


def time_attr(owner: Any, attr: str, label: str) -> None:
    """``owner.attr`` replaced by its :func:`timing` version."""
    setattr(owner, attr, timing(getattr(owner, attr), label))


def exit_code_of(main: Callable[[], Any]) -> Any:
    """``main()``'s exit code, whether it returns it or raises ``SystemExit``."""
    try:
        return main()
    except SystemExit as exc:
        return exc.code
