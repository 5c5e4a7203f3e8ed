"""The GPU suite: run with ``pytest -m gpu`` on a machine with a CUDA GPU (also part of plain
``pytest`` there). On a machine without one every test is skipped with that reason.

Covers what only a GPU shows: a bf16 model on ``cuda`` through every analyzer, CUDA memory peaks
and fragmentation, torchao int8 kernels with their real memory, GPTQ/AWQ calibrated on the GPU,
FLOPs counted on CUDA kernels, energy reported as MEASURED where NVML reads the GPU's power, and
the original weights kept in host memory (``runtime.original_weights=auto`` on a GPU)."""

import importlib.util
import math

import pytest
import torch

from conftest import TINY_JOB
from modelxray import api

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run pytest -m gpu on a GPU machine)"),
]

# the tiny job's keys, less performance's (set only where performance is chosen)
PERFORMANCE = [k for k in TINY_JOB if k.startswith("analyzer.performance.")]
GPU = [*(k for k in TINY_JOB if k not in PERFORMANCE), "model.device=cuda", "tracker=none"]
EVERY_ANALYZER = [
    *GPU,
    *PERFORMANCE,
    "analyzer=[performance,robustness,quant_impact,bitwidth,inspect]",
    "analyzer.bitwidth.sensitivity=false",
]
STRATEGIES = ["none", "int8", "int4", "gptq_int4", "awq_int4", "bf16"]
if importlib.util.find_spec("torchao"):
    STRATEGIES.append("int8_torchao")
QUANT_IMPACT = [*GPU, "analyzer=quant_impact", f"analyzer.quant_impact.strategies=[{','.join(STRATEGIES)}]"]
CALIBRATED = {quant: [*GPU, *PERFORMANCE, f"quant={quant}"] for quant in ("gptq_int4", "awq_int4")}
ENERGY = [*GPU, "analyzer=inspect"]
# every job above, by name: tests/test_gpu_jobs.py builds each on any machine, so none rots unseen
JOBS = {"every_analyzer": EVERY_ANALYZER, "quant_impact": QUANT_IMPACT, **CALIBRATED, "energy": ENERGY}


def _finite(metrics: dict) -> bool:
    return all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_every_analyzer_on_cuda(dtype, tmp_path):
    out = api.analyze([*EVERY_ANALYZER, f"model.dtype={dtype}"], output_dir=tmp_path)
    assert out.failed == [] and _finite(out.metrics)
    m = out.metrics
    assert m["performance/cuda_max_allocated_bytes"] > 0
    assert m["performance/cuda_max_reserved_bytes"] >= m["performance/cuda_max_allocated_bytes"]
    assert m["inspect/flops_total"] > 0  # counted on CUDA kernels
    assert "host memory" in out.results["bitwidth"].sentences(out.results)[-1]  # originals kept off the GPU


def test_quant_impact_reports_cuda_memory_and_fragmentation(tmp_path):
    out = api.analyze(QUANT_IMPACT, output_dir=tmp_path)
    result = out.results["quant_impact"]
    rows = {r["strategy"]: r for r in result.tables["strategies"]}
    assert set(rows) == set(STRATEGIES)
    assert result.data["load_memory"]["cuda_peak_allocated"] > 0  # the load onto the GPU, measured
    said = result.sentences(out.results)
    assert any(s.startswith("Loading the model took") for s in said)
    from modelxray.analyzers.quant_impact.insights import fragmentation

    assert [s for s in said if s.startswith("GPU memory fragmentation")] == fragmentation(list(rows.values()), 0.25)
    for r in rows.values():
        assert r["cuda_peak_allocated"] > 0 and r["cuda_peak_reserved"] >= r["cuda_peak_allocated"]
        assert r["cuda_fragmentation_bytes"] >= 0
    assert rows["bf16"]["weight_bytes"] == pytest.approx(rows["none"]["weight_bytes"] / 2, rel=0.01)
    if "int8_torchao" in rows:  # real int8 kernels: stored smaller, measured as stored
        assert not rows["int8_torchao"]["simulated"]
        assert rows["int8_torchao"]["stored_bytes"] < rows["none"]["stored_bytes"]


@pytest.mark.parametrize("quant", ["gptq_int4", "awq_int4"])
def test_calibrated_quantizers_on_the_gpu(quant, tmp_path):
    out = api.analyze(CALIBRATED[quant], output_dir=tmp_path)
    assert out.failed == [] and out.metrics["quant/modules_quantized"] > 0
    assert math.isfinite(out.metrics["performance/perplexity"])


def test_energy_on_the_gpu_is_measured_when_nvml_reads_power(tmp_path):
    pytest.importorskip("pynvml", reason="NVML bindings (pynvml) are not installed")
    out = api.analyze(ENERGY, output_dir=tmp_path)
    m = out.metrics
    assert m["inspect/energy_j_per_forward"] > 0
    text = "\n".join(out.results["inspect"].sentences(out.results))
    assert "GPU" in text


@pytest.mark.parametrize(
    "device_map",
    [
        "auto",
        "{model.embed_tokens: 0, model.rotary_emb: 0, model.layers.0: 0, model.layers.1: cpu, model.norm: cpu, lm_head: cpu}",
    ],
)
def test_device_map_on_the_gpu_gives_the_cpu_figures(device_map, tmp_path):
    """A causal LM placed by accelerate on the GPU (and the CPU) scores as it does whole on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "m")
    job = [
        "model=hf",
        f"model.name_or_path={tmp_path / 'm'}",
        "model.tokenizer=byte",
        "dataset.max_tokens=512",
        "dataset.seq_len=64",
        "analyzer=performance",
        "analyzer.performance.speed_batch_sizes=[1]",
        "tracker=none",
    ]
    placed = api.analyze([*job, f"model.device_map={device_map}"], output_dir=tmp_path / "placed")
    cpu = api.analyze([*job, "model.device=cpu"], output_dir=tmp_path / "cpu")
    assert placed.metrics["performance/perplexity"] == pytest.approx(cpu.metrics["performance/perplexity"], rel=1e-4)
