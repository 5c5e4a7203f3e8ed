"""Progress bars (tqdm) and the run's log. Whether bars show is a value passed down from the run's
``progress`` key (``RunContext.progress``), never a module global.

A bar draws itself with carriage returns, which only a terminal (or a notebook) redraws in place: in
a file or a pipe they pile up into one endless line. So a bar on a stream that is not a terminal
draws nothing and says one line when its step starts and one when it ends; on a terminal the bar
shows, and its end is one line of the run's log. The lines go to the ``modelxray.progress`` logger
(under the command line, Hydra's console and ``run.log``) and, where no console handler shows that
logger's lines, straight to the stream. ``run_log`` writes a Python API run's log to its ``run.log``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from pathlib import Path

log = logging.getLogger("modelxray.progress")
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # as Hydra writes run.log


def bar(iterable=None, *, desc: str, enabled: bool = True, **kwargs):
    """A progress bar over ``iterable`` (or of ``total`` steps, updated by hand): drawn on a terminal
    or in a notebook, one line at each end of the step anywhere else."""
    stream = kwargs.get("file") or sys.stderr
    cls = _terminal_bar() if _redraws(stream) else _line_bar()
    return cls(iterable, desc=desc, disable=not enabled, leave=False, **kwargs)


def _redraws(stream) -> bool:
    """Whether ``stream`` shows a bar redrawn in place: a terminal, or a notebook's widget."""
    from tqdm.auto import tqdm

    if any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__):
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


@functools.cache
def _terminal_bar():
    from tqdm.auto import tqdm

    class TerminalBar(_Logged, tqdm):
        """tqdm's bar; its end is a line of the run's log."""

    return TerminalBar


@functools.cache
def _line_bar():
    from tqdm.std import tqdm

    class LineBar(_Logged, tqdm):
        """No bar: a line when the step starts and one when it ends, each on a line of its own."""

        writes = True

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if not self.disable:
                self._say(f"{self.desc}: starting" + (f", {_count(self.total, self.unit)}" if self.total else ""))

        def display(self, msg=None, pos=None):
            return False  # nothing drawn: no carriage return reaches the stream

    return LineBar


class _Logged:
    """Mixed into a tqdm class: a line when the bar closes (how far it got, in how long)."""

    writes = False  # also write the lines to the bar's stream when no console shows the log

    def close(self):
        line = None if getattr(self, "disable", True) else self._end_line()
        super().close()  # a terminal's bar is cleared before its line is written
        if line:
            self._say(line)

    def _end_line(self) -> str:
        done = f"{self.n:,}/{_count(self.total, self.unit)}" if self.total else _count(self.n, self.unit)
        return f"{self.desc}: {done} in {self.format_dict['elapsed']:.1f} s"

    def _say(self, line: str) -> None:
        log.info(line)
        if self.writes and not shown_on_console(log):
            self.fp.write(line + "\n")
            self.fp.flush()


def _count(n, unit: str) -> str:
    """``2 steps``, ``1 step``, ``512 tok``: tqdm's unit, its default ``it`` as steps."""
    word = ("step" if n == 1 else "steps") if unit == "it" else unit
    return f"{n:,} {word}"


def shown_on_console(logger: logging.Logger) -> bool:
    """Whether an INFO line of ``logger`` reaches a handler that writes to a console (Hydra's, a
    ``logging.basicConfig``); a file's handler is not one."""
    if not logger.isEnabledFor(logging.INFO):
        return False
    node = logger
    while node is not None:
        for h in node.handlers:
            if (
                isinstance(h, logging.StreamHandler)
                and not isinstance(h, logging.FileHandler)
                and h.level <= logging.INFO
            ):
                return True
        node = node.parent if node.propagate else None
    return False


class _LazyFileHandler(logging.FileHandler):
    """Opens its file, and makes its folder, at the first line: a run stopped by bad input before any
    work leaves no folder behind."""

    def __init__(self, path: Path):
        super().__init__(path, mode="a", encoding="utf-8", delay=True)

    def _open(self):
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


class _Upward(logging.Handler):
    """Hands the parents' handlers (or Python's last resort) the lines they were given before the run's
    log lowered the logger's level: the run's log changes nothing else a caller sees."""

    def __init__(self, logger: logging.Logger, level: int):
        super().__init__(level)
        self.parent = logger.parent

    def emit(self, record: logging.LogRecord) -> None:
        if self.parent is not None:
            self.parent.callHandlers(record)


@contextlib.contextmanager
def run_log(path: Path, name: str = "modelxray"):
    """While the block runs, ``name``'s lines of INFO and above go to ``path`` too (the run folder's
    ``run.log``), as the command line's Hydra writes them; nothing when a handler writes there already."""
    logger = logging.getLogger(name)
    target = str(Path(path).resolve())
    if _logged_to(logger, target):
        yield
        return
    handler = _LazyFileHandler(Path(target))
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    saved = logger.level, logger.propagate
    added = [handler]
    if logger.getEffectiveLevel() > logging.INFO:  # INFO lines now made for the file; passed on as before
        if logger.propagate:
            added.append(_Upward(logger, logger.getEffectiveLevel()))
            logger.propagate = False
        logger.setLevel(logging.INFO)
    for h in added:
        logger.addHandler(h)
    try:
        yield
    finally:
        for h in added:
            logger.removeHandler(h)
        handler.close()
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def _logged_to(logger: logging.Logger, target: str) -> bool:
    """Whether a file handler on ``logger`` or its parents writes ``target`` (Hydra's run.log)."""
    node = logger
    while node is not None:
        if any(getattr(h, "baseFilename", None) == target for h in node.handlers):
            return True
        node = node.parent if node.propagate else None
    return False
