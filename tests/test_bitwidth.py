"""Bit-width analyzer: configurations, sensitivity, Pareto front, recommendation, and their cost."""

import copy
import dataclasses
import math

import pytest
import torch

from conftest import approx_nested
from modelxray.analyzers.bitwidth import BitwidthAnalyzer
from modelxray.core.result import RunContext
from modelxray.core.subject import Subject
from modelxray.measure.reference import Reference
from modelxray.metrics.lm import kl_and_agreement
from modelxray.metrics.pareto import pareto_front
from modelxray.metrics.windows import make_windows


def test_pareto_front():
    pts = [(8, 10.0), (4, 12.0), (4, 11.0), (2, 30.0), (6, 10.0), (3, 40.0)]
    assert pareto_front(pts) == [3, 2, 4]  # (2,30), (4,11), (6,10); sorted by size


def test_kl_and_agreement_against_hand_computation():
    p = torch.tensor([[[0.7, 0.2, 0.1]]])
    q = torch.tensor([[[0.2, 0.5, 0.3]]])
    kl, agree, n = kl_and_agreement(p.log(), q.log(), torch.ones(1, 1, dtype=torch.bool))
    assert kl == pytest.approx(
        sum(pi * math.log(pi / qi) for pi, qi in zip([0.7, 0.2, 0.1], [0.2, 0.5, 0.3])), rel=1e-5
    )
    assert (agree, n) == (0, 1)


def _subject(trained_tiny):
    loaded, data = trained_tiny
    return Subject(loaded.model, loaded.tokenizer, data, loaded.info)


def _reloaded(result, analyzer, out_dir):
    """``result`` as a resumed run loads it back: from ``results/bitwidth.json``, drawn by ``analyzer``."""
    from modelxray.report.result_file import load_result, save_result

    return load_result(save_result(out_dir, analyzer.name, result), source=analyzer)


def test_reference_against_itself(trained_tiny):
    subject = _subject(trained_tiny)
    windows = make_windows(subject.data.ids, 128, "disjoint")
    ref = Reference(subject.model, windows, 4, kl_windows=3)
    m = ref.evaluate(subject.model)
    assert m["top1_agree"] == 1.0 and abs(m["kl"]) < 1e-6
    assert m["loss"] == pytest.approx(ref.metrics["loss"], rel=1e-6)
    assert ref.metrics_of(1)["loss"] == pytest.approx(ref.evaluate(subject.model, max_batches=1)["loss"], rel=1e-6)


def test_bitwidth_analyzer_end_to_end(trained_tiny, tmp_path, monkeypatch):
    subject = _subject(trained_tiny)
    before = copy.deepcopy(subject.model.state_dict())
    copies = []
    real_deepcopy = copy.deepcopy
    monkeypatch.setattr(
        copy,
        "deepcopy",
        lambda x, *a, **k: copies.append(1) if isinstance(x, torch.nn.Module) else real_deepcopy(x, *a, **k),
    )
    analyzer = BitwidthAnalyzer(
        uniform_bits=[8, 4, 2],
        granularity="group",
        group_size=32,
        targets=["linear", "embedding", "lm_head"],
        sensitivity_bits=2,
        sensitivity_windows=4,
        budget_ppl_increase=0.01,
        kl_windows=4,
        batch_size=4,
        custom={"first_block_8bit": [{"blocks": [0], "bits": 8}]},
    )
    result = analyzer.run(subject, RunContext(output_dir=tmp_path, progress=False))
    # no copy of the model: it is quantized in place for each configuration and read back from a file
    assert copies == [] and "temporary file" in analyzer.insights(result, {})[-1]
    m = result.metrics
    names = {r["config"] for r in result.tables["configurations"]}
    assert names == {
        "uniform_int8",
        "uniform_int4",
        "uniform_int2",
        "mixed_attn8_mlp4",
        "mixed_attn4_mlp8",
        "custom_first_block_8bit",
    }  # 2 blocks: too few for a progressive plan with edges of 2
    assert m["uniform_int8_kl"] < m["uniform_int4_kl"] < m["uniform_int2_kl"]
    assert m["uniform_int8_top1_agree"] >= m["uniform_int2_top1_agree"]  # a tiny model mostly predicts one byte
    assert m["uniform_int8_effective_bits"] > m["uniform_int4_effective_bits"] > m["uniform_int2_effective_bits"]
    assert abs(m["uniform_int8_perplexity"] / m["reference_perplexity"] - 1) < 0.01
    # Pareto-optimal configurations are not dominated by any other
    rows = result.tables["configurations"]
    for r in (r for r in rows if r["pareto"]):
        assert not any(o["effective_bits"] <= r["effective_bits"] and o["perplexity"] < r["perplexity"] for o in rows)
    for r in rows:  # the paired loss change against the reference, with its error (windows as units)
        assert r["delta_loss"] == pytest.approx(r["loss"] - m["reference_loss"], abs=1e-9) and r["delta_loss_se"] >= 0
    sens = result.tables["layer_sensitivity"]
    assert {(r["block"], r["component"]) for r in sens} == {(0, "attention"), (0, "mlp"), (1, "attention"), (1, "mlp")}
    assert sorted(r["rank"] for r in sens) == [1, 2, 3, 4]
    rec = result.data["recommendation"]
    # every bound holds: the perplexity budget, and agreement and KL against the unquantized model
    fits = rec["ppl_increase"] <= 0.01 and rec["top1_agree"] >= 0.9 and rec["kl"] <= 0.25
    assert rec["within_budget"] == fits == (rec["broken_bounds"] == [])
    assert "bitwidth_recommended_plan.yaml" in result.texts  # written by the report writer
    assert len(rec["rules"]) == rec["units_high"]
    # the model under analysis is untouched
    assert all(torch.equal(v, subject.model.state_dict()[k]) for k, v in before.items())
    # insights.md asks the config (its insights hook), which reads the Result alone: the work writes no
    # sentence, a Result reloaded from results/bitwidth.json says the same, a failed one says nothing
    said = analyzer.insights(result, {})
    assert result.insights == [] and said == analyzer.insights(_reloaded(result, analyzer, tmp_path), {})
    assert said[0].startswith("Pareto-optimal configurations (effective bits -> perplexity): ")
    assert any(s.startswith("Most sensitive to 2-bit weights: block ") for s in said)
    assert any(
        s.startswith("Recommendation: ")
        and "within the +1% budget, top-1 agreement at least 0.9 and KL at most 0.25" in s
        for s in said
    )
    assert "progressive_4_edges8 not evaluated: 2 blocks, progressive_edge 2 needs more than 4." in said
    assert analyzer.insights(dataclasses.replace(result, error="boom"), {}) == []


def test_recommended_plan_file_is_a_valid_quant_config(trained_tiny, tmp_path):
    import yaml
    from omegaconf import OmegaConf

    from modelxray.core.instantiate import build_component

    subject = _subject(trained_tiny)
    result = BitwidthAnalyzer(
        uniform_bits=[4],
        mixed=False,
        progressive=False,
        sensitivity_windows=2,
        kl_windows=1,
        budget_ppl_increase=0.0,
        group_size=32,
    ).run(subject, RunContext(output_dir=tmp_path, progress=False))
    cfg = OmegaConf.create(yaml.safe_load(result.texts["bitwidth_recommended_plan.yaml"]))
    quantizer = build_component(cfg, "quant")
    _, report = quantizer.apply(subject)
    assert report.metrics["modules_quantized"] == 8


def test_a_smaller_evaluated_configuration_within_budget_is_recommended(trained_tiny, tmp_path):
    subject = _subject(trained_tiny)
    a = BitwidthAnalyzer(
        uniform_bits=[8, 3],
        mixed=False,
        progressive=False,
        group_size=32,
        sensitivity_windows=2,
        kl_windows=1,
        budget_ppl_increase=10.0,
    )  # everything is within a +1000% budget
    result = a.run(subject, RunContext(output_dir=tmp_path, progress=False))
    rec = result.data["recommendation"]
    assert rec["source"] == "uniform_int3" and rec["effective_bits"] < rec["greedy_effective_bits"]
    assert "bits: 3" in result.texts["bitwidth_recommended_plan.yaml"]


def test_agreement_bounds_the_recommendation_where_the_budget_would_not(trained_tiny, tmp_path):
    """A budget that lets anything through (+1000% perplexity) still recommends nothing whose top-1
    agreement with the unquantized model is below the floor: the cheap plan is refused, and the
    recommendation says which bound decided."""
    subject = _subject(trained_tiny)
    common = dict(uniform_bits=[8, 2], mixed=False, progressive=False, group_size=32, sensitivity_windows=2)
    common |= dict(kl_windows=1, budget_ppl_increase=10.0, low_bits=2)
    loose = BitwidthAnalyzer(**common, agreement_floor=0.0, kl_ceiling=1e9).run(
        subject, RunContext(output_dir=tmp_path / "a", progress=False)
    )
    cheap = loose.data["recommendation"]  # by perplexity alone, 2 bits everywhere pass
    assert cheap["units_high"] == 0 and cheap["top1_agree"] < 0.95
    strict = BitwidthAnalyzer(**common, agreement_floor=0.95)
    result = strict.run(subject, RunContext(output_dir=tmp_path / "b", progress=False))
    rec = result.data["recommendation"]
    rows = {r["config"]: r for r in result.tables["configurations"]}
    assert rows["uniform_int2"]["top1_agree"] < 0.95 and rec["source"] != "uniform_int2"
    assert rec["effective_bits"] > cheap["effective_bits"]
    assert rec["top1_agree"] >= 0.95 or any("top-1 agreement" in b for b in rec["broken_bounds"])
    said = next(s for s in strict.insights(result, {}) if s.startswith("Recommendation: "))
    assert "top-1 agreement" in said and "at least 0.95" in said


def test_changes_read_with_their_sign():
    from modelxray.analyzers.bitwidth.insights import Scoring

    mode = Scoring(
        "causal_lm", "perplexity", "perplexity", {}, {"count": 8160, "unit": "tokens"}, "", "", 0.05, "components"
    )
    assert mode.describe({"perplexity": 18.0}, -0.005) == "perplexity 18.000 (-0.5%)"  # not "(+-0.5%)"
    assert mode.describe({"perplexity": 18.0}, 0.007) == "perplexity 18.000 (+0.7%)"
    assert mode.budget_text() == "+5% budget"


def test_paired_loss_difference_against_hand_computation():
    from modelxray.analyzers.bitwidth.modes import WINDOWS, LanguageModelMode

    a = torch.tensor([[10.0, 5, 0], [12.0, 5, 0], [9.0, 4, 0]], dtype=torch.float64)  # NLL, tokens, hits
    b = torch.tensor([[9.0, 5, 0], [11.5, 5, 0], [9.5, 4, 0]], dtype=torch.float64)
    d = LanguageModelMode.paired_difference({WINDOWS: a}, {WINDOWS: b})
    # per-window differences 1, 0.5, -0.5 over 5, 5, 4 tokens: r = 1/14; residuals d_i - r n_i
    r = 1.0 / 14
    resid = [1 - 5 * r, 0.5 - 5 * r, -0.5 - 4 * r]
    assert d.value == pytest.approx(r) and d.paired
    assert d.se == pytest.approx(math.sqrt(3 / 2 * sum(x * x for x in resid)) / 14)
    other_tokens = b.clone()
    other_tokens[2, 1] = 3
    assert LanguageModelMode.paired_difference({WINDOWS: a}, {WINDOWS: other_tokens}) is None
    assert LanguageModelMode.paired_difference({WINDOWS: a}, {}) is None


class _Mode:
    def sample_text(self):
        return "8,160 tokens"


def test_the_recommendation_says_what_it_cannot_be_told_apart_from():
    from modelxray.analyzers.bitwidth.insights import _recommendation_noise

    rec = {
        "delta_loss": 0.0012,
        "delta_loss_se": 0.0009,
        "indistinguishable_from_reference": True,
        "indistinguishable_cheaper": [
            {"config": "uniform_int4", "effective_bits": 4.14, "loss_difference": -0.0021, "loss_difference_se": 0.003}
        ],
    }
    assert _recommendation_noise(rec, _Mode()) == [
        "On 8,160 tokens the recommended plan cannot be told apart from the unquantized model: its loss change, "
        "+0.0012 ± 0.0009 nats, is within two standard errors of zero (paired by window).",
        "On 8,160 tokens the recommended plan cannot be told apart from the cheaper uniform_int4 (4.14 effective "
        "bits; loss -0.0021 ± 0.0030 nats against the plan): the difference is within two standard errors, paired "
        "by window, so the plan's extra bits buy no quality this text can resolve; score more tokens "
        "(dataset.max_tokens) to decide.",
    ]
    assert (
        _recommendation_noise(
            {**rec, "indistinguishable_from_reference": False, "indistinguishable_cheaper": []}, _Mode()
        )
        == []
    )


def _segments(ax):
    """The (low, high) of every error bar drawn on ``ax``."""
    from matplotlib.container import ErrorbarContainer

    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    return [tuple(seg[:, 1] if c.has_yerr else seg[:, 0]) for c in bars for seg in c.lines[2][0].get_segments()]


def test_cheaper_plans_and_the_reference_the_recommendation_cannot_be_told_apart_from():
    from modelxray.analyzers.bitwidth.modes import WINDOWS, LanguageModelMode
    from modelxray.analyzers.bitwidth.run import _indistinguishable

    def windows(*nll):
        return {WINDOWS: torch.tensor([[x, n, 0] for x, n in zip(nll, (5, 5, 4))], dtype=torch.float64)}

    plan = windows(10.0, 12.0, 9.0)
    evaluations = {
        "uniform_int3": windows(10.2, 12.1, 9.4),  # +0.2, +0.1, +0.4: 0.05 +- 0.0223 nats, resolved
        "uniform_int4": windows(11.0, 12.0, 8.5),  # +1, 0, -0.5: 0.0357 +- 0.0926, within two errors
        "uniform_int8": windows(10.0, 12.0, 9.0),  # identical, but not cheaper
    }
    rows = [
        {"config": c, "effective_bits": b}
        for c, b in (("uniform_int3", 3.5), ("uniform_int4", 4.5), ("uniform_int8", 8.5))
    ]
    rec = {"source": "greedy", "effective_bits": 5.0, "delta_loss": 0.003, "delta_loss_se": 0.002}
    out = _indistinguishable(rec, plan, rows, evaluations, LanguageModelMode)
    r = 0.5 / 14
    resid = [1 - 5 * r, -5 * r, -0.5 - 4 * r]
    assert out["indistinguishable_from_reference"]  # 0.003 <= 2 x 0.002
    assert out["indistinguishable_cheaper"] == [
        {
            "config": "uniform_int4",
            "effective_bits": 4.5,
            "loss_difference": pytest.approx(r),
            "loss_difference_se": pytest.approx(math.sqrt(1.5 * sum(x * x for x in resid)) / 14),
        }
    ]
    assert not _indistinguishable({**rec, "delta_loss": 0.0041}, plan, rows, evaluations, LanguageModelMode)[
        "indistinguishable_from_reference"
    ]


def _segments(ax):
    """The (low, high) of every error bar drawn on ``ax``."""
    from matplotlib.container import ErrorbarContainer

    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    return [tuple(seg[:, 1] if c.has_yerr else seg[:, 0]) for c in bars for seg in c.lines[2][0].get_segments()]


def test_the_recommendation_states_its_uncertainty_and_the_plots_draw_it(trained_tiny, tmp_path):
    """On a real run: the verdicts follow the rule on the logged numbers, the insights say them, and
    the plots draw each configuration's own 95% interval."""
    from modelxray.analyzers.bitwidth.plots import figures

    subject = _subject(trained_tiny)
    analyzer = BitwidthAnalyzer(
        uniform_bits=[8, 4, 3],
        budget_ppl_increase=0.004,
        mixed=False,
        progressive=False,
        group_size=32,
        sensitivity_windows=4,
        kl_windows=2,
    )
    result = analyzer.run(subject, RunContext(output_dir=tmp_path, progress=False))
    rec = result.data["recommendation"]
    rows = {r["config"]: r for r in result.tables["configurations"]}
    same = abs(rec["delta_loss"]) <= 2 * rec["delta_loss_se"]
    assert rec["indistinguishable_from_reference"] == same
    assert result.metrics["recommended_delta_loss_se"] == rec["delta_loss_se"] > 0
    tokens = f"{int(result.metrics['reference_tokens_scored']):,} tokens"
    insights = analyzer.insights(result, {})
    said = [s for s in insights if s.startswith(f"On {tokens} the recommended plan cannot be told apart")]
    assert len(said) == same + bool(rec["indistinguishable_cheaper"])
    for c in rec["indistinguishable_cheaper"]:  # paired on the same tokens, the reference cancels
        assert c["effective_bits"] < rec["effective_bits"]
        assert c["loss_difference"] == pytest.approx(rows[c["config"]]["delta_loss"] - rec["delta_loss"], abs=1e-12)
        assert abs(c["loss_difference"]) <= 2 * c["loss_difference_se"]
        assert c["loss_difference_se"] <= rows[c["config"]]["delta_loss_se"] + rec["delta_loss_se"] + 1e-12
    for r in rows.values():
        line = f"{r['config']} ({r['delta_loss']:+.4f} ± {r['delta_loss_se']:.4f} nats)"
        listed = any(
            s.startswith(f"Indistinguishable from the unquantized model on {tokens}") and line in s for s in insights
        )
        assert listed == (abs(r["delta_loss"]) <= 2 * r["delta_loss_se"])
    # perplexity: exp(loss -+ 1.96 loss_se); KL: -+ 1.96 kl_se, bars from the most bits down
    z = 1.959963984540054
    figs = figures(result)
    want = [(math.exp(r["loss"] - z * r["loss_se"]), math.exp(r["loss"] + z * r["loss_se"])) for r in rows.values()]
    assert approx_nested(_segments(figs["accuracy_vs_bits.png"].axes[0]), want)
    by_size = sorted(rows.values(), key=lambda r: -r["effective_bits"])
    kl = [(r["kl"] - z * r["kl_se"], r["kl"] + z * r["kl_se"]) for r in by_size]
    assert approx_nested(_segments(figs["bit_width_configurations.png"].axes[1]), kl)


def test_quality_axes_label_values_without_an_offset():
    """Perplexities of about 1e8 that differ in their last digits: the axis shows the values, not
    "+1e8" and a baseline at "0.000"."""
    from modelxray.analyzers.bitwidth.plots import _accuracy_vs_bits
    from modelxray.core.result import Result

    base = 1.234e8
    rows = [
        {"config": f"int{b}", "effective_bits": b + 0.1, "perplexity": base + 40 * (8 - b), "pareto": b == 8}
        for b in (8, 6, 4)
    ]
    result = Result("bitwidth", data={"task": "causal_lm", "reference": {"perplexity": base}})
    fig = _accuracy_vs_bits(result, rows)
    fig.canvas.draw()
    axis = fig.axes[0].yaxis
    assert axis.get_major_formatter().get_offset() == ""
    assert all(
        float(t.get_text().replace(",", "").replace("\u2212", "-")) > 1e8 for t in axis.get_ticklabels() if t.get_text()
    )
