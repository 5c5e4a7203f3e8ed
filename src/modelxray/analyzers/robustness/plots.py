"""Robustness plots: quality and agreement vs attack radius (FGSM vs PGD), vs weight and
quantization-step noise, vs input perturbation rate, and vs the level of each image corruption
(Gaussian noise, blur, occlusion); error bars are the spread over seeds."""

from __future__ import annotations

import math

import pandas as pd
import seaborn as sns

from modelxray.plotting import new_figure

_FAMILIES = {
    "adversarial_robustness.png": (("fgsm", "pgd"), "attack radius eps (x embedding std)"),
    "noise_robustness.png": (("weight_noise", "quant_noise"), None),
    "perturbation_robustness.png": (
        ("token_dropout", "token_substitution", "feature_dropout", "feature_substitution"),
        "perturbation rate",
    ),
    "image_corruptions.png": (("gaussian_noise", "blur", "occlusion"), None),
}
# the x axis of each image corruption family (one panel each)
_IMAGE_LEVELS = {
    "gaussian_noise": "noise std (pixel units, clipped to the range)",
    "blur": "Gaussian blur std (pixels)",
    "occlusion": "patch side (fraction of the image side)",
}


def figures(result) -> dict:
    rows = result.tables.get("robustness") or []
    out = {}
    for name, (families, xlabel) in _FAMILIES.items():
        sub = [r for r in rows if r["family"] in families]
        if sub:
            if name == "adversarial_robustness.png" and _quality(result) == "accuracy":
                xlabel = "attack radius eps (fraction of the input range)"
            out[name] = _figure(result, sub, families, xlabel)
    return out


def _quality(result) -> str:
    return "perplexity" if result.data.get("task") == "causal_lm" else "accuracy"


def _figure(result, rows, families, xlabel):
    quality = _quality(result)
    present = [f for f in families if any(r["family"] == f for r in rows)]
    if families[0] == "gaussian_noise":
        return _image_figure(result, rows, present, quality)
    fig, axes = new_figure(ncols=len(present) if families[0] == "weight_noise" else 2, width=6.0, height=4.4)
    if families[0] == "weight_noise":
        for ax, fam in zip(axes[0], present):
            _lines(
                ax,
                result,
                [r for r in rows if r["family"] == fam],
                quality,
                "bits of the simulated grid" if fam == "quant_noise" else "noise std (x tensor std)",
                fam,
            )
        if "quant_noise" in present:
            axes[0][present.index("quant_noise")].invert_xaxis()
    else:
        _lines(axes[0][0], result, rows, quality, xlabel, "quality")
        _lines(
            axes[0][1],
            result,
            rows,
            "top1_agree" if quality == "perplexity" else "accuracy_drop",
            xlabel,
            "agreement with the clean predictions" if quality == "perplexity" else "accuracy lost",
        )
    fig.suptitle(f"Robustness: {', '.join(present)} (clean {quality} {result.data['clean'][quality]:.3g})")
    return fig


def _image_figure(result, rows, present, quality):
    """One column per image corruption (each has its own unit): quality on top, agreement with the
    clean predictions below."""
    fig, axes = new_figure(ncols=len(present), nrows=2, width=5.0, height=3.8)
    for col, fam in enumerate(present):
        fam_rows = [r for r in rows if r["family"] == fam]
        _lines(axes[0][col], result, fam_rows, quality, _IMAGE_LEVELS[fam], fam)
        _lines(axes[1][col], result, fam_rows, "top1_agree", _IMAGE_LEVELS[fam], f"{fam}: agreement with clean")
    shape = (result.data.get("image_corruptions") or {}).get("image_shape")
    on = f" on {'x'.join(map(str, shape))} images" if shape else ""
    fig.suptitle(f"Robustness to image corruptions{on} (clean {quality} {result.data['clean'][quality]:.3g})")
    return fig


def _lines(ax, result, rows, metric, xlabel, title):
    df = pd.DataFrame(rows)
    if metric not in df:
        ax.set_axis_off()
        return
    df = df.dropna(subset=[metric])
    sns.lineplot(data=df, x="level", y=metric, hue="family", marker="o", ax=ax)
    std = f"{metric}_std"
    if std in df:
        for _, r in df.iterrows():
            if isinstance(r.get(std), float) and r[std] > 0 and not math.isnan(r[std]):
                ax.errorbar(r["level"], r[metric], yerr=r[std], color="#555", capsize=3, lw=0.8)
    if metric == _quality(result):
        clean = result.data["clean"][metric]
        ax.axhline(clean, color="#2c3e50", ls="--", lw=1, label="clean")
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, clean), max(hi, clean))
        if metric == "perplexity" and df[metric].max() / max(df[metric].min(), 1e-9) > 3:
            ax.set_yscale("log")
    if df["level"].min() > 0 and df["level"].max() / df["level"].min() > 5 and df["family"].iloc[0] != "quant_noise":
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title.replace("_", " "))
    ax.legend(fontsize=8)


def panel(ax, result) -> None:
    """Dashboard: perplexity (or accuracy) vs attack radius."""
    rows = [r for r in result.tables.get("robustness") or [] if r["family"] in ("fgsm", "pgd")]
    if rows:
        _lines(ax, result, rows, _quality(result), "eps", "robustness to attacks")
    else:
        ax.set_axis_off()
