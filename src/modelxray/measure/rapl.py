"""RAPL energy counters read directly from Linux's powercap tree: the machine's package and DRAM
energy, each counter's wrap undone, and the idle draw. inspect reads them around each operation
(energy per op) and while the process sleeps (idle power); codecarbon reads them too, but only as
one total over its own sampling, not around a piece of work of our choosing."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

POWERCAP_ROOT = Path("/sys/class/powercap")  # where Linux exposes RAPL; a test points it at a fake tree
_ZONE_KINDS = ("package", "dram")  # cores and uncore are inside their package; psys would count twice


@dataclass(frozen=True)
class RaplZone:
    name: str  # package-0, dram
    path: Path  # its energy_uj
    max_uj: int  # the counter wraps at this value


def _zone_name(zone: Path) -> str:
    try:
        return (zone / "name").read_text().strip()
    except OSError:  # no name file: a zone one level deep (intel-rapl:0) is a package
        return "package" if zone.name.count(":") == 1 else zone.name


def _max_range(zone: Path) -> int:
    try:
        return int((zone / "max_energy_range_uj").read_text())
    except (OSError, ValueError):
        return 2**32  # the usual range; a wrap is rare within one read


def read_counter(path: Path) -> int:
    """One counter in microjoules (a function of its own, so a test can make a fake counter tick)."""
    return int(path.read_text())


def rapl_zones(root: Path | None = None) -> tuple[list[RaplZone], str | None]:
    """The RAPL zones whose counters add up to the machine's energy (each package and each DRAM
    zone, once), or none and the one line saying why (absent, or present but unreadable)."""
    root = POWERCAP_ROOT if root is None else root
    seen, zones = set(), []
    for counter in sorted(root.glob("intel-rapl*/energy_uj")) + sorted(root.glob("intel-rapl*/intel-rapl*/energy_uj")):
        zone = counter.parent
        name = _zone_name(zone)
        if counter.resolve() in seen or not name.startswith(_ZONE_KINDS):
            continue
        seen.add(counter.resolve())
        zones.append(RaplZone(name, counter, _max_range(zone)))
    if not zones:
        return [], f"no RAPL energy counters on this machine (nothing readable under {root}/intel-rapl*)"
    try:
        for z in zones:
            read_counter(z.path)
    except (OSError, ValueError) as exc:
        return [], (
            f"RAPL energy counters exist ({len(zones)} zones under {root}) but this process cannot read them "
            f"({type(exc).__name__}; the kernel lets only root read energy_uj unless access is granted)"
        )
    return zones, None


def counter_delta(before: int, after: int, max_uj: int) -> int:
    """Microjoules between two readings of a counter that wraps at ``max_uj``."""
    return after - before if after >= before else after + max_uj - before


class RaplMeter:
    """The summed RAPL counters in joules since the meter opened, each zone's wrap undone."""

    def __init__(self, zones: list[RaplZone]):
        self.zones = zones
        self._last = [read_counter(z.path) for z in zones]
        self._uj = 0

    def read(self) -> float:
        now = [read_counter(z.path) for z in self.zones]
        self._uj += sum(counter_delta(b, a, z.max_uj) for b, a, z in zip(self._last, now, self.zones))
        self._last = now
        return self._uj / 1e6

    def describe(self) -> str:
        return ", ".join(z.name for z in self.zones)


def idle_power_rapl(meter: RaplMeter, seconds: float) -> float:
    """The machine's idle draw in watts: the counters over ``seconds`` with this process asleep."""
    start, t0 = meter.read(), time.perf_counter()
    time.sleep(seconds)
    return (meter.read() - start) / max(time.perf_counter() - t0, 1e-9)
