"""Energy and CO2 of a piece of work, with codecarbon's ``OfflineEmissionsTracker`` (no network).

codecarbon reads power where the hardware exposes it (Intel RAPL, NVML on NVIDIA GPUs, powermetrics
on macOS) and otherwise *estimates* CPU power as a TDP times the share of the CPU the process kept
busy; RAM power is always a model, of the whole machine's memory: the work is charged the share of it
the process holds (its resident memory over the machine's), not all of it. The TDP itself may be a guess: codecarbon looks the CPU's name up
in its table and, when the name is not there (``AMD EPYC`` in a cloud VM), assumes 4 W per thread.
Users comparing energy must know which they got, so every figure derived from the measurement says
MEASURED or ESTIMATED, and an estimate names its power model and the TDP it assumed, which a user
may set (``cpu_tdp_w``, codecarbon's ``force_cpu_power``).

Where codecarbon estimates CPU power with its load model (TDP x the share of the CPU threads the
process kept busy), the CPU energy is that model applied to the process's CPU time over the whole
work, read here: codecarbon 3.3 applies it sample by sample, and its sampling thread, starved by a
busy main thread, pairs CPU-time deltas with the wrong wall-clock spans (estimates off by 2-8x on
2 cores). The model is linear, so the whole-work figure is exactly what it means."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from modelxray.core.errors import ConfigError

_MEASURED_CPU_MODES = {
    "intel_rapl": "Intel RAPL",
    "intel_power_gadget": "Intel Power Gadget",
    "apple_powermetrics": "Apple powermetrics",
    "windows_emi": "Windows Energy Meter",
}
DEFAULT_W_PER_THREAD = 4  # codecarbon's TDP guess per thread for a CPU missing from its table


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
    method: str  # how each part was obtained, and for an estimate its model and TDP
    cpu_power_model: str = "unknown"  # codecarbon's CPU mode: intel_rapl (measured), cpu_load, constant ...
    cpu_tdp_w: float | None = None  # the TDP a CPU estimate scaled; None when CPU power was measured
    cpu_tdp_source: str | None = None  # set (cpu_tdp_w) | table (codecarbon's CPU table) | default (4 W/thread)
    # the process's share of the machine's memory: codecarbon's RAM model covers all of it, and only
    # this share is the work's (1.0 for reports saved before the share was kept)
    ram_share: float = 1.0

    @property
    def status(self) -> str:
        """``MEASURED`` or ``ESTIMATED``: the word every derived figure carries."""
        return "MEASURED" if self.measured else "ESTIMATED"

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> EnergyReport:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def check_cpu_tdp_w(value: float | None, key: str = "cpu_tdp_w") -> None:
    """A set TDP must be a finite number of watts above zero (None: codecarbon's own guess)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ConfigError(
            key, f"must be the CPU's TDP in watts, a number above 0 (or null for codecarbon's guess); got {value!r}"
        )


def check_country(code, key: str = "country_iso_code") -> None:
    """A country whose grid codecarbon knows (ISO 3166 alpha-3, upper case): codecarbon takes any code
    it does not know silently and falls back to a world average, so the CO2 figure would name the
    wrong grid. Read from codecarbon's own table, without importing it."""
    if not (isinstance(code, str) and len(code) == 3 and code.isalpha()):
        raise ConfigError(key, f"must be a 3-letter ISO 3166 code such as USA, FRA or DEU; got {code!r}")
    known = grid_countries()
    if known and code not in known:
        close = sorted(c for c in known if c[0] == code[:1].upper())[:8]
        raise ConfigError(
            key,
            f"{code!r} is no country whose grid codecarbon knows (upper-case ISO 3166 alpha-3); "
            f"e.g. {', '.join(close or ['USA', 'FRA', 'DEU'])}",
        )


def grid_countries() -> set[str]:
    """The countries of codecarbon's energy-mix table (empty if the table cannot be read)."""
    import importlib.resources
    import json

    try:
        table = importlib.resources.files("codecarbon") / "data" / "private_infra" / "global_energy_mix.json"
        return set(json.loads(table.read_text()))
    except (OSError, ValueError, ModuleNotFoundError):
        return set()


def measure_energy(
    work: Callable[[], None],
    *,
    min_seconds: float = 5.0,
    max_iterations: int | None = None,
    country_iso_code: str = "USA",
    sample_seconds: float = 1.0,
    cpu_tdp_w: float | None = None,
    tdp_key: str = "cpu_tdp_w",
) -> EnergyReport:
    """Repeat ``work`` until ``min_seconds`` have passed (or ``max_iterations``) under the tracker.

    ``cpu_tdp_w`` (watts) replaces codecarbon's TDP guess; codecarbon then estimates CPU power from
    it even where RAPL could be read. ``tdp_key`` is the config key that sets it, named in the
    report when the TDP was guessed."""
    from codecarbon import OfflineEmissionsTracker

    check_cpu_tdp_w(cpu_tdp_w, tdp_key)
    for name in ("codecarbon", "CODECARBON"):
        logging.getLogger(name).setLevel(logging.ERROR)
    tracker = OfflineEmissionsTracker(
        country_iso_code=country_iso_code,
        log_level="error",
        save_to_file=False,
        measure_power_secs=sample_seconds,
        tracking_mode="process",
        **({"force_cpu_power": float(cpu_tdp_w)} if cpu_tdp_w is not None else {}),
    )
    tracker.start()
    start = time.perf_counter()
    cpu_start = _process_cpu_seconds()
    rss_start = _rss_share()
    n = 0
    try:
        while (max_iterations is None or n < max_iterations) and (n == 0 or time.perf_counter() - start < min_seconds):
            work()
            n += 1
    finally:
        seconds = time.perf_counter() - start
        cpu_seconds = _process_cpu_seconds() - cpu_start
        ram_share = (rss_start + _rss_share()) / 2  # the work's memory: the process's share, start and end
        tracker.stop()
    d = tracker.final_emissions_data
    kwh_to_j = 3.6e6
    cpu_mode, measured, method, tdp, source = _describe(tracker, d, tdp_key)
    cpu_j, gpu_j, ram_j = d.cpu_energy * kwh_to_j, d.gpu_energy * kwh_to_j, d.ram_energy * kwh_to_j
    co2_g = d.emissions * 1000.0
    threads = getattr(_cpu(tracker), "_cpu_count", None)
    if cpu_mode == "cpu_load" and tdp is not None and isinstance(threads, int) and threads > 0:
        reported = cpu_j + gpu_j + ram_j
        cpu_j = tdp * cpu_seconds / threads  # the load model over the whole work (module docstring)
        co2_g *= (cpu_j + gpu_j + ram_j) / reported if reported > 0 else 1.0
    before = cpu_j + gpu_j + ram_j
    ram_j *= ram_share  # codecarbon's RAM model powers all the machine's memory; this process holds its share
    co2_g *= (cpu_j + gpu_j + ram_j) / before if before > 0 else 1.0
    energy = cpu_j + gpu_j + ram_j
    return EnergyReport(
        seconds=seconds,
        iterations=n,
        energy_j=energy,
        cpu_energy_j=cpu_j,
        gpu_energy_j=gpu_j,
        ram_energy_j=ram_j,
        mean_power_w=energy / seconds if seconds > 0 else float("nan"),
        co2_g=co2_g,
        country_iso_code=country_iso_code,
        cpu_model=str(d.cpu_model),
        measured=measured,
        method=method,
        cpu_power_model=cpu_mode,
        cpu_tdp_w=tdp,
        cpu_tdp_source=source,
        ram_share=ram_share,
    )


def _rss_share() -> float:
    """This process's resident memory as a share of the machine's (psutil)."""
    import psutil

    total = psutil.virtual_memory().total
    return psutil.Process().memory_info().rss / total if total else 1.0


def _cpu(tracker):
    return next((h for h in getattr(tracker, "_hardware", []) if type(h).__name__ == "CPU"), None)


def _tdp_source(tracker, data) -> str | None:
    """``set`` when the user gave the TDP, ``table`` when codecarbon found the CPU's name in its
    table, ``default`` when it fell back on 4 W per thread; None when it cannot be told."""
    if getattr(tracker, "_force_cpu_power", None) is not None:
        return "set"
    model = getattr(data, "cpu_model", None)
    if not model:
        return None
    try:
        from codecarbon.core import cpu
        from codecarbon.core.hardware_cache import get_cached_tdp

        return "table" if get_cached_tdp(cpu)._get_cpu_power_from_registry(str(model)) else "default"
    except Exception:  # noqa: BLE001 - a codecarbon without this lookup: say nothing rather than guess
        return None


def _process_cpu_seconds() -> float:
    """CPU time of this process (every thread) and its finished children, as codecarbon counts it."""
    import os

    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _describe(tracker, data, tdp_key: str = "cpu_tdp_w") -> tuple[str, bool, str, float | None, str | None]:
    """codecarbon's CPU mode, whether the total was measured, one sentence on how each part (CPU,
    GPU, RAM) was obtained, and for a CPU estimate the TDP it scaled and who chose that TDP."""
    cpu = _cpu(tracker)
    mode = getattr(cpu, "_mode", "unknown")
    tdp, source = None, None
    if mode in _MEASURED_CPU_MODES:
        cpu_text, cpu_measured = f"CPU power measured ({_MEASURED_CPU_MODES[mode]})", True
    else:
        raw = getattr(cpu, "_tdp", None)
        tdp = float(raw) if isinstance(raw, (int, float)) and raw > 0 else None
        source = _tdp_source(tracker, data)
        cpu_text, cpu_measured = (
            _cpu_estimate(mode, tdp, source, getattr(cpu, "_cpu_count", None), data, tdp_key),
            False,
        )
    parts = [cpu_text]
    gpu_measured = True
    if getattr(data, "gpu_count", 0):
        parts.append("GPU power measured (NVML)")
    parts.append("RAM power estimated (codecarbon's per-GB model, for this process's share of the machine's memory)")
    return mode, cpu_measured and gpu_measured, "; ".join(parts) + ".", tdp, source


def _method(tracker, data, tdp_key: str = "cpu_tdp_w") -> tuple[str, bool, str]:
    """codecarbon's CPU mode, whether the total was measured, and how each part was obtained."""
    return _describe(tracker, data, tdp_key)[:3]


def _cpu_estimate(mode: str, tdp: float | None, source: str | None, threads, data, tdp_key: str) -> str:
    """``CPU power ESTIMATED: TDP 8 W x the share of the 2 CPU threads this process kept busy
    (codecarbon's load model); the TDP is a GUESS ...``"""
    tdp_text = f"TDP {tdp:g} W" if tdp is not None else "a TDP"
    if mode == "cpu_load":
        of = f"the {threads} CPU threads" if threads else "the CPU"
        text = f"CPU power ESTIMATED: {tdp_text} x the share of {of} this process kept busy (codecarbon's load model)"
    elif mode == "constant":
        text = f"CPU power ESTIMATED: half its {tdp_text}, whatever the load (codecarbon's constant model)"
    else:
        text = f"CPU power ESTIMATED by codecarbon's {mode} model from {tdp_text}"
    model = getattr(data, "cpu_model", None) or "this CPU"
    if source == "set":
        return text + f"; the TDP is the one set by {tdp_key}, which takes the place of any power counter"
    if source == "table":
        text += f"; the TDP is codecarbon's table value for {model!r}"
    elif source == "default":
        text += (
            f"; the TDP is a GUESS, codecarbon's default of {DEFAULT_W_PER_THREAD} W per thread "
            f"({model!r} is not in its CPU table): set {tdp_key} to the CPU's TDP"
        )
    return text + "; no power counter (RAPL) could be read here"


@dataclass(frozen=True)
class Energy:
    """Energy figures per unit of work (``forward``, ``token``, ``example``) over one measurement,
    a typed measurement for ``Result.record``: the summary report shows them in one line that says
    MEASURED or ESTIMATED, and the insight sentence names the power model and the TDP.

    Metrics (names fixed whatever the mode, so runs compare): ``energy_j_per_<unit>``,
    ``mean_power_w``, ``co2_g_per_<unit>``, ``flops_per_joule`` (with ``flops_per_unit``),
    ``energy_measured`` (1 measured, 0 estimated) and, for a CPU estimate, ``cpu_tdp_w``."""

    report: EnergyReport
    unit: str = "forward"
    units: float = 1.0  # units of work done during the measurement (forwards, tokens, examples)
    flops_per_unit: float | None = None

    @property
    def energy_j_per_unit(self) -> float:
        return self.report.energy_j / self.units

    @property
    def co2_g_per_unit(self) -> float:
        return self.report.co2_g / self.units

    @property
    def flops_per_joule(self) -> float | None:
        if self.flops_per_unit is None:
            return None
        e = self.energy_j_per_unit
        return self.flops_per_unit / e if e > 0 else float("nan")

    def to_metrics(self) -> dict[str, float]:
        r, u = self.report, self.unit
        out = {
            f"energy_j_per_{u}": self.energy_j_per_unit,
            "mean_power_w": r.mean_power_w,
            f"co2_g_per_{u}": self.co2_g_per_unit,
        }
        if self.flops_per_joule is not None:
            out["flops_per_joule"] = self.flops_per_joule
        out["energy_measured"] = 1.0 if r.measured else 0.0
        if r.cpu_tdp_w is not None:
            out["cpu_tdp_w"] = r.cpu_tdp_w
        return out

    def to_dict(self) -> dict:
        return {**self.report.as_dict(), "unit": self.unit, "units": self.units, "flops_per_unit": self.flops_per_unit}

    @classmethod
    def from_dict(cls, d: dict) -> Energy:
        return cls(
            EnergyReport.from_dict(d), d.get("unit", "forward"), float(d.get("units", 1.0)), d.get("flops_per_unit")
        )

    def _figures(self) -> str:
        r, u = self.report, self.unit
        s = r.seconds if r.seconds > 0 else float("nan")
        parts = [f"CPU {r.cpu_energy_j / s:.1f} W", f"RAM {r.ram_energy_j / s:.1f} W"]
        if r.gpu_energy_j:
            parts.insert(1, f"GPU {r.gpu_energy_j / s:.1f} W")
        text = (
            f"{r.mean_power_w:.1f} W mean ({', '.join(parts)}), {self.co2_g_per_unit:.3g} g CO2 per {u} "
            f"({r.country_iso_code} grid)"
        )
        if self.flops_per_joule is not None:
            text += f", {self.flops_per_joule / 1e9:.3g} GFLOP per J"
        return text

    def __str__(self) -> str:
        r = self.report
        return (
            f"{r.status}: {self.energy_j_per_unit:.3g} J per {self.unit}, {self._figures()}, "
            f"{int(self.units):,} {self.unit}s in {r.seconds:.1f} s. {r.method}"
        )

    def markdown(self) -> str:
        r = self.report
        every = "every figure ESTIMATED, " if not r.measured else ""
        return (
            f"**{r.status}: {self.energy_j_per_unit:.3g} J per {self.unit}**, {self._figures()} ({every}"
            f"{int(self.units):,} {self.unit}s in {r.seconds:.1f} s). {r.method}"
        )

    def insight(self) -> str:
        """One sentence for insights.md: the figures, the status, the power model and the TDP."""
        r = self.report
        return f"Energy ({r.status}) {self.energy_j_per_unit:.3g} J per {self.unit}, {self._figures()}: {r.method}"


def idle_power_of_model(report: EnergyReport) -> tuple[float | None, str]:
    """The idle power codecarbon's estimate charges a process that does nothing, and how: its RAM
    model is constant (the process's share of the machine's memory), its load model charges an idle
    CPU nothing, its constant model charges the CPU the same busy or idle. None for a model whose
    idle draw cannot be told (then the dynamic energy is not separated)."""
    s = report.seconds if report.seconds > 0 else float("nan")
    ram_w = report.ram_energy_j / s
    if report.cpu_power_model == "cpu_load":
        return ram_w, (
            f"ESTIMATED from the power model: RAM {ram_w:.2f} W (codecarbon's per-GB model, the same busy or idle) "
            "+ CPU 0 W (its load model charges only busy CPU time)"
        )
    if report.cpu_power_model == "constant":
        cpu_w = report.cpu_energy_j / s
        return ram_w + cpu_w, (
            f"ESTIMATED from the power model: RAM {ram_w:.2f} W + CPU {cpu_w:.2f} W (codecarbon's constant model "
            "charges the CPU the same busy or idle, so no energy is dynamic)"
        )
    return None, f"not known: codecarbon's {report.cpu_power_model} power model says nothing of the idle draw"
