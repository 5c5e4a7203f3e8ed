"""Bit-width plots: quality vs effective bits with the Pareto front, per-configuration bars, and the
layer sensitivity (a language model: a heat map of block x component; a classifier: a bar per block,
coloured by tower). Quality is perplexity for a language model, (zero-shot) accuracy for a classifier.
Error bars are each figure's own 95% interval where the row carries an error."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from modelxray.analyzers.bitwidth.blocks import OTHER
from modelxray.analyzers.bitwidth.insights import sensitivity_view
from modelxray.metrics.distinguish import error_bars
from modelxray.plotting import new_figure

LOG_SPAN = 3  # a quality axis spanning more than this factor is drawn on a log scale


def figures(result) -> dict:
    out = {}
    rows = result.tables.get("configurations") or []
    if rows:
        out["accuracy_vs_bits.png"] = _accuracy_vs_bits(result, rows)
        out["bit_width_configurations.png"] = _configurations(result, rows)
    sens = result.tables.get("layer_sensitivity") or []
    if sens:
        out["layer_sensitivity.png"] = _sensitivity(sens) if not _is_classifier(result) else _block_sensitivity(sens)
    return out


def _is_classifier(result) -> bool:
    """Whether the saved result was scored as a classifier is (accuracy, blocks by KL)."""
    return sensitivity_view(result) == "classifier"


def _quality(result) -> tuple[str, str]:
    """The row key of the quality metric and how to call it (``accuracy`` / ``zero-shot accuracy``)."""
    key = result.data.get("quality_key", "perplexity")
    return key, result.data.get("quality_metric", key)


def _log_axis(axis) -> None:
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    axis.set_major_formatter(ScalarFormatter())
    axis.set_minor_formatter(NullFormatter())


def _scatter(ax, result, rows, annotate=True):
    key, label = _quality(result)
    df = pd.DataFrame(rows)
    err = error_bars(rows, key)
    if err is not None:  # each configuration's own 95% interval
        ax.errorbar(
            df["effective_bits"], df[key], yerr=err, fmt="none", ecolor="#bdc3c7", lw=1, zorder=1, label="95% interval"
        )
    sns.scatterplot(
        data=df,
        x="effective_bits",
        y=key,
        hue="pareto",
        palette={True: "#c0392b", False: "#7f8c8d"},
        s=70,
        ax=ax,
        legend=False,
    )
    front = df[df["pareto"]].sort_values("effective_bits")
    ax.plot(front["effective_bits"], front[key], color="#c0392b", lw=1.5, label="Pareto front")
    ref = result.data["reference"][key]
    ref_text = f"{ref:.3f}" if _is_classifier(result) else f"{ref:.2f}"
    ax.axhline(ref, color="#2c3e50", ls="--", lw=1, label=f"unquantized ({ref_text})")
    rec = result.data.get("recommendation")
    if rec:
        ax.scatter(
            [rec["effective_bits"]],
            [rec[key]],
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
                (r["effective_bits"], r[key]),
                fontsize=7,
                xytext=(4, 3),
                textcoords="offset points",
            )
    values = [r[key] for r in rows] + [ref]
    log = not _is_classifier(result) and max(values) / min(values) > LOG_SPAN
    if log:
        ax.set_yscale("log")
        _log_axis(ax.yaxis)
    else:  # tick labels as the values themselves: an offset (+1e8) would show the baseline as "0.000"
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    ax.set_xlabel("effective bits per quantized weight (incl. scales)")
    ax.set_ylabel(label + (" (log scale)" if log else ""))
    ax.legend(fontsize=8)


def _accuracy_vs_bits(result, rows):
    fig, axes = new_figure(width=8, height=5.5)
    _scatter(axes[0][0], result, rows)
    axes[0][0].set_title("Quality vs size of quantization configurations")
    return fig


def _configurations(result, rows):
    key, label = _quality(result)
    df = pd.DataFrame(rows).sort_values("effective_bits", ascending=False)
    fig, axes = new_figure(ncols=3, width=5.2, height=max(3.5, 0.35 * len(df) + 1.5))
    for ax, col, xlabel in zip(
        axes[0],
        [key, "kl", "model_mb"],
        [label, "KL(unquantized || quantized)", "model size (MiB, packed)"],
    ):
        sns.barplot(data=df, y="config", x=col, ax=ax, color="#5d8aa8")
        err = error_bars(df.to_dict("records"), col)
        if err is not None:  # bars in the frame's order, at 0, 1, ...
            ax.errorbar(df[col], range(len(df)), xerr=err, fmt="none", ecolor="#2c3e50", lw=1, capsize=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("")
    ref = result.data["reference"][key]
    values = list(df[key]) + [ref]
    if not _is_classifier(result) and max(values) / min(values) > LOG_SPAN:
        axes[0][0].set_xscale("log")
        _log_axis(axes[0][0].xaxis)
        axes[0][0].set_xlabel(f"{label} (log scale)")
    elif _is_classifier(result):
        axes[0][0].set_xlim(0, 1)
    else:
        err = error_bars(df.to_dict("records"), key)
        if err is not None:  # the intervals inside the axis
            values += [v - e for v, e in zip(df[key], err[0])] + [v + e for v, e in zip(df[key], err[1])]
        axes[0][0].set_xlim(min(values) * 0.98, max(values) * 1.01)
        axes[0][0].ticklabel_format(axis="x", useOffset=False, style="plain")
    axes[0][0].axvline(ref, color="#2c3e50", ls="--", lw=1)
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


def _block_sensitivity(sens):
    """A classifier's blocks in model order, one bar each: KL(unquantized || quantized) with only that
    block at ``sensitivity_bits``; the tower (vision / text) as the colour, the rank in the label."""
    df = pd.DataFrame(sens)
    df["unit"] = [f"{r['block']} ({'' if r['type'] == OTHER else r['type'] + ', '}rank {r['rank']})" for r in sens]
    fig, axes = new_figure(width=7.5, height=max(3.0, 0.32 * len(df) + 1.5))
    ax = axes[0][0]
    hue = None
    if "tower" in df:
        hue, df["tower"] = "tower", df["tower"].fillna("none")
    sns.barplot(data=df, y="unit", x="kl", hue=hue, dodge=False, ax=ax, color=None if hue else "#5d8aa8")
    ax.set_xlabel("KL(unquantized || quantized), nats")
    ax.set_ylabel("")
    ax.set_title(f"Layer sensitivity: one block at {sens[0]['bits']} bits at a time")
    return fig


def panel(ax, result) -> None:
    rows = result.tables.get("configurations") or []
    if rows:
        _scatter(ax, result, rows, annotate=False)
    ax.set_title(f"bitwidth: {_quality(result)[1]} vs effective bits", fontsize=10)
