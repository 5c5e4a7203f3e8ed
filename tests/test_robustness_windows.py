"""Robustness: every series drawn on one axes was measured on the same windows (or samples), the
rows and the insights say on how many, and standard errors are drawn as error bars."""

from __future__ import annotations

import math

import pytest

from modelxray.analyzers.robustness import RobustnessAnalyzer, plots
from modelxray.core.result import Result, RunContext
from modelxray.plotting import style


@pytest.fixture(autouse=True)
def _headless():
    with style():
        yield


def _lm_result() -> Result:
    """FGSM on all 8 windows; PGD-5 on the first 2, carrying FGSM and clean on those 2 windows. The
    numbers are chosen so that mixing windows shows: PGD (40) lies below full-window FGSM at the same
    eps (60) and its windows' clean perplexity (12) below the full clean value (18)."""
    result = Result("robustness")
    result.data.update(
        {"task": "causal_lm", "clean": {"loss": math.log(18.0), "perplexity": 18.0}, "config": {"pgd_steps": 5}}
    )
    fgsm = [(0.01, 25.0, 0.9), (0.03, 60.0, 0.7)]
    pgd = [(0.01, 20.0, 16.0, 0.85, 0.92), (0.03, 40.0, 30.0, 0.6, 0.75)]
    rows = [
        {
            "family": "fgsm",
            "level": eps,
            "windows": 8,
            "loss": math.log(ppl),
            "perplexity": ppl,
            "loss_se": 0.05,
            "top1_agree": agree,
            "top1_agree_se": 0.02,
        }
        for eps, ppl, agree in fgsm
    ]
    rows += [
        {
            "family": "pgd",
            "level": eps,
            "windows": 2,
            "loss": math.log(ppl),
            "perplexity": ppl,
            "loss_se": 0.1,
            "top1_agree": agree,
            "fgsm_loss": math.log(f),
            "fgsm_perplexity": f,
            "fgsm_top1_agree": f_agree,
            "clean_loss": math.log(12.0),
            "clean_perplexity": 12.0,
        }
        for eps, ppl, f, agree, f_agree in pgd
    ]
    result.tables["robustness"] = rows
    return result


def _series(ax) -> dict[str, list[float]]:
    """Each labelled series of ``ax`` (a line, or the data line of an error-bar plot): its y values."""
    out = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    out.update({c.get_label(): c.lines[0] for c in ax.containers if hasattr(c, "has_yerr")})
    return {label: [float(y) for y in line.get_ydata()] for label, line in out.items()}


def test_every_series_on_an_axes_was_measured_on_the_same_windows():
    result = _lm_result()
    fig = plots.figures(result)["adversarial_robustness.png"]
    axes = [ax for ax in fig.axes if _series(ax)]
    with_pgd = [ax for ax in axes if any(k.upper().startswith("PGD") for k in _series(ax))]
    assert with_pgd, "PGD is drawn"
    for ax in with_pgd:
        lines = _series(ax)
        fgsm = lines["FGSM"]
        assert fgsm in ([16.0, 30.0], [0.92, 0.75]), "FGSM beside PGD is FGSM on the PGD windows"
        if fgsm == [16.0, 30.0]:
            assert lines["PGD-5"] == [20.0, 40.0]
            (clean,) = [v for k, v in lines.items() if k.startswith("clean")]
            assert set(clean) == {12.0}, "the clean line beside PGD is the clean value of its windows"
        assert "2 PGD windows" in ax.get_title()
    full = [ax for ax in axes if ax not in with_pgd]
    assert full and all("all 8 windows" in ax.get_title() for ax in full)
    quality = [ax for ax in full if [25.0, 60.0] in _series(ax).values()]
    (ax,) = quality
    assert {18.0} == set(next(v for k, v in _series(ax).items() if k.startswith("clean")))


def test_the_attack_frame_holds_one_count_per_group_and_drops_a_duplicate_fgsm():
    groups = plots.attack_groups(_lm_result())
    assert [(g["n"], sorted(set(g["frame"]["series"]))) for g in groups] == [
        (8, ["FGSM"]),
        (2, ["FGSM", "PGD-5"]),
    ]
    assert all(set(g["frame"]["n"]) == {g["n"]} for g in groups)
    assert [g["clean"] for g in groups] == [18.0, 12.0]
    # PGD on every window: one group, FGSM drawn once (the same windows give the same values)
    result = _lm_result()
    for r in result.tables["robustness"]:
        r["windows"] = 8
    (group,) = plots.attack_groups(result)
    fgsm = group["frame"][group["frame"]["series"] == "FGSM"]
    assert list(fgsm["perplexity"]) == [25.0, 60.0] and group["label"] == "on all 8 windows"


def test_standard_errors_become_error_bars():
    """FGSM carries loss_se 0.05: its perplexity bar spans exp(loss -+ 0.05), asymmetric."""
    frame = plots.attack_groups(_lm_result())[0]["frame"]
    row = frame[frame["level"] == 0.03].iloc[0]
    assert row["perplexity_lo"] == pytest.approx(60.0 - 60.0 * math.exp(-0.05))
    assert row["perplexity_hi"] == pytest.approx(60.0 * math.exp(0.05) - 60.0)
    assert row["top1_agree_lo"] == row["top1_agree_hi"] == 0.02
    fig = plots.figures(_lm_result())["adversarial_robustness.png"]
    bars = [c for ax in fig.axes for c in ax.collections if c.__class__.__name__ == "LineCollection"]
    assert bars, "error bars are drawn"


def test_the_dashboard_panel_draws_one_set_of_windows():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    plots.panel(ax, _lm_result())
    lines = _series(ax)
    assert lines["FGSM"] == [16.0, 30.0] and lines["PGD-5"] == [20.0, 40.0]
    assert "2 PGD windows" in ax.get_title()
    plt.close(fig)


def test_rows_and_insights_name_their_windows(trained_tiny, tmp_path):
    """Through the analyzer: FGSM rows on the 4 evaluated windows, PGD rows on its 1 window with the
    FGSM and clean values of that window; the insights say which."""
    from modelxray.core.subject import ModelInfo, Subject
    from modelxray.data.base import TokenData

    loaded, data = trained_tiny
    ids = data.ids[:512]
    subject = Subject(loaded.model, None, TokenData("t", ids, 512, 128, 512), ModelInfo("t", "config", "fp32"))
    a = RobustnessAnalyzer(
        eval_windows=4,
        batch_size=2,
        kl_windows=2,
        fgsm_eps=[0.03],
        pgd_eps=[0.03],
        pgd_steps=1,
        pgd_windows=1,
        weight_noise_levels=[],
        quant_noise_bits=[],
        dropout_rates=[],
        substitution_rates=[],
    )
    r = a.run(subject, RunContext(tmp_path, seed=0, progress=False))
    (fgsm,) = [row for row in r.tables["robustness"] if row["family"] == "fgsm"]
    (pgd,) = [row for row in r.tables["robustness"] if row["family"] == "pgd"]
    assert fgsm["windows"] == 4 and pgd["windows"] == 1
    assert pgd["clean_perplexity"] != r.data["clean"]["perplexity"]  # the first window alone
    assert pgd["gap"] == pytest.approx(pgd["loss"] - pgd["clean_loss"])
    assert fgsm["loss_se"] > 0 and "robustness" not in r.metrics  # sanity: rows carry their errors
    said = a.insights(r, {})  # insights.md asks the config's hook; the work writes no sentence
    assert r.insights == [] and said[-1].startswith("Memory: ")
    text = " ".join(said)
    assert "fgsm:" in text and "(4 windows)" in text
    assert "pgd:" in text and "(1 window)" in text
    groups = plots.attack_groups(r)
    assert [g["n"] for g in groups] == [4, 1]
