"""The inspect analyzer: architecture and input inference, weights-only files read tensor by
tensor, energy reporting, recommendations, and the CLI on the tiny GPT-2, a weights file and the
digits classifier. The statistics and FLOP counters have their own tests (test_tensor_stats.py,
test_flops.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from conftest import mlflow_runs, run_cli
from modelxray.analyzers.inspect import advice
from modelxray.analyzers.inspect.weights import analyze_weights
from modelxray.core.errors import ConfigError
from modelxray.measure.flops import closed_form_gpt2_flops
from modelxray.metrics.tensor_stats import StatsConfig
from modelxray.models.architecture import classify, classify_names
from modelxray.models.digits_classifier import build_digits_model
from modelxray.models.file import FileSource
from modelxray.models.input_inference import infer_input
from modelxray.models.tiny_gpt2 import TinyGPT2Source


@pytest.fixture(scope="module")
def gpt2():
    return TinyGPT2Source(device="cpu").load().model


def test_architecture_kinds(gpt2):
    from transformers import BertConfig, BertModel, T5Config, T5ForConditionalGeneration

    assert classify(gpt2)[0] == "decoder-only transformer"
    bert = BertModel(
        BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    )
    assert classify(bert)[0] == "encoder transformer"
    t5 = T5ForConditionalGeneration(T5Config(vocab_size=50, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2))
    assert classify(t5)[0] == "encoder-decoder transformer"
    assert classify(build_digits_model("mlp", [32], []))[0] == "MLP"
    assert classify(build_digits_model("cnn", [], [4]))[0] == "CNN"

    class Hybrid(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.attention = nn.MultiheadAttention(8, 2)

    assert classify(Hybrid())[0] == "hybrid"
    assert classify(nn.LSTM(4, 4))[0] == "RNN"


def test_a_mamba_model_is_a_state_space_model_not_a_cnn():
    from transformers import MambaConfig, MambaForCausalLM

    from modelxray.models.architecture import classify_names

    mamba = MambaForCausalLM(MambaConfig(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=1))
    kind, why = classify(mamba)
    assert kind == "state-space model" and "MambaForCausalLM" in why
    shapes = {n: tuple(p.shape) for n, p in mamba.named_parameters()}
    assert classify_names(list(shapes), shapes)[0] == "state-space model (from tensor names)"


def test_input_inference(gpt2):
    spec = infer_input(gpt2, batch_size=2, seq_len=64, input_shape=None)
    assert spec == {"kind": "token_ids", "shape": [2, 64], "vocab_size": 257, "context_length": 512, "source": "config"}
    assert infer_input(gpt2, batch_size=1, seq_len=4096, input_shape=None)["shape"] == [1, 512]  # capped at context
    mlp = build_digits_model("mlp", [32], [])
    assert infer_input(mlp, batch_size=1, seq_len=None, input_shape=None)["shape"] == [1, 64]
    assert infer_input(nn.Sequential(nn.Conv2d(3, 4, 3)), batch_size=1, seq_len=None, input_shape=[3, 16, 16])[
        "shape"
    ] == [1, 3, 16, 16]
    guess = infer_input(nn.Sequential(nn.Conv2d(3, 4, 3)), batch_size=1, seq_len=None, input_shape=None)
    assert guess["shape"] is None and guess["key"] == "analyzer.inspect.input_shape"  # never a guessed image size


@pytest.mark.parametrize("suffix", ["safetensors", "pt"])
def test_weights_only_file_streams_the_same_statistics(gpt2, tmp_path, suffix):
    state = {k: v.contiguous() for k, v in gpt2.state_dict().items() if k != "lm_head.weight"}
    path = tmp_path / f"w.{suffix}"
    save_file(state, str(path)) if suffix == "safetensors" else torch.save(state, path)
    loaded = FileSource(path=str(path)).load()
    assert loaded.task == "weights" and "weights only" in loaded.info.notes[0]
    cfg = StatsConfig(spectral="exact")
    from_file = {r["name"]: r for r in analyze_weights(loaded.model, cfg, progress=False)}
    from_model = {r["name"]: r for r in analyze_weights(gpt2, cfg, progress=False)}
    assert set(from_file) == set(from_model) - {n for n in from_model if n not in state}
    for name in ("transformer.h.0.attn.c_attn.weight", "transformer.wte.weight", "transformer.ln_f.bias"):
        for key in ("mean", "std", "kurtosis", "l2", "hist_counts", "quant_sensitivity"):
            a, b = from_file[name].get(key), from_model[name].get(key)
            assert a == b or (a != a and b != b), (name, key)  # NaN (kurtosis of a constant) on both sides
    assert from_file["transformer.wte.weight"]["type"] == "embedding"
    assert from_file["transformer.ln_f.bias"]["type"] in ("norm", "bias")


def test_corrupt_weights_only_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.safetensors"
    save_file({"a": torch.zeros(100, 100)}, str(path))
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(ConfigError, match="truncated or corrupt") as info:
        FileSource(path=str(path)).load()
    assert "\n" not in str(info.value)


def test_energy_report_says_how_power_was_obtained():
    from modelxray.measure.energy import measure_energy

    a = torch.randn(256, 256)
    e = measure_energy(lambda: a @ a, min_seconds=0.5, country_iso_code="FRA", sample_seconds=0.5)
    assert e.iterations > 1 and e.seconds >= 0.5 and e.energy_j > 0 and e.co2_g > 0
    assert e.mean_power_w == pytest.approx(e.energy_j / e.seconds)
    assert ("ESTIMATED" in e.method) != e.measured or "measured" in e.method


def test_energy_method_says_measured_only_with_hardware_counters():
    from types import SimpleNamespace

    from modelxray.measure.energy import _method

    def tracker(mode):
        cpu = type("CPU", (), {"_mode": mode, "_tdp": 85})()
        return SimpleNamespace(_hardware=[cpu])

    _, measured, text = _method(tracker("intel_rapl"), SimpleNamespace(gpu_count=0))
    assert measured and "CPU power measured (Intel RAPL)" in text and "ESTIMATED" not in text
    _, measured, text = _method(tracker("constant"), SimpleNamespace(gpu_count=0))
    assert not measured and "CPU power ESTIMATED" in text and "TDP 85 W" in text
    _, measured, text = _method(tracker("cpu_load"), SimpleNamespace(gpu_count=1))
    assert not measured and "GPU power measured (NVML)" in text  # an estimated CPU makes the total an estimate


def test_recommendations_carry_their_numbers():
    rows = [
        {
            "name": f"l{i}.weight",
            "shape": [8, 8],
            "prune_potential": p,
            "zeros_share": 0.0,
            "std": 1.0,
            "quant_sensitivity": q,
            "kurtosis": k,
            "outlier_share": 0.01,
        }
        for i, (p, q, k) in enumerate([(0.9, 0.05, 0.1), (0.1, 0.05, 0.2), (0.2, 0.30, 40.0)])
    ]
    prune = advice.prune_candidates(rows, top=5, prune_min=0.3, min_numel=64)
    assert [r["target"] for r in prune] == ["l0.weight"] and "90%" in prune[0]["why"]
    keep = advice.precision_candidates(rows, top=5, bits=4, ratio=1.25, min_numel=64)
    assert (
        [r["target"] for r in keep] == ["l2.weight"] and "0.300" in keep[0]["why"] and "kurtosis 40.0" in keep[0]["why"]
    )
    mem = advice.memory_bound_advice(
        [
            {"op": "aten.add", "bound": "memory", "intensity": 0.1, "time_s": 0.2, "ridge": 10},
            {"op": "aten.mm", "bound": "compute", "intensity": 50, "time_s": 0.8, "ridge": 10},
        ],
        5,
    )
    assert [r["target"] for r in mem] == ["aten.add"] and "20.0% of op time" in mem[0]["why"]


def test_names_alone_classify_a_weights_file():
    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"]
    assert classify_names(names, {n: (4, 4) for n in names})[0].startswith("decoder-only transformer")
    assert classify_names(["c.weight"], {"c.weight": (4, 3, 3, 3)})[0].startswith("CNN")


FAST = [
    "analyzer=inspect",
    "analyzer.inspect.energy_seconds=0.5",
    "analyzer.inspect.power_sample_seconds=0.5",
    "analyzer.inspect.profile_iters=2",
    "analyzer.inspect.profile_warmup=1",
    "analyzer.inspect.peak_matmul_size=256",
    "analyzer.inspect.seq_len=32",
    "progress=false",
]


@pytest.mark.slow  # the whole inspect analysis through run.py and MLflow: about 30 s on 2 cores
def test_cli_inspect_tiny_gpt2(tiny, tracking_uri, tmp_path):
    base = [o for o in tiny if not o.startswith("analyzer.performance.")]
    proc = run_cli([*base, *FAST], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(tracking_uri, "test_cli_inspect_tiny_gpt2")
    (run,) = runs
    m = run.data.metrics
    assert m["inspect/flops_total"] == closed_form_gpt2_flops(2, 64, 32, 257)  # eager attention counted exactly
    assert m["inspect/parameters"] == sum(p.numel() for p in TinyGPT2Source().load().model.parameters())
    assert m["inspect/energy_j_per_forward"] > 0 and m["inspect/co2_g_per_forward"] > 0
    assert 0 < m["inspect/utilization_of_peak"]
    # the energy split, the memory layout and the compressibility score reach MLflow too
    assert m["inspect/dynamic_energy_j_per_forward"] > 0 and "inspect/idle_power_w" in m
    assert m["inspect/tensors_non_contiguous"] == 0 and 0 < m["inspect/compressibility"] < 1
    out = next((tmp_path / "outputs").rglob("comprehensive_model_analysis.txt"))
    text = out.read_text()
    assert "rapl_energy_j" in text and "MEMORY LAYOUT AND CACHES" in text and "COMPRESSIBILITY" in text
    for section in (
        "ARCHITECTURE",
        "PARAMETERS BY LAYER TYPE",
        "EVERY TENSOR",
        "COMPUTE",
        "ENERGY AND CO2",
        "SYSTEM",
        "RECOMMENDATIONS",
    ):
        assert section in text, section
    assert "decoder-only transformer" in text and "transformer.h.1.mlp.c_fc.weight" in text
    energy = text.split("ENERGY AND CO2")[1]
    assert "ESTIMATED: CPU power ESTIMATED" in energy or "MEASURED: CPU power measured" in energy
    plots = {p.name for p in out.parent.rglob("*.png")}
    assert {"parameter_distributions.png", "layer_norms.png", "flops_by_op.png", "roofline.png"} <= plots
    artifacts = {
        a.path for a in __import__("mlflow").tracking.MlflowClient(tracking_uri).list_artifacts(run.info.run_id)
    }
    assert {"comprehensive_model_analysis.txt", "comprehensive_model_analysis.xml"} <= artifacts
    # the executive summary leads the text report and the Markdown section, and the XML holds it all
    assert text.split("EXECUTIVE SUMMARY")[1].split("SOURCE")[0].count("Finding ") == 3
    assert "What: a decoder-only transformer of 149,312 parameters" in text
    markdown = (out.parent / "summary_report.md").read_text().split("## inspect")[1]
    assert markdown.index("**Executive summary**") < markdown.index("| metric | value |")
    import xml.etree.ElementTree as ET

    root = ET.parse(out.parent / "comprehensive_model_analysis.xml").getroot()
    xml_metrics = {e.get("name"): float(e.get("value")) for e in root.iter("metric")}
    assert xml_metrics["flops_total"] == m["inspect/flops_total"]
    assert len(root.find("tables/table[@name='top_tensors']")) > 0 and len(root.findall("summary/line")) == 5
    results = json.loads((out.parent / "analysis_results.json").read_text())["results"]["inspect"]
    assert len(results["data"]["tensors"]) == len([p for p in TinyGPT2Source().load().model.parameters()])
    layers = results["tables"]["compressibility_by_layer"]
    assert sum(r["bytes_saved"] for r in layers) == pytest.approx(m["inspect/compressible_bytes"])


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_cli_inspect_weights_file_and_classifier(gpt2, tracking_uri, tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in gpt2.state_dict().items() if k != "lm_head.weight"}, str(path))
    common = [*FAST, f"tracker.uri={tracking_uri}", "tracker.experiment=inspect_files"]
    proc = run_cli(["model=file", f"model.path={path}", *common], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bad = run_cli(
        [
            "model=file",
            f"model.path={path}",
            "analyzer=performance",
            "progress=false",
            f"tracker.uri={tracking_uri}",
            "tracker.experiment=inspect_files",
        ],
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "analyzer=inspect" in bad.stderr and "model.architecture" in bad.stderr
    proc = run_cli(["model=digits_mlp", "model.epochs=1", *common], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(tracking_uri, "inspect_files")
    by_model = {r.data.params.get("model"): r for r in runs if r.info.status == "FINISHED"}
    weights = by_model["file"].data.metrics
    assert weights["inspect/tensors"] == len(gpt2.state_dict()) - 1 and "inspect/flops_total" not in weights
    digits = by_model["digits_mlp"].data.metrics
    assert digits["inspect/flops_per_sample"] == 2 * (64 * 64 + 64 * 10)  # two Linear layers, 2*K*N each


def test_inspect_a_torchscript_file(gpt2, tmp_path):
    """A traced model keeps its class names as ``original_name``: classified, input inferred, FLOPs counted."""
    from helpers import save_torchscript_lm
    from modelxray.analyzers.inspect import InspectAnalyzer
    from modelxray.core.result import RunContext
    from modelxray.core.subject import Subject

    path = tmp_path / "m.ts"
    save_torchscript_lm(gpt2, path, torch.zeros(1, 16, dtype=torch.long))
    loaded = FileSource(path=str(path), device="cpu").load()
    subject = Subject(loaded.model, loaded.tokenizer, None, loaded.info)
    result = InspectAnalyzer(seq_len=16, energy=False, profile_iters=1, profile_warmup=0, peak_matmul_size=128).run(
        subject, RunContext(tmp_path, progress=False)
    )
    arch = result.data["architecture"]
    assert arch["kind"] == "decoder-only transformer"
    assert arch["module_counts"]["Conv1D"] == 8 and arch["input"]["vocab_size"] == 257
    assert result.metrics["flops_total"] == closed_form_gpt2_flops(2, 64, 16, 257)
    assert result.metrics["parameters"] == sum(p.numel() for p in gpt2.parameters())
    # insights.md asks the config's hook, which reads the Result alone: the work writes no sentence, a
    # Result reloaded from results/inspect.json (a resumed run) says the same, a failed one nothing
    cfg = result.source
    said = cfg.insights(result, {})
    assert result.insights == [] and said == cfg.insights(_reloaded(result, tmp_path), {})
    assert said[0].startswith("decoder-only transformer (") and said[0].endswith(" tensors.")
    assert said[1].startswith("One forward of token_ids [1, 16], vocabulary 257 costs ")
    assert cfg.insights(dataclasses.replace(result, error="boom"), {}) == []


def _reloaded(result, out_dir):
    """``result`` as a resumed run loads it back: from ``results/inspect.json``, drawn by its analyzer."""
    from modelxray.report.result_file import load_result, save_result

    return load_result(save_result(out_dir, "inspect", result), source=result.source)


def test_a_weights_file_says_what_it_cannot_measure(gpt2, tmp_path):
    """A weights-only file: its insights name it and what needs the architecture, also once reloaded."""
    from modelxray.analyzers.inspect import InspectAnalyzer
    from modelxray.core.result import RunContext
    from modelxray.core.subject import Subject

    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in gpt2.state_dict().items() if k != "lm_head.weight"}, str(path))
    loaded = FileSource(path=str(path)).load()
    subject = Subject(loaded.model, None, None, loaded.info, task="weights")
    cfg = InspectAnalyzer(spectral="none")
    result = cfg.run(subject, RunContext(tmp_path, progress=False))
    said = cfg.insights(result, {})
    assert said[0] == f"{loaded.info.name} holds weights only: compute, energy and profiling need model.architecture."
    assert said[1].startswith(f"{result.data['architecture']['kind']} (")
    assert result.insights == [] and said == cfg.insights(_reloaded(result, tmp_path), {})


def test_the_energy_sentence_is_the_same_once_reloaded(tmp_path, monkeypatch):
    """The energy measurement is saved with the Result, so a resumed run's insights.md says it too."""
    import modelxray.measure.energy as energy
    from modelxray.analyzers.inspect import InspectAnalyzer
    from modelxray.core.result import RunContext
    from modelxray.core.subject import ModelInfo, Subject

    def fake(work, **kwargs):
        work()
        return energy.EnergyReport(
            seconds=1.0, iterations=2, energy_j=4.0, cpu_energy_j=1.5, gpu_energy_j=0.0, ram_energy_j=2.5,
            mean_power_w=4.0, co2_g=0.002, country_iso_code="USA", cpu_model="a CPU", measured=False,
            method="CPU power ESTIMATED from the TDP set by analyzer.inspect.cpu_tdp_w.",
            cpu_power_model="cpu_load", cpu_tdp_w=40.0, cpu_tdp_source="set",
        )  # fmt: skip

    monkeypatch.setattr(energy, "measure_energy", fake)
    cfg = InspectAnalyzer(
        cpu_tdp_w=40, input_shape=[8], profile_iters=1, profile_warmup=0, peak_matmul_size=64, spectral="none"
    )
    subject = Subject(nn.Sequential(nn.Linear(8, 4)), None, None, ModelInfo("toy", "test", "float32"))
    cfg.preflight(subject)
    result = cfg.run(subject, RunContext(tmp_path, progress=False))
    said = cfg.insights(result, {})
    (line,) = [ln for ln in said if "J per forward" in ln]
    assert line.startswith("Energy (ESTIMATED) 2 J per forward, 4.0 W mean (CPU 1.5 W, RAM 2.5 W)")
    assert result.insights == [] and said == cfg.insights(_reloaded(result, tmp_path), {})


def test_a_traced_cnn_file_reveals_its_image_size_through_its_own_forward(tmp_path):
    """A traced file records no input size; its flatten and linear layers run on one size only."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.Flatten(), nn.Linear(16 * 8 * 8, 10),
    ).eval()  # fmt: skip
    torch.jit.save(torch.jit.trace(net, torch.zeros(1, 3, 32, 32)), tmp_path / "cnn.pt")
    loaded = torch.jit.load(tmp_path / "cnn.pt")
    spec = infer_input(loaded, batch_size=2, seq_len=None, input_shape=None)
    assert spec["kind"] == "image" and spec["shape"] == [2, 3, 32, 32] and "only common image size" in spec["source"]
    pooled = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)).eval()
    spec = infer_input(pooled, batch_size=1, seq_len=None, input_shape=None)  # any size runs: the user's call
    assert spec["kind"] == "unknown" and "runs on several image sizes (224 and 32 at least)" in spec["message"]
    odd = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 998 * 998, 2)).eval()  # sized for 1000x1000
    spec = infer_input(odd, batch_size=1, seq_len=None, input_shape=None)
    assert spec["kind"] == "unknown" and "runs on none of the common square image sizes" in spec["message"]


def test_system_figures_say_where_they_came_from_or_that_they_are_not_exposed():
    """CPU clock, disk and network I/O, temperatures and cache counters around a piece of work:
    each measured figure names its source; one the OS does not expose says so in one line."""
    from modelxray.measure.utilization import UtilizationSampler

    with UtilizationSampler(0.05) as sampler:
        a = torch.randn(256, 256)
        for _ in range(200):
            a = torch.tanh(a @ a)
    s = sampler.summary()
    sources = s["sources"]
    assert set(sources) == {"cpu_freq_mhz", "process_read_bytes", "machine_net_sent_bytes", "temperature_c", "cache"}
    for key, text in sources.items():
        assert text.startswith(("measured", "not exposed here", "not readable here")), (key, text)
    if sources["cache"].startswith("measured"):
        assert 0 <= s["cache_miss_rate"] <= 1
    else:
        assert "cache_miss_rate" not in s
    assert s["process_write_bytes"] >= 0 and s["process_read_bytes"] >= 0
    assert any(k.startswith("temperature_c/") for k in s) == sources["temperature_c"].startswith("measured")
