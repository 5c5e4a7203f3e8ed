"""The robustness summary: where quality halves (interpolated, with its standard error), verdicts
that bound quality, agreement and KL and name the bound that decided, and a report that leads with
one summary table and leaves the per-level rows to an appendix."""

import math

import pytest

from modelxray.analyzers.robustness import RobustnessAnalyzer
from modelxray.analyzers.robustness.insights import level_insights
from modelxray.analyzers.robustness.summary import half_quality, summary_rows
from modelxray.core.errors import ConfigError


def test_half_quality_interpolates_between_the_bracketing_levels_with_the_delta_method_error():
    # clean 0.9 (se 0.01) at level 0; 0.6 (se 0.02) at 0.1; 0.3 (se 0.03) at 0.2: half (0.45) is
    # crossed between 0.1 and 0.2, at 0.1 + (0.6 - 0.45) / (0.6 - 0.3) * 0.1 = 0.15. By hand, with
    # t = c / 2: dx/dc = -0.1 / 0.3 / 2 = -1/6, dx/dq0 = 0.1 (t - q1) / 0.09 = 1/6, dx/dq1 = 0.1
    # (q0 - t) / 0.09 = 1/6, so se = sqrt(0.01² + 0.02² + 0.03²) / 6
    half = half_quality([(0.1, 0.6, 0.02), (0.2, 0.3, 0.03)], 0.9, 0.01, "accuracy", 0.0)
    assert half["level"] == pytest.approx(0.15)
    assert half["se"] == pytest.approx(math.sqrt(0.01**2 + 0.02**2 + 0.03**2) / 6, rel=1e-4)
    # crossed between the clean value (at level 0) and the first level: x = 0.1 (c - c/2) / (c - q1),
    # dx/dc = -0.1 q1 / 2 / (c - q1)² and dx/dq1 = 0.1 c / 2 / (c - q1)²
    half = half_quality([(0.1, 0.2, 0.02)], 1.0, 0.01, "accuracy", 0.0)
    assert half["level"] == pytest.approx(0.0625)
    se = math.hypot(0.01 * 0.2 * 0.05 / 0.64, 0.02 * 0.05 / 0.64)
    assert half["se"] == pytest.approx(se, rel=1e-4)
    # a perplexity halves its quality when it doubles: 10 -> 20 between 15 (level 1) and 30 (level 2)
    half = half_quality([(1.0, 15.0, None), (2.0, 30.0, None)], 10.0, None, "perplexity", 0.0)
    assert half == {"level": pytest.approx(1 + 5 / 15), "se": None}
    # never halved: the strongest level; bits (no level that changes nothing) halved at the mildest
    assert half_quality([(0.1, 0.8, 0.01), (0.2, 0.5, 0.01)], 0.9, None, "accuracy", 0.0) == {"not_reached": 0.2}
    assert half_quality([(8, 0.3, 0.01), (4, 0.1, 0.01)], 0.9, None, "accuracy", None) == {"reached_by": 8}
    # quantization noise from 8 to 4 bits: 0.9 at 8, 0.3 at 4 -> 0.45 at 8 - 0.45 / 0.6 * 4 = 5 bits
    assert half_quality([(8, 0.9, None), (4, 0.3, None)], 0.9, None, "accuracy", None)["level"] == pytest.approx(5.0)
    # a word error rate: half the clean share of words right, (1 + 0.1) / 2 = 0.55
    assert half_quality([(20.0, 0.3, None), (10.0, 0.8, None)], 0.1, None, "wer", None)["level"] == pytest.approx(15.0)


def _result(rows, clean, quality="accuracy", task="classification"):
    a = RobustnessAnalyzer()
    r = a.new_result()
    r.data.update({"task": task, "quality": quality, "clean": clean})
    r.tables["robustness"] = rows
    return a, r


def test_a_verdict_bounds_agreement_and_kl_and_names_the_bound_that_decided():
    # accuracy barely moves while FGSM flips almost every prediction: out of bounds, by agreement
    rows = [{"family": "fgsm", "level": 0.1, "samples": 500, "accuracy": 0.95, "top1_agree": 0.004}]
    cfg = RobustnessAnalyzer()
    (said,) = level_insights(rows, {"accuracy": 0.96}, "accuracy", "samples", cfg)
    assert said.startswith("fgsm: out of bounds from level 0.1 (500 samples), decided by agreement")
    assert "0.004 below the floor 0.9" in said and "(accuracy 0.95 stays within 10% of clean 0.96)" in said
    assert "stays within 10% of clean (0.96) up to" not in said
    # agreement and quality hold, KL does not
    rows = [{"family": "blur", "level": 1.0, "samples": 500, "accuracy": 0.95, "top1_agree": 0.97, "kl": 0.4}]
    (said,) = level_insights(rows, {"accuracy": 0.96}, "accuracy", "samples", cfg)
    assert "decided by KL 0.4 above the ceiling 0.25" in said and "agreement" not in said
    # everything within: the sentence states every bound it checked
    loose = RobustnessAnalyzer(agreement_floor=0.5, kl_ceiling=1.0)
    (said,) = level_insights(rows, {"accuracy": 0.96}, "accuracy", "samples", loose)
    assert said.startswith("blur: within bounds up to level 1 (blur std, pixels) (500 samples): accuracy stays")
    assert "agreement with the clean outputs at least 0.97 (floor 0.5)" in said and "KL at most 0.4 (ceiling 1)" in said
    # speech: agreement is 1 - the WER against the clean transcripts
    rows = [{"family": "audio_noise", "level": 10.0, "utterances": 8, "wer": 0.12, "transcript_change": 0.3}]
    (said,) = level_insights(rows, {"wer": 0.1}, "wer", "utterances", cfg)
    assert "decided by agreement with the clean outputs 0.7 below the floor 0.9" in said
    # the keys: defined once, checked
    with pytest.raises(ConfigError, match="agreement_floor"):
        RobustnessAnalyzer(agreement_floor=1.5).validate()
    with pytest.raises(ConfigError, match="kl_ceiling"):
        RobustnessAnalyzer(kl_ceiling=-1.0).validate()


def test_the_summary_table_has_one_row_per_family_with_the_strongest_level():
    rows = [
        {"family": "fgsm", "level": lv, "samples": 100, "accuracy": acc, "accuracy_se": 0.02, "top1_agree": ag}
        for lv, acc, ag in ((0.01, 0.9, 0.95), (0.1, 0.3, 0.31))
    ] + [
        {"family": "speed", "level": lv, "samples": 100, "accuracy": acc, "top1_agree": 0.99}
        for lv, acc in ((0.9, 0.88), (1.1, 0.89), (1.25, 0.87))
    ]
    a, r = _result(rows, {"accuracy": 0.9, "samples": 100})
    table = summary_rows(r, a)
    assert [t["family"] for t in table] == ["clean (no perturbation)", "fgsm", "speed (slower)", "speed (faster)"]
    fgsm = table[1]
    # 0.45 between 0.9 at 0.01 and 0.3 at 0.1: 0.01 + 0.45 / 0.6 * 0.09
    assert fgsm["quality halves at"].startswith(f"{0.01 + 0.45 / 0.6 * 0.09:.3g} ± ")
    assert (fgsm["strongest level"], fgsm["accuracy"], fgsm["agreement"]) == ("0.1", 0.3, 0.31)
    assert fgsm["first level out of bounds"] == "0.1 (quality, agreement)"
    assert table[3]["quality halves at"] == "not reached up to 1.25"
    assert table[3]["first level out of bounds"] == "none up to 1.25"
    assert "KL" not in fgsm  # no row measured one


def test_the_report_leads_the_robustness_section_with_the_summary_table_and_ends_with_the_levels():
    from modelxray.report.markdown import summary_report

    rows = [
        {"family": f, "level": lv, "samples": 100, "accuracy": acc, "top1_agree": 0.9, "kl": 0.1, "loss": 1.0}
        for f in ("fgsm", "weight_noise")
        for lv, acc in ((0.01, 0.9), (0.1, 0.5))
    ]
    _, r = _result(rows, {"accuracy": 0.92, "samples": 100})
    r.metrics.update({"clean_accuracy": 0.92, "fgsm_0.01_accuracy": 0.9, "fgsm_0.1_accuracy": 0.5})
    run = {
        "model": {"name": "/models/clip-vit-base", "source_format": "config", "source_dtype": "float32"},
        **{k: "x" for k in ("dataset", "quant", "tracking", "host")},
        "choices": {},
        "overrides": [],
        "versions": {},
    }
    text = summary_report(run, {"robustness": r}, ["plots/p.png"])
    section = text.split("\n## robustness\n")[1]
    body = [line for line in section.splitlines() if line and not line.startswith("Finished in")]
    assert body[0] == "### robustness summary" and body[1].startswith("| family | quality halves at |")
    assert "| metric | value |" not in section and "fgsm_0.01_accuracy" not in text  # no metric rows
    assert section.count("\n### ") == 2 and text.count("| fgsm |") == 3  # summary row + 2 levels
    appendix = text.split("## Appendix")[1]
    assert "## Plots" in section.split("## Appendix")[0] and "### robustness: per level" in appendix
    assert "| family | level | samples |" in appendix and "| weight_noise | 0.1 |" in appendix
