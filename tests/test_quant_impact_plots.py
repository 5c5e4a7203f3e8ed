"""A strategy simulated in float (it runs the float model) gets no speed in quant_impact's figures."""

import math

import numpy as np
import pytest

from modelxray.plotting import style


def _strategies() -> list[dict]:
    rows = []
    for name, simulated, tps, ppl in (
        ("none", False, 1000.0, 10.0),
        ("int8", False, 1500.0, 10.2),
        ("int4", True, 990.0, 11.0),
    ):
        rows.append(
            {
                "strategy": name,
                "simulated": simulated,
                "speed_measured": "float model, shared" if name in ("none", "int4") else "own",
                "tokens_per_s": tps,
                "perplexity": ppl,
                "loss": math.log(ppl),
                "weight_bytes": 1e6,
                "quality_ratio": 10.0 / ppl,
                "speed_ratio": tps / 1000.0,
                "memory_ratio": 1.0,
                "quality_per_gb": 1.0,
                "quantize_seconds": 1.0,
            }
        )
    return rows


def test_a_simulated_strategy_has_no_point_on_the_speed_axis_of_the_tradeoff():
    from modelxray.analyzers.quant_impact.plots import NOT_MEASURED, _tradeoff

    with style():
        fig = _tradeoff(_strategies())
    ax = fig.axes[0]
    xs = {round(float(x)) for c in ax.collections for x, _ in c.get_offsets()}
    assert xs == {1000, 1500}  # no point at int4's float-model speed (990)
    assert {a.get_text() for a in ax.texts} == {"none", "int8"}
    (line,) = [ln for ln in ax.get_lines() if ln.get_label().startswith("int4")]
    assert line.get_label() == f"int4: {NOT_MEASURED}" and set(line.get_ydata()) == {11.0}
    assert f"int4: {NOT_MEASURED}" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_simulated_strategy_has_no_speed_spoke_on_the_radar():
    from modelxray.analyzers.quant_impact.plots import AXES, NOT_MEASURED, _radar, radar_values

    rows = _strategies()
    values = radar_values(rows, blank_simulated_speed=True)
    assert math.isnan(values.loc["int4", "speed_ratio"])
    assert values.loc["int8", "speed_ratio"] == pytest.approx(1.0) and values.loc[
        "none", "speed_ratio"
    ] == pytest.approx(1 / 1.5)
    assert radar_values(rows).loc["int4", "speed_ratio"] == pytest.approx(0.99 / 1.5)  # the API's table: unchanged
    with style():
        fig = _radar(rows)
    ax = fig.axes[0]
    speed_angle = 2 * np.pi * [k for k, _ in AXES].index("speed_ratio") / len(AXES)
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"none", "int8", f"int4: {NOT_MEASURED}"}
    int4 = lines[f"int4: {NOT_MEASURED}"]
    assert not np.isclose(int4.get_xdata(), speed_angle).any() and len(int4.get_xdata()) == len(AXES)  # 4 + closing
    assert np.isclose(lines["int8"].get_xdata(), speed_angle).any()


def test_the_radar_legend_sits_below_the_plot_clear_of_its_title(tmp_path):
    """A legend beside the radar ran over the end of its title: it goes under the plot, in the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from modelxray.analyzers.quant_impact.plots import _radar
    from modelxray.plotting import save

    rows = _strategies() + [dict(_strategies()[1], strategy=s) for s in ("gptq_int4", "awq_int4", "bnb_nf4")]
    with style():
        fig = _radar(rows)
        save(fig, tmp_path / "quant_impact_radar.png")
    renderer = FigureCanvasAgg(fig).get_renderer()
    ax = fig.axes[0]
    title, legend = ax.title.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(title) and legend.y1 <= ax.get_window_extent(renderer).y0  # below the plot
    for box in (title, legend):
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1
