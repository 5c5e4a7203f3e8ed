"""Process and device memory readings."""

from __future__ import annotations

import resource
import sys

import psutil
import torch


def peak_rss_bytes() -> int:
    """Peak resident set size of this process since it started (ru_maxrss; KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def rss_and_peak() -> tuple[int, int]:
    """The current resident set size and the peak that covers it. A process at its high point keeps
    growing between two readings (reading the current size allocates), so a peak read first came out
    below the current size (by a few hundred KiB); read second, and never below the current value."""
    now = rss_bytes()
    return now, max(peak_rss_bytes(), now)


def cuda_peaks(device: torch.device) -> dict[str, int]:
    if device.type != "cuda":
        return {}
    return {
        "cuda_max_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
        "cuda_max_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
    }


def reset_cuda_peaks(device: torch.device) -> None:
    """Start the CUDA peak counters afresh, so peaks belong to the measurement that follows."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
