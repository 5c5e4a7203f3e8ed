"""Robustness plots: quality and agreement vs attack radius (FGSM vs PGD), vs weight and
quantization-step noise, vs input perturbation rate, and vs the level of each image corruption
(Gaussian noise, blur, occlusion).

Every series drawn on one axes was measured on the same windows (classifiers: samples): PGD runs
on the first ``pgd_windows`` windows only, so it is drawn beside FGSM and the clean value of those
windows, and FGSM on all windows gets axes of its own (``attack_groups``); where PGD stops before
FGSM's strongest radius (its own, shorter ``pgd_eps`` grid), the title says why. Error bars are the
spread over seeds for random perturbations drawn several times, else the standard error the row
carries (windows as units; a perplexity's bar spans exp(loss -+ its standard error))."""

from __future__ import annotations

import math
import textwrap

import pandas as pd
import seaborn as sns

from modelxray.analyzers.robustness.insights import pgd_short_note
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.table import saved_kind
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
        if not sub:
            continue
        if name == "adversarial_robustness.png":
            out[name] = _attack_figure(result, _attack_xlabel(result, xlabel))
        else:
            out[name] = _figure(result, sub, families, xlabel)
    return out


def _quality(result) -> str:
    """Perplexity for the models scored on token windows (language models, encoders, seq2seq,
    vision-language answers), else accuracy."""
    windows = isinstance(saved_kind(result.data), CausalLM) or result.data.get("quality") == "perplexity"
    return "perplexity" if windows else "accuracy"


def _unit(result) -> str:
    return "windows" if _quality(result) == "perplexity" else "samples"


def _agreement(result) -> tuple[str, str]:
    """The second attack metric and its axis title: agreement with the clean predictions for a
    language model, accuracy lost for a classifier."""
    if _quality(result) == "perplexity":
        return "top1_agree", "agreement with the clean predictions"
    return "accuracy_drop", "accuracy lost"


def _attack_xlabel(result, xlabel: str) -> str:
    if result.data.get("attack_space") == "pixels" or _quality(result) == "accuracy":
        return "attack radius eps (fraction of the input range)"
    return xlabel


# -- error bars ---------------------------------------------------------------------------------
def _finite_positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def error_bar(row: dict, metric: str, prefix: str = "") -> tuple[float, float] | None:
    """(down, up) error of ``row[prefix + metric]``: the spread over seeds (``<metric>_std``) for a
    random perturbation drawn more than once, else its standard error (``<metric>_se``; perplexity:
    exp(loss -+ loss_se), asymmetric; accuracy lost: the accuracy's); None when the row has none."""
    value = row.get(prefix + metric)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    std = row.get(f"{metric}_std") if not prefix else None
    if _finite_positive(std) and row.get("seeds", 1) > 1:
        return std, std
    if metric == "perplexity":
        se, loss = row.get(prefix + "loss_se"), row.get(prefix + "loss")
        if _finite_positive(se) and isinstance(loss, (int, float)):
            return value - math.exp(loss - se), math.exp(loss + se) - value
    name = "accuracy" if metric == "accuracy_drop" else metric
    se = row.get(f"{prefix}{name}_se")
    if _finite_positive(se):
        return se, se
    if _finite_positive(std):  # one seed: the spread is 0; a row with only a std still shows it
        return std, std
    return None


# -- attacks: one group of axes per set of windows ------------------------------------------------
def attack_groups(result) -> list[dict]:
    """The attack series grouped by the windows (classifiers: samples) they were measured on, the
    full set first: each group is {"n", "unit", "label", "clean", "frame"}, where ``frame`` holds one
    row per series and level (``series``, ``level``, ``n``, each metric and its ``_lo``/``_hi``
    error) and ``clean`` is the clean quality on the same windows. FGSM on all windows is one series;
    PGD, run on the first ``pgd_windows`` windows, comes with FGSM and the clean value of those
    windows (its ``fgsm_*`` and ``clean_*`` columns). Where PGD ran on every window, its FGSM copy
    is the full FGSM and is dropped."""
    rows = [r for r in result.tables.get("robustness") or [] if r["family"] in ("fgsm", "pgd")]
    quality, (agree, _) = _quality(result), _agreement(result)
    unit = _unit(result)
    steps = (result.data.get("config") or {}).get("pgd_steps")
    pgd_name = f"PGD-{steps}" if steps else "PGD"
    points: list[dict] = []
    clean: dict[int, float] = {}
    for r in rows:
        n = int(_count(r))
        if r["family"] == "fgsm":
            points.append(_point("FGSM", r, n, (quality, agree), ""))
            continue
        points.append(_point(pgd_name, r, n, (quality, agree), ""))
        if f"fgsm_{quality}" in r:
            points.append(_point("FGSM", r, n, (quality, agree), "fgsm_", from_pgd=True))
        if f"clean_{quality}" in r:
            clean[n] = r[f"clean_{quality}"]
    full_fgsm = {p["n"] for p in points if p["series"] == "FGSM" and not p["from_pgd"]}
    points = [p for p in points if not (p["from_pgd"] and p["n"] in full_fgsm)]
    if not points:
        return []
    full = max(p["n"] for p in points)
    groups = []
    for n in sorted({p["n"] for p in points}, key=lambda k: -k):
        frame = pd.DataFrame([p for p in points if p["n"] == n]).drop(columns="from_pgd")
        every = n in full_fgsm or (n == full and n == _clean_count(result))
        label = f"on all {n} {_plural(unit, n)}" if every else f"on the {n} PGD {_plural(unit, n)}"
        value = result.data["clean"].get(quality) if n in full_fgsm or n not in clean else clean[n]
        groups.append({"n": n, "unit": unit, "label": label, "clean": value, "frame": frame})
    return groups


def _count(row: dict) -> float:
    """The windows (language models) or samples (classifiers) a row was measured on."""
    return row.get("windows", row.get("samples", 0))


def _clean_count(result) -> float | None:
    c = result.data.get("clean") or {}
    return c.get("windows_scored", c.get("samples"))


def _plural(unit: str, n: int) -> str:
    return unit if n != 1 else unit[:-1]


def _point(series: str, row: dict, n: int, metrics: tuple[str, ...], prefix: str, from_pgd: bool = False) -> dict:
    """One plotted point: ``row[prefix + metric]`` with its error bar, for each metric."""
    out = {"series": series, "level": row["level"], "n": n, "from_pgd": from_pgd}
    for metric in metrics:
        value = row.get(prefix + metric)
        if metric == "accuracy_drop" and value is None and prefix:
            acc, base = row.get(prefix + "accuracy"), row.get("clean_accuracy")
            value = base - acc if acc is not None and base is not None else None
        out[metric] = value if value is not None else math.nan
        err = error_bar(row, metric, prefix) if value is not None else None
        out[f"{metric}_lo"], out[f"{metric}_hi"] = err if err else (0.0, 0.0)
    return out


def _attack_figure(result, xlabel: str):
    """One row of axes per set of windows (quality left, agreement right): FGSM on all windows, then
    PGD against FGSM and the clean value on the PGD windows."""
    quality, (agree, agree_title) = _quality(result), _agreement(result)
    groups = attack_groups(result)
    fig, axes = new_figure(ncols=2, nrows=max(1, len(groups)), width=6.0, height=4.4)
    for row_axes, group in zip(axes, groups):
        _attack_axes(row_axes[0], group, quality, xlabel, f"{quality} {group['label']}")
        _attack_axes(row_axes[1], group, agree, xlabel, f"{agree_title} {group['label']}")
    n, unit = _clean_count(result), _unit(result)
    on = f" on all {n:g} {_plural(unit, int(n))}" if n else ""
    title = (
        f"Robustness to attacks (clean {quality} {result.data['clean'][quality]:.3g}{on}); "
        f"the series on one axes share their {unit}"
    )
    note = pgd_short_note(result.tables.get("robustness") or [], result.data.get("config") or {}, unit)
    if note:  # PGD stops before FGSM's strongest radius: why, under the title
        fig.suptitle(title + "\n" + textwrap.fill(note, 150), fontsize=10)
    else:
        fig.suptitle(title)
    return fig


def _attack_axes(ax, group: dict, metric: str, xlabel: str, title: str) -> None:
    """Each series of ``group`` as a line with its error bars; for the quality, the clean value of
    the same windows as a dashed line."""
    df = group["frame"].dropna(subset=[metric])
    if df.empty:
        ax.set_axis_off()
        return
    palette = {"FGSM": "#3182bd"}
    for series, part in df.groupby("series", sort=False):
        part = part.sort_values("level")
        color = palette.get(series, "#e6550d")
        yerr = [part[f"{metric}_lo"].to_numpy(), part[f"{metric}_hi"].to_numpy()]
        has_err = bool((yerr[0] > 0).any() or (yerr[1] > 0).any())
        ax.errorbar(
            part["level"],
            part[metric],
            yerr=yerr if has_err else None,
            label=series,
            color=color,
            marker="o",
            capsize=3 if has_err else 0,
            lw=1.5,
        )
    if metric in ("perplexity", "accuracy") and group.get("clean") is not None:
        clean = group["clean"]
        ax.axhline(clean, color="#2c3e50", ls="--", lw=1, label=f"clean ({clean:.3g})")
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, clean), max(hi, clean))
        if metric == "perplexity" and df[metric].max() / max(min(df[metric].min(), clean), 1e-9) > 3:
            ax.set_yscale("log")
    _log_x(ax, df)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)


def _log_x(ax, df) -> None:
    if df["level"].min() > 0 and df["level"].max() / df["level"].min() > 5:
        ax.set_xscale("log")


# -- the other families ---------------------------------------------------------------------------
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
        metric, title = _agreement(result)
        _lines(axes[0][0], result, rows, quality, xlabel, "quality")
        _lines(axes[0][1], result, rows, metric, xlabel, title)
    n = _count(rows[0])
    on = f" on {n:g} {_plural(_unit(result), int(n))}" if n else ""
    fig.suptitle(f"Robustness: {', '.join(present)}{on} (clean {quality} {result.data['clean'][quality]:.3g})")
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
    """Families measured on every evaluated window or sample, against the clean value of the same."""
    df = pd.DataFrame(rows)
    if metric not in df:
        ax.set_axis_off()
        return
    df = df.dropna(subset=[metric])
    sns.lineplot(data=df, x="level", y=metric, hue="family", marker="o", ax=ax)
    for r in rows:
        err = error_bar(r, metric)
        if err is not None and r.get(metric) is not None:
            ax.errorbar(r["level"], r[metric], yerr=[[err[0]], [err[1]]], color="#555", capsize=3, lw=0.8)
    if metric == _quality(result):
        clean = result.data["clean"][metric]
        ax.axhline(clean, color="#2c3e50", ls="--", lw=1, label="clean")
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, clean), max(hi, clean))
        if metric == "perplexity" and df[metric].max() / max(df[metric].min(), 1e-9) > 3:
            ax.set_yscale("log")
    if df["family"].iloc[0] != "quant_noise":
        _log_x(ax, df)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title.replace("_", " "))
    ax.legend(fontsize=8)


def panel(ax, result) -> None:
    """Dashboard: perplexity (or accuracy) vs attack radius, on one set of windows: PGD against FGSM
    and the clean value on the PGD windows when PGD ran, else FGSM on all windows."""
    groups = attack_groups(result)
    if not groups:
        ax.set_axis_off()
        return
    group = next((g for g in groups if (g["frame"]["series"] != "FGSM").any()), groups[0])
    _attack_axes(ax, group, _quality(result), "eps", f"attacks {group['label']}")
