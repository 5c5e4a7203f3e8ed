"""Training plots: loss and held-out quality over steps, per-layer parameter change over steps (heat
map), KL vs kept share for magnitude vs random masks and rank-r updates, gradient norm per layer."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import seaborn as sns

from modelxray.plotting import new_figure

_LAYER = re.compile(r"^(param_change|grad)/layer_(\d+)/(relative_l2|norm)$")


def figures(result) -> dict:
    out = {}
    if result.tables.get("history"):
        out["training_curves.png"] = _curves(result)
    history = result.data.get("dynamics_history") or []
    heat = _layer_frame(history, "param_change", "relative_l2")
    if heat is not None:
        out["param_change_heatmap.png"] = _heatmap(
            heat, "Parameter change per block: ||dW|| / ||W|| per interval", "relative change"
        )
    grads = _layer_frame(history, "grad", "norm")
    if grads is not None:
        out["grad_norms.png"] = _grad_lines(grads)
    if result.tables.get("sparse_quality"):
        out["sparse_quality.png"] = _sparse(result.tables["sparse_quality"])
    if result.data.get("learning"):
        from modelxray.learning_dynamics import plots as learning

        parts = {
            name: {"data": data, "tables": result.tables, "metrics": result.metrics}
            for name, data in result.data["learning"].items()
        }
        out.update(learning.figures(parts))
    return out


def panel(ax, result) -> None:
    _loss_axes(ax, result)


def _loss_axes(ax, result) -> None:
    hist = pd.DataFrame(result.data.get("loss_history") or result.tables["history"])
    ax.plot(hist["step"], hist["train/loss"], label="train loss (batch)", color="tab:blue", alpha=0.8)
    evals = pd.DataFrame(result.tables.get("evaluations") or [])
    for col, color in (("eval_loss", "tab:orange"), ("test_loss", "tab:orange"), ("train_loss", "tab:green")):
        if col in evals:
            ax.plot(evals["step"], evals[col], "o-", color=color, label=col.replace("_", " "))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats)")
    ax.set_title("Training")
    ax.legend(fontsize=8)


def _curves(result):
    evals = pd.DataFrame(result.tables.get("evaluations") or [])
    acc = [c for c in ("train_accuracy", "test_accuracy") if c in evals]
    fig, axes = new_figure(ncols=2 if acc or "eval_perplexity" in evals else 1, width=6.2, height=4.2)
    _loss_axes(axes[0][0], result)
    if acc:
        ax = axes[0][1]
        for c in acc:
            ax.plot(evals["step"], evals[c], "o-", label=c.replace("_", " "), markersize=3)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("accuracy")
        ax.set_xlabel("optimizer step")
        ax.set_title("Accuracy")
        ax.legend(fontsize=8)
    elif "eval_perplexity" in evals:
        ax = axes[0][1]
        ax.plot(evals["step"], evals["eval_perplexity"], "o-", color="tab:orange")
        ax.set_ylabel("held-out perplexity")
        ax.set_xlabel("optimizer step")
        ax.set_title("Held-out perplexity")
    fig.suptitle("Training curves")
    return fig


def _layer_frame(history: list[dict], family: str, stat: str) -> pd.DataFrame | None:
    rows = []
    for rec in history:
        for k, v in rec.items():
            m = _LAYER.match(k)
            if m and m.group(1) == family and m.group(3) == stat:
                rows.append({"step": int(rec["step"]), "layer": int(m.group(2)), "value": v})
    if not rows:
        return None
    return pd.DataFrame(rows)


def _heatmap(df: pd.DataFrame, title: str, label: str):
    grid = df.pivot_table(index="layer", columns="step", values="value")
    fig, axes = new_figure(width=min(4 + 0.5 * grid.shape[1], 14), height=min(3 + 0.25 * grid.shape[0], 10))
    ax = axes[0][0]
    sns.heatmap(grid, ax=ax, cmap="viridis", cbar_kws={"label": label})
    ax.set_xlabel("optimizer step (end of interval)")
    ax.set_ylabel("block")
    ax.set_title(title)
    return fig


def _grad_lines(df: pd.DataFrame):
    fig, axes = new_figure(width=7.5, height=4.4)
    ax = axes[0][0]
    sns.lineplot(df, x="step", y="value", hue="layer", palette="viridis", ax=ax, marker="o", legend="brief")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("gradient L2 norm")
    ax.set_title("Gradient norm per block")
    ax.legend(title="block", fontsize=7, ncol=2)
    return fig


def _sparse(rows: list[dict]):
    df = pd.DataFrame(rows)
    fig, axes = new_figure(width=7.5, height=4.6)
    ax = axes[0][0]
    floor = 1e-12  # KL 0 (nothing removed) still needs a place on a log axis
    kinds = [
        ("magnitude mask", ~df["variant"].str.startswith("rank"), "kl", "o", "tab:blue"),
        ("random mask (same count)", ~df["variant"].str.startswith("rank"), "kl_random", "x", "tab:red"),
        ("rank-r update", df["variant"].str.startswith("rank"), "kl", "s", "tab:green"),
    ]
    for label, sel, col, marker, color in kinds:
        sub = df[sel & df[col].notna()] if col in df else df.iloc[0:0]
        if sub.empty:
            continue
        sub = sub.sort_values("kept_ratio")
        ax.plot(
            sub["kept_ratio"],
            np.maximum(sub[col].astype(float), floor),
            marker=marker,
            linestyle="-",
            color=color,
            label=label,
        )
        for _, r in sub.iterrows():
            ax.annotate(
                r["variant"],
                (r["kept_ratio"], max(float(r[col]), floor)),
                fontsize=7,
                alpha=0.7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("share of the update kept (entries; parameters for rank r)")
    ax.set_ylabel("KL(full || variant), nats/token (0 drawn at 1e-12)")
    ax.set_title(f"Sparse and low-rank updates vs the full update (step {int(df['step'].iloc[0])})")
    ax.legend(fontsize=8)
    return fig
