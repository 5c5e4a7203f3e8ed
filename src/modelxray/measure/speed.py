"""Wall-clock timing of forward passes, with warm-up and device synchronisation, and how much of the
machine the timed work had (a busy machine slows every figure; the timings alone cannot say so)."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from modelxray.core.cpus import cpu_budget
from modelxray.core.progress import bar
from modelxray.measure.scoring import device_of, forward_logits


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_forward(
    model: nn.Module,
    input_ids: torch.Tensor | dict,
    warmup: int,
    iters: int,
    progress: bool = True,
    desc: str = "timing",
) -> list[float]:
    """Seconds per forward pass of ``input_ids`` over ``iters`` timed runs after ``warmup`` untimed ones."""
    device = device_of(input_ids)
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            forward_logits(model, input_ids)
        _sync(device)
        for _ in bar(range(iters), desc=desc, enabled=progress):
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
