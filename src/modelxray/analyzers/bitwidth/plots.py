"""Bit-width plots: quality vs effective bits with the Pareto front, per-configuration bars, and the
layer-sensitivity heat map."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from modelxray.plotting import new_figure


def figures(result) -> dict:
    out = {}
    rows = result.tables.get("configurations") or []
    if rows:
        out["accuracy_vs_bits.png"] = _accuracy_vs_bits(result, rows)
        out["bit_width_configurations.png"] = _configurations(result, rows)
    sens = result.tables.get("layer_sensitivity") or []
    if sens:
        out["layer_sensitivity.png"] = _sensitivity(sens)
    return out


def _scatter(ax, result, rows, annotate=True):
    df = pd.DataFrame(rows)
    sns.scatterplot(
        data=df,
        x="effective_bits",
        y="perplexity",
        hue="pareto",
        palette={True: "#c0392b", False: "#7f8c8d"},
        s=70,
        ax=ax,
        legend=False,
    )
    front = df[df["pareto"]].sort_values("effective_bits")
    ax.plot(front["effective_bits"], front["perplexity"], color="#c0392b", lw=1.5, label="Pareto front")
    ref = result.data["reference"]["perplexity"]
    ax.axhline(ref, color="#2c3e50", ls="--", lw=1, label=f"unquantized ({ref:.2f})")
    rec = result.data.get("recommendation")
    if rec:
        ax.scatter(
            [rec["effective_bits"]],
            [rec["perplexity"]],
            marker="*",
            s=250,
            color="#f1c40f",
            edgecolor="black",
            zorder=5,
            label="recommended",
        )
    if annotate:
        for r in rows:
            ax.annotate(
                r["config"],
                (r["effective_bits"], r["perplexity"]),
                fontsize=7,
                xytext=(4, 3),
                textcoords="offset points",
            )
    values = [r["perplexity"] for r in rows] + [ref]
    log = max(values) / min(values) > 3
    if log:
        from matplotlib.ticker import NullFormatter, ScalarFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("effective bits per quantized weight (incl. scales)")
    ax.set_ylabel("perplexity" + (" (log scale)" if log else ""))
    ax.legend(fontsize=8)


def _accuracy_vs_bits(result, rows):
    fig, axes = new_figure(width=8, height=5.5)
    _scatter(axes[0][0], result, rows)
    axes[0][0].set_title("Quality vs size of quantization configurations")
    return fig


def _configurations(result, rows):
    df = pd.DataFrame(rows).sort_values("effective_bits", ascending=False)
    fig, axes = new_figure(ncols=3, width=5.2, height=max(3.5, 0.35 * len(df) + 1.5))
    for ax, col, label in zip(
        axes[0],
        ["perplexity", "kl", "model_mb"],
        ["perplexity", "KL(unquantized || quantized)", "model size (MiB, packed)"],
    ):
        sns.barplot(data=df, y="config", x=col, ax=ax, color="#5d8aa8")
        ax.set_xlabel(label)
        ax.set_ylabel("")
    ppl = list(df["perplexity"]) + [result.data["reference"]["perplexity"]]
    if max(ppl) / min(ppl) > 3:
        from matplotlib.ticker import NullFormatter, ScalarFormatter

        axes[0][0].set_xscale("log")
        axes[0][0].xaxis.set_major_formatter(ScalarFormatter())
        axes[0][0].xaxis.set_minor_formatter(NullFormatter())
        axes[0][0].set_xlabel("perplexity (log scale)")
    else:
        axes[0][0].set_xlim(min(ppl) * 0.98, max(ppl) * 1.01)
    axes[0][0].axvline(result.data["reference"]["perplexity"], color="#2c3e50", ls="--", lw=1)
    fig.suptitle("Bit-width configurations")
    return fig


def _sensitivity(sens):
    df = pd.DataFrame(sens).pivot(index="component", columns="block", values="loss_increase")
    fig, axes = new_figure(width=max(6.0, 0.35 * df.shape[1] + 2), height=2.8)
    ax = axes[0][0]
    sns.heatmap(df, cmap="rocket_r", ax=ax, cbar_kws={"label": "loss increase (nats)"})
    ax.set_title(f"Layer sensitivity: one block component at {sens[0]['bits']} bits at a time")
    ax.set_xlabel("block")
    ax.set_ylabel("")
    return fig


def panel(ax, result) -> None:
    rows = result.tables.get("configurations") or []
    if rows:
        _scatter(ax, result, rows, annotate=False)
    ax.set_title("bitwidth: perplexity vs effective bits", fontsize=10)
