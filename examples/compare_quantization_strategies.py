"""``get_quantization_analyzer``: quantization strategies compared from Python by memory, accuracy,
inference time and an efficiency score, with recommendations and a memory timeline.

    python examples/compare_quantization_strategies.py

The model is ``digits_clip`` (a small CLIP trained on scikit-learn's digits, its weights shipped
with modelxray: about 20 s on 2 cores); five strategies run (none, int8, int4, gptq-int4 and
awq-int4), GPTQ and AWQ calibrated on training images and the class prompts. ``run_benchmark`` returns one result per strategy; the memory timeline of each is
plotted and saved. Results, plots and the MLflow store go to a temporary directory; the asserts
check the per-strategy summary fields against the run's MLflow metrics, the recommendations, the
report's files and the timelines.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed: the timeline is saved as a PNG
import matplotlib.pyplot as plt  # noqa: E402

from modelxray import get_quantization_analyzer  # noqa: E402

STRATEGIES = ["none", "int8", "int4", "gptq-int4", "awq-int4"]
# each summary field and its MLflow metric quant_impact/<strategy>_<metric> (the score: of the priority)
SUMMARY = {
    "memory_used_gb": "memory_used_gb",
    "accuracy": "accuracy",
    "inference_time": "inference_time",
    "efficiency_score": "score_balanced",
}


def experiment_settings(tmp: Path) -> dict:
    """Small evaluation settings (128 test examples, 2 timed passes), tracked in ``tmp``."""
    return {
        "threads": 1,
        "progress": False,
        "tracker.uri": f"sqlite:///{tmp / 'mlflow.db'}",
        "tracker.experiment": "compare_quantization_strategies",
        "analyzer.quant_impact.eval_examples": 128,
        "analyzer.quant_impact.iters": 2,
    }


def compare_strategies(experiment_config: dict, results_dir: Path):
    """Benchmark the strategies, print each one's summary and the recommendations, plot the memory timeline."""
    analyzer = get_quantization_analyzer(
        model_name="digits_clip", config=experiment_config, results_dir=str(results_dir)
    )
    benchmark = analyzer.run_benchmark(strategies=STRATEGIES, priority="balanced")
    for result in benchmark.results:
        print(f"Strategy: {result.strategy}")
        print(f"  Memory: {result.memory_used_gb:.2f} GB")
        print(f"  Accuracy: {result.accuracy:.4f}")
        print(f"  Inference time: {result.inference_time:.4f} s")
        print(f"  Efficiency score: {result.efficiency_score:.4f}")
    print("\nRecommendations:")
    for recommendation in benchmark.recommendations:
        print(f"- {recommendation}")
    visualization_data = analyzer._generate_visualization_data(benchmark)
    memory_timeline = visualization_data["memory_timeline"]
    plt.figure(figsize=(12, 6))
    for strategy, data in memory_timeline.items():
        plt.plot(data["timestamps"], data["memory_values"], label=strategy)
    plt.xlabel("Time (s)")
    plt.ylabel("Memory Usage (GB)")
    plt.legend()
    plt.savefig(results_dir / "memory_timeline.png")
    plt.close()
    return benchmark, visualization_data


def check(benchmark, visualization_data, results_dir: Path, tracking_uri: str) -> None:
    """Per-strategy summary fields (the run's MLflow metrics), recommendations,
    the run's files, and a memory timeline per strategy."""
    from mlflow.tracking import MlflowClient

    strategies = [r.strategy for r in benchmark.results]
    assert strategies == ["none", "int8", "int4", "gptq_int4", "awq_int4"], strategies
    assert not benchmark.unsupported, benchmark.unsupported
    logged = MlflowClient(tracking_uri).get_run(benchmark.run_id).data.metrics
    for r in benchmark.results:
        for field, metric in SUMMARY.items():
            assert getattr(r, field) == logged[f"quant_impact/{r.strategy}_{metric}"], (r.strategy, field)
    assert benchmark.recommended in strategies and benchmark.recommendations
    for name in ("quant_impact_strategies.csv", "summary_report.md", "plots/quant_impact_radar.png"):
        assert (results_dir / name).is_file(), name
    timeline = visualization_data["memory_timeline"]
    assert list(timeline) == strategies
    for data in timeline.values():
        assert len(data["timestamps"]) == len(data["memory_values"]) > 1
        assert data["timestamps"] == sorted(data["timestamps"]) and min(data["memory_values"]) > 0
    assert set(visualization_data["normalized_comparison"]) == set(strategies)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        settings = experiment_settings(tmp)
        benchmark, visualization_data = compare_strategies(settings, tmp / "results")
        check(benchmark, visualization_data, tmp / "results", settings["tracker.uri"])
        print(f"MLflow run {benchmark.run_id}; all checks passed")


if __name__ == "__main__":
    main()
