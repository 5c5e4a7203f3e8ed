"""What inspect reads of the hardware and how it splits a forward's cost: RAPL energy counters per
op group (a fake powercap tree) or the one line saying why not; the idle power subtracted and the
dynamic energy split by FLOPs and bytes; each tensor's alignment and strides and each op's cache
level (a fake cache tree); the compressibility score; and a TorchScript file larger than the
memory the run may use, refused before loading."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

import modelxray.measure.energy as energy
import modelxray.measure.hardware as hardware
import modelxray.measure.rapl as rapl_counters
from modelxray.analyzers.inspect import InspectAnalyzer
from modelxray.core.result import RunContext
from modelxray.core.subject import ModelInfo, Subject
from modelxray.measure.peak import Peak
from modelxray.metrics import compressibility as comp
from modelxray.metrics import energy_model
from modelxray.metrics.memory_layout import (
    cache_level,
    fits_in_memory,
    layout,
    stride_pattern,
    torchscript_too_large,
)

FAST = dict(profile_iters=1, profile_warmup=0, peak_matmul_size=64, spectral="none", structured_layers=0)


# -- RAPL ----------------------------------------------------------------------------------------
def _powercap(root, package_uj=1_000, dram_uj=50):
    """A powercap tree as Linux lays it out: a package zone with its core subzone (inside the
    package, not counted again) and a DRAM subzone, and the control type's own directory."""
    (root / "intel-rapl").mkdir(parents=True)
    for zone, name, uj in (
        ("intel-rapl:0", "package-0", package_uj),
        ("intel-rapl:0/intel-rapl:0:0", "core", 10),
        ("intel-rapl:0/intel-rapl:0:1", "dram", dram_uj),
    ):
        (root / zone).mkdir(parents=True)
        (root / zone / "name").write_text(name + "\n")
        (root / zone / "energy_uj").write_text(f"{uj}\n")
        (root / zone / "max_energy_range_uj").write_text("262143328850\n")
    return root


def test_rapl_zones_are_the_packages_and_dram_once_and_a_wrapped_counter_is_undone(tmp_path):
    zones, why = rapl_counters.rapl_zones(_powercap(tmp_path / "powercap"))
    assert why is None and [z.name for z in zones] == ["package-0", "dram"]
    meter = rapl_counters.RaplMeter(zones)
    (zones[0].path).write_text("3000\n")  # 2000 uJ later
    assert meter.read() == pytest.approx(0.002)
    assert rapl_counters.counter_delta(before=90, after=10, max_uj=100) == 20


def test_without_readable_counters_one_line_says_why(tmp_path):
    zones, why = rapl_counters.rapl_zones(tmp_path / "nothing")
    assert zones == [] and why.startswith("no RAPL energy counters on this machine") and "\n" not in why
    root = _powercap(tmp_path / "powercap")
    for counter in root.rglob("energy_uj"):  # unreadable, even for root: a directory
        counter.unlink()
        counter.mkdir()
    zones, why = rapl_counters.rapl_zones(root)
    assert zones == [] and "cannot read them" in why and "only root" in why


def test_energy_per_op_is_read_around_each_op():
    """A counter that gains 1 J at every read: each op window holds one read's gain per call."""
    from modelxray.measure.op_profile import energy_by_op

    joules = iter(range(10**9))
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    rows, whole = energy_by_op(model, torch.ones(1, 4), lambda: float(next(joules)), seconds=0.0)
    by_op = {r["op"]: r for r in rows}
    assert by_op["aten.relu"]["calls"] == 1 and by_op["aten.relu"]["energy_j"] == 1.0
    assert whole["forwards"] == 1 and sum(r["energy_j"] for r in rows) < whole["energy_j"]


def _fake_clock_counter(monkeypatch, idle_w=5.0, busy_w=20.0):
    """A package counter that gains ``idle_w`` over wall time and ``busy_w`` over the main thread's CPU
    time (the idle draw is read asleep, the work adds to it); the DRAM counter stays still."""
    t0, c0 = time.perf_counter(), time.thread_time()

    def read(path):
        if path.parent.name.endswith(":1"):
            return 50
        return int(1e6 * (idle_w * (time.perf_counter() - t0) + busy_w * (time.thread_time() - c0)))

    monkeypatch.setattr(rapl_counters, "read_counter", read)


def _report(measured: bool, **kw):
    base = dict(
        seconds=2.0, iterations=4, energy_j=8.0, cpu_energy_j=6.0, gpu_energy_j=0.0, ram_energy_j=2.0,
        mean_power_w=4.0, co2_g=0.004, country_iso_code="USA", cpu_model="a CPU", measured=measured,
        method="CPU power measured (Intel RAPL)." if measured else "CPU power ESTIMATED ...",
        cpu_power_model="intel_rapl" if measured else "cpu_load", cpu_tdp_w=None if measured else 8.0,
    )  # fmt: skip
    return energy.EnergyReport(**{**base, **kw})


def _run(tmp_path, monkeypatch, model, report, **cfg):
    def fake(work, **kwargs):
        for _ in range(report.iterations):
            work()
        return report

    monkeypatch.setattr(energy, "measure_energy", fake)
    cfg = InspectAnalyzer(**{**FAST, **cfg})
    subject = Subject(model, None, None, ModelInfo("toy", "test", "float32"))
    cfg.preflight(subject)
    return cfg, cfg.run(subject, RunContext(tmp_path, progress=False))


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))


def test_rapl_splits_the_energy_per_op_and_fits_the_model(tmp_path, monkeypatch):
    monkeypatch.setattr(rapl_counters, "POWERCAP_ROOT", _powercap(tmp_path / "powercap"))
    _fake_clock_counter(monkeypatch)
    cfg, result = _run(
        tmp_path, monkeypatch, _mlp(), _report(True), input_shape=[32], idle_seconds=0.2, rapl_seconds=0.3
    )
    assert result.error is None
    m, split = result.metrics, result.data["energy_split"]
    assert m["idle_power_w"] == pytest.approx(5.0, rel=0.2)  # asleep: the idle draw alone
    assert split["idle_power"].startswith("MEASURED by the RAPL counters (package-0, dram)")
    rapl = result.tables["energy_by_op_rapl"]
    assert {"aten.addmm", "aten.relu"} <= {r["op"] for r in rapl} and all(r["energy_j"] >= 0 for r in rapl)
    roof = result.tables["roofline"]
    assert all("rapl_energy_j" in r for r in roof if r["op"] in {x["op"] for x in rapl})
    assert split["rapl"].startswith("MEASURED: RAPL counters (package-0, dram) read around each op")
    assert sum(r["dynamic_energy_j"] for r in roof) == pytest.approx(m["dynamic_energy_j_per_forward"])
    text = result.texts["comprehensive_model_analysis.txt"]
    assert "RAPL energy per op group" in text and "rapl_energy_j      MEASURED: RAPL counters" in text


def test_without_rapl_the_report_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(rapl_counters, "POWERCAP_ROOT", tmp_path / "none")
    _, result = _run(tmp_path, monkeypatch, _mlp(), _report(False), input_shape=[32])
    text = result.texts["comprehensive_model_analysis.txt"]
    (line,) = [ln for ln in text.splitlines() if "rapl_energy_j" in ln]
    assert line.strip().startswith("rapl_energy_j      not measured: no RAPL energy counters on this machine")
    assert "energy_by_op_rapl" not in result.tables and "rapl_energy_j" not in result.tables["roofline"][0]
    assert any("No per-op RAPL energy: no RAPL energy counters" in s for s in result.source.insights(result, {}))


# -- the static energy model -----------------------------------------------------------------------
def test_the_dynamic_energy_is_split_by_flops_and_bytes_and_the_parts_add_up():
    # 8 J over 4 s with 0.5 W idle: 6 J dynamic; weights 1 x 100 + 2 x 10 = 120 and 2 x 30 = 60
    dyn = energy_model.dynamic_energy(8.0, 0.5, 4.0)
    rows = [{"flops": 100, "bytes": 10}, {"flops": 0, "bytes": 30}]
    parts = energy_model.attribute(rows, dyn, e_flop=1.0, e_byte=2.0)
    assert dyn == 6.0 and parts == pytest.approx([4.0, 2.0]) and sum(parts) == pytest.approx(dyn)
    assert energy_model.scale(rows, dyn, 1.0, 2.0) == pytest.approx(6.0 / 180)
    assert energy_model.dynamic_energy(1.0, 1.0, 4.0) == 0.0  # never below the idle draw
    flops, nbytes = [10.0, 0.0, 5.0], [1.0, 4.0, 2.0]
    fit = energy_model.fit_coefficients(flops, nbytes, [2 * f + 3 * b for f, b in zip(flops, nbytes)])
    assert fit == pytest.approx((2.0, 3.0))
    assert energy_model.fit_coefficients(flops, nbytes, [10.0, -5.0, 5.0])[1] == 0.0  # never negative
    assert energy_model.fit_coefficients([1.0], [1.0], [1.0]) is None


def test_inspect_subtracts_the_model_idle_power_and_splits_the_rest(tmp_path, monkeypatch):
    """codecarbon's load model: idle = its RAM power (2 J over 2 s = 1 W), so the dynamic energy per
    forward is (8 J - 1 W x 2 s) / 4 = 1.5 J, split by the documented constants."""
    monkeypatch.setattr(rapl_counters, "POWERCAP_ROOT", tmp_path / "none")
    _, result = _run(tmp_path, monkeypatch, _mlp(), _report(False), input_shape=[32])
    m, roof = result.metrics, result.tables["roofline"]
    assert m["idle_power_w"] == 1.0 and m["dynamic_energy_j_per_forward"] == pytest.approx(1.5)
    assert sum(r["dynamic_energy_j"] for r in roof) == pytest.approx(1.5)
    assert sum(r["energy_j"] for r in roof) == pytest.approx(2.0)  # the time share keeps the whole energy
    weights = [2.3e-12 * r["flops"] + 162.5e-12 * r["bytes"] for r in roof]
    assert [r["dynamic_energy_j"] for r in roof] == pytest.approx([1.5 * w / sum(weights) for w in weights])
    assert (m["energy_model_pj_per_flop"], m["energy_model_pj_per_byte"]) == (2.3, 162.5)
    split = result.data["energy_split"]
    assert split["idle_power"].startswith("ESTIMATED from the power model") and "Horowitz" in split["energy_model"]
    text = result.texts["comprehensive_model_analysis.txt"]
    assert "idle power         1 W, ESTIMATED" in text and "dynamic_energy_j   the dynamic energy by" in text


# -- memory layout and caches ----------------------------------------------------------------------
def test_stride_patterns_and_alignment():
    w = torch.randn(8, 16)
    assert stride_pattern(w.shape, w.stride()) == "contiguous"
    assert stride_pattern(w.t().shape, w.t().stride()) == "transposed"
    assert stride_pattern(w[:, ::2].shape, w[:, ::2].stride()) == "strided"
    assert stride_pattern((4, 16), torch.randn(16).expand(4, 16).stride()) == "broadcast"
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert stride_pattern(x.shape, x.stride()) == "channels_last"
    flat = torch.zeros(64)
    assert layout(flat[1:].shape, flat[1:].stride(), flat[1:].data_ptr())["align_offset"] == (flat.data_ptr() + 4) % 64
    assert cache_level(100, {"L1d": 64, "L2": 1024}) == "L2" and cache_level(10**6, {"L2": 1024}) == "memory"
    assert cache_level(1, {}) == "unknown"


def _caches(root, sizes):
    for i, (level, kind, size) in enumerate(sizes):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def test_cache_sizes_come_from_sysfs_or_a_line_says_they_are_not_reported(tmp_path):
    root = _caches(tmp_path / "cache", [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K")])
    assert hardware.cache_sizes(root) == ({"L1d": 48 * 1024, "L2": 2 * 2**20}, f"sysfs {root}")
    sizes, why = hardware.cache_sizes(tmp_path / "none")
    assert sizes == {} and "not reported" in why


def _transposed_model():
    """A Linear whose weight is a transposed view (stride (1, 256)), as ``W.t()`` of a stored matrix."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 4))
    model[0].weight = nn.Parameter(torch.randn(256, 128).t())
    return model


@pytest.mark.parametrize("l2", ["4K", "1G"])
def test_a_transposed_weight_and_an_op_beyond_l2_are_reported(tmp_path, monkeypatch, l2):
    """A fake L2 of 4 KiB: the first Linear's 129 KiB per call at 0.5 FLOP/byte (ridge 10) does not
    fit and gets advice; an L2 of 1 GiB holds it, and no advice is given."""
    caches = _caches(tmp_path / "cache", [(1, "Data", "1K"), (2, "Unified", l2), (3, "Unified", "2G")])
    monkeypatch.setattr(hardware, "CPU_CACHE_ROOT", caches)
    monkeypatch.setattr("modelxray.measure.peak.measure_peak", lambda **kw: Peak(1e11, 1e10, "cpu", "float32", 64))
    _, result = _run(tmp_path, monkeypatch, _transposed_model(), _report(False), input_shape=[256], energy=False)
    (row,) = [r for r in result.data["tensors"] if r["name"] == "0.weight"]
    assert (row["stride_pattern"], row["contiguous"], row["strides"]) == ("transposed", False, "[1, 128]")
    assert row["align_offset"] == 0  # torch's allocator aligns to 64 bytes
    assert result.metrics["tensors_non_contiguous"] == 1.0 and result.tables["memory_layout"][0]["name"] == "0.weight"
    (node,) = [n for n in result.tables["nodes"] if n["module"] == "Sequential.0"]
    assert node["working_set_bytes"] == (256 + 128 * 256 + 128 + 128) * 4
    local = [r for r in result.tables["recommendations"] if r["action"] == "cache locality"]
    if l2 == "4K":
        assert node["cache_level"] == "L3" and result.metrics["ops_beyond_l2_low_intensity"] >= 1
        assert (
            local
            and local[0]["target"].startswith("aten.addmm on ")
            and "exceeds the 4.0 KiB L2 cache" in (local[0]["why"])
        )
    else:
        assert node["cache_level"] == "L2" and result.metrics["ops_beyond_l2_low_intensity"] == 0 and not local
    text = result.texts["comprehensive_model_analysis.txt"]
    assert "MEMORY LAYOUT AND CACHES" in text and "1 are not contiguous" in text
    assert any(s.startswith("Memory layout: 1 tensor is not contiguous: 0.weight (transposed)") for s in
               result.source.insights(result, {}))  # fmt: skip


# -- compressibility -------------------------------------------------------------------------------
def test_compressibility_by_hand():
    # float32 (32 bits), 4-bit: q = 1 - 4/32 = 0.875; p = 0.5, s = 0.2: c = 1 - 0.5 x (1 - 0.875 x 0.8) = 0.85
    assert comp.tensor_score(0.5, 0.2, 32, 4) == pytest.approx(0.85)
    assert comp.tensor_score(0.0, 0.1, 4, 4) == 0.0  # already 4-bit and nothing to prune
    rows = [
        {"name": "a.weight", "bytes": 4000, "numel": 1000, "prune_potential": 0.5, "quant_sensitivity": 0.2},
        {"name": "a.bias", "bytes": 40, "numel": 10, "prune_potential": 0.0, "quant_sensitivity": None},
        {"name": "head.weight", "bytes": 1000, "numel": 1000, "prune_potential": 0.4, "quant_sensitivity": 0.1},
    ]  # head: int8 (8 bits, q = 0.5), its units are the outputs (p = 0): c = 0.5 x 0.9 = 0.45
    scored = comp.scored_rows(rows, 4, {"a.weight", "head.weight"}, {"head.weight"})
    assert [t["compressibility"] for t in scored] == pytest.approx([0.85, 0.0, 0.45])
    layers = {r["layer"]: r for r in comp.by_layer(scored)}
    assert layers["a"]["compressibility"] == pytest.approx(0.85 * 4000 / 4040)
    assert layers["head"]["prune_potential"] == 0.0 and layers["head"]["bytes_saved"] == pytest.approx(450)
    assert comp.model_score(scored) == pytest.approx((0.85 * 4000 + 0.45 * 1000) / 5040)


def test_inspect_logs_the_compressibility_of_the_model_and_each_layer(tmp_path, monkeypatch):
    _, result = _run(tmp_path, monkeypatch, _mlp(), _report(False), input_shape=[32], energy=False)
    m, layers = result.metrics, result.tables["compressibility_by_layer"]
    assert 0 < m["compressibility"] < 1 and {r["layer"] for r in layers} == {"0", "2"}
    assert m["compressible_bytes"] == pytest.approx(sum(r["bytes_saved"] for r in layers))
    assert m["compressibility"] == pytest.approx(m["compressible_bytes"] / m["weight_bytes"])
    head = next(r for r in layers if r["layer"] == "2")
    assert head["prune_potential"] == 0.0  # its units are the model's outputs
    assert "COMPRESSIBILITY" in result.texts["comprehensive_model_analysis.txt"]


# -- a TorchScript file larger than the memory the run may use -------------------------------------
def test_a_torchscript_file_larger_than_memory_is_one_line():
    assert fits_in_memory(100, 100) and not fits_in_memory(101, 100)
    assert torchscript_too_large(100, 100, "runtime.max_memory") is None
    line = torchscript_too_large(3 * 2**30, 2**30, "runtime.max_memory")
    assert line.startswith("the TorchScript file (3.0 GiB) is larger than the memory this run may use (1.0 GiB: ")
    assert "model.architecture" in line and "memory-mapped" in line and "\n" not in line


def test_a_torchscript_file_larger_than_the_run_may_use_stops_before_loading(tmp_path, monkeypatch):
    """Through the product: one ConfigError line naming model.path and the alternative, and the file
    is never loaded (``torch.jit.load`` is not called)."""
    import modelxray
    from modelxray.core.errors import ConfigError

    path = tmp_path / "big.pt"
    torch.jit.save(torch.jit.script(nn.Linear(64, 64)), str(path))
    monkeypatch.setattr(torch.jit, "load", lambda *a, **k: pytest.fail("the file was loaded"))
    args = ["model=file", f"model.path={path}", "analyzer=inspect", "runtime.max_memory=1KB", "tracker=none"]
    with pytest.raises(ConfigError) as exc:
        modelxray.analyze(args, output_dir=tmp_path / "run")
    line = str(exc.value)
    assert line.startswith("model.path: the TorchScript file (") and "runtime.max_memory" in line
    assert "model.architecture" in line and "\n" not in line
