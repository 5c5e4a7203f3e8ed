"""The performance analyzer on classifiers: accuracy with a Wilson interval checked by hand and
against scipy, throughput in examples/s derived from the latency, no perplexity anywhere, plots and
reports, the CNN through the CLI, and one-line errors for what does not fit a classifier."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import modelxray
from conftest import mlflow_runs, run_cli
from modelxray.analyzers.performance import PerformanceAnalyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import ModelInfo, Subject
from modelxray.data.base import ClassificationData
from modelxray.metrics.measurements import Latency, Quality, Speed, Throughput, wilson_interval

SECONDS = [0.010, 0.012, 0.011, 0.013]
# threads=1: a loaded 2-core machine stalls torch's thread pool on every small batch (20 s -> 6 s)
FAST = ["analyzer.performance.iters=3", "analyzer.performance.layer_timing_iters=1", "progress=false", "threads=1"]


@pytest.fixture
def keep_threads():
    """``threads=1`` sets torch's threads for the whole process: give the other tests theirs back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# -- measurements ------------------------------------------------------------------------------
def test_wilson_interval_by_hand_and_against_scipy():
    from scipy.stats import binomtest

    z = 1.959963984540054
    # 50 of 100 by hand: centre 0.5, half-width z*sqrt(0.25/100 + z^2/40000) / (1 + z^2/100)
    half = z * math.sqrt(0.25 / 100 + z * z / 40_000) / (1 + z * z / 100)
    assert wilson_interval(50, 100) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-12)
    assert wilson_interval(50, 100) == pytest.approx((0.4038, 0.5962), abs=1e-4)  # the textbook value
    # 0 of 10: [0, z^2 / (n + z^2)], not the zero-width [0, 0] of the normal approximation
    assert wilson_interval(0, 10) == pytest.approx((0.0, z * z / (10 + z * z)), abs=1e-12)
    assert wilson_interval(10, 10) == pytest.approx((10 / (10 + z * z), 1.0), abs=1e-12)
    for k, n in [(432, 450), (7, 64), (1, 3), (999, 1000)]:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)
    with pytest.raises(ValueError, match="n > 0"):
        wilson_interval(0, 0)


def test_classifier_quality_names_its_metrics_and_never_a_perplexity():
    q = Quality.of_classifier(loss=0.25, n_scored=450, accuracy_at={5: 0.99, 1: 0.96})
    lo, hi = wilson_interval(0.96 * 450, 450)
    assert q.to_metrics() == pytest.approx(
        {
            "loss": 0.25,
            "examples_scored": 450.0,
            "accuracy": 0.96,
            "accuracy_ci_low": lo,
            "accuracy_ci_high": hi,
            "top5_accuracy": 0.99,
        }
    )
    assert list(q.to_metrics()) == [
        "loss",
        "examples_scored",
        "accuracy",
        "accuracy_ci_low",
        "accuracy_ci_high",
        "top5_accuracy",
    ]
    assert q.accuracy_ci95 == pytest.approx((lo, hi))
    for text in (str(q), q.markdown()):
        assert "perplexity" not in text and "ppl" not in text
    assert (
        str(q)
        == f"accuracy 0.960 (95% CI [{lo:.3f}, {hi:.3f}], loss 0.2500 nats, top-5 accuracy 0.990), 450 examples scored"
    )
    assert q.markdown().startswith("**accuracy 0.960**")
    back = Quality.from_dict(json.loads(json.dumps(q.to_dict())))
    assert back == q and back.is_classifier
    # pooling: a weighted accuracy over the pooled count, and the interval of the pooled numbers
    pooled = Quality.aggregate([q, Quality.of_classifier(0.5, 50, {1: 0.5, 5: 0.9})])
    assert pooled.n_scored == 500 and pooled.accuracy == pytest.approx((432 + 25) / 500)
    assert pooled.accuracy_ci95 == pytest.approx(wilson_interval(457, 500))
    assert "perplexity" not in pooled.to_metrics()
    with pytest.raises(ValueError, match="language model with that of a classifier"):
        Quality.aggregate([q, Quality(loss=1.0, n_scored=10)])
    # a language model keeps its perplexity and gets no interval (its tokens are not independent)
    lm = Quality(loss=2.0, n_scored=100, accuracy_at={1: 0.5})
    assert "perplexity" in lm.to_metrics() and lm.accuracy_ci95 is None and "accuracy_ci_low" not in lm.to_metrics()
    # with its windows' standard error: a Wilson interval at the effective count (0.25 / 0.1^2 = 25)
    windowed = Quality(loss=2.0, n_scored=100, accuracy_at={1: 0.5}, accuracy_se=0.1)
    assert windowed.accuracy_ci95 == pytest.approx(wilson_interval(12.5, 25))


def test_speed_of_examples_counts_examples_per_second():
    sp = Speed.of_examples(4, (3, 32, 32), Latency.from_values(SECONDS))
    mean_s = sum(SECONDS) / len(SECONDS)
    metrics = sp.to_metrics()
    assert metrics["bs4_examples_per_s"] == pytest.approx(4 / mean_s)
    assert metrics["bs4_batches_per_s"] == pytest.approx(1 / mean_s)
    assert not any("tokens" in k for k in metrics)
    assert list(sp.row())[:2] == ["batch_size", "input_shape"] and sp.row()["input_shape"] == [3, 32, 32]
    assert "seq_len" not in sp.row()
    back = Speed.from_dict(json.loads(json.dumps(sp.to_dict())))
    assert back == sp and back.unit == "examples" and back.throughput == sp.throughput
    assert str(sp).startswith("batch of 4 examples shaped 3x32x32: ") and "examples/s" in str(sp)
    assert sp.throughput.items_per_s == pytest.approx(4 / mean_s)
    with pytest.raises(AttributeError, match="examples/s has no tokens_per_s"):
        sp.throughput.tokens_per_s  # noqa: B018 - examples are never read as tokens
    thr = Throughput.from_latency(Latency.from_values([0.5]), 8, unit="examples")
    assert thr.to_metrics() == {"examples_per_s": 16.0, "batches_per_s": 2.0}
    assert Throughput.from_dict(thr.to_dict()) == thr
    with pytest.raises(ValueError, match="not 'images'"):
        Throughput(1.0, 1.0, "images")
    with pytest.raises(ValueError, match="different workloads"):
        Speed.aggregate([sp, Speed.of_examples(4, (64,), sp.latency)])
    with pytest.raises(ValueError, match="either seq_len"):
        Speed(4, 128, sp.latency, (64,))
    # a language model's speed keeps its names
    assert "bs4_tokens_per_s" in Speed(4, 128, sp.latency).to_metrics()


# -- the analyzer on a subject -----------------------------------------------------------------
def _subject(data, model=None):
    model = model or torch.nn.Sequential(torch.nn.Linear(64, 10))
    return Subject(model, None, data, ModelInfo("toy", "config", "float32"), task="classification")


def _data(n_test: int = 20, n_classes: int = 10) -> ClassificationData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(n_test, 64, generator=g), torch.randint(0, n_classes, (n_test,), generator=g)
    return ClassificationData("toy", x, y, x, y, n_classes, (0.0, 1.0), (64,))


def test_preflight_errors_are_one_line():
    ok = _subject(_data())
    PerformanceAnalyzer().preflight(ok)
    with pytest.raises(ConfigError, match="test split of a classification dataset .none was loaded.") as exc:
        PerformanceAnalyzer().preflight(_subject(None))
    assert "\n" not in str(exc.value) and "dataset=digits" in str(exc.value)
    empty = _data()
    empty = ClassificationData(
        "toy", empty.x_train, empty.y_train, empty.x_test[:0], empty.y_test[:0], 10, (0, 1), (64,)
    )
    with pytest.raises(ConfigError, match="the test split needs examples"):
        PerformanceAnalyzer().preflight(_subject(empty))
    for key, value in [("speed_seq_len", 64), ("stride", 8), ("prefix_token", "bos"), ("protocol", "sliding")]:
        with pytest.raises(ConfigError, match=f"^{key}: applies to language models") as exc:
            PerformanceAnalyzer(**{key: value}).preflight(ok)
        assert "\n" not in str(exc.value)


def test_top_k_stops_below_the_class_count_and_labels_must_fit_the_logits(tmp_path):
    subject = _subject(_data(n_classes=3), torch.nn.Sequential(torch.nn.Linear(64, 3)))
    result = PerformanceAnalyzer(iters=1, layer_timing=False).run(subject, RunContext(tmp_path, progress=False))
    assert result.measurements["quality"].accuracy_at.keys() == {1}  # top-5 of 3 classes would be 1.0
    assert "top5_accuracy" not in result.metrics and result.data["quality"]["top_k"] == [1]
    wrong = _subject(_data(n_classes=10), torch.nn.Sequential(torch.nn.Linear(64, 3)))
    with pytest.raises(ConfigError, match="the model gives 3 logits"):
        PerformanceAnalyzer(iters=1, layer_timing=False).run(wrong, RunContext(tmp_path, progress=False))


# -- whole runs --------------------------------------------------------------------------------
def test_digits_mlp_run_matches_a_hand_computation_and_writes_its_reports(tmp_path, keep_threads):
    from modelxray.api import compose
    from modelxray.config.components import build_components

    overrides = ["model=digits_mlp", "model.epochs=5", "analyzer=performance", "tracker=none", *FAST]
    out = modelxray.analyze(overrides, output_dir=tmp_path / "run")
    assert not out.failed
    m = out.metrics

    # the same model (trained deterministically) and test split, scored by hand
    components = build_components(compose(overrides))
    model, data = components.model.load().model, components.dataset.load(None)
    with torch.inference_mode():
        logits = model(data.x_test)
    n = int(data.y_test.numel())
    correct = int((logits.argmax(-1) == data.y_test).sum())
    top5 = int((logits.topk(5, dim=-1).indices == data.y_test[:, None]).any(-1).sum())
    assert m["performance/examples_scored"] == n == 450
    assert m["performance/accuracy"] == correct / n
    assert m["performance/top5_accuracy"] == top5 / n
    assert m["performance/loss"] == pytest.approx(float(F.cross_entropy(logits, data.y_test)), rel=1e-5)
    lo, hi = wilson_interval(correct, n)
    assert (m["performance/accuracy_ci_low"], m["performance/accuracy_ci_high"]) == pytest.approx((lo, hi), abs=1e-9)
    assert lo < correct / n < hi

    for bs in (1, 4):  # throughput is the batch over the mean latency
        mean_s = m[f"performance/bs{bs}_latency_mean_ms"] / 1e3
        assert m[f"performance/bs{bs}_examples_per_s"] == pytest.approx(bs / mean_s, rel=1e-9)
        assert m[f"performance/bs{bs}_batches_per_s"] == pytest.approx(1 / mean_s, rel=1e-9)
        assert m[f"performance/bs{bs}_latency_p50_ms"] > 0
    assert {"performance/param_bytes", "performance/peak_rss_bytes", "performance/layer_time_total_ms"} <= set(m)
    assert "performance/time_share/Linear" in m and "performance/eval_examples_per_s" in m
    assert not any("perplexity" in k or "tokens" in k or "bits_per_byte" in k for k in m)

    run = tmp_path / "run"
    for f in ["performance_speed.png", "performance_memory.png", "performance_layers.png"]:
        assert (run / "plots" / f).is_file(), f
    assert (run / "plots" / "analysis_summary_dashboard.png").is_file()
    saved = json.loads((run / "analysis_results.json").read_text())["results"]["performance"]
    assert list(saved["data"]) == ["quality", "speed", "memory", "consistency", "layer_time"]  # as a language model's
    assert saved["data"]["quality"]["examples_scored"] == n and saved["data"]["quality"]["correct"] == correct
    speed = Speed.from_dict(saved["data"]["speed"][1])
    assert speed.input_shape == tuple(data.x_test.shape[1:]) and speed.batch_size == 4
    assert saved["data"]["layer_time"]["input_shape"] == [64]
    summary, insights = (run / "summary_report.md").read_text(), (run / "insights.md").read_text()
    for text in (summary, insights):
        assert "perplexity" not in text and "tokens/s" not in text
    assert f"accuracy {correct / n:.3f}" in summary and "examples/s" in summary
    assert f"{correct:,} of {n:,} correct" in insights and "95% Wilson interval" in insights
    assert "Server: best throughput" in insights and "examples/s target" in insights
    assert "for one example" in insights


def test_digits_cnn_through_the_cli_is_tracked(tracking_uri, tmp_path):
    args = [
        "model=digits_mlp",
        "model.arch=cnn",
        "model.epochs=3",
        "analyzer=performance",
        "analyzer.performance.speed_batch_sizes=[1,8]",
        *FAST,
        f"tracker.uri={tracking_uri}",
        "tracker.experiment=perf_cnn",
    ]
    proc = run_cli(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(tracking_uri, "perf_cnn")
    (run,) = runs
    m = run.data.metrics
    assert run.info.status == "FINISHED" and run.data.params["model/name"] == "digits-cnn"
    for key in ["accuracy", "top5_accuracy", "accuracy_ci_low", "loss", "bs8_examples_per_s", "bs1_latency_p95_ms"]:
        assert math.isfinite(m[f"performance/{key}"]), key
    assert 0.0 <= m["performance/accuracy_ci_low"] <= m["performance/accuracy"] <= m["performance/accuracy_ci_high"]
    assert m["performance/bs8_examples_per_s"] == pytest.approx(8e3 / m["performance/bs8_latency_mean_ms"], rel=1e-6)
    assert "performance/time_share/Conv2d" in m  # the per-module hooks timed the convolutions
    assert not any("perplexity" in k or "tokens" in k for k in m)
    assert len(list((tmp_path / "outputs").rglob("performance_layers.png"))) == 1


def test_config_errors_for_a_classifier_stop_the_run_in_one_line(tmp_path):
    base = ["model=digits_mlp", "model.epochs=1", "analyzer=performance", "tracker=none", "progress=false"]
    with pytest.raises(ConfigError) as exc:
        modelxray.analyze([*base, "analyzer.performance.speed_seq_len=64"], output_dir=tmp_path / "a")
    assert str(exc.value).startswith("analyzer.performance.speed_seq_len: applies to language models")
    with pytest.raises(ConfigError, match="analyzer.performance.speed_batch_sizes"):
        modelxray.analyze([*base, "analyzer.performance.speed_batch_sizes=[0]"], output_dir=tmp_path / "b")
