"""Performance plots: latency/throughput per batch size, memory by dtype, slowest modules.

Throughput is in the unit the speed measurements carry (tokens/s for a language model, examples/s
for a classifier) and titles name the quality that fits the model (perplexity or accuracy)."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from modelxray.core.formatting import human_bytes
from modelxray.metrics.measurements import Memory, Quality, Speed
from modelxray.plotting import new_figure


def figures(result) -> dict:
    out = {}
    if result.measurements_of(Speed):
        out["performance_speed.png"] = _speed(result)
    if "memory" in result.measurements:
        out["performance_memory.png"] = _memory(result.measurements["memory"])
    if result.tables.get("layer_time"):
        out["performance_layers.png"] = _layers(result)
    return out


def quality_line(result, short: bool = False) -> str | None:
    """``perplexity 18.634 (disjoint windows of 256)``, or a classifier's ``accuracy 0.936 (95% CI
    0.909-0.955) on ...``; ``short``: ``ppl 18.63`` / ``acc 0.936``. None without a quality."""
    q = result.measurements.get("quality")
    if not isinstance(q, Quality):
        return None
    desc = result.data.get("quality", {}).get("protocol_description", "")
    if q.is_classifier:
        if q.accuracy is None:
            return f"loss {q.loss:.3f}"
        if short:
            return f"acc {q.accuracy:.3f}"
        ci = q.accuracy_ci95
        interval = f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if ci else ""
        return f"accuracy {q.accuracy:.3f}{interval} on {desc}"
    if short:
        text = f"ppl {q.perplexity:.2f}"
        return text + (f", acc {q.accuracy:.3f}" if q.accuracy is not None else "")
    return f"perplexity {q.perplexity:.3f} ({desc})"


def _throughput(speeds) -> tuple[pd.DataFrame, str]:
    """Throughput per batch size, and its column name (``tokens/s`` or ``examples/s``)."""
    label = f"{speeds[0].unit}/s"
    return pd.DataFrame([{"batch size": s.batch_size, label: s.throughput.items_per_s} for s in speeds]), label


def _workload(speed: Speed) -> str:
    if speed.seq_len is not None:
        return f"{speed.seq_len} tokens per sequence"
    return "inputs shaped " + "x".join(str(d) for d in speed.input_shape or ())


def _speed(result):
    speeds = list(result.measurements_of(Speed).values())
    samples = pd.DataFrame(
        [{"batch size": s.batch_size, "latency (ms)": x} for s in speeds for x in s.latency.samples_ms]
    )
    thr, label = _throughput(speeds)
    fig, axes = new_figure(ncols=2)
    ax = axes[0][0]
    sns.boxplot(data=samples, x="batch size", y="latency (ms)", ax=ax, color="#8fb3d9")
    sns.stripplot(data=samples, x="batch size", y="latency (ms)", ax=ax, color="#1f3b5c", size=4)
    ax.set_title(f"Forward latency per batch ({_workload(speeds[0])})")
    ax = axes[0][1]
    sns.barplot(data=thr, x="batch size", y=label, ax=ax, color="#5a9e6f")
    for i, v in enumerate(thr[label]):
        ax.annotate(f"{v:,.0f}", (i, v), ha="center", va="bottom")
    ax.set_title(f"Throughput ({label})")
    line = quality_line(result)
    if line:
        fig.suptitle(line)
    return fig


def _memory(mem: Memory):
    rows = [{"what": f"{kind} ({dt})", "bytes": b} for kind, d in mem.by_dtype.items() for dt, b in d.items()]
    if mem.file_bytes:
        rows.append({"what": "model file on disk", "bytes": mem.file_bytes})
    rows.append({"what": "process RSS now", "bytes": mem.rss_bytes})
    rows.append({"what": "process peak RSS", "bytes": mem.peak_rss_bytes})
    if mem.cuda_max_allocated_bytes is not None:
        rows.append({"what": "cuda max allocated", "bytes": mem.cuda_max_allocated_bytes})
    if mem.cuda_max_reserved_bytes is not None:
        rows.append({"what": "cuda max reserved", "bytes": mem.cuda_max_reserved_bytes})
    df = pd.DataFrame(rows)
    df["MiB"] = df["bytes"] / 2**20
    fig, axes = new_figure(width=8)
    ax = axes[0][0]
    sns.barplot(data=df, y="what", x="MiB", ax=ax, color="#c9874f")
    for i, b in enumerate(df["bytes"]):
        ax.annotate(" " + human_bytes(b), (df["MiB"][i], i), va="center")
    ax.set_ylabel("")
    ax.set_title(f"Memory ({mem.num_parameters:,} parameters)")
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
    speeds = list(result.measurements_of(Speed).values())
    if speeds:
        thr, label = _throughput(speeds)
        thr["batch size"] = thr["batch size"].astype(str)
        sns.barplot(data=thr, x="batch size", y=label, ax=ax, color="#5a9e6f")
    mem = result.measurements.get("memory")
    text = []
    line = quality_line(result, short=True)
    if line:
        text.append(line)
    if isinstance(mem, Memory):
        text.append(f"weights {human_bytes(mem.param_bytes)}")
    ax.set_title("performance: " + ", ".join(text), fontsize=10)
