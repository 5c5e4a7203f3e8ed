"""Performance figures that do not mislead: the speed figure's title is about speed, the layer-time
bars are self times (the whole model no longer squashes the rest)."""

import pytest

from modelxray.core.result import Result
from modelxray.metrics.measurements import Quality
from modelxray.metrics.measurements.speed import Latency, Speed
from modelxray.plotting import style


def _performance() -> Result:
    r = Result("performance")
    r.record("quality", Quality(loss=2.0, n_scored=100))
    r.record("speed_b1", Speed(1, 64, Latency.from_values([0.010, 0.011, 0.012])))
    r.record("speed_b4", Speed(4, 64, Latency.from_values([0.030, 0.031, 0.033])))
    r.tables["layer_time"] = [
        {"module": "transformer", "type": "GPT2Model", "time_ms": 100.0, "self_ms": 2.0, "leaf": False},
        {"module": "transformer.h.0", "type": "GPT2Block", "time_ms": 45.0, "self_ms": 5.0, "leaf": False},
        {"module": "transformer.h.0.mlp", "type": "GPT2MLP", "time_ms": 25.0, "self_ms": 25.0, "leaf": True},
        {"module": "lm_head", "type": "Linear", "time_ms": 30.0, "self_ms": 30.0, "leaf": True},
    ]
    return r


def test_the_speed_figure_is_titled_by_what_it_timed_not_by_the_perplexity():
    from modelxray.analyzers.performance.plots import _speed

    with style():
        fig = _speed(_performance())
    title = fig._suptitle.get_text()
    assert "perplexity" not in title and "ppl" not in title
    assert title.startswith("Speed: forward passes at batch size 1, 4 (64 tokens per sequence; 6 timed passes)")


def test_the_layer_time_bars_are_self_times_with_the_whole_forward_in_the_title():
    from modelxray.analyzers.performance.plots import _layers

    with style():
        fig = _layers(_performance())
    ax = fig.axes[0]
    widths = sorted((p.get_width() for p in ax.patches if p.get_width() > 0), reverse=True)
    assert widths == pytest.approx([30.0, 25.0, 5.0, 2.0])  # self: the whole model is 2 ms, not 100
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "lm_head",
        "transformer.h.0.mlp",
        "transformer.h.0",
        "transformer",
    ]
    assert "self" in ax.get_xlabel() and "whole forward (transformer, children included): 100 ms" in ax.get_title()
