"""Wall-clock timing of forward passes, with warm-up and device synchronisation, and how much of the
machine the timed work had (a busy machine slows every figure; the timings alone cannot say so)."""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from modelxray.core.cpus import cpu_budget
from modelxray.core.progress import bar
from modelxray.measure.scoring import device_of, forward_logits
from modelxray.metrics.measurements.speed import t_critical_95


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class StopRule:
    """When timing stops: at ``max_iters`` timed passes, or once ``min_iters`` ran and either the
    95% interval of the mean latency is within ``precision`` of it (a fraction: 0.05 is +-5%) or
    ``budget_s`` seconds of timed passes went by. A slow or steady model stops after a few passes, a
    fast or noisy one takes more, and no figure waits on a fixed count it did not need."""

    max_iters: int
    min_iters: int = 3
    precision: float = 0.05
    budget_s: float = 3.0

    @classmethod
    def of(cls, cfg) -> StopRule:
        """From an analyzer's ``iters``, ``min_iters``, ``precision`` and ``timing_budget_s``."""
        return cls(cfg.iters, min(cfg.min_iters, cfg.iters), cfg.precision, cfg.timing_budget_s)

    def done(self, times: list[float]) -> bool:
        n = len(times)
        if n >= self.max_iters:
            return True
        if n < max(self.min_iters, 2):
            return False
        if sum(times) >= self.budget_s:
            return True
        mean = statistics.fmean(times)
        half = t_critical_95(n - 1) * statistics.stdev(times) / math.sqrt(n)
        return half <= self.precision * mean


def time_forward(
    model: nn.Module,
    input_ids: torch.Tensor | dict,
    warmup: int,
    stop: StopRule | int,
    progress: bool = True,
    desc: str = "timing",
) -> list[float]:
    """Seconds per forward pass of ``input_ids``, timed after ``warmup`` untimed passes until ``stop``
    says so (a count: exactly that many)."""
    rule = StopRule(stop, min_iters=stop, budget_s=math.inf) if isinstance(stop, int) else stop
    device = device_of(input_ids)
    times: list[float] = []
    with torch.inference_mode():
        for _ in range(warmup):
            forward_logits(model, input_ids)
        _sync(device)
        for _ in bar(range(rule.max_iters), desc=desc, enabled=progress):
            if times and rule.done(times):  # checked before the next pass: the bar counts the passes run
                break
            start = time.perf_counter()
            forward_logits(model, input_ids)
            _sync(device)
            times.append(time.perf_counter() - start)
    return times


# -- how much of the machine the work had ---------------------------------------------------------
@dataclass(frozen=True)
class CpuUse:
    """What this process got of the CPUs over a stretch of work. Intra-op threads meet after every
    op, so when another process holds a core the whole forward waits for the thread that lost it:
    ``wait_s`` (the time its threads were ready to run but waited for a CPU) says so directly,
    ``cpu_s`` against ``wall_s`` and the load average say so indirectly."""

    wall_s: float
    cpu_s: float  # process CPU time, all threads
    wait_s: float | None  # run-queue wait of its threads (Linux schedstat); None where unreadable
    threads: int  # torch's intra-op threads
    cpus: int  # CPUs this process may use
    load: float | None  # 1-minute load average at the end; None where the OS keeps none

    @property
    def cpu_share(self) -> float:
        """CPU time over what ``threads`` busy threads would get: near 1 when every thread ran throughout."""
        return self.cpu_s / max(self.wall_s * self.threads, 1e-12)

    @property
    def wait_share(self) -> float | None:
        """Run-queue wait over the threads' wall time: 0 on an idle machine, 0.5 when half of it was
        spent waiting for a CPU."""
        return None if self.wait_s is None else self.wait_s / max(self.wall_s * self.threads, 1e-12)

    def to_dict(self) -> dict:
        return {**asdict(self), "cpu_share": self.cpu_share, "wait_share": self.wait_share}


def run_queue_wait_s(task_dir: Path = Path("/proc/self/task")) -> float | None:
    """Seconds this process's live threads have waited on a run queue (the second field of each
    thread's ``schedstat``); None where the file is not there (not Linux, no schedstats)."""
    try:
        tasks = list(task_dir.iterdir())
    except OSError:
        return None
    total, read = 0, False
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[1])
            read = True
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / 1e9 if read else None


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class CpuWatch:
    """``with CpuWatch() as watch: ...``, then ``watch.use``: the block's wall time, process CPU time
    and run-queue wait."""

    use: CpuUse | None = None

    def __enter__(self) -> CpuWatch:
        self._start = (time.perf_counter(), time.process_time(), run_queue_wait_s())
        return self

    def __exit__(self, *exc) -> None:
        wall, cpu, wait = time.perf_counter(), time.process_time(), run_queue_wait_s()
        wall0, cpu0, wait0 = self._start
        waited = None if wait is None or wait0 is None else max(wait - wait0, 0.0)  # ended threads leave the sum
        self.use = CpuUse(wall - wall0, cpu - cpu0, waited, torch.get_num_threads(), cpu_budget().cpus, _load())
