"""Inspect plots: parameter distributions by layer type, per-layer norms, FLOPs by op type, and the
roofline (achieved FLOP/s of each op against the measured compute and memory roofs)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import seaborn as sns

from modelxray.plotting import new_figure


def figures(result) -> dict:
    out = {}
    rows = result.data.get("tensors") or []
    if rows:
        out["parameter_distributions.png"] = _distributions(rows)
        norms = _layer_norms(rows)
        if norms is not None:
            out["layer_norms.png"] = norms
    if result.tables.get("flops_by_op"):
        out["flops_by_op.png"] = _flops(result)
    if result.tables.get("roofline") and result.data.get("peak"):
        out["roofline.png"] = _roofline(result)
    return out


def _distributions(rows):
    fig, axes = new_figure(ncols=3, width=5.6, height=4.4)
    ax = axes[0][0]
    largest: dict[str, dict] = {}
    for r in rows:  # matrices only: norms and biases are near-constant and would flatten the axis
        if len(r["shape"]) >= 2 and r["std"] > 0 and r["numel"] > largest.get(r["type"], {"numel": -1})["numel"]:
            largest[r["type"]] = r
    for kind, r in sorted(largest.items(), key=lambda kv: -kv[1]["numel"])[:6]:
        counts, edges = np.asarray(r["hist_counts"], float), np.asarray(r["hist_edges"], float)
        z = ((edges[:-1] + edges[1:]) / 2 - r["mean"]) / r["std"]
        width = np.diff(edges) / r["std"]
        density = counts / max(counts.sum(), 1) / np.where(width > 0, width, 1)
        keep = density > 0
        ax.plot(z[keep], density[keep], lw=1.2, label=f"{kind}: {r['name']}")
    zz = np.linspace(-5, 5, 201)
    ax.plot(zz, np.exp(-(zz**2) / 2) / np.sqrt(2 * np.pi), color="#999", ls="--", lw=1, label="normal")
    ax.set_yscale("log")
    ax.set_xlabel("weight value in std from the mean")
    ax.set_ylabel("density (log): tails show outliers")
    ax.set_title("value distribution, largest matrix per layer type")
    ax.legend(fontsize=7)
    df = pd.DataFrame([r for r in rows if r.get("quant_sensitivity") is not None])
    for ax, col, title in (
        (axes[0][1], "quant_sensitivity", "quantization sensitivity (RTN rel. error)"),
        (axes[0][2], "kurtosis", "excess kurtosis (tails)"),
    ):
        if df.empty or col not in df:
            ax.set_axis_off()
            continue
        sns.boxplot(data=df, y="type", x=col, ax=ax, color="#9ecae1", fliersize=2)
        if col == "kurtosis" and (df[col] > 0).all() and df[col].max() / max(df[col].min(), 1e-9) > 20:
            ax.set_xscale("log")
        ax.set_title(title)
        ax.set_xlabel(col.replace("_", " "))
        ax.set_ylabel("layer type")
    fig.suptitle("Parameter distributions by layer type")
    return fig


def _suffix(name: str) -> str:
    parts = [p for p in name.split(".") if not p.isdigit()]
    return ".".join(parts[-2:])


def _layer_norms(rows):
    mats = [r for r in rows if r.get("block") is not None and len(r.get("shape", [])) >= 2]
    if not mats:
        return None
    df = pd.DataFrame(
        [
            {
                "block": r["block"],
                "tensor": _suffix(r["name"]),
                "frobenius": r["l2"],
                "spectral": r.get("spectral_norm"),
                "stable_rank": r.get("stable_rank"),
            }
            for r in mats
        ]
    )
    fig, axes = new_figure(ncols=3, width=5.4, height=4.4)
    for ax, col, title in (
        (axes[0][0], "frobenius", "Frobenius norm"),
        (axes[0][1], "spectral", "spectral norm"),
        (axes[0][2], "stable_rank", "stable rank"),
    ):
        if df[col].isna().all():
            ax.set_axis_off()
            continue
        sns.lineplot(data=df, x="block", y=col, hue="tensor", marker="o", ax=ax)
        ax.set_title(f"{title} per block")
        ax.set_xlabel("block")
        ax.set_ylabel(title)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle("Per-layer weight norms")
    return fig


def _flops(result):
    df = pd.DataFrame(result.tables["flops_by_op"])
    times = {t["op"]: t for t in result.data.get("op_times", [])}
    fig, axes = new_figure(ncols=2, width=6.0, height=max(3.5, 0.35 * len(df) + 1.5))
    sns.barplot(data=df, y="op", x="flops", ax=axes[0][0], color="#3182bd")
    axes[0][0].set_xscale("log")
    axes[0][0].set_xlabel("FLOPs per forward (log)")
    axes[0][0].set_ylabel("aten op")
    axes[0][0].set_title(f"FLOPs by op type (total {result.metrics['flops_total'] / 1e9:.2f} G)")
    if times:
        tdf = pd.DataFrame(
            sorted(({"op": k, "ms": 1e3 * _time(v)} for k, v in times.items()), key=lambda r: -r["ms"])[:15]
        )
        sns.barplot(data=tdf, y="op", x="ms", ax=axes[0][1], color="#e6550d")
        axes[0][1].set_xlabel("time per forward (ms)")
        axes[0][1].set_ylabel("")
        axes[0][1].set_title("measured time by op (top 15)")
    else:
        axes[0][1].set_axis_off()
    fig.suptitle("Where the compute goes")
    return fig


def _time(t: dict) -> float:
    return float(t.get("device_time_s") or 0.0) or float(t.get("cpu_time_s") or 0.0)


def _roofline(result):
    peak = result.data["peak"]
    pf, bw = peak["matmul_flops_per_s"], peak["memory_bytes_per_s"]
    rows = [r for r in result.tables["roofline"] if r.get("intensity") and r.get("achieved_flops_per_s")]
    fig, axes = new_figure(ncols=2, width=7.5, height=5.6)
    ax = axes[0][0]
    _bandwidth(axes[0][1], result.tables["roofline"], bw)
    if rows:
        lo = min(min(r["intensity"] for r in rows), pf / bw) / 4
        hi = max(max(r["intensity"] for r in rows), pf / bw) * 4
    else:
        lo, hi = 0.01, 1000.0
    xs = np.logspace(math.log10(lo), math.log10(hi), 200)
    ax.plot(
        xs, np.minimum(pf, xs * bw), color="#2c3e50", lw=2, label=f"roof: {pf / 1e9:.0f} GFLOP/s, {bw / 1e9:.1f} GB/s"
    )
    ax.axvline(pf / bw, color="#2c3e50", ls=":", lw=1)
    if rows:
        df = pd.DataFrame(rows)
        sns.scatterplot(
            data=df,
            x="intensity",
            y="achieved_flops_per_s",
            hue="bound",
            size="time_s" if "time_s" in df else None,
            sizes=(30, 300),
            ax=ax,
            legend="brief",
        )
        for r in sorted(rows, key=lambda r: -r.get("time_s", 0))[:8]:
            ax.annotate(
                r["op"].replace("aten.", ""),
                (r["intensity"], r["achieved_flops_per_s"]),
                fontsize=7,
                xytext=(4, 4),
                textcoords="offset points",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"Roofline on {peak.get('device', '?')} ({peak.get('dtype', '')}); ridge at {pf / bw:.1f} FLOP/B")
    ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Roofline: compute-bound ops left, memory-bound ops right")
    return fig


def _bandwidth(ax, rows, bw: float) -> None:
    """Ops without FLOPs (elementwise, copies) do not fit a FLOP/s axis: their bandwidth instead."""
    mem = sorted(
        (r for r in rows if r.get("bound") == "memory" and r.get("achieved_bytes_per_s")),
        key=lambda r: -r.get("time_s", 0.0),
    )[:12]
    if not mem:
        ax.set_axis_off()
        return
    df = pd.DataFrame(
        [
            {
                "op": r["op"].replace("aten.", ""),
                "GB/s": r["achieved_bytes_per_s"] / 1e9,
                "ms": 1e3 * r.get("time_s", 0.0),
                "in_cache": bool(r.get("in_cache")),
            }
            for r in mem
        ]
    )
    sns.barplot(data=df, y="op", x="GB/s", ax=ax, color="#e6550d")
    ax.axvline(bw / 1e9, color="#2c3e50", ls="--", lw=1.2, label=f"copy bandwidth {bw / 1e9:.1f} GB/s")
    for i, r in df.iterrows():
        cached = " (in cache: faster than the copy bandwidth)" if r["in_cache"] else ""
        ax.text(r["GB/s"], i, f" {r['ms']:.1f} ms{cached}", va="center", fontsize=7)
    ax.set_xlabel("achieved GB/s (bytes read + written / time)")
    ax.set_ylabel("memory-bound op (slowest first)")
    ax.set_title("memory-bound ops against the bandwidth roof")
    ax.legend(fontsize=7, loc="lower right")


def panel(ax, result) -> None:
    """Dashboard: FLOPs share by op type, or parameters by layer type when nothing ran."""
    rows = result.tables.get("flops_by_op") or []
    if rows:
        df = pd.DataFrame(rows[:8])
        sns.barplot(data=df, y="op", x="share", ax=ax, color="#3182bd")
        ax.set_title("FLOPs share by op")
        ax.set_xlabel("share of FLOPs")
        ax.set_ylabel("")
        return
    agg = result.tables.get("parameters_by_layer_type") or []
    if agg and "parameters" in agg[0]:
        df = pd.DataFrame(agg)
        sns.barplot(data=df, y="type", x="parameters", ax=ax, color="#3182bd")
        ax.set_title("parameters by layer type")
        return
    ax.set_axis_off()
