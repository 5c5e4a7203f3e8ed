"""The CPUs this process may really use: its affinity mask (``taskset``, SLURM's ``--cpus-per-task``)
and its cgroup's CPU quota (containers, ``docker --cpus``), whichever is smaller. PyTorch's default
thread count is the machine's physical cores, which oversubscribes a process limited to fewer: its
threads then spin waiting for each other. No library reads both limits (``os.cpu_count`` and
``psutil`` see the machine), hence this module."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
MIN_WINDOW_S = 0.25  # a shorter look says too little of what other processes do
MAX_WINDOW_S = 60.0  # a longer one (a notebook that imported modelxray long ago) says too little of now


@dataclass(frozen=True)
class CpuBudget:
    cpus: int  # what the process may use: the smaller of the two limits, at least 1
    affinity: int | None  # CPUs in the affinity mask (None where the OS has no such call)
    quota: float | None  # CPUs the cgroup's quota allows (None: no quota)

    def describe(self) -> str:
        parts = [f"affinity {self.affinity}" if self.affinity is not None else "affinity unknown"]
        parts.append(f"cgroup quota {self.quota:g} CPUs" if self.quota is not None else "no cgroup quota")
        return f"{self.cpus} usable CPU{'s' if self.cpus != 1 else ''} ({', '.join(parts)})"


def cgroup_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs the cgroup's quota allows: v2 ``cpu.max`` ("max 100000" or "200000 100000"), else v1's
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; None when unlimited or unreadable."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def cpu_budget(root: Path = Path("/sys/fs/cgroup")) -> CpuBudget:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    quota = cgroup_quota(root)
    limits = [n for n in (affinity, math.ceil(quota) if quota is not None else None) if n is not None]
    cpus = max(1, min(limits)) if limits else max(1, os.cpu_count() or 1)
    return CpuBudget(cpus, affinity, quota)


@dataclass(frozen=True)
class CpuSample:
    """What the machine's CPUs and this process had done by ``wall``."""

    wall: float  # time.monotonic()
    busy: float | None  # CPU-seconds every process spent running since boot; None where unreadable
    cpus: int  # CPUs the machine's count covers
    own: float  # this process's CPU-seconds, all its threads


def cpu_sample(stat: Path = PROC_STAT) -> CpuSample:
    """The machine's busy CPU time (``/proc/stat``: user, nice, system, irq and softirq; idle, I/O
    wait and time the hypervisor stole are not busy) beside this process's own."""
    busy, cpus = None, 1
    try:
        lines = stat.read_text().splitlines()
        fields = [int(v) for v in lines[0].split()[1:8]]  # user nice system idle iowait irq softirq
        busy = (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")
        cpus = max(1, sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit()))
    except (OSError, ValueError, IndexError):
        pass
    return CpuSample(time.monotonic(), busy, cpus, time.process_time())


def busy_elsewhere(since: CpuSample, now: CpuSample) -> float | None:
    """The share (0-1) of the machine's CPUs other processes kept busy between two samples; None
    where unknown or the window is too short to tell."""
    wall = now.wall - since.wall
    if since.busy is None or now.busy is None or wall < MIN_WINDOW_S:
        return None
    others = (now.busy - since.busy) - (now.own - since.own)
    return min(1.0, max(0.0, others / (wall * now.cpus)))


_START = cpu_sample()  # this module is imported as the process starts (the command line imports it first)
_busy_at_start: list[float | None] = []


def busy_at_start() -> float | None:
    """:func:`busy_elsewhere` from this module's import to the first call, the same on every call; a
    first call long after the import looks for a quarter of a second instead."""
    if not _busy_at_start:
        since = _START
        if time.monotonic() - since.wall > MAX_WINDOW_S:
            since = cpu_sample()
            time.sleep(MIN_WINDOW_S)
        _busy_at_start.append(busy_elsewhere(since, cpu_sample()))
    return _busy_at_start[0]


def free_threads(cores: int, busy: float | None) -> int:
    """Threads for ``cores`` CPUs of which the share ``busy`` is held by other processes: the free
    ones, rounded, at least one."""
    return max(1, round(cores * (1.0 - (busy or 0.0))))
