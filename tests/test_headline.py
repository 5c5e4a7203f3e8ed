"""A run's headline: per entry the first alternative it logged, with its standard error, as
headline/* metrics and as its MLflow description."""

from modelxray.config.settings import HEADLINE
from modelxray.report.headline import description, headline, headline_metrics


def test_each_kind_heads_with_its_own_quality_never_one_column_for_two():
    lm = {"performance/perplexity": 19.97, "performance/perplexity_se": 0.41, "performance/accuracy": 0.41,
          "performance/top1_agree": 0.912, "performance/top1_agree_se": 0.004, "performance/kl": 0.0513,
          "performance/kl_se": 0.002, "performance/ppl_ratio": 1.07, "model/size_bytes": 98 * 2**20}  # fmt: skip
    figures = headline(lm, list(HEADLINE))
    assert [f[0] for f in figures] == ["perplexity", "top1_agree", "kl", "size_bytes"]  # not token accuracy
    classifier = {"performance/accuracy": 0.95, "performance/accuracy_se": 0.01, "model/size_bytes": 70_000.0}
    assert [f[0] for f in headline(classifier, list(HEADLINE))] == ["accuracy", "size_bytes"]
    assert headline({"performance/kl": float("nan")}, ["performance/kl|performance/ppl_ratio"]) == []
    assert headline_metrics(figures) == {
        "_headline/perplexity": 19.97, "_headline/perplexity_se": 0.41, "_headline/top1_agree": 0.912,
        "_headline/top1_agree_se": 0.004, "_headline/kl": 0.0513, "_headline/kl_se": 0.002,
        "_headline/size_bytes": 98 * 2**20,
    }  # fmt: skip


def test_the_description_reads_as_a_sentence_with_its_links():
    figures = [("perplexity", 19.97, 0.41), ("top1_agree", 0.912, 0.004), ("size_bytes", 98 * 2**20, None)]
    text = description(
        "smollm2 perf int4", figures, [("The sweep's comparison", "http://x/#/r?workflowType=machine_learning")]
    )
    assert text == (
        "**smollm2 perf int4**\n\nperplexity 19.97 ± 0.41; top-1 agreement 0.912 ± 0.004; weights 98.0 MiB "
        "(± one standard error)\n\n[The sweep's comparison](http://x/#/r?workflowType=machine_learning)\n"
    )
    assert description("t", [("size_bytes", 1024.0, None)], []) == "**t**\n\nweights 1.0 KiB\n"
