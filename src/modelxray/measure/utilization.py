"""CPU and GPU utilisation and memory while some code runs, sampled by a background thread.

psutil gives this process's CPU share (100% = one core busy) and the whole machine's per-core
load; on CUDA, ``torch.cuda.utilization`` (NVML) and the allocator's peak; ``system_metrics`` the
CPU clock, disk and network I/O, temperatures and cache counters, each saying where it came from. Short bursts between
samples are missed; the interval is config."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field

import psutil
import torch

from modelxray.measure.system_metrics import CacheCounters, cpu_freq_mhz, io_snapshot, temperatures


@dataclass
class UtilizationSampler:
    interval_s: float = 0.2
    samples: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._proc = psutil.Process()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._cuda = torch.cuda.is_available()

    def _run(self) -> None:
        self._proc.cpu_percent(None)
        psutil.cpu_percent(None)
        while not self._stop.wait(self.interval_s):
            row = {
                "t": time.perf_counter() - self._t0,
                "process_cpu_percent": self._proc.cpu_percent(None),
                "system_cpu_percent": psutil.cpu_percent(None),
                "rss_bytes": self._proc.memory_info().rss,
            }
            freq = cpu_freq_mhz()
            if freq is not None:
                row["cpu_freq_mhz"] = freq
            if self._cuda:
                try:
                    row["gpu_util_percent"] = float(torch.cuda.utilization())
                except Exception:  # noqa: BLE001 - NVML missing: utilisation unknown, memory still known
                    pass
                row["gpu_memory_bytes"] = torch.cuda.memory_allocated()
            self.samples.append(row)

    def __enter__(self) -> UtilizationSampler:
        self._t0 = time.perf_counter()
        self._cpu0 = self._proc.cpu_times()
        self._io0 = io_snapshot()
        self._cache = CacheCounters().__enter__()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._seconds = time.perf_counter() - self._t0
        cpu1 = self._proc.cpu_times()
        self._cpu_seconds = (cpu1.user - self._cpu0.user) + (cpu1.system - self._cpu0.system)
        io1 = io_snapshot()
        self._io = {k: io1[k] - v for k, v in self._io0.items() if k in io1}
        self._cache.__exit__(*exc)
        self._temperatures, self._temperature_note = temperatures()

    def summary(self) -> dict:
        """Means and peaks; ``cores_busy`` is process CPU time / wall time (exact, not sampled)."""
        out = {
            "seconds": self._seconds,
            "cpu_seconds": self._cpu_seconds,
            "cores_busy": self._cpu_seconds / self._seconds if self._seconds > 0 else 0.0,
            "logical_cores": psutil.cpu_count(logical=True),
            "samples": len(self.samples),
        }
        for key in ("process_cpu_percent", "system_cpu_percent", "gpu_util_percent"):
            vals = [s[key] for s in self.samples if key in s]
            if vals:
                out[f"{key}_mean"] = statistics.fmean(vals)
                out[f"{key}_max"] = max(vals)
        rss = [s["rss_bytes"] for s in self.samples]
        out["rss_peak_bytes"] = max(rss) if rss else psutil.Process().memory_info().rss
        gpu = [s["gpu_memory_bytes"] for s in self.samples if "gpu_memory_bytes" in s]
        if gpu:
            out["gpu_memory_peak_bytes"] = max(gpu)
        freq = [s["cpu_freq_mhz"] for s in self.samples if "cpu_freq_mhz" in s]
        if freq:
            out["cpu_freq_mhz_mean"], out["cpu_freq_mhz_max"] = statistics.fmean(freq), max(freq)
        out.update(self._io)
        out.update({f"temperature_c/{name}": v for name, v in self._temperatures.items()})
        out.update(getattr(self._cache, "values", {}))
        out["sources"] = {
            "cpu_freq_mhz": "measured: the clock the OS reports, sampled" if freq else "not exposed here",
            "process_read_bytes": "measured: this process's disk I/O (the OS's counters)",
            "machine_net_sent_bytes": "measured: the whole machine's network I/O, not this process's alone",
            "temperature_c": "measured: the OS's sensors" if self._temperatures else self._temperature_note,
            "cache": "measured: perf stat on this process"
            if getattr(self._cache, "values", None)
            else self._cache.note,
        }
        return out
