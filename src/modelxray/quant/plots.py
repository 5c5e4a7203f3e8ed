"""Quantization plot: relative weight error and bits of every quantized module, in model order."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from modelxray.plotting import new_figure


def figures(result) -> dict:
    rows = result.tables.get("layers") or []
    if not rows:
        return {}
    df = pd.DataFrame(rows)
    df["layer"] = range(len(df))
    df["bits"] = df["bits"].astype(str)
    fig, axes = new_figure(width=11, height=4.5)
    ax = axes[0][0]
    sns.scatterplot(data=df, x="layer", y="rel_error", hue="bits", style="component", ax=ax, s=40)
    ax.set_xlabel("quantized module (model order)")
    ax.set_ylabel("relative weight error ||W - Q(W)|| / ||W||")
    m = result.metrics
    ax.set_title(
        f"{result.data.get('method', 'quantization')}: {m['effective_bits']:.2f} effective bits, "
        f"model {m['compression_ratio']:.2f}x smaller"
    )
    return {"quantization_layers.png": fig}


def panel(ax, result) -> None:
    rows = result.tables.get("layers") or []
    if rows:
        df = pd.DataFrame(rows)
        sns.boxplot(data=df, x="component", y="rel_error", ax=ax, color="#d9a38f")
        ax.set_ylabel("relative weight error")
    m = result.metrics
    ax.set_title(
        f"quant: {m.get('effective_bits', 0):.2f} bits, {m.get('compression_ratio', 1):.2f}x smaller", fontsize=10
    )
