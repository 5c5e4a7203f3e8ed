"""The one rule that says when two measured figures cannot be told apart, against hand numbers."""

import math

import pytest

from conftest import approx_nested
from modelxray.metrics.distinguish import (
    Difference,
    combined_se,
    difference,
    error_bars,
    indistinguishable,
    interval_of,
    se_from_interval,
    se_of,
)

Z = 1.959963984540054


def test_within_two_standard_errors_of_zero():
    assert indistinguishable(0.3, 0.2) and indistinguishable(-0.39, 0.2)  # 0.3, 0.39 <= 0.4
    assert not indistinguishable(0.5, 0.2) and not indistinguishable(-0.41, 0.2)
    assert indistinguishable(1.0, 0.5)  # on the boundary: within
    assert indistinguishable(0.0, 0.0)  # an identical figure, no spread
    assert not indistinguishable(0.0, math.nan) and not indistinguishable(0.0, None)  # no error, no claim
    assert not indistinguishable(math.nan, 0.1)
    # quant_impact's case: a loss change of +0.0012 +- 0.0005 nats is resolved, +0.0009 +- 0.0005 is not
    assert not indistinguishable(0.0012, 0.0005) and indistinguishable(0.0009, 0.0005)


def test_unpaired_errors_combine_as_independent_and_a_paired_error_wins():
    assert combined_se(0.3, 0.4) == pytest.approx(0.5)
    assert math.isnan(combined_se(0.3, None))
    d = difference(10.0, 9.0, 0.375, 0.5)  # se sqrt(0.140625 + 0.25) = 0.625: 1.0 <= 1.25
    assert (d.value, d.se, d.paired, d.indistinguishable) == (1.0, 0.625, False, True)
    d = difference(10.0, 9.0, 0.375, 0.5, paired_se=0.25)  # the same figures paired by window: 1.0 > 0.5
    assert (d.value, d.se, d.paired, d.indistinguishable) == (1.0, 0.25, True, False)
    assert not difference(10.0, 9.0).indistinguishable  # no error at all


def test_an_interval_stands_for_its_width_over_two_z():
    assert se_from_interval(0.9, 1.1) == pytest.approx(0.2 / (2 * Z))
    assert math.isnan(se_from_interval(None, 1.1))


def test_the_error_of_a_logged_figure_by_its_sibling_keys():
    rec = {"perplexity": math.exp(2.0), "loss": 2.0, "loss_se": 0.1}
    low, high = interval_of(rec, "perplexity")  # exp(loss -+ z se)
    assert (low, high) == pytest.approx((math.exp(2.0 - Z * 0.1), math.exp(2.0 + Z * 0.1)))
    assert se_of(rec, "perplexity") == pytest.approx(math.exp(2.0) * 0.1)  # the delta method
    run = {"p/uniform_int4_perplexity": 20.0, "p/uniform_int4_loss": math.log(20.0), "p/uniform_int4_loss_se": 0.05}
    assert se_of(run, "p/uniform_int4_perplexity") == pytest.approx(1.0)
    acc = {"accuracy": 0.96, "accuracy_ci_low": 0.938, "accuracy_ci_high": 0.975}
    assert interval_of(acc, "accuracy") == (0.938, 0.975)
    assert se_of(acc, "accuracy") == pytest.approx(0.037 / (2 * Z))
    kl = {"kl": 0.5, "kl_se": 0.1, "kl_ci_low": None}
    assert interval_of(kl, "kl") == pytest.approx((0.5 - Z * 0.1, 0.5 + Z * 0.1)) and se_of(kl, "kl") == 0.1
    assert interval_of({"kl": 0.5}, "kl") is None and math.isnan(se_of({"kl": 0.5}, "kl"))


def test_error_bars_for_errorbar():
    rows = [{"kl": 1.0, "kl_se": 0.1}, {"kl": 2.0}, {"kl": 3.0, "kl_se": math.nan}]
    below, above = error_bars(rows, "kl")
    assert below == pytest.approx([Z * 0.1, 0.0, 0.0]) and above == pytest.approx([Z * 0.1, 0.0, 0.0])
    assert error_bars([{"kl": 1.0}], "kl") is None


def test_a_difference_reads_with_its_sign():
    assert Difference(-0.005, 0.002).text() == "-0.0050 ± 0.0020"
    assert Difference(0.0012, 0.0009).text(unit=" nats") == "+0.0012 ± 0.0009 nats"
    assert Difference(0.5, math.nan).text(2) == "+0.50"


def test_quant_impact_draws_each_strategys_interval():
    from matplotlib.container import ErrorbarContainer

    from modelxray.analyzers.quant_impact.plots import _tradeoff
    from modelxray.plotting import style

    rows = [
        {"strategy": "none", "perplexity": math.exp(2.0), "loss": 2.0, "loss_se": 0.05, "tokens_per_s": 900.0},
        {"strategy": "int8", "perplexity": math.exp(2.1), "loss": 2.1, "loss_se": 0.04, "tokens_per_s": 1500.0},
        {"strategy": "int4", "perplexity": math.exp(2.5), "loss": 2.5, "tokens_per_s": 2000.0},  # no error
    ]
    for r in rows:
        r.update(weight_bytes=1e6, simulated=False)
    with style():
        fig = _tradeoff(rows)
    (bars,) = [c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]
    segments = [tuple(s[:, 1]) for s in bars.lines[2][0].get_segments()]
    assert approx_nested(
        segments,
        [
            (math.exp(2.0 - Z * 0.05), math.exp(2.0 + Z * 0.05)),
            (math.exp(2.1 - Z * 0.04), math.exp(2.1 + Z * 0.04)),
            (math.exp(2.5), math.exp(2.5)),
        ],
    )
    acc = [
        {"strategy": "none", "accuracy": 0.96, "accuracy_ci_low": 0.938, "accuracy_ci_high": 0.975},
        {"strategy": "int8", "accuracy": 0.955, "accuracy_ci_low": 0.932, "accuracy_ci_high": 0.971},
    ]
    for r in acc:
        r.update(examples_per_s=100.0, weight_bytes=1e6, simulated=False)
    with style():
        fig = _tradeoff(acc, classifier=True)
    (bars,) = [c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]
    assert approx_nested([tuple(s[:, 1]) for s in bars.lines[2][0].get_segments()], [(0.938, 0.975), (0.932, 0.971)])
