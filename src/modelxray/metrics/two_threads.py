"""Run a chunked pass on two threads: the even chunks here, the odd ones on one helper thread,
torch single-threaded in both. Used by ``tensor_stats`` (see ``on_two_threads`` for why this beats
torch's own intra-op threads on small chunk ops)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

_helper: ThreadPoolExecutor | None = None
_helper_lock = threading.Lock()


def _forget_helper() -> None:  # a forked child has no helper thread, only its stale executor
    global _helper, _helper_lock
    _helper, _helper_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helper)


def on_two_threads(fn, chunks: list[torch.Tensor], two: bool, *args) -> list:
    """``fn(group, *args)`` for the even and the odd chunks, the second group on a helper thread;
    torch runs single-threaded meanwhile, in both. Two threads that each run whole chunks beat
    torch's intra-op threads, which split every one of the ~35 small ops of a chunk and meet
    after each: no per-op fork/join, the serial ``bincount`` runs on both cores, and when another
    process holds a core the work slows down in proportion instead of stalling at every op
    (measured 2.5x slower with a busy core)."""
    global _helper
    if not two or len(chunks) < 2:
        return [fn(chunks, *args)]
    with _helper_lock:
        if _helper is None:  # its initializer changes torch's default thread count: the caller restores it
            _helper = ThreadPoolExecutor(1, thread_name_prefix="tensor_stats", initializer=_single_threaded)
    other = _helper.submit(fn, chunks[1::2], *args)
    try:
        return [fn(chunks[0::2], *args), other.result()]
    finally:
        other.result()  # never leave the helper working on buffers that a next call reuses


def _single_threaded() -> None:
    torch.get_num_threads()  # torch sets a thread's count from its global default on first use:
    torch.set_num_threads(1)  # use it first, then set 1 (this sets the default too)
