"""get_quantization_analyzer: model names and config become the CLI's
overrides, bad input fails before any work, and a benchmark's fields are the analyzer's MLflow metrics."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

import modelxray
from conftest import REPO, mlflow_runs
from modelxray.core.errors import ConfigError
from modelxray.quantization_api import StrategyResult, config_overrides, model_overrides

STRATEGIES = ["none", "int4", "gptq-int4"]  # a hyphenated name; GPTQ is skipped on a classifier
FAST = {
    "model.epochs": 5,
    "threads": 1,
    "progress": False,
    "report.dashboard": False,
    "analyzer.quant_impact": {"eval_examples": 128, "iters": 2},
}
# each seed field and its MLflow metric quant_impact/<strategy>_<metric>
SEED_METRICS = {
    "memory_used_gb": "memory_used_gb",
    "accuracy": "accuracy",
    "inference_time": "inference_time",
    "efficiency_score": "score_balanced",
}
ROW_METRICS = ("loss", "kl", "top1_agree", "latency_p50_ms", "examples_per_s", "weight_bytes", "quantize_seconds")


def test_import_stays_light_and_the_verb_is_exported():
    code = (
        "import sys, modelxray; from modelxray import get_quantization_analyzer; "
        "assert 'get_quantization_analyzer' in modelxray.__all__; "
        "assert 'torch' not in sys.modules and 'hydra' not in sys.modules, 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_model_name_maps_to_the_model_config_group(tmp_path):
    assert model_overrides("digits_clip") == ["model=digits_clip"]
    assert model_overrides("openai/clip-vit-large-patch14") == [
        "model=hf",
        "model.name_or_path=openai/clip-vit-large-patch14",
    ]
    folder = tmp_path / "my model, v2"  # a comma and a space: quoted for Hydra
    folder.mkdir()
    weights = tmp_path / "ckpt.safetensors"
    weights.write_bytes(b"")
    assert model_overrides(folder)[0] == "model=hf" and model_overrides(str(weights))[0] == "model=file"
    cfg = modelxray.compose(model_overrides(folder))
    assert cfg.model.name_or_path == str(folder)
    assert modelxray.compose(model_overrides(weights)).model.path == str(weights)
    with pytest.raises(ConfigError, match=r"^model_name: 'digitz_clip' is not a model config \(.*digits_clip"):
        modelxray.get_quantization_analyzer("digitz_clip")


def test_config_becomes_override_strings():
    nested = {"dataset": "digits", "tracker.uri": "sqlite:///x.db", "analyzer": {"quant_impact": {"iters": 2}}}
    expected = ["dataset=digits", "tracker.uri=sqlite:///x.db", "analyzer.quant_impact.iters=2"]
    assert config_overrides(nested) == expected
    assert config_overrides(OmegaConf.create(nested)) == expected
    assert config_overrides(["threads=1"]) == ["threads=1"] and config_overrides(None) == []
    values = config_overrides({"a": None, "b": True, "c": [1, "x y"], "d": "it's"})
    assert values == ["a=null", "b=true", "c=[1,'x y']", "d='it\\'s'"]
    with pytest.raises(ConfigError, match="^config: must be None, a dict"):
        config_overrides("threads=1")
    with pytest.raises(ConfigError, match=r"^config: sets 'analyzer.quant_impact.priority': pass it as run_benchmark"):
        config_overrides({"analyzer.quant_impact.priority": "speed"})
    with pytest.raises(ConfigError, match="^config: sets 'model': pass the model as model_name"):
        config_overrides(["model=tiny_gpt2"])


def test_overrides_are_the_cli_command_line():
    analyzer = modelxray.get_quantization_analyzer("digits_mlp", config={"threads": 1})
    assert analyzer.overrides(["none", "gptq-int4"], "memory") == [
        "model=digits_mlp",
        "analyzer=quant_impact",
        "analyzer.quant_impact.strategies=[none,gptq-int4]",
        "analyzer.quant_impact.priority=memory",
        "threads=1",
    ]
    assert not any("strategies" in o for o in analyzer.overrides())  # None: the analyzer's default list


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategies": ["none", "int5"]}, r"^strategies: unknown strategy 'int5': .*valid: .*int4"),
        ({"strategies": "int8"}, r"^strategies: must be a non-empty list"),
        ({"strategies": []}, r"^strategies: must be a non-empty list"),
        ({"strategies": ["none"], "priority": "fast"}, r"^priority: unknown priority 'fast'; use one of accuracy"),
    ],
)
def test_bad_benchmark_arguments_fail_before_any_work(monkeypatch, kwargs, message):
    import modelxray.api

    monkeypatch.setattr(modelxray.api, "analyze", lambda *a, **k: pytest.fail("a run started"))
    analyzer = modelxray.get_quantization_analyzer("digits_mlp")
    with pytest.raises(ConfigError, match=message):
        analyzer.run_benchmark(**kwargs)


def test_strategy_result_keeps_every_column_of_the_row():
    row = {
        "strategy": "int8",
        "memory_used_gb": 0.5,
        "accuracy": 0.4,
        "inference_time": 0.01,
        "efficiency_score": 0.9,
        "perplexity": 20.0,
        "tokens_per_s": 100.0,
        "score_balanced": 0.9,
        "score_speed": 0.8,
        "cuda_peak_reserved": 7,
    }
    r = StrategyResult.from_row(row)
    assert r.perplexity == 20.0 and r.accuracy_ci_low is None and r.throughput == 100.0
    assert r.scores == {"balanced": 0.9, "speed": 0.8} and r.extra == {"cuda_peak_reserved": 7}


@pytest.fixture(scope="module")
def benchmark_run(tmp_path_factory):
    """One benchmark of digits_mlp on three strategies, tracked in its own SQLite store."""
    tmp = tmp_path_factory.mktemp("quantization_api")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    config = {**FAST, "tracker.uri": uri, "tracker.experiment": "quantization_api"}
    threads = torch.get_num_threads()  # threads=1 is process-wide: give the other tests theirs back
    analyzer = modelxray.get_quantization_analyzer("digits_mlp", config=config, results_dir=tmp / "results")
    benchmark = analyzer.run_benchmark(strategies=STRATEGIES, priority="balanced")
    torch.set_num_threads(threads)
    return analyzer, benchmark, uri, tmp / "results"


def test_benchmark_fields_are_the_runs_mlflow_metrics(benchmark_run):
    analyzer, benchmark, uri, results_dir = benchmark_run
    assert [r.strategy for r in benchmark.results] == ["none", "int4"]
    (skipped,) = benchmark.unsupported
    assert skipped.strategy == "gptq_int4" and "repeated blocks" in skipped.reason
    client, (run,) = mlflow_runs(uri, "quantization_api")
    assert run.info.run_id == benchmark.run_id and run.info.status == "FINISHED"
    logged = run.data.metrics
    for r in benchmark.results:
        for field, metric in SEED_METRICS.items():
            assert getattr(r, field) == logged[f"quant_impact/{r.strategy}_{metric}"], (r.strategy, field)
        for k in ROW_METRICS:
            assert getattr(r, k) == logged[f"quant_impact/{r.strategy}_{k}"], (r.strategy, k)
        assert r.perplexity is None and r.accuracy_ci_low < r.accuracy < r.accuracy_ci_high
    assert run.data.tags["modelxray.overrides"] == " ".join(analyzer.overrides(STRATEGIES, "balanced"))
    assert run.data.params["analyzer.quant_impact.priority"] == benchmark.priority == "balanced"
    assert benchmark.output_dir == results_dir and (results_dir / "quant_impact_strategies.csv").is_file()
    assert benchmark.recommended == benchmark.best_by_priority["balanced"]["strategy"]
    assert any(line.startswith("For priority 'balanced', use") for line in benchmark.recommendations)
    assert benchmark.task == "classification" and benchmark.quality_metric == "accuracy"


def test_visualization_data_shape(benchmark_run):
    analyzer, benchmark, _, _ = benchmark_run
    data = analyzer._generate_visualization_data(benchmark)
    strategies = ["none", "int4"]
    for key in ("memory_timeline", "memory_usage", "speed_accuracy", "normalized_comparison", "efficiency_scores"):
        assert list(data[key]) == strategies, key
    for series in data["memory_timeline"].values():
        n = len(series["timestamps"])
        assert n > 1 and len(series["memory_values"]) == len(series["phases"]) == n
        assert series["timestamps"] == sorted(series["timestamps"]) and 0 < min(series["memory_values"]) < 1024
        assert {"quantize", "inference"} <= set(series["phases"])
    int4 = next(r for r in benchmark.results if r.strategy == "int4")
    assert data["memory_usage"]["int4"]["weights_gb"] == int4.memory_used_gb
    assert data["speed_accuracy"]["int4"]["accuracy"] == int4.accuracy
    assert data["normalized_comparison"]["int4"]["memory_ratio"] == 1.0  # int4 has the smallest weights
    radar = data["radar_chart"]
    assert len(radar["values"]["none"]) == len(radar["axes"]) and max(radar["values"]["int4"]) == 1.0
    assert data["efficiency_scores"]["int4"]["balanced"] == int4.efficiency_score
