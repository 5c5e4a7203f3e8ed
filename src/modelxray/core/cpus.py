"""The CPUs this process may really use: its affinity mask (``taskset``, SLURM's ``--cpus-per-task``)
and its cgroup's CPU quota (containers, ``docker --cpus``), whichever is smaller. PyTorch's default
thread count is the machine's physical cores, which oversubscribes a process limited to fewer: its
threads then spin waiting for each other. No library reads both limits (``os.cpu_count`` and
``psutil`` see the machine), hence this module."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path


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
