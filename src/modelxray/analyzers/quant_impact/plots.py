"""Quantization-impact plots: memory timeline per strategy, radar chart of normalised axes, and
speed vs quality with each strategy's 95% interval where its row carries an error (the data behind
each is exported as CSV next to the report). A strategy simulated in float (``simulated: True``:
int4, GPTQ, AWQ fake-quantized in the float layers) runs the float model, so neither figure gives
it a speed: no point on the radar's speed spoke, no point on the speed axis (a dashed line at its
quality), each labelled "speed not measured (simulated)"."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from modelxray.metrics.distinguish import error_bars
from modelxray.plotting import new_figure

AXES = [
    ("quality_ratio", "quality\n(base ppl / ppl)"),
    ("speed_ratio", "speed\n(tokens/s vs base)"),
    ("memory_ratio", "memory\n(base bytes / bytes)"),
    ("quality_per_gb", "quality per GB"),
    ("quick_to_quantize", "quick to\nquantize"),
]


NOT_MEASURED = "speed not measured (simulated)"
# the row keys that are speed: a strategy simulated in float has none of its own
SPEED_KEYS = ("speed_ratio", "tokens_per_s", "examples_per_s")


STREAMED = "speed not measured (streamed from disk)"


def speed_measured(row: dict) -> bool:
    """Whether a strategy's speed is its own: a simulated one (int4, GPTQ, AWQ fake-quantized in
    the float layers) runs the float model, whose latency and throughput say nothing of it; on a
    model streamed from disk no strategy is timed."""
    return not row.get("simulated", False) and not _streamed(row)


def _streamed(row: dict) -> bool:
    return row.get("latency_p50_ms") != row.get("latency_p50_ms")  # NaN: not timed


def not_measured(row: dict) -> str:
    """Why a strategy has no speed of its own, for its legend entry."""
    return STREAMED if _streamed(row) else NOT_MEASURED


def radar_values(rows: list[dict], blank_simulated_speed: bool = False) -> pd.DataFrame:
    """Each axis divided by its best value across strategies (1 = best). ``blank_simulated_speed``
    (the radar chart): a simulated strategy's speed is NaN (not measured: it ran the float model)
    and takes no part in the speed axis's best."""
    df = pd.DataFrame(rows).set_index("strategy")
    df["quick_to_quantize"] = 1.0 / (df["quantize_seconds"] + 1.0)
    if blank_simulated_speed:
        measured = pd.Series([speed_measured(r) for r in rows], index=df.index)
        df["speed_ratio"] = df["speed_ratio"].where(measured)
    out = pd.DataFrame({k: df[k] / df[k].max() for k, _ in AXES})
    return out


def figures(result) -> dict:
    rows = result.tables.get("strategies") or []
    if not rows:
        return {}
    out = {
        "quant_impact_memory_timeline.png": _timeline(result),
        "quant_impact_radar.png": _radar(rows, classifier=_is_classifier(result)),
    }
    if any(not _streamed(r) for r in rows):
        out["quant_impact_speed_vs_quality.png"] = _tradeoff(rows, classifier=_is_classifier(result))
    else:  # streamed from disk: no strategy was timed, so size is the other axis
        out["quant_impact_size_vs_quality.png"] = _size_tradeoff(rows)
    return out


def _size_tradeoff(rows):
    """Each strategy at (weight size, perplexity) with its 95% interval: what a model streamed from
    disk, whose speed is not measured, trades."""
    df = pd.DataFrame(rows)
    df["weights (MiB)"] = df["weight_bytes"] / 2**20
    fig, axes = new_figure(width=7, height=5)
    ax = axes[0][0]
    err = error_bars(rows, "perplexity")
    if err is not None:
        ax.errorbar(df["weights (MiB)"], df["perplexity"], yerr=err, fmt="none", ecolor="#95a5a6", lw=1, capsize=3)
    sns.scatterplot(data=df, x="weights (MiB)", y="perplexity", hue="strategy", ax=ax, s=90, legend=False)
    for r in rows:
        ax.annotate(
            r["strategy"],
            (r["weight_bytes"] / 2**20, r["perplexity"]),
            fontsize=8,
            xytext=(5, 4),
            textcoords="offset points",
        )
    ax.set_title("Size vs quality" + ("; bars: 95% interval" if err is not None else ""))
    ax.set_xlabel("weights (MiB); speed not measured: streamed from disk")
    return fig


def _is_classifier(result) -> bool:
    """Whether the strategies were scored one score per example (a classifier or a vision task: accuracy
    and examples/s), as the run recorded its scoring, rather than by perplexity and tokens/s."""
    return bool((result.data.get("scoring") or {}).get("classifier"))


CLASSIFIER_LABELS = {
    "quality_ratio": "quality\n(accuracy / base)",
    "speed_ratio": "speed\n(examples/s vs base)",
}


def _timeline(result):
    df = pd.DataFrame(result.tables["memory_timeline"])
    df["RSS (MiB)"] = df["rss_bytes"] / 2**20
    fig, axes = new_figure(width=10, height=4.5)
    ax = axes[0][0]
    sns.lineplot(data=df, x="t_s", y="RSS (MiB)", hue="strategy", ax=ax, drawstyle="steps-post")
    for strategy, g in df.groupby("strategy"):
        q = g[g["phase"] == "quantize"]
        if len(q):
            ax.axvspan(q["t_s"].min(), q["t_s"].max(), alpha=0.06, color="gray")
    ax.legend(bbox_to_anchor=(1.01, 1), loc="upper left", fontsize=8)
    ax.set_xlabel("seconds since the strategy started (grey: quantizing)")
    ax.set_title("Process memory while quantizing and running each strategy")
    return fig


def _radar(rows, classifier: bool = False):
    """One polygon per strategy; a simulated strategy's runs around its other spokes, with no point
    on the speed spoke, and its legend entry says its speed was not measured."""
    values = radar_values(rows, blank_simulated_speed=True)
    by_name = {r["strategy"]: r for r in rows}
    labels = [(CLASSIFIER_LABELS.get(k, label) if classifier else label) for k, label in AXES]
    angles = np.linspace(0, 2 * np.pi, len(labels), endpoint=False).tolist()
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(8.5, 6.5))
    ax = fig.add_subplot(111, polar=True)
    palette = sns.color_palette("tab10", len(values))
    for color, (strategy, row) in zip(palette, values.iterrows()):
        kept = [(a, v) for a, v in zip(angles, row.tolist()) if not np.isnan(v)]
        a = [p[0] for p in kept] + [kept[0][0]]
        v = [p[1] for p in kept] + [kept[0][1]]
        label = strategy if len(kept) == len(angles) else f"{strategy}: {not_measured(by_name[strategy])}"
        ax.plot(a, v, color=color, label=label, ls="-" if len(kept) == len(angles) else "--")
        ax.fill(a, v, color=color, alpha=0.08)
    ax.set_xticks(angles)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title("Strategies on normalised axes (1 = best of the strategies)", pad=24)
    _legend_below(ax, len(values))
    return fig


def _legend_below(ax, entries: int) -> None:
    """The legend under the plot, in columns: beside or above it, it covers the title or a spoke."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=min(entries, 3), fontsize=8, frameon=False)


def _tradeoff(rows, classifier: bool = False):
    """Measured strategies as points (speed, quality); a simulated strategy has no speed of its own,
    so no point: a dashed line at its quality, labelled as not measured."""
    x, y = ("examples_per_s", "accuracy") if classifier else ("tokens_per_s", "perplexity")
    measured = [r for r in rows if speed_measured(r)]
    simulated = [r for r in rows if not speed_measured(r)]
    fig, axes = new_figure(width=7, height=5)
    ax = axes[0][0]
    err = error_bars(measured, y) if measured else None  # each strategy's own 95% interval
    if measured:
        df = pd.DataFrame(measured)
        if err is not None:
            ax.errorbar(df[x], df[y], yerr=err, fmt="none", ecolor="#95a5a6", lw=1, capsize=3, zorder=1)
        sns.scatterplot(data=df, x=x, y=y, size="weight_bytes", ax=ax, sizes=(60, 400), legend="brief")
        for r in measured:
            ax.annotate(r["strategy"], (r[x], r[y]), fontsize=8, xytext=(5, 4), textcoords="offset points")
    palette = sns.color_palette("Set2", max(len(simulated), 1))
    for color, r in zip(palette, simulated):
        ax.axhline(r[y], color=color, ls="--", lw=1.2, label=f"{r['strategy']}: {not_measured(r)}")
    if simulated:  # the lines join seaborn's size legend
        ax.legend(fontsize=8, title="weight_bytes" if measured else None, title_fontsize=8)
    ax.set_ylabel(y)
    ax.set_xlabel(f"throughput ({'examples' if classifier else 'tokens'}/s, batch of the speed test)")
    ax.set_title("Speed vs quality (marker size: weight bytes" + ("; bars: 95% interval)" if err is not None else ")"))
    return fig


def panel(ax, result) -> None:
    rows = result.tables.get("strategies") or []
    if rows:
        df = pd.DataFrame(rows)
        sns.barplot(data=df, x="strategy", y=f"score_{result.data['priority']}", ax=ax, color="#8e6fb5")
        ax.tick_params(axis="x", rotation=30)
        ax.set_ylabel("efficiency score")
    ax.set_title(f"quant_impact: efficiency ({result.data.get('priority')})", fontsize=10)
