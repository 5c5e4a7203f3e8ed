"""Your model, your loader: a model whose vocabulary and positions are small, fed a DataLoader of its
own ids, runs through every ModelAnalyzer call, per-module timing and speed included. Every input any
analyzer builds comes from the loader's rows: no token beyond the vocabulary, no window beyond the
model's positions."""

from __future__ import annotations

import pytest
import torch

from modelxray import ModelAnalyzer

VOCAB, POSITIONS, ROW = 50, 40, 32  # a 128-token timing window or a bos id of 50256 would both fail

QUICK = [
    "threads=1",
    "progress=false",
    "tracker=none",
    "report.dashboard=false",
    "analyzer.performance.iters=1",
    "analyzer.performance.warmup=0",
    "analyzer.performance.speed_batch_sizes=[1,2]",
    "analyzer.performance.layer_timing_iters=1",
    "analyzer.bitwidth.uniform_bits=[8,4]",
    "analyzer.robustness.pgd_eps=[]",
    "analyzer.robustness.weight_noise_levels=[0.01]",
    "analyzer.robustness.quant_noise_bits=[8]",
    "analyzer.robustness.dropout_rates=[0.1]",
    "analyzer.robustness.substitution_rates=[0.1]",
]


@pytest.fixture(scope="module")
def model_and_loader():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=POSITIONS))
    assert model.config.bos_token_id >= VOCAB  # GPT-2's default bos is not in this vocabulary
    ids = torch.randint(0, VOCAB, (6, ROW), generator=torch.Generator().manual_seed(1))
    return model, torch.utils.data.DataLoader(ids, batch_size=2)


def test_every_call_runs_on_the_loaders_rows(model_and_loader, tmp_path):
    model, loader = model_and_loader
    analyzer = ModelAnalyzer(model, QUICK, output_dir=tmp_path)
    perf = analyzer.analyze_performance(loader)
    assert perf["ok"], perf.get("error")
    assert perf["data"]["layer_time"]["seq_len"] == ROW  # timed on a row as the loader gave it
    assert perf["metrics"]["layer_time_total_ms"] > 0
    assert {row["seq_len"] for row in perf["tables"]["speed"]} == {ROW}
    assert perf["metrics"]["tokens_scored"] == 6 * (ROW - 1)
    bits = analyzer.analyze_bit_widths(loader)
    assert bits["ok"], bits.get("error")
    assert bits["metrics"]["reference_perplexity"] == pytest.approx(perf["metrics"]["perplexity"], rel=1e-5)
    robust = analyzer.analyze_robustness(loader)
    assert robust["ok"], robust.get("error")
    sensitivity = analyzer.bit_width_analyzer.analyze_layer_sensitivity(loader)
    assert sensitivity and all(row["rank"] >= 1 for row in sensitivity)
    speed = analyzer.performance_analyzer.benchmark_inference_speed(loader, iters=2)
    assert speed["seq_len"] == ROW and speed["tokens_per_second"] > 0
    written = analyzer.generate_comprehensive_report()
    assert "summary_report.md" in written
    assert not any(name.startswith("errors/") for name in written)
