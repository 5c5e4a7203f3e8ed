"""What the machine did around a piece of work, beyond CPU and memory: CPU frequency, the process's
disk I/O, the machine's network I/O, temperatures and cache counters, each labelled with where it
came from. A figure the OS does not expose here is said in one line ("not exposed here: ..."),
never left out silently or made up.

psutil reads frequency, I/O and temperatures; cache behaviour comes from ``perf stat`` on this
process when the kernel lets it count (``perf_event_paranoid``) and the CPU exposes its counters
(most VMs do not)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import psutil

CACHE_EVENTS = ("cache-references", "cache-misses")


def cpu_freq_mhz() -> float | None:
    """The current CPU clock as the OS reports it (MHz), None where it reports none."""
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, AttributeError):
        return None
    return float(freq.current) if freq and freq.current else None


def io_snapshot() -> dict[str, float]:
    """The process's disk bytes read and written, and the machine's network bytes, so far."""
    out: dict[str, float] = {}
    try:
        io = psutil.Process().io_counters()
        out.update(process_read_bytes=float(io.read_bytes), process_write_bytes=float(io.write_bytes))
    except (OSError, NotImplementedError, AttributeError, psutil.Error):
        pass
    try:
        net = psutil.net_io_counters()
        out.update(machine_net_sent_bytes=float(net.bytes_sent), machine_net_recv_bytes=float(net.bytes_recv))
    except (OSError, AttributeError):
        pass
    return out


def temperatures() -> tuple[dict[str, float], str]:
    """The hottest reading of each sensor (degrees C), and a note when the OS exposes none."""
    read = getattr(psutil, "sensors_temperatures", None)
    try:
        sensors = read() if read else {}
    except (OSError, NotImplementedError):
        sensors = {}
    out = {name: max(float(e.current) for e in entries) for name, entries in sensors.items() if entries}
    return out, "" if out else "not exposed here: the OS reports no temperature sensor (common in VMs)"


class CacheCounters:
    """``perf stat`` counting this process's cache references and misses while the work runs."""

    def __init__(self) -> None:
        self.note = ""
        self._proc: subprocess.Popen | None = None
        perf = shutil.which("perf")
        if perf is None:
            self.note = "not readable here: the perf tool is not installed"
            return
        probe = subprocess.run(
            [perf, "stat", "-x,", "-e", ",".join(CACHE_EVENTS), "--", "true"], capture_output=True, text=True
        )
        if probe.returncode != 0 or "<not supported>" in probe.stderr or "<not counted>" in probe.stderr:
            why = "the CPU exposes no cache counters (perf reports them not supported: a VM without PMU access)"
            if probe.returncode != 0:
                why = f"perf cannot count here ({(probe.stderr.strip().splitlines() or ['no output'])[-1][:100]})"
            self.note = f"not readable here: {why}"
            return
        self._perf = perf

    def __enter__(self) -> CacheCounters:
        if not self.note:
            cmd = [self._perf, "stat", "-x,", "-e", ",".join(CACHE_EVENTS), "-p", str(os.getpid())]
            self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc) -> None:
        self.values: dict[str, float] = {}
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGINT)
        _, err = self._proc.communicate(timeout=10)
        for line in err.splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[2] in CACHE_EVENTS and parts[0].strip().isdigit():
                self.values[parts[2].replace("-", "_")] = float(parts[0])
        refs, misses = self.values.get("cache_references"), self.values.get("cache_misses")
        if refs:
            self.values["cache_miss_rate"] = (misses or 0.0) / refs
