"""quant_impact and bitwidth ranked by an lm-eval task: each strategy or configuration runs the task
on its quantized model in memory, and the task's score is a column and the quality axis."""

from __future__ import annotations

import pytest

from lm_eval_model import LIMIT, _run, tiny_llama_with_bpe

pytest.importorskip("lm_eval", reason="rank_by_task needs lm-eval (extra modelxray[lm_eval])")


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return tiny_llama_with_bpe(tmp_path_factory.mktemp("lm") / "m")


@pytest.mark.parametrize(
    "more,message",
    [
        (
            ["analyzer.quant_impact.rank_by_task=pydoc_topic_mc/accuracy"],
            r"^analyzer.quant_impact.rank_by_task: pydoc_topic_mc gives acc, acc_norm, not 'accuracy'$",
        ),
        (
            ["analyzer.quant_impact.rank_by_task=pydoc_topic_mc"],
            r"^analyzer.quant_impact.rank_by_task: must be <task>/<metric>",
        ),
        (["analyzer.quant_impact.task_limit=0"], r"^analyzer.quant_impact.task_limit: "),
    ],
)
def test_a_bad_ranking_task_is_one_line_before_the_model_loads(more, message, llama_dir, tmp_path, monkeypatch):
    from modelxray import api
    from modelxray.core.errors import ConfigError
    from modelxray.models.hf import HFSource

    monkeypatch.setattr(HFSource, "load", lambda self: (_ for _ in ()).throw(AssertionError("the model was loaded")))
    overrides = ["model=hf", f"model.name_or_path={llama_dir}", "analyzer=quant_impact", "tracker=none", *more]
    with pytest.raises(ConfigError, match=message):
        api.analyze(overrides, output_dir=tmp_path / "run")


def test_quant_impact_ranks_the_strategies_by_a_task(llama_dir, tmp_path, tracking_uri):
    """rank_by_task: each strategy runs the task in memory; its score, with lm-eval's error, is the
    quality axis of the efficiency score and a column of the strategies table."""
    out = _run(
        llama_dir,
        tmp_path,
        tracking_uri,
        "analyzer=quant_impact",
        "analyzer.quant_impact.strategies=[none,int8,int2]",
        "analyzer.quant_impact.rank_by_task=pydoc_topic_mc/acc",
        f"analyzer.quant_impact.task_limit={LIMIT}",
        "analyzer.quant_impact.iters=1",
    )
    plain = _run(llama_dir, tmp_path, tracking_uri, "quant=int2")  # lm_eval itself on int2: the same score
    rows = {r["strategy"]: r for r in out.results["quant_impact"].tables["strategies"]}
    assert rows["int2"]["task_score"] == plain.metrics["lm_eval/pydoc_topic_mc/acc"]
    assert out.metrics["quant_impact/int2_task_score_se"] == pytest.approx(
        plain.metrics["lm_eval/pydoc_topic_mc/acc_se"]
    )
    base = rows["none"]["task_score"]
    for r in rows.values():
        assert r["quality_ratio"] == pytest.approx(r["task_score"] / base)
    assert out.results["quant_impact"].data["ranked_by"] == "pydoc_topic_mc/acc"
    assert "pydoc_topic_mc/acc" in (out.output_dir / "insights.md").read_text()


def test_bitwidth_scores_every_configuration_on_a_task(llama_dir, tmp_path, tracking_uri):
    out = _run(
        llama_dir,
        tmp_path,
        tracking_uri,
        "analyzer=bitwidth",
        "analyzer.bitwidth.uniform_bits=[8,2]",
        "analyzer.bitwidth.mixed=false",
        "analyzer.bitwidth.progressive=false",
        "analyzer.bitwidth.sensitivity=false",
        "analyzer.bitwidth.rank_by_task=pydoc_topic_mc/acc",
        f"analyzer.bitwidth.task_limit={LIMIT}",
    )
    rows = {r["config"]: r for r in out.results["bitwidth"].tables["configurations"]}
    assert set(rows) == {"uniform_int8", "uniform_int2"}
    assert out.metrics["bitwidth/uniform_int2_task_score"] == rows["uniform_int2"]["task_score"]
    assert 0 <= rows["uniform_int8"]["task_score"] <= 1 and rows["uniform_int8"]["task_score_se"] > 0
    assert out.results["bitwidth"].data["ranked_by"] == "pydoc_topic_mc/acc"
    if rows["uniform_int2"]["task_score"] >= rows["uniform_int8"]["task_score"]:
        assert rows["uniform_int2"]["pareto"] and not rows["uniform_int8"]["pareto"]  # fewer bits, no worse
