"""Energy rests on a power model: the report names it and the TDP it assumed, a user's TDP
(``cpu_tdp_w``) reaches codecarbon as its ``force_cpu_power``, a bad one is a one-line error, and
every figure derived from an estimate says ESTIMATED, in the metrics' companion flags, the
insight and the summary report."""

from __future__ import annotations

import math
import re
import time
from types import SimpleNamespace

import pytest

from modelxray.core.errors import ConfigError
from modelxray.core.result import Result
from modelxray.measure.energy import Energy, EnergyReport, check_cpu_tdp_w, measure_energy

KEY = "analyzer.inspect.cpu_tdp_w"


class CPU:  # codecarbon's hardware objects are found by class name
    def __init__(self, mode: str, tdp: float | None, threads: int = 2):
        self._mode, self._tdp, self._cpu_count = mode, tdp, threads


def _fake_tracker(mode: str, codecarbon_tdp: float, model: str, seen: list):
    """An OfflineEmissionsTracker stand-in that records its arguments and, like codecarbon, uses a
    forced CPU power as the TDP of its load model."""

    class Tracker:
        def __init__(self, **kwargs):
            seen.append(kwargs)
            self._force_cpu_power = kwargs.get("force_cpu_power")
            forced = self._force_cpu_power is not None
            self._hardware = [CPU("cpu_load" if forced else mode, self._force_cpu_power or codecarbon_tdp)]
            self.final_emissions_data = SimpleNamespace(
                energy_consumed=2e-6, cpu_energy=5e-7, gpu_energy=0.0, ram_energy=1.5e-6,
                emissions=1e-6, cpu_model=model, gpu_count=0,
            )  # fmt: skip

        def start(self):
            pass

        def stop(self):
            pass

    return Tracker


def test_a_set_tdp_reaches_codecarbon_and_the_report(monkeypatch):
    import codecarbon

    seen: list[dict] = []
    monkeypatch.setattr(codecarbon, "OfflineEmissionsTracker", _fake_tracker("cpu_load", 8, "AMD EPYC", seen))
    forced = measure_energy(lambda: None, min_seconds=0, max_iterations=3, cpu_tdp_w=65, tdp_key=KEY)
    assert seen[-1]["force_cpu_power"] == 65.0 and seen[-1]["tracking_mode"] == "process"
    assert (forced.cpu_power_model, forced.cpu_tdp_w, forced.cpu_tdp_source) == ("cpu_load", 65.0, "set")
    assert not forced.measured and forced.status == "ESTIMATED"
    assert forced.method.startswith(
        "CPU power ESTIMATED: TDP 65 W x the share of the 2 CPU threads this process kept busy (codecarbon's "
        f"load model); the TDP is the one set by {KEY}"
    )
    # codecarbon's RAM figure for the machine's memory, charged for this process's share of it, and its
    # CPU load model applied to the CPU time of the whole work
    import psutil

    share = psutil.Process().memory_info().rss / psutil.virtual_memory().total
    assert 0 < forced.ram_share < 1 and forced.ram_share == pytest.approx(share, rel=0.2)
    assert forced.iterations == 1 and forced.ram_energy_j == pytest.approx(1.5e-6 * 3.6e6 * forced.ram_share)
    assert forced.energy_j == pytest.approx(forced.cpu_energy_j + forced.ram_energy_j)
    assert 0 <= forced.cpu_energy_j <= 65.0 * 0.05  # an empty lambda: next to no CPU time

    guessed = measure_energy(lambda: None, min_seconds=0, max_iterations=1, tdp_key=KEY)
    assert "force_cpu_power" not in seen[-1]  # null: codecarbon's own guess
    assert (guessed.cpu_tdp_w, guessed.cpu_tdp_source) == (8.0, "default")
    assert (
        "the TDP is a GUESS, codecarbon's default of 4 W per thread ('AMD EPYC' is not in its CPU table): "
        f"set {KEY} to the CPU's TDP; no power counter (RAPL) could be read here" in guessed.method
    )

    monkeypatch.setattr(
        codecarbon,
        "OfflineEmissionsTracker",
        _fake_tracker("cpu_load", 150, "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", seen),
    )
    listed = measure_energy(lambda: None, min_seconds=0, max_iterations=1, tdp_key=KEY)
    assert (listed.cpu_tdp_w, listed.cpu_tdp_source) == (150.0, "table")
    assert "the TDP is codecarbon's table value for 'Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz'" in listed.method

    monkeypatch.setattr(codecarbon, "OfflineEmissionsTracker", _fake_tracker("intel_rapl", None, "Intel Xeon", seen))
    rapl = measure_energy(lambda: None, min_seconds=0, max_iterations=1)
    assert rapl.measured and rapl.status == "MEASURED" and rapl.cpu_tdp_w is None and rapl.cpu_tdp_source is None
    assert "ESTIMATED" not in rapl.method and "cpu_tdp_w" not in Energy(rapl).to_metrics()


def test_a_set_tdp_scales_codecarbons_real_estimate():
    """codecarbon offline, for real: with a TDP of 50 W its load model gives CPU energy = 50 W x the
    CPU time this process used / the machine's threads (the hand computation of the sentence the
    report prints)."""
    measure_energy(lambda: None, min_seconds=0, max_iterations=1, sample_seconds=0.25, cpu_tdp_w=50)  # set-up
    t0 = time.process_time()
    report = measure_energy(lambda: sum(range(20_000)), min_seconds=1.0, sample_seconds=0.25, cpu_tdp_w=50, tdp_key=KEY)
    cpu_seconds = time.process_time() - t0
    assert (report.cpu_power_model, report.cpu_tdp_w, report.cpu_tdp_source) == ("cpu_load", 50.0, "set")
    assert not report.measured and f"set by {KEY}" in report.method
    threads = int(re.search(r"the (\d+) CPU threads", report.method).group(1))
    by_hand = 50.0 * cpu_seconds / threads
    assert report.cpu_energy_j == pytest.approx(by_hand, rel=0.3), (report.cpu_energy_j, by_hand)
    assert report.cpu_energy_j <= 50.0 * report.seconds * 1.05  # never above the TDP


@pytest.mark.parametrize("bad", [0, -5, -0.5, float("nan"), float("inf"), "65", True])
def test_a_bad_tdp_is_a_one_line_error_naming_the_key(bad):
    with pytest.raises(ConfigError) as exc:
        check_cpu_tdp_w(bad, KEY)
    assert str(exc.value).startswith(f"{KEY}: must be the CPU's TDP in watts") and "\n" not in str(exc.value)


def test_a_bad_tdp_stops_before_any_measurement(monkeypatch):
    import codecarbon

    seen: list[dict] = []
    monkeypatch.setattr(codecarbon, "OfflineEmissionsTracker", _fake_tracker("cpu_load", 8, "AMD EPYC", seen))
    with pytest.raises(ConfigError, match=f"^{re.escape(KEY)}: "):
        measure_energy(lambda: None, cpu_tdp_w=0, tdp_key=KEY)
    assert seen == []
    check_cpu_tdp_w(None, KEY)
    check_cpu_tdp_w(65, KEY)
    check_cpu_tdp_w(12.5, KEY)


def _report(measured: bool) -> EnergyReport:
    return EnergyReport(
        seconds=10.0, iterations=40, energy_j=200.0, cpu_energy_j=50.0, gpu_energy_j=0.0, ram_energy_j=150.0,
        mean_power_w=20.0, co2_g=0.02, country_iso_code="FRA", cpu_model="AMD EPYC", measured=measured,
        method="CPU power measured (Intel RAPL)." if measured else "CPU power ESTIMATED: TDP 8 W x ...",
        cpu_power_model="intel_rapl" if measured else "cpu_load",
        cpu_tdp_w=None if measured else 8.0, cpu_tdp_source=None if measured else "default",
    )  # fmt: skip


def test_energy_figures_by_hand_and_their_names_do_not_depend_on_the_mode():
    e = Energy(_report(False), unit="forward", units=40, flops_per_unit=1e9)
    assert e.to_metrics() == pytest.approx(
        {
            "energy_j_per_forward": 5.0,
            "mean_power_w": 20.0,
            "co2_g_per_forward": 0.0005,
            "flops_per_joule": 2e8,
            "energy_measured": 0.0,
            "cpu_tdp_w": 8.0,
        }
    )
    measured = Energy(_report(True), unit="forward", units=40, flops_per_unit=1e9).to_metrics()
    assert measured["energy_measured"] == 1.0 and set(measured) == set(e.to_metrics()) - {"cpu_tdp_w"}
    per_token = Energy(_report(False), unit="token", units=40 * 128)
    assert per_token.to_metrics()["energy_j_per_token"] == pytest.approx(200.0 / 5120)
    back = Energy.from_dict(e.to_dict())
    assert back == e


def test_every_estimated_figure_says_so_in_the_insight_and_the_summary_report():
    from modelxray.report.markdown import summary_report

    for measured in (False, True):
        e = Energy(_report(measured), unit="forward", units=40, flops_per_unit=1e9)
        word = "MEASURED" if measured else "ESTIMATED"
        assert e.insight().startswith(f"Energy ({word}) 5 J per forward, 20.0 W mean (CPU 5.0 W, RAM 15.0 W)")
        assert str(e).startswith(f"{word}: 5 J per forward")
        result = Result("inspect")
        result.record("energy", e)
        run = {
            "model": {"name": "toy", "source_format": "config", "source_dtype": "float32"},
            "dataset": "none", "quant": "none", "choices": {}, "overrides": [], "tracking": "none",
            "host": "test", "versions": {},
        }  # fmt: skip
        text = summary_report(run, {"inspect": result}, [])
        # the energy figures leave the bare metrics table and stand in one line led by the status
        table = [ln for ln in text.splitlines() if ln.startswith("| ")]
        assert not any(name in ln for ln in table for name in e.to_metrics())
        (line,) = [ln for ln in text.splitlines() if "J per forward" in ln]
        assert line.startswith(f"- **energy**: **{word}: 5 J per forward**")
        assert "0.0005 g CO2 per forward (FRA grid), 0.2 GFLOP per J" in line
        assert ("every figure ESTIMATED" in line) != measured
        if not measured:
            assert math.isclose(e.to_metrics()["cpu_tdp_w"], 8.0) and "TDP 8 W" in line
