"""Performance figures that do not mislead: the speed figure's title is about speed, the layer-time
bars are self times (the whole model no longer squashes the rest), picked by the self time they draw,
beside the self time of each module type."""

import time
from types import SimpleNamespace

import pytest
import torch

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
    assert "self time" in ax.get_xlabel() and "the whole forward: 100 ms" in ax.get_title()


class _Sleep(torch.nn.Module):
    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return x


class Proj(_Sleep):
    """A projection: 8 ms, two in every block (the Linear layers of a decoder)."""


class Head(_Sleep):
    """The output head: 20 ms once (an lm_head)."""


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Proj(0.008), Proj(0.008)

    def forward(self, x):
        return self.b(self.a(x))


class _Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(*(_Block() for _ in range(4)))
        self.head = Head(0.02)

    def forward(self, ids):
        return self.head(self.body(ids.float()))


def test_the_layer_plot_picks_modules_by_the_self_time_it_draws_beside_each_types_share():
    """By inclusive time the body and its blocks (each of them little time of its own) would be picked
    and drawn as near-empty bars, the head alone standing out; by self time the head (20 ms, about a
    quarter of the forward) comes first, and the type panel shows the projections take the rest."""
    from modelxray.analyzers.performance.plots import _layers as draw
    from modelxray.analyzers.performance.run import _layers

    result = Result("performance")
    cfg = SimpleNamespace(layer_timing_iters=1, top_layers=3)
    subject = SimpleNamespace(model=_Decoder(), info=SimpleNamespace(name="decoder"))
    _layers(cfg, subject, result, torch.zeros(1, 4, dtype=torch.long), {"seq_len": 4})
    picked = result.tables["layer_time"]
    assert sorted(r["type"] for r in picked) == ["Head", "Proj", "Proj"]  # no container: Sequential, _Block
    with style():
        fig = draw(result)
    modules, types = fig.axes[0], fig.axes[1]
    labels = [t.get_text() for t in modules.get_yticklabels()]
    widths = [w for _, w in sorted((p.get_y(), p.get_width()) for p in modules.patches if p.get_width() > 0)]
    by_module = {r["module"]: r["self_ms"] for r in picked}
    assert widths == pytest.approx([by_module[m] for m in labels])  # drawn: the quantity picked by
    assert widths == sorted(widths, reverse=True) and "self time" in modules.get_xlabel()
    shares = {t.get_text(): p.get_width() for t, p in zip(types.get_yticklabels(), types.patches)}
    assert list(shares)[:2] == ["Proj", "Head"]
    assert shares["Proj"] > 60 and 10 < shares["Head"] < 35  # percent of the whole forward's self time
    assert "share of the whole forward" in types.get_xlabel()
    total = result.data["layer_time"]["total_self_ms"]
    assert f"the whole forward: {total:.3g} ms" in modules.get_title()  # about 84 ms
