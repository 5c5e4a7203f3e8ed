"""Latency of repeated calls, throughput and speed at one batch size (pure: numpy and the standard library)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from modelxray.metrics.measurements.quality import Z_95

# Student's t 97.5% quantiles for 1 to 30 degrees of freedom (scipy.stats.t.ppf(0.975, df), 10 decimals);
# beyond 30 the Cornish-Fisher expansion below is within 3e-8 of them. A table rather than scipy: importing
# scipy.stats takes most of a second, more than a small run's whole speed benchmark.
_T_975 = (
    12.7062047362,
    4.3026527297,
    3.1824463053,
    2.7764451052,
    2.5705818356,
    2.4469118511,
    2.3646242516,
    2.3060041352,
    2.2621571628,
    2.2281388520,
    2.2009851601,
    2.1788128297,
    2.1603686565,
    2.1447866879,
    2.1314495456,
    2.1199052992,
    2.1098155778,
    2.1009220402,
    2.0930240544,
    2.0859634473,
    2.0796138447,
    2.0738730679,
    2.0686576104,
    2.0638985616,
    2.0595385528,
    2.0555294386,
    2.0518305165,
    2.0484071418,
    2.0452296421,
    2.0422724563,
)


def t_critical_95(df: int) -> float:
    """Two-sided 95% critical value of Student's t with ``df`` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError("a t interval needs at least one degree of freedom (two samples)")
    if df <= len(_T_975):
        return _T_975[df - 1]
    z, n = Z_95, float(df)  # Cornish-Fisher (Abramowitz & Stegun 26.7.5), four terms
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / n + g2 / n**2 + g3 / n**3 + g4 / n**4


def _ms(v: float) -> str:
    """A duration in ms with about three significant digits."""
    if not math.isfinite(v):
        return str(v)
    return f"{v:.1f}" if abs(v) >= 10 else (f"{v:.2f}" if abs(v) >= 1 else f"{v:.3g}")


# -- latency -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Latency:
    """Per-call latencies and their statistics, in milliseconds.

    Percentiles are numpy's default (linear interpolation, ``np.percentile(..., method="linear")``);
    ``std_ms`` is the sample standard deviation (ddof=1; 0 for one call); ``ci95_ms`` is the 95%
    Student-t confidence interval of the mean (NaN bounds for one call). The statistics are derived
    from the samples, so two latencies are equal when their samples are.
    """

    samples_ms: tuple[float, ...] = field(repr=False)
    count: int = field(init=False, compare=False)
    mean_ms: float = field(init=False, compare=False)
    std_ms: float = field(init=False, compare=False)
    min_ms: float = field(init=False, compare=False)
    max_ms: float = field(init=False, compare=False)
    p50_ms: float = field(init=False, compare=False)
    p90_ms: float = field(init=False, compare=False)
    p95_ms: float = field(init=False, compare=False)
    p99_ms: float = field(init=False, compare=False)
    ci95_ms: tuple[float, float] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        ms = np.asarray(self.samples_ms, dtype=np.float64)
        if ms.ndim != 1 or ms.size == 0:
            raise ValueError("no timings to summarise")
        n = int(ms.size)
        mean = float(ms.mean())
        std = float(ms.std(ddof=1)) if n > 1 else 0.0
        half = t_critical_95(n - 1) * std / math.sqrt(n) if n > 1 else math.nan
        p50, p90, p95, p99 = (float(x) for x in np.percentile(ms, [50, 90, 95, 99]))
        stats = {
            "samples_ms": tuple(float(x) for x in ms),
            "count": n,
            "mean_ms": mean,
            "std_ms": std,
            "min_ms": float(ms.min()),
            "max_ms": float(ms.max()),
            "p50_ms": p50,
            "p90_ms": p90,
            "p95_ms": p95,
            "p99_ms": p99,
            "ci95_ms": (mean - half, mean + half),
        }
        for k, v in stats.items():
            object.__setattr__(self, k, v)

    @classmethod
    def from_values(cls, seconds: Iterable[float]) -> Latency:
        """From raw per-call durations in seconds."""
        return cls(tuple(float(x) for x in np.asarray(list(seconds), dtype=np.float64) * 1e3))

    @classmethod
    def aggregate(cls, latencies: Sequence[Latency]) -> Latency:
        """Pool the samples of several measurements (statistics are recomputed, not averaged)."""
        if not latencies:
            raise ValueError("no latency measurements to aggregate")
        return cls(tuple(x for lat in latencies for x in lat.samples_ms))

    @property
    def seconds(self) -> tuple[float, ...]:
        return tuple(x / 1e3 for x in self.samples_ms)

    @property
    def mean_s(self) -> float:
        return self.mean_ms / 1e3

    def to_metrics(self, prefix: str = "") -> dict[str, float]:
        """``{prefix}latency_{mean,std,min,max,p50,p95,p99}_ms``: the names logged to MLflow."""
        return {
            f"{prefix}latency_mean_ms": self.mean_ms,
            f"{prefix}latency_std_ms": self.std_ms,
            f"{prefix}latency_min_ms": self.min_ms,
            f"{prefix}latency_max_ms": self.max_ms,
            f"{prefix}latency_p50_ms": self.p50_ms,
            f"{prefix}latency_p95_ms": self.p95_ms,
            f"{prefix}latency_p99_ms": self.p99_ms,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.to_metrics(), "samples_ms": list(self.samples_ms)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Latency:
        """From ``to_dict()`` output (the statistics are recomputed from ``samples_ms``)."""
        if not d.get("samples_ms"):
            raise ValueError("a latency record needs its samples_ms")
        return cls(tuple(float(x) for x in d["samples_ms"]))

    def __str__(self) -> str:
        return f"{_ms(self.p50_ms)} ms p50 (p95 {_ms(self.p95_ms)}, p99 {_ms(self.p99_ms)}), n={self.count}"

    @property
    def ci95_half_ms(self) -> float:
        """Half the width of the 95% confidence interval of the mean (NaN for one call)."""
        lo, hi = self.ci95_ms
        return (hi - lo) / 2

    def ci_text(self) -> str:
        """``mean 12.5 ± 0.6 ms (95% CI)``, or the mean alone for a single call."""
        if self.count < 2:
            return f"mean {_ms(self.mean_ms)} ms (one call, no interval)"
        return f"mean {_ms(self.mean_ms)} ± {_ms(self.ci95_half_ms)} ms (95% CI)"

    def markdown(self) -> str:
        return (
            f"**{_ms(self.p50_ms)} ms** p50 (p95 {_ms(self.p95_ms)}, p99 {_ms(self.p99_ms)}), "
            f"{self.ci_text()}, n={self.count}"
        )


# -- throughput --------------------------------------------------------------------------------
UNITS = ("tokens", "examples")  # what a throughput counts: a language model's tokens, a classifier's examples


@dataclass(frozen=True)
class Throughput:
    """Items (``unit``: tokens for a language model, examples for a classifier) and batches per
    second at the mean latency of a workload. Metric names follow the unit: ``tokens_per_s`` or
    ``examples_per_s``, then ``batches_per_s``."""

    items_per_s: float
    batches_per_s: float
    unit: str = "tokens"  # what items_per_s counts: tokens | examples

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"a throughput counts one of {UNITS}, not {self.unit!r}")

    @property
    def tokens_per_s(self) -> float:
        """``items_per_s`` of a token workload; an AttributeError for any other unit, so examples
        are never read as tokens."""
        if self.unit != "tokens":
            raise AttributeError(f"a throughput in {self.unit}/s has no tokens_per_s; read items_per_s")
        return self.items_per_s

    @property
    def key(self) -> str:
        """The metric name of ``items_per_s``: ``tokens_per_s``, ``examples_per_s``."""
        return f"{self.unit}_per_s"

    @classmethod
    def from_latency(cls, latency: Latency, batch_size: int, seq_len: int = 1, unit: str = "tokens") -> Throughput:
        """``batch_size * seq_len`` items per call (``seq_len`` 1 for examples) at the mean latency."""
        mean_s = latency.mean_s
        if mean_s <= 0:
            return cls(math.inf, math.inf, unit)
        return cls(batch_size * seq_len / mean_s, 1.0 / mean_s, unit)

    def to_metrics(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{self.key}": self.items_per_s, f"{prefix}batches_per_s": self.batches_per_s}

    def to_dict(self) -> dict[str, Any]:
        return self.to_metrics()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Throughput:
        """From ``to_dict()`` output: the unit is read back from the ``<unit>_per_s`` key."""
        unit = next((u for u in UNITS if f"{u}_per_s" in d), None)
        if unit is None:
            raise ValueError(f"a throughput record needs one of {[f'{u}_per_s' for u in UNITS]}")
        return cls(float(d[f"{unit}_per_s"]), float(d["batches_per_s"]), unit)

    def __str__(self) -> str:
        return f"{self.items_per_s:,.0f} {self.unit}/s ({self.batches_per_s:.3g} batches/s)"

    def markdown(self) -> str:
        return f"**{self.items_per_s:,.0f} {self.unit}/s** ({self.batches_per_s:.3g} batches/s)"


# -- speed at one batch size -------------------------------------------------------------------
def _shape(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


@dataclass(frozen=True)
class Speed:
    """Forward latency of one batch and the throughput it gives: ``batch_size`` sequences of
    ``seq_len`` tokens (a language model), or ``batch_size`` examples of ``input_shape`` (a
    classifier: ``seq_len`` is None, build it with ``Speed.of_examples``). Throughput is derived
    from the latency, so pooling latencies pools throughput too."""

    batch_size: int
    seq_len: int | None
    latency: Latency
    input_shape: tuple[int, ...] | None = None  # one example's shape (classifier), instead of seq_len

    def __post_init__(self) -> None:
        if (self.seq_len is None) == (self.input_shape is None):
            raise ValueError("a speed measurement has either seq_len (tokens) or input_shape (examples)")
        if self.input_shape is not None:
            object.__setattr__(self, "input_shape", tuple(int(d) for d in self.input_shape))

    @classmethod
    def of_examples(cls, batch_size: int, input_shape: Sequence[int], latency: Latency) -> Speed:
        """A classifier's workload: ``batch_size`` examples shaped ``input_shape`` per forward pass."""
        return cls(batch_size, None, latency, tuple(input_shape))

    @property
    def unit(self) -> str:
        """``tokens`` (a language model's sequences) or ``examples`` (a classifier's inputs)."""
        return "tokens" if self.seq_len is not None else "examples"

    @property
    def throughput(self) -> Throughput:
        return Throughput.from_latency(self.latency, self.batch_size, self.seq_len or 1, self.unit)

    @classmethod
    def aggregate(cls, speeds: Sequence[Speed]) -> Speed:
        """Pool runs of one workload (same batch size and sequence length or input shape)."""
        if not speeds:
            raise ValueError("no speed measurements to aggregate")
        shapes = {(s.batch_size, s.seq_len, s.input_shape) for s in speeds}
        if len(shapes) > 1:
            raise ValueError(f"cannot pool speed measurements of different workloads {sorted(shapes, key=str)}")
        first = speeds[0]
        return cls(first.batch_size, first.seq_len, Latency.aggregate([s.latency for s in speeds]), first.input_shape)

    def to_metrics(self, prefix: str | None = None) -> dict[str, float]:
        """``bs<b>_latency_*_ms``, ``bs<b>_tokens_per_s`` (``bs<b>_examples_per_s`` for a classifier),
        ``bs<b>_batches_per_s`` (prefix ``bs<b>_``)."""
        prefix = f"bs{self.batch_size}_" if prefix is None else prefix
        return {**self.latency.to_metrics(prefix), **self.throughput.to_metrics(prefix)}

    def _workload(self) -> dict[str, Any]:
        if self.seq_len is not None:
            return {"batch_size": self.batch_size, "seq_len": self.seq_len}
        return {"batch_size": self.batch_size, "input_shape": list(self.input_shape or ())}

    def row(self) -> dict[str, Any]:
        """One row of the ``speed`` table: the workload (``batch_size`` and ``seq_len``, or
        ``input_shape``) and its statistics, without the samples."""
        return {**self._workload(), **self.to_metrics("")}

    def to_dict(self) -> dict[str, Any]:
        return {**self.row(), "samples_ms": list(self.latency.samples_ms)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Speed:
        if d.get("seq_len") is None and d.get("input_shape") is not None:
            return cls.of_examples(int(d["batch_size"]), d["input_shape"], Latency.from_dict(d))
        return cls(int(d["batch_size"]), int(d["seq_len"]), Latency.from_dict(d))

    def _what(self) -> str:
        if self.seq_len is not None:
            return f"batch {self.batch_size} x {self.seq_len} tokens"
        what = "example" if self.batch_size == 1 else "examples"
        return f"batch of {self.batch_size} {what} shaped {_shape(self.input_shape or ())}"

    def __str__(self) -> str:
        return f"{self._what()}: {self.latency}; {self.throughput}"

    def markdown(self) -> str:
        return f"{self._what()}: {self.latency.markdown()}; {self.throughput.markdown()}"
