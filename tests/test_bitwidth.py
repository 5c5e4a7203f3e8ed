"""Bit-width analyzer: configurations, sensitivity, Pareto front, recommendation, and their cost."""

import copy
import math

import pytest
import torch

from modelxray.analyzers.bitwidth import BitwidthAnalyzer
from modelxray.analyzers.bitwidth import run as bitwidth_module
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
    monkeypatch.setattr(bitwidth_module.copy, "deepcopy", lambda x, *a: copies.append(1) or real_deepcopy(x, *a))
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
    assert len(copies) == 1  # one working copy for every configuration, restored in memory
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
    assert rec["within_budget"] == (rec["ppl_increase"] <= 0.01)
    assert "bitwidth_recommended_plan.yaml" in result.texts  # written by the report writer
    assert len(rec["rules"]) == rec["units_high"]
    # the model under analysis is untouched
    assert all(torch.equal(v, subject.model.state_dict()[k]) for k, v in before.items())


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
