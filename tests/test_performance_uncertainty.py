"""The performance analyzer's quality with its uncertainty: the paired change of a quantized
classifier against its unquantized outputs checked by hand, the insight that calls a change within
two standard errors indistinguishable (and one beyond them real), and the quality plot's error bars
drawn at the 95% intervals the measurements carry."""

from __future__ import annotations

import math
import statistics

import matplotlib
import pytest
import torch

from conftest import approx_nested
from modelxray.analyzers.performance import PerformanceAnalyzer
from modelxray.analyzers.performance import insights as perf_insights
from modelxray.analyzers.performance import plots as perf_plots
from modelxray.analyzers.performance.classifier import against_reference, paired_change
from modelxray.core.result import Result, RunContext
from modelxray.core.subject import ModelInfo, Subject
from modelxray.data.base import ClassificationData
from modelxray.metrics.measurements import Z_95, Quality, wilson_interval

matplotlib.use("Agg")


def _log_softmax(row: list[float]) -> list[float]:
    top = max(row)
    lse = top + math.log(sum(math.exp(v - top) for v in row))
    return [v - lse for v in row]


def test_paired_change_matches_a_hand_computation():
    reference = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 0.5, 0.0], [0.2, 0.1, 0.0]])
    logits = torch.tensor([[1.5, 0.2, 0.0], [0.3, 0.2, 0.0], [0.0, 0.1, 2.5], [0.4, 0.5, 0.0], [0.2, 0.1, 0.3]])
    labels = torch.tensor([0, 1, 2, 0, 2])
    got = paired_change(reference, logits, labels)
    ref_loss = [-_log_softmax(r)[y] for r, y in zip(reference.tolist(), labels.tolist())]
    loss = [-_log_softmax(r)[y] for r, y in zip(logits.tolist(), labels.tolist())]
    ref_hit = [float(max(range(3), key=r.__getitem__) == y) for r, y in zip(reference.tolist(), labels.tolist())]
    hit = [float(max(range(3), key=r.__getitem__) == y) for r, y in zip(logits.tolist(), labels.tolist())]
    assert ref_hit == [1, 1, 1, 1, 0] and hit == [1, 0, 1, 0, 1]
    d_loss = [a - b for a, b in zip(loss, ref_loss)]
    d_hit = [a - b for a, b in zip(hit, ref_hit)]
    assert got["unquantized_accuracy"] == pytest.approx(0.8)
    assert got["unquantized_loss"] == pytest.approx(statistics.mean(ref_loss), abs=1e-12)
    assert got["delta_accuracy"] == pytest.approx(-0.2)
    assert got["delta_accuracy_se"] == pytest.approx(statistics.stdev(d_hit) / math.sqrt(5), abs=1e-12)
    assert got["delta_loss"] == pytest.approx(statistics.mean(d_loss), abs=1e-12)
    assert got["delta_loss_se"] == pytest.approx(statistics.stdev(d_loss) / math.sqrt(5), abs=1e-12)
    # against_reference adds them to the agreement figures only when it has the labels
    assert "delta_accuracy" in against_reference(reference, logits, labels)
    assert "delta_accuracy" not in against_reference(reference, logits)


def _vs(delta_accuracy: float, se: float, delta_loss: float = 0.001, loss_se: float = 0.002) -> dict:
    return {
        "unquantized_accuracy": 0.9,
        "delta_accuracy": delta_accuracy,
        "delta_accuracy_se": se,
        "delta_loss": delta_loss,
        "delta_loss_se": loss_se,
        "top1_agree": 0.98,
        "top1_agree_ci_low": 0.96,
        "top1_agree_ci_high": 0.99,
        "kl": 0.004,
        "kl_se": 0.001,
    }


def test_a_change_within_two_standard_errors_is_called_indistinguishable():
    within = perf_insights.against_unquantized(_vs(-0.004, 0.003), 450)
    assert within.startswith("Quantized accuracy is indistinguishable from the unquantized model's on these 450")
    assert "0.896 vs 0.900" in within and "-0.0040 ± 0.0030 (paired by example)" not in within
    assert "-0.0040 ± 0.0030, within 2 standard errors of zero (paired by example)" in within
    assert "loss change +0.0010 ± 0.0020 nats, within 2 standard errors of zero" in within
    assert "same top-1 prediction on 98.0% (95% CI 96.0%-99.0%)" in within and "KL 0.004 ± 0.001 nats" in within
    beyond = perf_insights.against_unquantized(_vs(-0.05, 0.01, 0.2, 0.03), 450)
    assert beyond.startswith("Quantization loses accuracy beyond its uncertainty: 0.850 vs 0.900 unquantized")
    assert (
        "-0.0500 ± 0.0100, beyond 2 standard errors" in beyond and "loss change +0.2000 ± 0.0300 nats, beyond" in beyond
    )
    gain = perf_insights.against_unquantized(_vs(0.03, 0.01), 450)
    assert gain.startswith("Quantization gains accuracy beyond its uncertainty")
    same = perf_insights.against_unquantized(_vs(0.0, 0.0), 450)
    assert same.startswith("Quantized accuracy equals the unquantized model's: every one of the 450 test examples")
    # exactly two standard errors is still within (the rule of quant_impact and bitwidth: <=)
    assert "indistinguishable" in perf_insights.against_unquantized(_vs(-0.02, 0.01), 450)


def _lm_result() -> Result:
    result = PerformanceAnalyzer().new_result()
    q = Quality(loss=2.5, n_scored=4000, accuracy_at={1: 0.4, 5: 0.7}, loss_se=0.02, accuracy_se=0.01, windows=16)
    result.record("quality", q)
    result.data["quality"] = {**q.to_dict(), "protocol_description": "disjoint windows of 256"}
    return result


def test_a_language_model_reports_its_perplexity_interval_and_points_to_the_paired_change():
    result = _lm_result()
    text = perf_insights.performance_insights(result, PerformanceAnalyzer())[0]
    low, high = math.exp(2.5 - Z_95 * 0.02), math.exp(2.5 + Z_95 * 0.02)
    assert text.startswith(f"Perplexity {math.exp(2.5):.3f} (95% CI {low:.4g}-{high:.4g}; loss 2.5000 ± 0.0200 nats")
    # the accuracy's Wilson interval at the effective count its windowed standard error implies:
    # p(1-p)/se^2 = 0.24/0.0001 = 2,400 tokens' worth
    lo, hi = wilson_interval(0.4 * 2400, 2400)
    assert "4,000 scored tokens in 16 windows" in text and f"accuracy 0.400 (95% interval {lo:.3f}-{hi:.3f})" in text
    assert perf_insights.unpaired_lm_note(result, {}) == []
    quant = Result("quant", data={"method": "rtn"})
    (note,) = perf_insights.unpaired_lm_note(result, {"quant": quant})
    assert "quantized model's (rtn) alone" in note and "analyzer=quant_impact" in note
    assert (
        perf_plots.quality_line(result, short=True)
        == f"ppl {math.exp(2.5):.2f} ± {math.exp(2.5) * 0.02:.2g}, acc 0.400"
    )


def _intervals(rows: list[dict]) -> dict[str, tuple[float, float, float]]:
    return {r["figure"]: (r["value"], r["low"], r["high"]) for r in rows}


def test_quality_intervals_are_the_measurements_own():
    lm = _intervals(perf_plots.quality_intervals(_lm_result()))
    ppl = math.exp(2.5)
    assert lm["perplexity"] == pytest.approx((ppl, math.exp(2.5 - Z_95 * 0.02), math.exp(2.5 + Z_95 * 0.02)))
    # Wilson at the effective count of the windowed error (p(1-p)/se^2 = 2,400), close to 0.4 -+ 1.96 se here
    assert lm["top-1 accuracy"] == pytest.approx((0.4, *wilson_interval(960, 2400)))
    assert lm["top-1 accuracy"][1:] == pytest.approx((0.4 - Z_95 * 0.01, 0.4 + Z_95 * 0.01), abs=5e-4)
    assert "top-5 accuracy" not in lm  # no error for it: not drawn, so no bar reads as certainty

    clf = _classifier_result()
    got = _intervals(perf_plots.quality_intervals(clf))
    assert got["top-1 accuracy"] == pytest.approx((0.8, *wilson_interval(360, 450)))
    assert got["top-5 accuracy"] == pytest.approx((0.96, *wilson_interval(432, 450)))
    assert got["unquantized top-1"] == pytest.approx((0.82, *wilson_interval(369, 450)))
    assert got["same top-1 as unquantized"] == pytest.approx((0.95, 0.93, 0.97))
    assert got["accuracy change"] == pytest.approx((-0.02, -0.02 - Z_95 * 0.008, -0.02 + Z_95 * 0.008))
    assert got["loss change"] == pytest.approx((0.05, 0.05 - Z_95 * 0.01, 0.05 + Z_95 * 0.01))
    assert got["KL(unquantized || quantized)"] == pytest.approx((0.001, 0.0, 0.001 + Z_95 * 0.002))  # never below 0

    generic = PerformanceAnalyzer().new_result()
    generic.tables["output_agreement"] = [
        {"output": "logits", "cosine": 0.999, "cosine_se": 0.001, "rel_error": 0.01, "examples": 4.0},
        {"output": "hidden", "cosine": 0.9, "cosine_se": float("nan"), "rel_error": 0.1, "examples": 4.0},
    ]
    assert approx_nested(  # capped at 1, and no bar without an error
        _intervals(perf_plots.quality_intervals(generic)), {"logits": (0.999, 0.999 - Z_95 * 0.001, 1.0)}
    )
    assert perf_plots.quality_intervals(PerformanceAnalyzer().new_result()) == []


def _classifier_result() -> Result:
    result = PerformanceAnalyzer().new_result()
    q = Quality.of_classifier(loss=0.6, n_scored=450, accuracy_at={1: 0.8, 5: 0.96})
    result.record("quality", q)
    result.data["quality"] = {
        **q.to_dict(),
        "protocol_description": "the 450 examples of the toy test split",
        "vs_unquantized": {
            "unquantized_accuracy": 0.82,
            "top1_agree": 0.95,
            "top1_agree_ci_low": 0.93,
            "top1_agree_ci_high": 0.97,
            "delta_accuracy": -0.02,
            "delta_accuracy_se": 0.008,
            "delta_loss": 0.05,
            "delta_loss_se": 0.01,
            "kl": 0.001,
            "kl_se": 0.002,
        },
    }
    return result


def test_the_quality_plot_draws_each_interval_as_an_error_bar():
    result = _classifier_result()
    figs = perf_plots.figures(result)
    fig = figs["performance_quality.png"]
    rows = perf_plots.quality_intervals(result)
    drawn = {}
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        (bars,) = ax.containers  # one errorbar per panel
        for label, segment in zip(labels, bars.lines[2][0].get_segments()):
            drawn[label] = (segment[0][0], segment[1][0])
    assert [ax.get_title() for ax in fig.axes] == ["accuracy", "change vs unquantized", "nats vs unquantized"]
    assert approx_nested(drawn, {r["figure"]: (r["low"], r["high"]) for r in rows})
    assert "error bars: 95% intervals" in fig._suptitle.get_text()


def test_a_quantized_classifier_run_reports_its_paired_change(tmp_path):
    """The analyzer on a subject that keeps its unquantized logits: the changes are the two models'
    figures apart, and the insight carries the verdict."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(200, 8, generator=g), torch.randint(0, 3, (200,), generator=g)
    data = ClassificationData("toy", x, y, x, y, 3, (0.0, 1.0), (8,))
    model = torch.nn.Linear(8, 3)
    torch.nn.init.normal_(model.weight, generator=g)
    with torch.inference_mode():
        reference = model(x)
        model.weight.add_(0.3 * torch.randn(model.weight.shape, generator=g))  # "quantization" error
    subject = Subject(model, None, data, ModelInfo("toy", "config", "float32"), task="classification")
    subject.reference = {"logits": reference}
    cfg = PerformanceAnalyzer(iters=1, layer_timing=False, top_k=[1])
    result = cfg.run(subject, RunContext(tmp_path, progress=False))
    m = result.metrics
    assert m["delta_accuracy"] == pytest.approx(m["accuracy"] - m["unquantized_accuracy"], abs=1e-12)
    assert m["delta_loss"] == pytest.approx(m["loss"] - m["unquantized_loss"], abs=1e-5)
    assert m["unquantized_accuracy"] == float((reference.argmax(-1) == y).double().mean())
    text = " ".join(cfg.insights(result, {}))
    verdict = (
        "indistinguishable" if abs(m["delta_accuracy"]) <= 2 * m["delta_accuracy_se"] else "beyond its uncertainty"
    )
    assert verdict in text and f"{m['delta_accuracy']:+.4f} ± {m['delta_accuracy_se']:.4f}" in text


def test_a_language_models_accuracy_near_zero_keeps_its_interval_inside_0_1():
    """Top-1 accuracy 0.001 with a windowed standard error larger than it: share -+ 1.96 se would go
    below 0; the Wilson interval at the effective count does not (and is what the plot draws)."""
    from modelxray.analyzers.performance.plots import quality_intervals
    from modelxray.metrics.measurements.quality import clustered_wilson

    q = Quality(loss=6.0, n_scored=4000, accuracy_at={1: 0.001}, loss_se=0.02, accuracy_se=0.002, windows=16)
    low, high = q.accuracy_ci95
    assert 0.0 <= low < 0.001 < high < 0.02
    n_eff = 0.001 * 0.999 / 0.002**2
    assert (low, high) == wilson_interval(0.001 * n_eff, n_eff) == clustered_wilson(0.001, 0.002, 4000)
    assert clustered_wilson(0.0, 0.0, 4000) == wilson_interval(0, 4000)  # no error measured: every token counts
    result = PerformanceAnalyzer().new_result()
    result.record("quality", q)
    (row,) = [r for r in quality_intervals(result) if r["figure"] == "top-1 accuracy"]
    assert row["low"] == low and row["low"] >= 0


def test_top1_agreement_near_1_is_drawn_inside_0_1():
    from modelxray.metrics.measurements.quality import clustered_wilson

    result = _lm_result()
    result.data["quality"]["vs_reference"] = {"top1_agree": 0.999, "top1_agree_se": 0.002, "reference": "x"}
    row = _intervals(perf_plots.quality_intervals(result))["same top-1 token"]
    assert row == pytest.approx((0.999, *clustered_wilson(0.999, 0.002, 4000))) and row[2] <= 1.0
