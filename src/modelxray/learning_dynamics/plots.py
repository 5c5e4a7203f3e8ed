"""Figures of the learning-dynamics callbacks' reports (``training/plots.py`` calls them for a
training run that used them).

``figures(parts)`` takes the callbacks' ``CallbackReport``s keyed by callback name
(``example_dynamics``, ``gradient_flow``, ``memorization``, ``feature_evolution``) and returns
``{file name: Figure}``; save them with ``modelxray.plotting.save``:

- ``cartography_map.png``: variability (x) vs confidence (y) per example, coloured by correctness,
  with the region thresholds drawn; ``forgetting_histogram.png``; ``learning_curves_by_region.png``;
- ``gradient_flow.png``: per-layer gradient norm over steps (log scale) with the flag thresholds;
- ``memorization.png``: train vs test accuracy over steps (log x) with the transition steps and the
  change points marked: the grokking figure; ``fitted_noise.png`` when labels were flipped;
- ``feature_evolution.png``: silhouette, probe accuracy, CKA to the previous and final snapshot,
  Fourier sparsity and weight norm; ``feature_pca.png`` (``feature_tsne.png`` with ``projection=tsne``): the sample in 2-D at a few snapshots.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelxray.plotting import new_figure

REGION_COLORS = {"easy": "tab:green", "ambiguous": "tab:orange", "hard": "tab:red"}


def _get(part: Any, key: str) -> dict:
    return (part.get(key) if isinstance(part, dict) else getattr(part, key, None)) or {}


def figures(parts: dict[str, Any], unit: str = "step") -> dict:
    """``unit`` names the x axis of the curves: ``step`` for a training run, ``epoch`` where the
    series were recorded per epoch (``modelxray.learning_dynamics.trackers``)."""
    out = {}
    builders = {
        "example_dynamics": _examples,
        "gradient_flow": _grad_flow,
        "memorization": _memorization,
        "feature_evolution": _features,
    }
    for name, build in builders.items():
        if name in parts and _get(parts[name], "data"):
            out.update(
                build(_get(parts[name], "data"), _get(parts[name], "tables"), _get(parts[name], "metrics"), unit)
            )
    return out


def _examples(data, tables, metrics, unit: str = "step") -> dict:
    out = {}
    c = data.get("cartography")
    if c:
        fig, axes = new_figure(width=6.5, height=5.0)
        ax = axes[0][0]
        sc = ax.scatter(c["variability"], c["confidence"], c=c["correctness"], cmap="viridis", s=10, vmin=0, vmax=1)
        fig.colorbar(sc, ax=ax, label="correctness")
        t = data.get("thresholds", {})
        if "ambiguous_variability" in t:
            cut = t["ambiguous_variability"]
            amb = [v for v, r in zip(c["variability"], c.get("region", [])) if r == "ambiguous" and v == v]
            if t.get("ambiguous_top_share") is not None and amb:
                cut = min(amb)  # the quantile cut the regions were drawn with
            ax.axvline(cut, color="gray", ls="--", lw=1)
            ax.axhline(t["easy_confidence"], color="gray", ls=":", lw=1)
            ax.text(0.01, 0.97, "easy", color=REGION_COLORS["easy"], transform=ax.transAxes, va="top")
            ax.text(0.01, 0.03, "hard", color=REGION_COLORS["hard"], transform=ax.transAxes)
            ax.text(0.97, 0.5, "ambiguous", color=REGION_COLORS["ambiguous"], transform=ax.transAxes, ha="right")
        shares = {
            r: sum(1 for x in c.get("region", []) if x == r) / max(len(c.get("region", [])), 1) for r in REGION_COLORS
        }
        ax.set(
            xlabel="variability (std of true-class probability)",
            ylabel="confidence (mean true-class probability)",
            title="Dataset cartography: " + ", ".join(f"{r} {v:.0%}" for r, v in shares.items()),
            xlim=(0.0, 0.5),
            ylim=(-0.02, 1.02),
        )  # 0.5: the largest possible std
        out["cartography_map.png"] = fig
    hist = tables.get("forgetting_histogram")
    if hist:
        fig, axes = new_figure()
        ax = axes[0][0]
        ax.bar([str(r["forgetting_events"]) for r in hist], [r["examples"] for r in hist], color="tab:blue")
        ax.set(xlabel="forgetting events", ylabel="examples", title="Forgetting events per example")
        out["forgetting_histogram.png"] = fig
    curves = data.get("curves")
    if curves:
        fig, axes = new_figure()
        ax = axes[0][0]
        x = data.get("steps") or list(range(len(next(iter(curves.values()))["p_true"])))
        for region, cur in curves.items():
            ax.plot(x, cur["p_true"], label=region, color=REGION_COLORS.get(region))
        ax.set(xlabel=unit, ylabel="mean true-class probability", title="Learning curves by cartography region")
        ax.legend()
        out["learning_curves_by_region.png"] = fig
    return out


def _grad_flow(data, tables, metrics, unit: str = "step") -> dict:
    norms = np.array([[np.nan if v is None else v for v in row] for row in data.get("norms", [])], dtype=float)
    if norms.size == 0:
        return {}
    fig, axes = new_figure(width=7.0)
    ax = axes[0][0]
    for name, row in zip(data["layers"], norms):
        ax.plot(data["steps"], row, label=name, lw=1)
    ax.set_yscale("log")
    ax.set(xlabel=unit, ylabel="gradient norm", title="Gradient flow per layer")
    if len(data["layers"]) <= 12:
        ax.legend(fontsize=7)
    return {"gradient_flow.png": fig}


def _memorization(data, tables, metrics, unit: str = "step") -> dict:
    s, steps = data.get("series", {}), data.get("steps", [])
    if "train_accuracy" not in s:
        return {}
    out = {}
    fig, axes = new_figure(width=7.0)
    ax = axes[0][0]
    x = np.maximum(np.asarray(steps, float), 1)
    ax.plot(x, s["train_accuracy"], label="train accuracy", color="tab:blue")
    ax.plot(x, s["test_accuracy"], label="test accuracy", color="tab:red")
    for key, color in (("train_accuracy", "tab:blue"), ("test_accuracy", "tab:red")):
        step = metrics.get(f"transitions/{key}/step")
        if step is not None:
            ax.axvline(max(step, 1), color=color, ls="--", lw=1)
            ax.annotate(
                f"{key.split('_')[0]} {data.get('transition_level', 0.95):.0%} @ {int(step)}",
                (max(step, 1), 0.5),
                rotation=90,
                color=color,
                fontsize=8,
                ha="right",
            )
    for cp in tables.get("change_points", []):
        if cp["metric"] == "test_accuracy":
            ax.plot([max(cp["step"], 1)], [cp["after"]], marker="v", color="black", ms=6)
    ax.set_xscale("log")
    ax.set(
        xlabel=f"{unit} (log)",
        ylabel="accuracy",
        title="Train vs test accuracy (transitions dashed, change points ▼)",
        ylim=(-0.02, 1.02),
    )
    ax.legend(loc="center left")
    out["memorization.png"] = fig
    if "flipped_fitted_share" in s:
        fig, axes = new_figure()
        ax = axes[0][0]
        ax.plot(steps, s["flipped_fitted_share"], label="flipped labels fitted", color="tab:red")
        ax.plot(steps, s["clean_fitted_share"], label="clean labels fitted", color="tab:green")
        ax.set(xlabel=unit, ylabel="share", title="Memorization of noisy labels", ylim=(-0.02, 1.02))
        ax.legend()
        out["fitted_noise.png"] = fig
    return out


def _features(data, tables, metrics, unit: str = "step") -> dict:
    out = {}
    series, steps = data.get("series", {}), data.get("steps", [])
    keys = [(k, k.split("/")[-1]) for k in series if k.split("/")[-1] in ("silhouette", "probe_accuracy", "cka_prev")]
    extra = [k for k in ("fourier_sparsity", "weight_norm") if k in series]
    ncols = 1 + bool(extra)
    fig, axes = new_figure(ncols=ncols, width=6.0)
    ax = axes[0][0]
    for key, _ in keys:
        ax.plot(steps, series[key], label=key, marker=".")
    for layer, cur in data.get("cka_final", {}).items():
        ax.plot(cur["steps"], cur["cka"], label=f"{layer}/cka_final", ls="--")
    ax.set(xlabel=unit, title="Feature evolution")
    ax.legend(fontsize=7)
    if extra:
        ax2 = axes[0][1]
        ax2.plot(steps, series["fourier_sparsity"], color="tab:purple", label="Fourier sparsity", marker=".")
        ax2.set(xlabel=unit, ylabel="Fourier sparsity", title="Embedding Fourier sparsity and weight norm")
        if "weight_norm" in series:
            tw = ax2.twinx()
            tw.plot(steps, series["weight_norm"], color="tab:gray", label="weight norm")
            tw.set_ylabel("weight norm")
    out["feature_evolution.png"] = fig
    pca = data.get("pca")
    if pca:
        layer = data["layers"][0]
        labels = np.asarray(data.get("sample_labels", []))
        fig, axes = new_figure(ncols=len(pca), width=3.2, height=3.2)
        for ax, snap in zip(axes[0], pca):
            xy = np.asarray(snap["layers"][layer])
            ax.scatter(xy[:, 0], xy[:, 1], c=labels[: len(xy)] if labels.size else None, cmap="tab10", s=6)
            ax.set(title=f"{unit} {snap['step']}", xticks=[], yticks=[])
        how = "t-SNE" if data.get("projection") == "tsne" else "PCA"
        fig.suptitle(f"{how} of {layer} activations")
        out["feature_tsne.png" if how == "t-SNE" else "feature_pca.png"] = fig
    return out
