"""Latency statistics of repeated timings."""

from __future__ import annotations

import numpy as np


def latency_stats(seconds: list[float]) -> dict[str, float]:
    """Mean, std, min, max and p50/p95/p99 in milliseconds (linear-interpolated percentiles)."""
    if not seconds:
        raise ValueError("no timings to summarise")
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    return {
        "latency_mean_ms": float(ms.mean()),
        "latency_std_ms": float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
        "latency_min_ms": float(ms.min()),
        "latency_max_ms": float(ms.max()),
        "latency_p50_ms": float(np.percentile(ms, 50)),
        "latency_p95_ms": float(np.percentile(ms, 95)),
        "latency_p99_ms": float(np.percentile(ms, 99)),
    }


def throughput(batch_size: int, seq_len: int, mean_seconds: float) -> dict[str, float]:
    return {"tokens_per_s": batch_size * seq_len / mean_seconds, "batches_per_s": 1.0 / mean_seconds}
