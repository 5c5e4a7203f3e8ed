"""``ModelAnalyzer``: one model loaded once, one analysis per call on your own DataLoader.

A small GPT-2 is built here, saved as ``model.pt`` (a state dict) with its ``config.json`` beside it,
and a DataLoader of token batches is cut from the Python docs text (the stdlib's
``pydoc_data.topics``). Then ``ModelAnalyzer("model.pt")`` runs performance, bit-width and
robustness analyses on it and writes the comprehensive report; the sub-analyzers time inference on
your batches (``performance_analyzer.benchmark_inference_speed``), rank the layers by sensitivity to
quantization (``bit_width_analyzer.analyze_layer_sensitivity``) and test your own per-layer bit
widths (``bit_width_analyzer.test_configurations``); a focused run does only the cheaper analyses,
and a loop analyzes several model files. The asserts check the report's files, its plots and the
result keys. Everything is logged to MLflow (``mlflow.db`` in the working folder). About a minute
on 2 cores.

    python examples/model_analyzer_calls.py [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from modelxray import ModelAnalyzer


def make_model_and_data(folder: Path, n_layer: int = 2) -> torch.utils.data.DataLoader:
    """``model.pt`` + ``config.json`` in ``folder``, and 16 windows of 64 byte tokens of real text."""
    from pydoc_data.topics import topics

    torch.manual_seed(0)
    config = GPT2Config(n_layer=n_layer, n_embd=64, n_head=4, vocab_size=257, n_positions=128)
    model = GPT2LMHeadModel(config)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), folder / "model.pt")
    config.save_pretrained(folder)
    text = " ".join(topics.values()).encode("utf-8")[: 16 * 64]
    ids = torch.tensor(list(text), dtype=torch.long).view(16, 64)
    return torch.utils.data.DataLoader(ids, batch_size=4)


def main(workdir: Path) -> None:
    os.chdir(workdir)
    data_loader = make_model_and_data(Path("."))

    # --- Programmatic Usage --------------------------------------------------------------------
    # Initialize analyzer
    analyzer = ModelAnalyzer("model.pt")

    # Run specific analyses
    performance_results = analyzer.analyze_performance(data_loader)
    bit_width_results = analyzer.analyze_bit_widths(data_loader)
    robustness_results = analyzer.analyze_robustness(data_loader)

    # Generate comprehensive report
    analyzer.generate_comprehensive_report("./results/")

    # --- Speed Benchmarking --------------------------------------------------------------------
    speed_metrics = analyzer.performance_analyzer.benchmark_inference_speed(data_loader)
    print(f"Throughput: {speed_metrics['tokens_per_second']:.2f} tokens/sec")

    # --- Layer Sensitivity Analysis ------------------------------------------------------------
    sensitivity = analyzer.bit_width_analyzer.analyze_layer_sensitivity(data_loader)
    # Shows which layers are most sensitive to quantization

    # --- Custom Analysis -----------------------------------------------------------------------
    # Custom bit-width configurations
    custom_configs = {
        "my_config": [
            {"attn_bits": 8, "mlp_bits": 4},  # Layer 0
            {"attn_bits": 4, "mlp_bits": 8},  # Layer 1
            # ... more layers
        ]
    }
    # Test custom configurations
    results = analyzer.bit_width_analyzer.test_configurations(data_loader, custom_configs)

    # --- what the calls above give -------------------------------------------------------------
    for name in ("analysis_results.json", "summary_report.md", "insights.md"):
        assert (Path("results") / name).is_file(), name
    plots = {p.name for p in Path("results/plots").glob("*.png")}
    promised = {
        "performance_speed.png",
        "performance_memory.png",
        "bit_width_configurations.png",
        "accuracy_vs_bits.png",
        "layer_sensitivity.png",
        "adversarial_robustness.png",
        "noise_robustness.png",
        "perturbation_robustness.png",
        "analysis_summary_dashboard.png",
    }
    assert promised <= plots, promised - plots
    m = performance_results["metrics"]
    for key in ("loss", "perplexity", "accuracy", "top5_accuracy", "bs1_latency_p95_ms", "bs1_tokens_per_s"):
        assert key in m and m[key] == m[key], key
    assert bit_width_results["tables"]["configurations"] and "recommended_perplexity" in bit_width_results["metrics"]
    assert {r["family"] for r in robustness_results["tables"]["robustness"]} >= {"fgsm", "pgd", "weight_noise"}
    for key in ("tokens_per_second", "batches_per_second", "latency_mean_ms", "latency_p50_ms", "latency_p95_ms"):
        assert speed_metrics[key] > 0, key
    assert sensitivity and "loss_increase" in sensitivity[0]
    assert any(r["config"] == "custom_my_config" for r in results["tables"]["configurations"])

    # --- Focused Analysis ----------------------------------------------------------------------
    # Run only specific analyses
    performance_only = analyzer.analyze_performance(data_loader)

    # Skip expensive robustness testing
    analyzer.analyze_bit_widths(data_loader)
    analyzer.generate_comprehensive_report("./results/")
    assert performance_only["metrics"]["perplexity"] == performance_results["metrics"]["perplexity"]

    # --- Batch Analysis ------------------------------------------------------------------------
    for i in (1, 2, 3):
        make_model_and_data(Path(f"model{i}"), n_layer=i)
        Path(f"model{i}.pt").unlink(missing_ok=True)
        os.symlink(Path(f"model{i}") / "model.pt", f"model{i}.pt")
    # Analyze multiple models
    models = ["model1.pt", "model2.pt", "model3.pt"]
    for model_path in models:
        analyzer = ModelAnalyzer(model_path)
        analyzer.analyze_performance(data_loader)
        analyzer.generate_comprehensive_report(f"./results/{model_path}/")
    for model_path in models:
        assert (Path("results") / model_path / "summary_report.md").is_file()
    print(f"every call ran; reports in {workdir / 'results'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None, help="where to work (default: a temporary folder)")
    args = parser.parse_args()
    if args.workdir is None:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        main(args.workdir.resolve())
