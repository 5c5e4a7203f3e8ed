"""Quantization-impact analyzer: strategies measured, scored and recommended; data exported."""

import copy
import dataclasses
import importlib.util
import io
import math

import pandas as pd
import pytest
import torch

from modelxray.analyzers.quant_impact import QuantImpactAnalyzer
from modelxray.analyzers.quant_impact.config import PRIORITIES
from modelxray.analyzers.quant_impact.run import efficiency_scores
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import Subject
from modelxray.measure.hardware import hardware_profile


def test_efficiency_score_is_the_weighted_geometric_mean_of_normalised_axes():
    rows = [
        {"quality_ratio": 1.0, "speed_ratio": 1.0, "memory_ratio": 1.0},
        {"quality_ratio": 0.5, "speed_ratio": 1.0, "memory_ratio": 4.0},
    ]
    bal = efficiency_scores(rows, "balanced")
    # axes normalised by the best: row 0 = (1, 1, 0.25), row 1 = (0.5, 1, 1)
    assert bal[0] == pytest.approx(0.25 ** (1 / 3))
    assert bal[1] == pytest.approx(0.5 ** (1 / 3))
    acc = efficiency_scores(rows, "accuracy")
    assert acc[0] == pytest.approx(0.25**0.2) and acc[1] == pytest.approx(0.5**0.6)
    assert set(PRIORITIES) == {"accuracy", "speed", "memory", "balanced"}


def test_hardware_profile():
    p = hardware_profile()
    assert p["logical_cores"] >= 1 and p["ram_bytes"] > 2**30 and isinstance(p["gpus"], list)


def test_unknown_strategy_fails_at_config_time():
    with pytest.raises(ConfigError, match="^strategies|unknown strategy 'int5'"):
        QuantImpactAnalyzer(strategies=["none", "int5"])


def _reloaded(result, analyzer, out_dir):
    """``result`` as a resumed run loads it back: from ``results/quant_impact.json``, drawn by ``analyzer``."""
    from modelxray.report.result_file import load_result, save_result

    return load_result(save_result(out_dir, analyzer.name, result), source=analyzer)


def test_quant_impact_end_to_end(trained_tiny, tmp_path, monkeypatch):
    loaded, data = trained_tiny
    subject = Subject(loaded.model, loaded.tokenizer, data, loaded.info)
    strategies = ["none", "int8", "int2", "bf16"] + (["int8_torchao"] if importlib.util.find_spec("torchao") else [])
    a = QuantImpactAnalyzer(strategies=strategies, eval_windows=4, kl_windows=2, iters=2, memory_interval_ms=10)
    before = {k: v.clone() for k, v in subject.model.state_dict().items()}
    copies, real_deepcopy = [], copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda x, *a, **k: copies.append(type(x)) or real_deepcopy(x, *a, **k))
    result = a.run(subject, RunContext(output_dir=tmp_path, progress=False))
    # RTN and the cast change the model itself and are undone from the file of original weights
    # (tied embeddings stay tied); only torchao, which swaps modules, works on a copy
    assert sum(issubclass(c, torch.nn.Module) for c in copies) == ("int8_torchao" in strategies)
    after = subject.model.state_dict()
    assert all(torch.equal(v, after[k]) and v.dtype == after[k].dtype for k, v in before.items())
    # insights.md asks the config's hook, which reads the Result alone: the work writes no sentence, a
    # Result reloaded from results/quant_impact.json (a resumed run) says the same, a failed one nothing
    said = a.insights(result, {})
    assert result.insights == [] and said == a.insights(_reloaded(result, a, tmp_path), {})
    assert said[0].startswith("Hardware: ") and said[1].startswith("For priority 'balanced', use ")
    assert "in place" in said[-1] and "temporary file" in said[-1]
    assert a.insights(dataclasses.replace(result, error="boom"), {}) == []
    rows = {r["strategy"]: r for r in result.tables["strategies"]}
    assert list(rows) == strategies
    assert rows["none"]["kl"] == pytest.approx(0.0, abs=1e-6) and rows["none"]["quality_ratio"] == 1.0
    assert rows["int8"]["kl"] < rows["int2"]["kl"]
    assert rows["int2"]["memory_ratio"] > rows["int8"]["memory_ratio"] > 1 and rows["bf16"][
        "memory_ratio"
    ] == pytest.approx(2.0)
    assert rows["int8"]["simulated"] and not rows["bf16"]["simulated"]
    # simulated strategies run the float model: one shared timing, never ranked by timing noise
    assert rows["int8"]["latency_p50_ms"] == rows["none"]["latency_p50_ms"] == rows["int2"]["latency_p50_ms"]
    assert rows["int8"]["speed_ratio"] == 1.0 and rows["int8"]["speed_measured"] == "float model, shared"
    assert rows["bf16"]["speed_measured"] == "own"
    if "int8_torchao" in rows:
        assert not rows["int8_torchao"]["simulated"]
        assert rows["int8_torchao"]["stored_bytes"] < rows["none"]["stored_bytes"]  # real int8 in memory
    for r in rows.values():
        assert r["peak_quantize_rss"] > 0 and r["peak_inference_rss"] > 0 and math.isfinite(r["tokens_per_s"])
    assert set(result.data["recommendations"]) == set(PRIORITIES)
    # paired loss change against the unquantized model, with its error; "indistinguishable" when within 2 se
    assert rows["none"]["delta_loss"] == 0.0
    assert rows["int2"]["delta_loss"] == pytest.approx(rows["int2"]["loss"] - rows["none"]["loss"], abs=1e-9)
    same_line = next((s for s in said if s.startswith("Indistinguishable")), "")
    for name in ("int8", "int2"):
        r = rows[name]
        assert r["delta_loss_se"] > 0
        assert (f"{name} (" in same_line) == (abs(r["delta_loss"]) <= 2 * r["delta_loss_se"])
    timeline = pd.read_csv(io.StringIO(result.texts["quant_impact_memory_timeline.csv"]))
    assert {"quantize", "inference"} <= set(timeline["phase"]) and set(timeline["strategy"]) == set(strategies)
    assert len(pd.read_csv(io.StringIO(result.texts["quant_impact_strategies.csv"]))) == len(strategies)
    assert "none_perplexity" in result.metrics and "int2_score_balanced" in result.metrics


def test_the_memory_sentence_names_the_strategies_that_quantized_in_place(tmp_path):
    """A cast is quantized in place without being simulated: the sentence names it, not "each simulated strategy"."""
    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", "report.dashboard=false"]
    import modelxray

    out = modelxray.analyze(
        [
            *args,
            "analyzer=[quant_impact]",
            "analyzer.quant_impact.strategies=[none,fp16]",
            "analyzer.quant_impact.eval_windows=2",
            "analyzer.quant_impact.iters=1",
            "analyzer.quant_impact.warmup=0",
        ],
        output_dir=tmp_path,
    )
    result = out.results["quant_impact"]
    (said,) = [s for s in result.sentences(out.results) if s.startswith("Memory:")]
    assert said.startswith("Memory: fp16 quantized the model in place.")


def test_a_recommendation_that_is_not_the_smallest_says_why():
    from modelxray.analyzers.quant_impact.insights import strategy_insights

    def row(name, size, quality):
        scores = {f"score_{p}": 0.5 for p in ("accuracy", "speed", "memory", "balanced")}
        return {"strategy": name, "weight_bytes": size, "quality_ratio": quality, "perplexity": 20 / quality,
                "tokens_per_s": 100.0, "simulated": True, **scores}  # fmt: skip

    rows = [row("none", 4e6, 1.0), {**row("int8", 1e6, 0.99), "score_memory": 0.9}, row("int2", 0.5e6, 0.2)]
    data = {
        "scoring": {"classifier": False, "throughput": "tokens_per_s", "unit": "tokens/s"},
        "hardware": {"cpu_model": "cpu", "physical_cores": 2, "ram_bytes": 2**34, "gpus": [], "torch": "2"},
        "quality_metric": "perplexity", "reference": {"tokens_scored": 100}, "unsupported": [],
    }  # fmt: skip
    said = strategy_insights("memory", rows, data)
    (why,) = [s for s in said if s.startswith("The smallest")]
    assert "int2" in why and "memory 0.6, quality 0.2 and speed 0.2" in why and "0.20 of the baseline's quality" in why


def test_a_strategy_whose_outputs_moved_is_never_recommended_and_the_bound_is_named():
    from modelxray.analyzers.quant_impact.insights import strategy_insights
    from modelxray.analyzers.quant_impact.run import fidelity_broken

    def row(name, size, agree, kl, score):
        scores = {f"score_{p}": score for p in ("accuracy", "speed", "memory", "balanced")}
        r = {"strategy": name, "weight_bytes": size, "quality_ratio": 0.99, "perplexity": 20.0, "tokens_per_s": 100.0,
             "simulated": True, "top1_agree": agree, "kl": kl, **scores}  # fmt: skip
        r["fidelity_broken"] = fidelity_broken(r, 0.9, 0.25)
        return r

    rows = [row("none", 4e6, 1.0, 0.0, 0.3), row("int8", 1e6, 0.99, 0.001, 0.5), row("int2", 0.5e6, 0.61, 0.9, 0.9)]
    assert rows[2]["fidelity_broken"] == ["top-1 agreement 0.610 below the floor 0.9", "KL 0.9 above the ceiling 0.25"]
    data = {
        "scoring": {"classifier": False, "throughput": "tokens_per_s", "unit": "tokens/s"},
        "hardware": {"cpu_model": "cpu", "physical_cores": 2, "ram_bytes": 2**34, "gpus": [], "torch": "2"},
        "quality_metric": "perplexity", "reference": {"tokens_scored": 100}, "unsupported": [],
        "fidelity": {"agreement_floor": 0.9, "kl_ceiling": 0.25},
    }  # fmt: skip
    said = strategy_insights("memory", rows, data)
    assert any(
        s.startswith("Not recommended whatever their score") and "int2 (top-1 agreement 0.610" in s for s in said
    )
    assert any(s.startswith("The 'memory' score alone would pick int2; the agreement bound decided") for s in said)
    assert any(s.startswith("For priority 'memory', use int8") for s in said)
    with pytest.raises(ConfigError, match="agreement_floor"):
        QuantImpactAnalyzer(agreement_floor=2.0)


def test_the_summary_table_shows_no_speed_for_a_simulated_strategy():
    from modelxray.core.result import Result

    rows = [
        {"strategy": "none", "simulated": False, "latency_p50_ms": 5.0, "tokens_per_s": 100.0},
        {"strategy": "int4", "simulated": True, "latency_p50_ms": 5.0, "tokens_per_s": 100.0},
        {"strategy": "int8_torchao", "simulated": False, "latency_p50_ms": 4.0, "tokens_per_s": 120.0},
    ]
    result = Result("quant_impact")
    result.tables["strategies"] = rows
    shown = {r["strategy"]: r for r in QuantImpactAnalyzer().summary_tables(result)["strategies"]}
    assert shown["int4"]["tokens_per_s"] == shown["int4"]["latency_p50_ms"] == "not measured (simulated)"
    assert shown["none"]["tokens_per_s"] == 100.0 and shown["int8_torchao"]["latency_p50_ms"] == 4.0
    assert rows[1]["tokens_per_s"] == 100.0  # the full table in the JSON and MLflow is unchanged


def test_memory_life_and_fragmentation_sentences_from_the_rows():
    """Hand-made rows: the load sentence, each strategy's quantizing overhead above the loaded model
    (costliest first), and fragmentation named only past the configured share of reserved memory."""
    from modelxray.analyzers.quant_impact.insights import fragmentation, memory_life

    load = {"seconds": 1.5, "rss_before": 100 * 2**20, "peak_rss": 400 * 2**20, "rss_after": 300 * 2**20}
    rows = [
        {"strategy": "none", "quantize_overhead_bytes": 0, "peak_quantize_rss": 300 * 2**20},
        {"strategy": "int8", "quantize_overhead_bytes": 10 * 2**20, "peak_quantize_rss": 310 * 2**20},
        {"strategy": "gptq_int4", "quantize_overhead_bytes": 200 * 2**20, "peak_quantize_rss": 500 * 2**20},
    ]
    first, second = memory_life(rows, load)
    assert first == (
        "Loading the model took 1.5 s; process memory peaked at 400.0 MiB (300.0 MiB above the process "
        "before it), 300.0 MiB held after."
    )
    assert "gptq_int4 +200.0 MiB, int8 +10.0 MiB." in second and "The costliest, gptq_int4, needs 500.0 MiB" in second
    assert memory_life([rows[0]], None) == []
    gpu = [
        {"strategy": "int8", "cuda_peak_reserved": 1000, "cuda_fragmentation_bytes": 200},
        {"strategy": "int4", "cuda_peak_reserved": 1000, "cuda_fragmentation_bytes": 400},
    ]
    (said,) = fragmentation(gpu, 0.25)
    assert said.startswith("GPU memory fragmentation after int4") and "(40%;" in said and "expandable_segments" in said
    assert len(fragmentation(gpu, 0.1)) == 2 and fragmentation(rows, 0.1) == []  # CPU rows: nothing to say
    with pytest.raises(ConfigError, match="fragmentation_share"):
        QuantImpactAnalyzer(fragmentation_share=1.5)


def test_a_budget_limits_the_recommendation_to_the_strategies_within_it(tmp_path):
    """max_memory_gb: only strategies whose weights fit are recommended, for every priority; those
    beyond it are named; with a budget nothing meets, the report says so and recommends nothing."""
    import modelxray

    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", "report.dashboard=false"]
    args += ["analyzer=[quant_impact]", "analyzer.quant_impact.strategies=[none,int8,int4]"]
    args += ["analyzer.quant_impact.eval_windows=2", "analyzer.quant_impact.iters=1", "analyzer.quant_impact.warmup=0"]
    out = modelxray.analyze(args, output_dir=tmp_path / "all")
    rows = {r["strategy"]: r for r in out.results["quant_impact"].tables["strategies"]}
    limit = (rows["int4"]["weight_bytes"] + rows["int8"]["weight_bytes"]) / 2 / 2**30  # int4 fits, int8 does not
    out = modelxray.analyze([*args, f"analyzer.quant_impact.max_memory_gb={limit}"], output_dir=tmp_path / "b")
    result = out.results["quant_impact"]
    assert {v["strategy"] for v in result.data["recommendations"].values()} == {"int4"}
    assert [r["within_budget"] for r in result.tables["strategies"]] == [False, False, True]
    said = result.sentences(out.results)
    assert any(
        s.startswith("Budget: weights within")
        and "the strategies none (the model unquantized) and int8 exceed it and are not recommended." in s
        for s in said
    )
    # the memory of the model's life: its load (measured once, before any strategy) and each strategy's
    load = result.data["load_memory"]
    assert load["seconds"] > 0 and load["peak_rss"] >= max(load["rss_before"], load["rss_after"]) > 0
    assert result.metrics["load_peak_rss_bytes"] == load["peak_rss"]
    assert any(s.startswith("Loading the model took") for s in said)
    assert any(s.startswith("Quantizing raised process memory") and "int4 +" in s for s in said)
    assert any("use int4" in s for s in said)
    out = modelxray.analyze([*args, "analyzer.quant_impact.max_latency_ms=1e-9"], output_dir=tmp_path / "c")
    result = out.results["quant_impact"]
    assert result.data["recommendations"] == {}
    assert any(s.startswith("No strategy meets the budget") for s in result.sentences(out.results))


def test_a_strategy_that_fails_never_loses_the_others(tmp_path, monkeypatch):
    """A quantizer that crashes on this model (Swin under GPTQ did) is listed as failed, with its
    traceback kept in the run; the other strategies are measured and recommended as before."""
    import modelxray
    from modelxray.quant.weight import WeightQuantizer

    real = WeightQuantizer.quantize

    def crash_at_4_bits(self, model, *args, **kwargs):
        if self.bits == 4:
            raise RuntimeError("shape '[8, 16, 16, 64]' is invalid for input of size 4096")
        return real(self, model, *args, **kwargs)

    monkeypatch.setattr(WeightQuantizer, "quantize", crash_at_4_bits)
    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", "report.dashboard=false"]
    args += ["analyzer.quant_impact.eval_windows=2", "analyzer.quant_impact.iters=1", "analyzer.quant_impact.warmup=0"]
    out = modelxray.analyze(
        [*args, "analyzer=[quant_impact]", "analyzer.quant_impact.strategies=[none,int8,int4]"], output_dir=tmp_path
    )
    result = out.results["quant_impact"]
    assert not out.failed and [r["strategy"] for r in result.tables["strategies"]] == ["none", "int8"]
    (failed,) = result.tables["unsupported"]
    assert failed["strategy"] == "int4" and failed["reason"].startswith("failed: RuntimeError: shape '[8, 16, 16, 64]'")
    assert "crash_at_4_bits" in result.texts["quant_impact_int4_traceback.txt"]
