"""What reaches the user of analyzer=inspect's energy: a TDP set by ``analyzer.inspect.cpu_tdp_w``
reaches codecarbon and MLflow (param and metric), a bad one stops the run in one line, and every
energy figure in the summary, the insights and the text report says ESTIMATED."""

from __future__ import annotations

import re

import pytest
import torch

import modelxray
from conftest import mlflow_runs
from modelxray.analyzers.inspect import InspectAnalyzer
from modelxray.core.errors import ConfigError

KEY = "analyzer.inspect.cpu_tdp_w"
FAST = [
    "model=digits_mlp",
    "model.epochs=1",
    "analyzer=inspect",
    "analyzer.inspect.energy_seconds=0.5",
    "analyzer.inspect.power_sample_seconds=0.25",
    "analyzer.inspect.profile_iters=1",
    "analyzer.inspect.profile_warmup=0",
    "analyzer.inspect.peak_matmul_size=128",
    "analyzer.inspect.spectral=none",
    "progress=false",
    "threads=1",
]


@pytest.fixture
def keep_threads():
    """``threads=1`` sets torch's threads for the whole process: give the other tests theirs back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("bad", ["0", "-5", "nan"])
def test_a_bad_tdp_stops_the_run_in_one_line(bad, tmp_path):
    with pytest.raises(ConfigError) as exc:
        modelxray.analyze([*FAST, "tracker=none", f"{KEY}={bad}"], output_dir=tmp_path / "run")
    assert str(exc.value).startswith(f"{KEY}: must be the CPU's TDP in watts") and "\n" not in str(exc.value)
    assert not (tmp_path / "run" / "summary_report.md").exists()
    InspectAnalyzer(cpu_tdp_w=None).validate()  # null: codecarbon's own guess


def test_the_analyzer_passes_its_tdp_and_labels_every_figure(tmp_path, monkeypatch):
    """Unit level, codecarbon replaced: the key's value and name reach measure_energy, the metrics
    are the per-forward figures by hand, and the insight and the text report say ESTIMATED."""
    import modelxray.measure.energy as energy
    from modelxray.core.result import RunContext
    from modelxray.core.subject import ModelInfo, Subject

    seen = {}

    def fake(work, **kwargs):
        seen.update(kwargs)
        for _ in range(4):
            work()
        return energy.EnergyReport(
            seconds=2.0, iterations=4, energy_j=8.0, cpu_energy_j=3.0, gpu_energy_j=0.0, ram_energy_j=5.0,
            mean_power_w=4.0, co2_g=0.004, country_iso_code="USA", cpu_model="AMD EPYC", measured=False,
            method="CPU power ESTIMATED: TDP 40 W x the share of the 2 CPU threads this process kept busy "
            "(codecarbon's load model); the TDP is the one set by analyzer.inspect.cpu_tdp_w.",
            cpu_power_model="cpu_load", cpu_tdp_w=40.0, cpu_tdp_source="set",
        )  # fmt: skip

    monkeypatch.setattr(energy, "measure_energy", fake)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    cfg = InspectAnalyzer(
        cpu_tdp_w=40, input_shape=[8], profile_iters=1, profile_warmup=0, peak_matmul_size=64, spectral="none"
    )
    subject = Subject(model, None, None, ModelInfo("toy", "test", "float32"))
    cfg.preflight(subject)
    result = cfg.run(subject, RunContext(tmp_path, progress=False))
    assert seen["cpu_tdp_w"] == 40 and seen["tdp_key"] == KEY
    m = result.metrics
    assert m["energy_j_per_forward"] == 2.0 and m["co2_g_per_forward"] == 0.001 and m["mean_power_w"] == 4.0
    assert m["flops_per_joule"] == pytest.approx(m["flops_total"] / 2.0) and m["cpu_tdp_w"] == 40.0
    assert m["energy_measured"] == 0.0
    (line,) = [ln for ln in result.sentences() if "J per forward" in ln]
    assert line.startswith("Energy (ESTIMATED) 2 J per forward, 4.0 W mean (CPU 1.5 W, RAM 2.5 W)")
    section = result.texts["comprehensive_model_analysis.txt"].split("ENERGY AND CO2")[1].split("\n\n")[0]
    assert "power model        cpu_load, CPU TDP 40 W (set)" in section
    figures = [ln for ln in section.splitlines() if re.search(r"\d J|g CO2|GFLOP per J", ln)]
    assert len(figures) == 3 and all("ESTIMATED" in ln for ln in figures), figures


@pytest.mark.slow  # a whole inspect run tracked in MLflow, codecarbon measuring for real: about 20 s
def test_a_set_tdp_reaches_the_report_and_mlflow_and_every_figure_says_estimated(tracking_uri, tmp_path, keep_threads):
    args = [*FAST, f"{KEY}=40", f"tracker.uri={tracking_uri}", "tracker.experiment=energy_tdp"]
    out = modelxray.analyze(args, output_dir=tmp_path / "run")
    assert not out.failed
    _, (run,) = mlflow_runs(tracking_uri, "energy_tdp")
    m = run.data.metrics
    assert m["inspect/cpu_tdp_w"] == 40.0 and m["inspect/energy_measured"] == 0.0
    assert float(run.data.params[KEY]) == 40.0
    assert m["inspect/energy_j_per_forward"] > 0 and m["inspect/co2_g_per_forward"] > 0

    root = tmp_path / "run"
    summary = (root / "summary_report.md").read_text()
    energy_names = ("energy_j_per_forward", "mean_power_w", "co2_g_per_forward", "flops_per_joule", "cpu_tdp_w")
    assert not any(name in ln for ln in summary.splitlines() if ln.startswith("| ") for name in energy_names)
    (line,) = [ln for ln in summary.splitlines() if "J per forward" in ln]
    assert line.startswith("- **energy**: **ESTIMATED: ") and "every figure ESTIMATED" in line
    assert "TDP 40 W x the share of" in line and f"the TDP is the one set by {KEY}" in line

    insights = (root / "insights.md").read_text()
    (energy_insight,) = [ln for ln in insights.splitlines() if "J per forward" in ln]
    assert energy_insight.startswith("- Energy (ESTIMATED) ") and "TDP 40 W" in energy_insight

    text = next(root.rglob("comprehensive_model_analysis.txt")).read_text()
    section = text.split("ENERGY AND CO2")[1].split("\n\n")[0]
    assert "power model        cpu_load, CPU TDP 40 W (set)" in section
    figures = [ln for ln in section.splitlines() if re.search(r"\d J|g CO2|GFLOP per J", ln)]
    assert len(figures) >= 3 and all("ESTIMATED" in ln for ln in figures), figures


def test_energy_survives_a_result_file(tmp_path):
    """A resumed run draws its summary from results/<name>.json: the energy line keeps its status."""
    from modelxray.core.result import Result
    from modelxray.measure.energy import Energy, EnergyReport
    from modelxray.report.result_file import load_result, save_result

    report = EnergyReport(
        seconds=2.0, iterations=4, energy_j=8.0, cpu_energy_j=3.0, gpu_energy_j=0.0, ram_energy_j=5.0,
        mean_power_w=4.0, co2_g=0.004, country_iso_code="USA", cpu_model="AMD EPYC", measured=False,
        method="CPU power ESTIMATED: ...", cpu_power_model="cpu_load", cpu_tdp_w=8.0, cpu_tdp_source="default",
    )  # fmt: skip
    result = Result("inspect")
    result.record("energy", Energy(report, "forward", 4, 1e6))
    back = load_result(save_result(tmp_path, "inspect", result))
    assert back.measurements["energy"] == result.measurements["energy"]
    assert back.measurements["energy"].markdown().startswith("**ESTIMATED: 2 J per forward**")


def test_each_operators_energy_is_its_share_of_the_profiled_time_and_they_add_up():
    from types import SimpleNamespace

    from modelxray.analyzers.inspect.run import _energy_by_op

    rows = [{"op": "aten.addmm", "time_s": 0.003}, {"op": "aten.add", "time_s": 0.001}]
    _energy_by_op(rows, SimpleNamespace(energy_j=8.0, iterations=4))  # 2 J per forward
    assert [r["energy_j"] for r in rows] == pytest.approx([1.5, 0.5])
    assert sum(r["energy_j"] for r in rows) == pytest.approx(2.0) and {r["energy_status"] for r in rows} == {
        "ESTIMATED"
    }
