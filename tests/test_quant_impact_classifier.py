"""quant_impact on classifiers (the quantization-impact workflow on a CLIP model): accuracy, loss, top-1 agreement and KL
against the unquantized model per strategy, hyphenated strategy names, calibration-based strategies
listed as unsupported for the model, the summary fields, and metrics logged under quant_impact/."""

from __future__ import annotations

import io

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import modelxray
from conftest import mlflow_runs, run_cli
from modelxray.analyzers.quant_impact import QuantImpactAnalyzer
from modelxray.analyzers.quant_impact.config import strategy_name

SUMMARY_FIELDS = ("memory_used_gb", "accuracy", "inference_time", "efficiency_score")
STRATEGIES = "analyzer.quant_impact.strategies=[none,int8,int4,gptq-int4]"
FAST = ["analyzer.quant_impact.iters=2", "tracker=none", "threads=1", "progress=false"]


@pytest.fixture
def keep_threads():
    """``threads=1`` sets torch's threads for the whole process: give the other tests theirs back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_hyphenated_strategy_names_are_the_underscored_options():
    assert strategy_name("gptq-int4") == "gptq_int4" and strategy_name("int8") == "int8"
    QuantImpactAnalyzer(strategies=["none", "awq-int4", "gptq-int4"])  # validates without error


def _check(out, overrides, tmp_path, zero_shot: bool = False):
    """``zero_shot``: digits_clip, whose repeated blocks GPTQ calibrates on images; the digits MLP has
    no repeated blocks, so GPTQ is listed as unable to run, with the reason."""
    from modelxray.api import compose
    from modelxray.config.components import build_components

    assert not out.failed
    result = out.results["quant_impact"]
    rows = {r["strategy"]: r for r in result.tables["strategies"]}
    if zero_shot:
        assert list(rows) == ["none", "int8", "int4", "gptq_int4"] and not result.tables.get("unsupported")
        assert rows["gptq_int4"]["top1_agree"] >= 0.9
    else:
        assert list(rows) == ["none", "int8", "int4"]
        (gptq,) = result.tables["unsupported"]
        assert gptq["strategy"] == "gptq_int4" and "repeated blocks" in gptq["reason"]
        said = result.source.insights(result, out.results)
        assert any(line.startswith("gptq_int4 cannot run here") for line in said)

    # the unquantized model on the evaluated test examples, scored by hand
    components = build_components(compose(overrides))
    loaded = components.model.load()
    data = components.dataset.load(None)
    model = loaded.model
    if zero_shot:
        model = model.for_classes(data.meta["class_names"], loaded.tokenizer, data.meta["prompt_template"])
    n = min(512, int(data.y_test.numel()))
    with torch.inference_mode():
        logits = model(data.x_test[:n])
    correct = int((logits.argmax(-1) == data.y_test[:n]).sum())
    none = rows["none"]
    assert none["accuracy"] == correct / n and none["examples_scored"] == n
    assert none["loss"] == pytest.approx(float(F.cross_entropy(logits, data.y_test[:n])), rel=1e-5)
    assert none["top1_agree"] == 1.0 and none["kl"] == pytest.approx(0.0, abs=1e-7)
    assert none["accuracy_ci_low"] < none["accuracy"] < none["accuracy_ci_high"]
    assert rows["int8"]["top1_agree"] >= 0.98 and rows["int8"]["kl"] < rows["int4"]["kl"]
    for r in rows.values():
        for k in SUMMARY_FIELDS:
            assert k in r, k
        assert r["memory_used_gb"] == r["weight_bytes"] / 2**30
        assert r["inference_time"] > 0 and r["examples_per_s"] == pytest.approx(1 / r["inference_time"])
        assert r["efficiency_score"] == r["score_balanced"] and 0 < r["efficiency_score"] <= 1
        assert "perplexity" not in r and "tokens_per_s" not in r
    # quality is accuracy: higher is better, the baseline's quality ratio is 1
    assert none["quality_ratio"] == 1.0
    assert rows["int4"]["quality_ratio"] == pytest.approx(rows["int4"]["accuracy"] / none["accuracy"])
    assert rows["int4"]["memory_ratio"] > rows["int8"]["memory_ratio"] > 1
    recs = result.data["recommendations"]
    assert {"accuracy", "strategy"} <= set(recs["accuracy"]) and "perplexity" not in recs["accuracy"]

    m = out.metrics
    assert m["quant_impact/none_accuracy"] == correct / n and m["quant_impact/none_top1_agree"] == 1.0
    for s in rows:
        for k in ("accuracy", "loss", "kl", "top1_agree", "examples_per_s", "memory_used_gb", "inference_time"):
            assert f"quant_impact/{s}_{k}" in m, (s, k)
    assert not any(k.startswith("quant_impact/") and "perplexity" in k for k in m)

    run = tmp_path / "run"
    csv = (run / "quant_impact_strategies.csv") if (run / "quant_impact_strategies.csv").exists() else None
    csv = csv or next(run.rglob("quant_impact_strategies.csv"))
    table = pd.read_csv(io.StringIO(csv.read_text()))
    assert set(SUMMARY_FIELDS) <= set(table.columns) and len(table) == len(rows)
    assert (run / "plots" / "quant_impact_speed_vs_quality.png").is_file()
    # insights.md: from the config's hook, on the test examples scored; the Result the run saved in
    # results/quant_impact.json (what a resumed run loads) says the same
    from modelxray.report.result_file import load_result

    said = result.source.insights(result, out.results)
    assert any(f"(baseline {none['accuracy']:.3f}, {n:,} test examples)" in s for s in said)
    saved = load_result(next(run.rglob("results/quant_impact.json")), source=result.source)
    assert result.insights == [] and saved.source.insights(saved, out.results) == said
    return result


def test_digits_mlp_quant_impact(tmp_path, keep_threads):
    overrides = ["model=digits_mlp", "model.epochs=5", "analyzer=quant_impact", STRATEGIES, *FAST]
    out = modelxray.analyze(overrides, output_dir=tmp_path / "run")
    result = _check(out, overrides, tmp_path)
    assert result.data["quality_metric"] == "accuracy"


def test_digits_clip_quant_impact_is_zero_shot(tmp_path, keep_threads):
    overrides = [
        "model=digits_clip",
        f"model.cache_dir={tmp_path / 'cache'}",
        "model.epochs=2",
        "analyzer=quant_impact",
        STRATEGIES,
        *FAST,
    ]
    out = modelxray.analyze(overrides, output_dir=tmp_path / "run")
    result = _check(out, overrides, tmp_path, zero_shot=True)
    assert result.data["quality_metric"] == "zero-shot accuracy"
    assert any("zero-shot accuracy" in line for line in result.source.insights(result, out.results))


@pytest.mark.slow  # a CLI process with a fresh MLflow store: about 18 s on 2 cores
def test_cli_digits_mlp_quant_impact_is_logged_to_mlflow(tmp_path):
    """The command line on a classifier: per-strategy metrics, the strategy params and the run's files
    in MLflow, with the metrics equal to the strategies CSV it uploaded."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [
        "model=digits_mlp",
        "model.epochs=5",
        "dataset=digits",
        "analyzer=quant_impact",
        "analyzer.quant_impact.strategies=[none,int8,int4]",
        "analyzer.quant_impact.eval_examples=128",
        "analyzer.quant_impact.iters=2",
        "tracker=mlflow",
        f"tracker.uri={uri}",
        "tracker.experiment=quant_impact_cli",
        "threads=1",
        "progress=false",
        "report.dashboard=false",
    ]
    proc = run_cli(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    client, (run,) = mlflow_runs(uri, "quant_impact_cli")
    assert run.info.status == "FINISHED"
    assert run.data.params["analyzer.quant_impact.strategies"] == "['none', 'int8', 'int4']"
    assert run.data.params["analyzer.quant_impact.priority"] == "balanced" and run.data.params["model"] == "digits_mlp"
    files = {a.path for a in client.list_artifacts(run.info.run_id)}
    files |= {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert {"quant_impact_strategies.csv", "quant_impact_memory_timeline.csv", "summary_report.md"} <= files
    assert {f"plots/quant_impact_{p}.png" for p in ("memory_timeline", "radar", "speed_vs_quality")} <= files
    csv = client.download_artifacts(run.info.run_id, "quant_impact_strategies.csv", str(tmp_path / "dl"))
    table = pd.read_csv(csv).set_index("strategy")
    assert list(table.index) == ["none", "int8", "int4"]
    m = run.data.metrics
    for s, row in table.iterrows():
        for k in (*SUMMARY_FIELDS[:3], "loss", "kl", "top1_agree", "examples_per_s"):
            assert m[f"quant_impact/{s}_{k}"] == pytest.approx(row[k], rel=1e-9), (s, k)
        assert m[f"quant_impact/{s}_score_balanced"] == pytest.approx(row["efficiency_score"], rel=1e-9)
    assert (
        m["quant_impact/none_top1_agree"] == 1.0
        and m["quant_impact/int4_memory_used_gb"] < m["quant_impact/none_memory_used_gb"]
    )
