"""Energy and CO2 of a piece of work, with codecarbon's ``OfflineEmissionsTracker`` (no network).

codecarbon reads power where the hardware exposes it (Intel RAPL, NVML on NVIDIA GPUs, powermetrics
on macOS) and otherwise *estimates* CPU power from a TDP table times the CPU load; RAM power is
always a model. Users comparing energy must know which they got, so the report says it, per device."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

_MEASURED_CPU_MODES = {
    "intel_rapl": "Intel RAPL",
    "intel_power_gadget": "Intel Power Gadget",
    "apple_powermetrics": "Apple powermetrics",
}


@dataclass
class EnergyReport:
    seconds: float
    iterations: int
    energy_j: float  # CPU + GPU + RAM, as codecarbon accounts it
    cpu_energy_j: float
    gpu_energy_j: float
    ram_energy_j: float
    mean_power_w: float
    co2_g: float
    country_iso_code: str
    cpu_model: str
    measured: bool  # True only when CPU (and GPU, if used) power came from hardware counters
    method: str  # one sentence: how each part was obtained

    def as_dict(self) -> dict:
        return asdict(self)


def measure_energy(
    work: Callable[[], None],
    *,
    min_seconds: float = 5.0,
    max_iterations: int | None = None,
    country_iso_code: str = "USA",
    sample_seconds: float = 1.0,
) -> EnergyReport:
    """Repeat ``work`` until ``min_seconds`` have passed (or ``max_iterations``) under the tracker."""
    from codecarbon import OfflineEmissionsTracker

    for name in ("codecarbon", "CODECARBON"):
        logging.getLogger(name).setLevel(logging.ERROR)
    tracker = OfflineEmissionsTracker(
        country_iso_code=country_iso_code,
        log_level="error",
        save_to_file=False,
        measure_power_secs=sample_seconds,
        tracking_mode="process",
    )
    tracker.start()
    start = time.perf_counter()
    n = 0
    try:
        while (max_iterations is None or n < max_iterations) and (n == 0 or time.perf_counter() - start < min_seconds):
            work()
            n += 1
    finally:
        seconds = time.perf_counter() - start
        tracker.stop()
    d = tracker.final_emissions_data
    kwh_to_j = 3.6e6
    energy = d.energy_consumed * kwh_to_j
    cpu_mode, measured, method = _method(tracker, d)
    return EnergyReport(
        seconds=seconds,
        iterations=n,
        energy_j=energy,
        cpu_energy_j=d.cpu_energy * kwh_to_j,
        gpu_energy_j=d.gpu_energy * kwh_to_j,
        ram_energy_j=d.ram_energy * kwh_to_j,
        mean_power_w=energy / seconds if seconds > 0 else float("nan"),
        co2_g=d.emissions * 1000.0,
        country_iso_code=country_iso_code,
        cpu_model=str(d.cpu_model),
        measured=measured,
        method=method,
    )


def _method(tracker, data) -> tuple[str, bool, str]:
    cpu = next((h for h in getattr(tracker, "_hardware", []) if type(h).__name__ == "CPU"), None)
    mode = getattr(cpu, "_mode", "unknown")
    tdp = getattr(cpu, "_tdp", None)
    if mode in _MEASURED_CPU_MODES:
        cpu_text, cpu_measured = f"CPU power measured ({_MEASURED_CPU_MODES[mode]})", True
    else:
        cpu_text = (
            f"CPU power ESTIMATED by codecarbon's TDP model ({mode} mode"
            + (f", TDP {tdp} W" if tdp else "")
            + " x CPU load; no RAPL access here)"
        )
        cpu_measured = False
    parts = [cpu_text]
    gpu_measured = True
    if getattr(data, "gpu_count", 0):
        parts.append("GPU power measured (NVML)")
    parts.append("RAM power estimated (codecarbon's per-GB model)")
    return mode, cpu_measured and gpu_measured, "; ".join(parts) + "."
