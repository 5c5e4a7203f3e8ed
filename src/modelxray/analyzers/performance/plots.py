"""Performance plots: latency/throughput per batch size, memory by dtype, slowest modules."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from modelxray.core.formatting import human_bytes
from modelxray.plotting import new_figure


def figures(result) -> dict:
    out = {}
    if result.data.get("speed"):
        out["performance_speed.png"] = _speed(result)
    if result.data.get("memory"):
        out["performance_memory.png"] = _memory(result)
    if result.tables.get("layer_time"):
        out["performance_layers.png"] = _layers(result)
    return out


def _speed(result):
    rows = result.data["speed"]
    samples = pd.DataFrame([{"batch size": r["batch_size"], "latency (ms)": s} for r in rows for s in r["samples_ms"]])
    thr = pd.DataFrame([{"batch size": r["batch_size"], "tokens/s": r["tokens_per_s"]} for r in rows])
    fig, axes = new_figure(ncols=2)
    ax = axes[0][0]
    sns.boxplot(data=samples, x="batch size", y="latency (ms)", ax=ax, color="#8fb3d9")
    sns.stripplot(data=samples, x="batch size", y="latency (ms)", ax=ax, color="#1f3b5c", size=4)
    ax.set_title(f"Forward latency per batch ({rows[0]['seq_len']} tokens per sequence)")
    ax = axes[0][1]
    sns.barplot(data=thr, x="batch size", y="tokens/s", ax=ax, color="#5a9e6f")
    for i, v in enumerate(thr["tokens/s"]):
        ax.annotate(f"{v:,.0f}", (i, v), ha="center", va="bottom")
    ax.set_title("Throughput")
    q = result.data.get("quality", {})
    if q:
        fig.suptitle(f"perplexity {q['perplexity']:.3f} ({q['protocol_description']})")
    return fig


def _memory(result):
    mem = result.data["memory"]
    rows = [{"what": f"{kind} ({dt})", "bytes": b} for kind, d in mem["by_dtype"].items() for dt, b in d.items()]
    if mem.get("file_bytes"):
        rows.append({"what": "model file on disk", "bytes": mem["file_bytes"]})
    rows.append({"what": "process RSS now", "bytes": mem["rss_bytes"]})
    rows.append({"what": "process peak RSS", "bytes": mem["peak_rss_bytes"]})
    for k in ("cuda_max_allocated_bytes", "cuda_max_reserved_bytes"):
        if k in mem:
            rows.append({"what": k.replace("_bytes", "").replace("_", " "), "bytes": mem[k]})
    df = pd.DataFrame(rows)
    df["MiB"] = df["bytes"] / 2**20
    fig, axes = new_figure(width=8)
    ax = axes[0][0]
    sns.barplot(data=df, y="what", x="MiB", ax=ax, color="#c9874f")
    for i, b in enumerate(df["bytes"]):
        ax.annotate(" " + human_bytes(b), (df["MiB"][i], i), va="center")
    ax.set_ylabel("")
    ax.set_title(f"Memory ({mem['num_parameters']:,} parameters)")
    ax.set_xlim(0, df["MiB"].max() * 1.3)
    return fig


def _layers(result):
    rows = result.tables["layer_time"]
    df = pd.DataFrame(rows)
    fig, axes = new_figure(width=9, height=max(3.0, 0.35 * len(df) + 1))
    ax = axes[0][0]
    sns.barplot(data=df, y="module", x="time_ms", hue="type", dodge=False, ax=ax)
    ax.set_xlabel("forward time, inclusive (ms)")
    ax.set_ylabel("")
    ax.set_title("Slowest modules (batch 1)")
    return fig


def panel(ax, result) -> None:
    """Dashboard panel: throughput per batch size, with the headline quality numbers."""
    rows = result.data.get("speed") or []
    if rows:
        thr = pd.DataFrame([{"batch size": str(r["batch_size"]), "tokens/s": r["tokens_per_s"]} for r in rows])
        sns.barplot(data=thr, x="batch size", y="tokens/s", ax=ax, color="#5a9e6f")
    m = result.metrics
    text = []
    if "perplexity" in m:
        text.append(f"ppl {m['perplexity']:.2f}")
    if "accuracy" in m:
        text.append(f"acc {m['accuracy']:.3f}")
    if "param_bytes" in m:
        text.append(f"weights {human_bytes(m['param_bytes'])}")
    ax.set_title("performance: " + ", ".join(text), fontsize=10)
