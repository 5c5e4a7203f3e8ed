"""Every performance figure checked against its neighbours from the same run: the speed of each batch
size against the quality pass (the same model over the same kind of input), the latency statistics
against their own samples, the memory peak against the current size, and the machine the figures
were measured on. A figure can be computed right and still not be the model's (a busy machine), or
two figures can contradict each other; each check returns a ``Flag`` saying so in one sentence.

Pure: plain numbers and the measurement dataclasses in, flags out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from modelxray.core.formatting import human_bytes
from modelxray.metrics.measurements import Latency, Memory, Speed

# a speed this many times below the quality pass's (which does more work per item) is not the model's
SPEED_TOLERANCE = 2.0
# threads that waited for a CPU this share of their time were slowed by other work
BUSY_WAIT_SHARE = 0.2
# without run-queue waits: other work's load (the load average less this process's threads) this
# share of the CPUs
BUSY_LOAD_SHARE = 0.5
# the median call this many times slower than the fastest: the calls did not run at one speed
SPREAD = 2.0
# latency statistics in the order they must be in
_ORDER = ("latency_min_ms", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "latency_max_ms")


@dataclass(frozen=True)
class Flag:
    """One inconsistency: which check found it, the figure it is about, and a sentence for the report."""

    check: str  # machine | throughput | latency | memory
    figure: str  # speed/bs1, memory, ...
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


def _ms(v: float) -> str:
    return f"{v:.3g} ms" if v < 100 else f"{v:,.0f} ms"


def _rate(v: float) -> str:
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"


# -- the machine -------------------------------------------------------------------------------------
def busy_machine(
    wait_share: float | None, load: float | None, threads: int, cpus: int
) -> tuple[bool | None, str | None]:
    """Whether other work slowed this process (None: nothing measured says), and the evidence in
    words: its threads' run-queue wait where measured (the direct evidence), else the load average
    beyond its own threads."""
    if wait_share is not None:
        on = f" (load average {load:.1f} on {cpus} CPUs)" if load is not None else ""
        return wait_share >= BUSY_WAIT_SHARE, f"its {threads} threads waited for a CPU {wait_share:.0%} of the time{on}"
    if load is None:
        return None, None
    others = load - threads
    return others >= BUSY_LOAD_SHARE * cpus, f"load average {load:.1f} on {cpus} CPUs besides its {threads} threads"


def machine_flag(busy: bool | None, evidence: str | None, threads: int) -> Flag | None:
    """A flag when other work held the CPUs while the model was measured (``busy_machine``)."""
    if not busy:
        return None
    one = " (one thread never waits for another)" if threads > 1 else ""
    return Flag(
        "machine",
        "speed",
        f"The machine was busy while the model was measured: {evidence}, so its speeds are the contention's, "
        f"not the model's; measure on an idle machine, or with threads=1 where other work shares these cores{one}.",
    )


# -- throughput against the quality pass ---------------------------------------------------------------
_CAUSES = {
    True: "the busy machine explains it",
    False: "the machine was not busy; rerun to see whether it stays",
    None: "nothing measured says why; rerun to see whether it stays",
}


def speed_ratios(speeds: Sequence[Speed], eval_per_s: float, eval_batch: int, flat: bool) -> list[dict]:
    """Each speed's throughput over the quality pass's (``eval_per_s``, at ``eval_batch``), and
    whether it is held to it: the quality pass runs the same forward and scores it besides, so a
    speed at its batch size or above should be at least as fast; on a CPU (``flat``) a language
    model's throughput barely changes with the batch size (its sequences already fill the cores),
    so smaller batches are held to it too."""
    rows = []
    for s in speeds:
        per_s = s.throughput.items_per_s
        held = s.batch_size >= eval_batch or (flat and s.unit == "tokens")
        ratio = per_s / eval_per_s if eval_per_s > 0 else math.nan
        rows.append({"batch_size": s.batch_size, "unit": s.unit, "per_s": per_s, "ratio": ratio, "held": held})
    return rows


def throughput_flags(
    rows: Sequence[dict], eval_per_s: float, eval_batch: int, pass_name: str, busy: bool | None
) -> list[Flag]:
    """A flag for each held speed (``speed_ratios``) more than ``SPEED_TOLERANCE`` times below the
    quality pass's, with its cause where the machine says it (``busy``: None when nothing measured it)."""
    out = []
    for r in rows:
        if not r["held"] or not r["ratio"] < 1 / SPEED_TOLERANCE:
            continue
        unit = r["unit"]
        cause = _CAUSES[busy]
        out.append(
            Flag(
                "throughput",
                f"speed/bs{r['batch_size']}",
                f"Batch {r['batch_size']} ran at {_rate(r['per_s'])} {unit}/s, {r['ratio']:.2f}x the "
                f"{_rate(eval_per_s)} {unit}/s of the {pass_name} at batch {eval_batch} in the same run, which "
                f"does more work per {unit[:-1]}: {cause}.",
            )
        )
    return out


# -- latency -------------------------------------------------------------------------------------------
def latency_problems(stats: Mapping[str, float], samples_ms: Sequence[float]) -> list[str]:
    """What is wrong with a latency record (``Latency.to_metrics()`` names): statistics out of order
    (min <= p50 <= p95 <= p99 <= max, min <= mean <= max), or a mean or median that is not the mean
    or median of its samples (two statistics swapped). Empty when it is right."""
    out = []
    values = [stats[k] for k in _ORDER]
    if any(a > b * (1 + 1e-9) for a, b in zip(values, values[1:])):
        out.append("percentiles out of order (" + ", ".join(f"{k[8:-3]} {stats[k]:.4g}" for k in _ORDER) + ")")
    mean = stats["latency_mean_ms"]
    if not values[0] * (1 - 1e-9) <= mean <= values[-1] * (1 + 1e-9):
        out.append(f"mean {mean:.4g} ms outside min-max")
    if samples_ms:
        ms = np.asarray(samples_ms, dtype=np.float64)
        for key, name, want in (("latency_mean_ms", "mean", ms.mean()), ("latency_p50_ms", "median", np.median(ms))):
            if not math.isclose(stats[key], float(want), rel_tol=1e-6, abs_tol=1e-9):
                out.append(f"{key} is {stats[key]:.4g} ms, but the {name} of its samples is {float(want):.4g} ms")
    return out


def latency_flags(figure: str, what: str, lat: Latency) -> list[Flag]:
    """Flags for a latency (``what``: "Batch 1"): statistics that contradict its samples, and calls
    that did not run at one speed (the median ``SPREAD`` times the fastest or more), which is also
    why a mean can sit below the median: a few fast calls among slow ones."""
    out = [
        Flag("latency", figure, f"{what}: the latency statistics contradict their samples: {p}.")
        for p in latency_problems(lat.to_metrics(), lat.samples_ms)
    ]
    if lat.count >= 3 and lat.min_ms > 0 and lat.p50_ms >= SPREAD * lat.min_ms:
        below = f", which puts the mean ({_ms(lat.mean_ms)}) below the median" if lat.mean_ms < lat.p50_ms else ""
        out.append(
            Flag(
                "latency",
                figure,
                f"{what}: the fastest of {lat.count} calls took {_ms(lat.min_ms)} and the median one "
                f"{_ms(lat.p50_ms)}{below}: the calls did not run at one speed, as on a busy machine, and the "
                "fastest is the nearest to the model's own.",
            )
        )
    return out


# -- memory --------------------------------------------------------------------------------------------
def memory_flags(mem: Memory) -> list[Flag]:
    """A peak below the value it is the peak of: the process's RSS, CUDA's reserved memory (which
    holds what is allocated)."""
    out = []
    if mem.peak_rss_bytes < mem.rss_bytes:
        out.append(
            Flag(
                "memory",
                "memory",
                f"The process's peak RSS ({human_bytes(mem.peak_rss_bytes)}) is below its current RSS "
                f"({human_bytes(mem.rss_bytes)}): a peak covers every reading.",
            )
        )
    alloc, reserved = mem.cuda_max_allocated_bytes, mem.cuda_max_reserved_bytes
    if alloc is not None and reserved is not None and reserved < alloc:
        out.append(
            Flag(
                "memory",
                "memory",
                f"CUDA's peak reserved memory ({human_bytes(reserved)}) is below its peak allocated memory "
                f"({human_bytes(alloc)}): what is allocated is reserved first.",
            )
        )
    return out
