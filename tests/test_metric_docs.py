"""Every metric the comparing analyzers log on a language model is named on their docs page, so the
pages cannot fall behind what MLflow holds."""

from __future__ import annotations

import re
from pathlib import Path

import modelxray

DOCS = Path(__file__).resolve().parents[1] / "docs" / "analyzers"
ARGS = [
    "debug=tiny",
    "model.n_layer=1",
    "dataset.max_tokens=512",
    "dataset.seq_len=64",
    "quant=none",
    "analyzer=[quant_impact,bitwidth]",
    "analyzer.quant_impact.strategies=[none,int8]",
    "analyzer.bitwidth.sensitivity=false",
    "analyzer.bitwidth.progressive=false",
    "report.dashboard=false",
]


def _named(page: str) -> set[str]:
    return set(re.findall(r"`(?:<\w+>_)?([a-z0-9_]+)`", (DOCS / page).read_text()))


def test_every_metric_quant_impact_and_bitwidth_log_is_on_their_page(tmp_path):
    out = modelxray.analyze(ARGS, output_dir=tmp_path)
    assert not out.failed, {n: r.error for n, r in out.results.items() if not r.ok}
    qi = {k.split("/", 1)[1] for k in out.metrics if k.startswith("quant_impact/")}
    per_strategy = {k.removeprefix("int8_") for k in qi if k.startswith("int8_")}
    assert {"kl_p90", "kl_p999", "kl_max", "rms_dp", "top1_agree_se"} <= per_strategy
    assert (
        per_strategy - {f"score_{p}" for p in ("balanced", "memory", "speed", "accuracy")} - _named("quant_impact.md")
        == set()
    )
    bw = {k.split("/", 1)[1] for k in out.metrics if k.startswith("bitwidth/uniform_int8_")}
    per_config = {k.removeprefix("uniform_int8_") for k in bw}
    assert {"kl_p90", "kl_p99", "kl_p999", "kl_max", "rms_dp", "top1_agree_se"} <= per_config
    assert per_config - _named("bitwidth.md") == set()


def test_every_metric_performance_logs_on_a_quantized_language_model_is_on_its_page(tmp_path):
    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", "quant=int4"]
    out = modelxray.analyze([*args, "analyzer.performance.iters=1", "report.dashboard=false"], output_dir=tmp_path)
    logged = {k.split("/", 1)[1] for k in out.metrics if k.startswith("performance/")}
    assert {"kl_p999", "ppl_ratio", "perplexity_se_per_token"} <= logged
    speed = {k for k in logged if k.startswith("bs") or k.startswith("time_share/")}
    assert logged - speed - _named("performance.md") == set()
