"""Typed measurements a Result carries: latency, throughput, speed at a batch size, memory, quality.

In the style of optimum-benchmark's ``Latency``/``Throughput``/``Memory``: each is a small frozen
dataclass that is built from raw readings, pools with others of its kind (``aggregate``), names its
own metrics (``to_metrics(prefix)``, the names logged to MLflow), serialises itself
(``to_dict``/``from_dict``, the layout stored in ``Result.data``) and renders itself (``str`` for a
plain sentence, ``markdown()`` for the summary report). Readers use attributes (``lat.p95_ms``),
never string keys; the keys live here only.

Pure: numpy, scipy (imported on first use) and the standard library, no torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from modelxray.core.formatting import human_bytes


def t_critical_95(df: int) -> float:
    """Two-sided 95% critical value of Student's t with ``df`` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError("a t interval needs at least one degree of freedom (two samples)")
    from scipy import stats  # on first use: it takes a few hundred ms to import

    return float(stats.t.ppf(0.975, df))


def _ms(v: float) -> str:
    """A duration in ms with about three significant digits."""
    if not math.isfinite(v):
        return str(v)
    return f"{v:.1f}" if abs(v) >= 10 else (f"{v:.2f}" if abs(v) >= 1 else f"{v:.3g}")


def _safe_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


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


# -- memory ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Memory:
    """Bytes held by the model and the process. The CUDA peaks and the model file are ``None`` when
    not measured (CPU run, model not from a file). ``by_dtype``: ``{"params"|"buffers": {dtype: bytes}}``."""

    param_bytes: int
    buffer_bytes: int
    num_parameters: int
    peak_rss_bytes: int
    rss_bytes: int
    cuda_max_allocated_bytes: int | None = None
    cuda_max_reserved_bytes: int | None = None
    file_bytes: int | None = None
    by_dtype: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)

    @property
    def weight_bytes(self) -> int:
        """The parameters as held in memory (buffers excluded)."""
        return self.param_bytes

    @classmethod
    def aggregate(cls, memories: Sequence[Memory]) -> Memory:
        """The largest reading of every field (a peak over the measurements); ``None`` where none has one."""
        if not memories:
            raise ValueError("no memory measurements to aggregate")
        out: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "by_dtype":
                continue
            values = [getattr(m, f.name) for m in memories if getattr(m, f.name) is not None]
            out[f.name] = max(values) if values else None
        by_dtype: dict[str, dict[str, int]] = {}
        for m in memories:
            for kind, d in m.by_dtype.items():
                slot = by_dtype.setdefault(kind, {})
                for dt, b in d.items():
                    slot[dt] = max(slot.get(dt, 0), b)
        return cls(**out, by_dtype=by_dtype)

    def _readings(self) -> dict[str, int]:
        """The numeric fields that were measured, in the order they are logged."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "by_dtype" and getattr(self, f.name) is not None
        }

    def to_metrics(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": float(v) for k, v in self._readings().items()}

    def to_dict(self) -> dict[str, Any]:
        return {**self._readings(), "by_dtype": {k: dict(v) for k, v in self.by_dtype.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Memory:
        names = {f.name for f in fields(cls)} - {"by_dtype"}
        values = {k: int(v) for k, v in d.items() if k in names and v is not None}
        return cls(**values, by_dtype={k: dict(v) for k, v in (d.get("by_dtype") or {}).items()})

    def __str__(self) -> str:
        parts = [
            f"weights {human_bytes(self.param_bytes)} ({self.num_parameters:,} parameters)",
            f"RSS {human_bytes(self.rss_bytes)} (peak {human_bytes(self.peak_rss_bytes)})",
        ]
        if self.cuda_max_allocated_bytes is not None:
            reserved = self.cuda_max_reserved_bytes
            parts.append(
                f"CUDA peak {human_bytes(self.cuda_max_allocated_bytes)} allocated"
                + (f" / {human_bytes(reserved)} reserved" if reserved is not None else "")
            )
        if self.file_bytes is not None:
            parts.append(f"file {human_bytes(self.file_bytes)}")
        return ", ".join(parts)

    def markdown(self) -> str:
        return str(self)


# -- quality -----------------------------------------------------------------------------------
_TOPK = re.compile(r"^top(\d+)_accuracy$")
Z_95 = 1.959963984540054  # two-sided 95% quantile of the standard normal, scipy.stats.norm.ppf(0.975)


def wilson_interval(successes: float, n: float, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of the proportion ``successes / n`` (95% for the default ``z``).

    With p = successes/n: centre (p + z²/2n) / (1 + z²/n), half-width
    z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n). Unlike the normal (Wald) interval it stays inside
    [0, 1] and has a width at p = 0 or 1 (Wilson 1927; Brown, Cai & DasGupta 2001)."""
    if not n > 0:
        raise ValueError("an interval of a proportion needs n > 0")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Quality:
    """Mean loss (nats per scored token or example) over ``n_scored`` scored items, top-k accuracy
    (``accuracy_at[1]`` is ``accuracy``) and bits per byte. ``count_key`` names the count in metrics
    and JSON (``tokens_scored``; ``examples_scored`` for a classifier; robustness's ``samples``).

    ``task`` is ``causal_lm`` or ``classification`` (build the latter with ``Quality.of_classifier``).
    A language model's perplexity is ``exp(loss)``, always derived, so a pooled perplexity is that
    of the pooled mean loss, never a mean of perplexities. A classifier has no perplexity (none is
    logged or rendered); its accuracy carries a 95% Wilson score interval (``accuracy_ci95``,
    metrics ``accuracy_ci_low``/``accuracy_ci_high``), which treats the examples as independent
    trials: that holds for a test set of examples, not for the correlated tokens of a text."""

    loss: float
    n_scored: float | None = None
    accuracy_at: dict[int, float] = field(default_factory=dict)
    bits_per_byte: float | None = None
    count_key: str = field(default="tokens_scored", repr=False)
    task: str = field(default="causal_lm", repr=False)  # causal_lm | classification

    @classmethod
    def of_classifier(cls, loss: float, n_scored: float, accuracy_at: dict[int, float]) -> Quality:
        """A classifier's quality: mean cross-entropy over ``n_scored`` examples and top-k accuracy."""
        return cls(
            loss=loss,
            n_scored=n_scored,
            accuracy_at=dict(sorted(accuracy_at.items())),
            count_key="examples_scored",
            task="classification",
        )

    @property
    def is_classifier(self) -> bool:
        return self.task == "classification"

    @property
    def perplexity(self) -> float:
        """exp of the mean loss (inf when it overflows, NaN when the loss is). Defined for a
        language model; a classifier's quality never reports it."""
        return _safe_exp(self.loss)

    @property
    def accuracy(self) -> float | None:
        return self.accuracy_at.get(1)

    @property
    def accuracy_ci95(self) -> tuple[float, float] | None:
        """95% Wilson score interval of a classifier's top-1 accuracy over its ``n_scored``
        examples; None for a language model or when the accuracy or count is missing."""
        acc, n = self.accuracy, self.n_scored
        if not self.is_classifier or acc is None or not n or not math.isfinite(acc):
            return None
        return wilson_interval(acc * n, n)

    @classmethod
    def aggregate(cls, qualities: Sequence[Quality], weights: Sequence[float] | None = None) -> Quality:
        """Pool by ``weights`` (default: the items each scored): the loss and accuracies are weighted
        means, bits per byte is total nats over total bytes, and the perplexity follows from the loss
        (a classifier's accuracy interval from the pooled accuracy and count)."""
        if not qualities:
            raise ValueError("no quality measurements to aggregate")
        if len({q.task for q in qualities}) > 1:
            raise ValueError("cannot pool the quality of a language model with that of a classifier")
        if weights is None:
            if any(q.n_scored is None for q in qualities):
                raise ValueError("pooling by items scored needs every n_scored; pass weights")
            weights = [float(q.n_scored) for q in qualities]  # type: ignore[arg-type]
        if len(weights) != len(qualities):
            raise ValueError("one weight per measurement")
        total = float(sum(weights))
        if not total > 0:
            raise ValueError("the weights sum to zero: nothing was scored")
        mean = lambda xs: sum(w * x for w, x in zip(weights, xs)) / total  # noqa: E731
        ks = set.intersection(*(set(q.accuracy_at) for q in qualities))
        bpb = None
        if all(q.bits_per_byte is not None and q.bits_per_byte > 0 for q in qualities):
            nats = [w * q.loss for w, q in zip(weights, qualities)]  # proportional to each one's nats
            nbytes = [n / q.bits_per_byte for n, q in zip(nats, qualities)]  # and to its bytes (x ln 2)
            bpb = sum(nats) / sum(nbytes)
        counts = [q.n_scored for q in qualities]
        return cls(
            loss=mean([q.loss for q in qualities]),
            n_scored=None if any(c is None for c in counts) else float(sum(counts)),  # type: ignore[arg-type]
            accuracy_at={k: mean([q.accuracy_at[k] for q in qualities]) for k in sorted(ks)},
            bits_per_byte=bpb,
            count_key=qualities[0].count_key,
            task=qualities[0].task,
        )

    def to_metrics(self, prefix: str = "") -> dict[str, float]:
        """A language model: ``loss``, ``perplexity``, ``tokens_scored``, ``accuracy``,
        ``top<k>_accuracy``, ``bits_per_byte``. A classifier: ``loss``, ``examples_scored``,
        ``accuracy``, ``accuracy_ci_low``, ``accuracy_ci_high``, ``top<k>_accuracy`` (no perplexity)."""
        out = {f"{prefix}loss": self.loss}
        if not self.is_classifier:
            out[f"{prefix}perplexity"] = self.perplexity
        if self.n_scored is not None:
            out[f"{prefix}{self.count_key}"] = float(self.n_scored)
        ci = self.accuracy_ci95
        for k in sorted(self.accuracy_at):
            out[f"{prefix}accuracy" if k == 1 else f"{prefix}top{k}_accuracy"] = self.accuracy_at[k]
            if k == 1 and ci is not None:
                out[f"{prefix}accuracy_ci_low"], out[f"{prefix}accuracy_ci_high"] = ci
        if self.bits_per_byte is not None:
            out[f"{prefix}bits_per_byte"] = self.bits_per_byte
        return out

    def to_dict(self) -> dict[str, Any]:
        return self.to_metrics()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Quality:
        """From ``to_dict()`` or any record with these keys (others are ignored; ``perplexity`` and
        the accuracy interval are recomputed). An ``examples_scored`` count marks a classifier."""
        count_key = next(
            (k for k in ("tokens_scored", "examples_scored", "samples") if d.get(k) is not None), "tokens_scored"
        )
        acc = {1: float(d["accuracy"])} if d.get("accuracy") is not None else {}
        for key, v in d.items():
            m = _TOPK.match(key)
            if m and v is not None:
                acc[int(m.group(1))] = float(v)
        bpb = d.get("bits_per_byte")
        return cls(
            loss=float(d["loss"]),
            n_scored=None if d.get(count_key) is None else float(d[count_key]),
            accuracy_at=dict(sorted(acc.items())),
            bits_per_byte=None if bpb is None else float(bpb),
            count_key=count_key,
            task="classification" if count_key == "examples_scored" else "causal_lm",
        )

    def _parts(self) -> tuple[str, list[str]]:
        if self.is_classifier:
            acc = self.accuracy
            head = f"accuracy {acc:.3f}" if acc is not None else f"loss {self.loss:.4f} nats"
            rest = []
            ci = self.accuracy_ci95
            if ci is not None:
                rest.append(f"95% CI [{ci[0]:.3f}, {ci[1]:.3f}]")
            if acc is not None:
                rest.append(f"loss {self.loss:.4f} nats")
            rest += [f"top-{k} accuracy {v:.3f}" for k, v in sorted(self.accuracy_at.items()) if k != 1]
            return head, rest
        head = f"perplexity {self.perplexity:.4g}"
        rest = [f"loss {self.loss:.4f} nats"]
        rest += [f"{'top-1' if k == 1 else f'top-{k}'} accuracy {v:.3f}" for k, v in sorted(self.accuracy_at.items())]
        if self.bits_per_byte is not None:
            rest.append(f"{self.bits_per_byte:.3f} bits/byte")
        return head, rest

    def _count(self) -> str:
        if self.n_scored is None:
            return ""
        what = {"tokens_scored": "tokens", "examples_scored": "examples"}.get(self.count_key, self.count_key)
        return f", {int(self.n_scored):,} {what} scored"

    def __str__(self) -> str:
        head, rest = self._parts()
        return f"{head} ({', '.join(rest)}){self._count()}" if rest else f"{head}{self._count()}"

    def markdown(self) -> str:
        head, rest = self._parts()
        return f"**{head}** ({', '.join(rest)}){self._count()}" if rest else f"**{head}**{self._count()}"
