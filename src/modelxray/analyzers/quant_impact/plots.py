"""Quantization-impact plots: memory timeline per strategy, radar chart of normalised axes, and
speed vs quality with each strategy's 95% interval where its row carries an error (the data behind
each is exported as CSV next to the report)."""

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


def radar_values(rows: list[dict]) -> pd.DataFrame:
    """Each axis divided by its best value across strategies (1 = best)."""
    df = pd.DataFrame(rows).set_index("strategy")
    df["quick_to_quantize"] = 1.0 / (df["quantize_seconds"] + 1.0)
    out = pd.DataFrame({k: df[k] / df[k].max() for k, _ in AXES})
    return out


def figures(result) -> dict:
    rows = result.tables.get("strategies") or []
    if not rows:
        return {}
    return {
        "quant_impact_memory_timeline.png": _timeline(result),
        "quant_impact_radar.png": _radar(rows, classifier=_is_classifier(result)),
        "quant_impact_speed_vs_quality.png": _tradeoff(rows, classifier=_is_classifier(result)),
    }


def _is_classifier(result) -> bool:
    return result.data.get("task") == "classification"


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
    values = radar_values(rows)
    labels = [(CLASSIFIER_LABELS.get(k, label) if classifier else label) for k, label in AXES]
    angles = np.linspace(0, 2 * np.pi, len(labels), endpoint=False).tolist()
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(8.5, 6.5))
    ax = fig.add_subplot(111, polar=True)
    palette = sns.color_palette("tab10", len(values))
    for color, (strategy, row) in zip(palette, values.iterrows()):
        v = row.tolist()
        ax.plot(angles + angles[:1], v + v[:1], color=color, label=strategy)
        ax.fill(angles + angles[:1], v + v[:1], color=color, alpha=0.08)
    ax.set_xticks(angles)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title("Strategies on normalised axes (1 = best of the strategies)")
    ax.legend(loc="upper right", bbox_to_anchor=(1.3, 1.1), fontsize=8)
    return fig


def _tradeoff(rows, classifier: bool = False):
    df = pd.DataFrame(rows)
    x, y = ("examples_per_s", "accuracy") if classifier else ("tokens_per_s", "perplexity")
    fig, axes = new_figure(width=7, height=5)
    ax = axes[0][0]
    err = error_bars(rows, y)  # each strategy's own 95% interval
    if err is not None:
        ax.errorbar(df[x], df[y], yerr=err, fmt="none", ecolor="#95a5a6", lw=1, capsize=3, zorder=1)
    sns.scatterplot(
        data=df,
        x=x,
        y=y,
        size="weight_bytes",
        hue="simulated",
        ax=ax,
        sizes=(60, 400),
        legend="brief",
    )
    for r in rows:
        ax.annotate(r["strategy"], (r[x], r[y]), fontsize=8, xytext=(5, 4), textcoords="offset points")
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
