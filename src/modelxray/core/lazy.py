"""A package's public names imported on first use, so importing the package (or a light config
module inside it) pulls in no torch through its ``__init__``; and large libraries imported without
the garbage collector's full passes (``collector_paused``)."""

from __future__ import annotations

import contextlib
import gc
import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a submodule of ``package``) when
    ``name`` is first asked for."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


@contextlib.contextmanager
def collector_paused():
    """The cyclic garbage collector off while a large library is imported (torch, transformers'
    model code, MLflow and its store, matplotlib and seaborn), on again after.

    Why: an import allocates hundreds of thousands of objects, each batch of which triggers a
    collection, and every few of those is a full pass over every object of the process: about a
    second of a short run's start-up, for garbage that imports hardly make (their objects live as
    long as the process). Reference counting still frees everything else at once."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
