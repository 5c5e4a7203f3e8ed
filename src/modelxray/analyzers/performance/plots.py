"""Performance plots: quality with its 95% intervals, latency/throughput per batch size, memory by
dtype, the modules and module types that take the most self time (exclusive of their children).

Throughput is in the unit the speed measurements carry (tokens/s for a language model, examples/s
for a classifier) and titles name the quality that fits the model (perplexity or accuracy). Every
quality figure that has an uncertainty is drawn with its 95% interval as an error bar; a figure
without one is not drawn there, so a missing bar never reads as "no uncertainty"."""

from __future__ import annotations

import math

import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator

from modelxray.core.formatting import human_bytes
from modelxray.metrics.distinguish import interval_of
from modelxray.metrics.measurements import Memory, Quality, Speed, wilson_interval
from modelxray.plotting import new_figure


def figures(result) -> dict:
    out = {}
    if quality_intervals(result):
        out["performance_quality.png"] = _quality(result)
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
        return _plain_quality(result.metrics)
    desc = result.data.get("quality", {}).get("protocol_description", "")
    if q.is_classifier:
        if q.accuracy is None:
            return f"loss {q.loss:.3f}"
        if short:
            return f"acc {q.accuracy:.3f}"
        ci = q.accuracy_ci95
        interval = f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if ci else ""
        return f"accuracy {q.accuracy:.3f}{interval} on {desc}"
    se = q.perplexity_se
    if short:
        text = f"ppl {q.perplexity:.2f}" + (f" ± {se:.2g}" if se is not None and math.isfinite(se) else "")
        return text + (f", acc {q.accuracy:.3f}" if q.accuracy is not None else "")
    ci = q.perplexity_ci95
    interval = f", 95% CI {ci[0]:.4g}-{ci[1]:.4g}" if ci else ""
    return f"{q.name} {q.perplexity:.3f} ({desc}{interval})"


# a quality logged as plain metrics (no Quality measurement), in the order a line names one
_PLAIN_QUALITY = (
    ("map_50", "mAP@.5"),
    ("miou", "mean IoU"),
    ("knn_accuracy", "k-NN accuracy"),
    ("wer", "word error rate"),
    ("accuracy", "accuracy"),
)


def _plain_quality(m: dict) -> str | None:
    """A detector's, segmenter's, backbone's, CTC recogniser's or token classifier's headline quality
    with its uncertainty, or None."""
    for key, name in _PLAIN_QUALITY:
        if key in m:
            se = m.get(f"{key}_se")
            err = f" ± {se:.2g}" if se is not None and math.isfinite(se) else ""
            if f"{key}_ci_low" in m:
                err = f" ({m[f'{key}_ci_low']:.2f}-{m[f'{key}_ci_high']:.2f})"
            return f"{name} {m[key]:.3f}{err}"
    return None


# -- quality with its uncertainty ---------------------------------------------------------------
# figures logged in nats (drawn apart from scores in [0, 1]), and the names the plot gives figures
_NOT_QUALITY = ("latency", "per_s", "bytes", "_ms", "seconds")  # speed and memory figures
_NATS = {"loss": "nats", "delta_loss": "nats vs unquantized", "kl": "nats vs unquantized"}
_FIGURES = {
    "map": "mAP@[.5:.95]",
    "map_50": "mAP@.5",
    "miou": "mean IoU",
    "knn_accuracy": "k-NN accuracy",
    "top1_agree": "same top-1 as unquantized",
    "delta_loss": "loss change",
    "kl": "KL(unquantized || quantized)",
    "unquantized_map_50": "mAP@.5 against the unquantized detections",
    "unquantized_miou": "mean IoU against the unquantized maps",
    "pixel_agree": "pixels agreeing with the unquantized maps",
    "embedding_drift": "cosine drift from the unquantized embeddings",
    "unquantized_wer": "WER against the unquantized transcripts",
}


def _share_interval(record: dict, key: str, n) -> tuple[float, float] | None:
    """The Wilson interval of the share ``record[key]`` over ``n`` units clustered in windows, at the
    effective count its standard error ``<key>_se`` implies; None without both."""
    from modelxray.metrics.measurements.quality import clustered_wilson

    share, se = record.get(key), record.get(f"{key}_se")
    if share is None or se is None or not n or not (math.isfinite(share) and math.isfinite(se)):
        return None
    return clustered_wilson(share, se, n)


def quality_intervals(result) -> list[dict]:
    """Every quality figure of ``result`` that has a 95% interval, as rows ``{panel, figure, value,
    low, high}``: a language model's perplexity (exp of the loss's interval) and top-1 accuracy
    (windows as units), and against its reference the perplexity ratio, top-1 agreement, loss change
    and KL; a classifier's top-k accuracies (Wilson) and, after quantization, the
    unquantized accuracy, top-1 agreement (Wilson), the paired accuracy and loss changes and the KL
    (normal, from their standard errors); a generic model's cosine similarity per output."""
    rows: list[dict] = []
    q = result.measurements.get("quality")
    info = result.data.get("quality", {})

    def add(panel: str, figure: str, record: dict, key: str, bounds=None) -> None:
        value = record.get(key)
        bounds = bounds if bounds is not None else interval_of(record, key)
        if value is None or bounds is None or not all(math.isfinite(x) for x in (value, *bounds)):
            return
        rows.append({"panel": panel, "figure": figure, "value": float(value), "low": bounds[0], "high": bounds[1]})

    if isinstance(q, Quality) and not q.is_classifier:
        m = q.to_metrics()
        name = q.name.split(" (")[0]  # "answer perplexity (teacher-forced)" -> "answer perplexity"
        add(name, name, m, "perplexity")
        predicted = "next-token accuracy" if q.name == "perplexity" else "scored-token accuracy"
        add(predicted, "top-1 accuracy", m, "accuracy")
        vs = info.get("vs_reference") or {}
        if vs:  # against the reference: the model before quant=, or reference=
            who = "reference" if str(vs.get("reference", "")).startswith("the reference") else "unquantized"
            add(f"ratio to {who}", "perplexity ratio", vs, "ppl_ratio")
            agree = _share_interval(vs, "top1_agree", q.n_scored)  # Wilson: a share near 1 stays below 1
            add(f"agreement with {who}", "same top-1 token", vs, "top1_agree", agree)
            add(f"nats vs {who}", "loss change", vs, "delta_loss")
            kl = interval_of(vs, "kl")  # a KL is never below 0
            add(f"nats vs {who}", f"KL({who} || model)", vs, "kl", kl and (max(kl[0], 0.0), kl[1]))
    elif isinstance(q, Quality):
        n = q.n_scored or 0
        for k, v in sorted(q.accuracy_at.items()):
            if n > 0:
                add("accuracy", f"top-{k} accuracy", {"v": v}, "v", wilson_interval(round(v * n), n))
        vs = info.get("vs_unquantized") or {}
        if vs and n > 0 and vs.get("unquantized_accuracy") is not None:
            ref = vs["unquantized_accuracy"]
            add("accuracy", "unquantized top-1", vs, "unquantized_accuracy", wilson_interval(round(ref * n), n))
        add("accuracy", "same top-1 as unquantized", vs, "top1_agree")
        add("change vs unquantized", "accuracy change", vs, "delta_accuracy")
        add("nats vs unquantized", "loss change", vs, "delta_loss")
        kl = interval_of(vs, "kl")  # a KL is never below 0
        add("nats vs unquantized", "KL(unquantized || quantized)", vs, "kl", kl and (max(kl[0], 0.0), kl[1]))
    elif not result.tables.get("output_agreement"):  # a token classifier, a detector, a segmenter, a backbone
        for key in sorted(result.metrics):
            if key.endswith(("_se", "_ci_low", "_ci_high")) or any(u in key for u in _NOT_QUALITY):
                continue
            if interval_of(result.metrics, key) is not None:
                add(_NATS.get(key, "score"), _FIGURES.get(key, key.replace("_", " ")), result.metrics, key)
    for row in result.tables.get("output_agreement") or []:
        bounds = interval_of(row, "cosine")
        if bounds is not None:  # a cosine similarity is at most 1
            bounds = (bounds[0], min(bounds[1], 1.0))
        add("cosine vs unquantized outputs", str(row.get("output", "output")), row, "cosine", bounds)
    return rows


def _quality(result):
    """One panel per unit (perplexity, proportions, nats, ...), each figure a point with its 95%
    interval; change panels carry a line at zero (no change)."""
    rows = pd.DataFrame(quality_intervals(result))
    panels = list(dict.fromkeys(rows["panel"]))
    tallest = int(rows.groupby("panel").size().max())
    ncols = min(3, len(panels))  # wrapped in rows of three: five panels side by side are too flat to read
    nrows = -(-len(panels) // ncols)
    fig, axes = new_figure(ncols=ncols, nrows=nrows, width=5.5, height=max(2.6, 0.5 * tallest + 1.6))
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels):
        df = rows[rows["panel"] == panel].reset_index(drop=True)
        y = list(range(len(df)))
        err = [(df["value"] - df["low"]).clip(lower=0), (df["high"] - df["value"]).clip(lower=0)]
        ax.errorbar(df["value"], y, xerr=err, fmt="o", color="#1f3b5c", ecolor="#1f3b5c", capsize=4, lw=1.2)
        for i, r in df.iterrows():
            ax.annotate(f"{r['value']:.4g}", (r["value"], i), textcoords="offset points", xytext=(0, 7), ha="center")
        if "change" in panel or "nats" in panel:
            ax.axvline(0.0, color="#888", lw=0.8, ls="--")
        elif panel.startswith("ratio to"):
            ax.axvline(1.0, color="#888", lw=0.8, ls="--")
        ax.set_yticks(y, df["figure"])
        ax.set_ylim(-0.7, len(df) - 0.3)
        ax.invert_yaxis()
        ax.set_title(panel)
        ax.xaxis.set_major_locator(MaxNLocator(5))  # a narrow interval would crowd the tick labels
    import textwrap

    line = quality_line(result)
    width = max(60, int(ncols * 5.5 * 14))  # characters that fit the figure's width at this size
    fig.suptitle((textwrap.fill(line, width) + "\n" if line else "") + "error bars: 95% intervals", fontsize=10)
    return fig


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
    fig.suptitle(speed_title(speeds))
    return fig


def speed_title(speeds) -> str:
    """What the speed figure measured: batch sizes, the workload and how many timed passes (the
    quality is the quality figure's title, not this one's)."""
    sizes = ", ".join(str(s.batch_size) for s in speeds)
    runs = sum(len(s.latency.samples_ms) for s in speeds)
    return f"Speed: forward passes at batch size {sizes} ({_workload(speeds[0])}; {runs} timed passes)"


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


_TOP_TYPES = 10  # module types drawn beside the modules


def layer_bars(rows: list[dict], total_ms: float | None = None) -> pd.DataFrame:
    """The layer-time bars: each module's self time (its forward less its timed children's), the
    quantity the table picks them by, largest first, with its share of the forward (``total_ms``,
    what the self times of every module add up to); a table from before self times were kept
    falls back to the inclusive time."""
    df = pd.DataFrame(rows)
    df["ms"] = df["self_ms"] if "self_ms" in df else df["time_ms"]
    df = df.sort_values("ms", ascending=False, kind="stable").reset_index(drop=True)
    df["share"] = df["ms"] / total_ms if total_ms else math.nan
    return df


def type_bars(result) -> pd.DataFrame:
    """Self time per module type as a share of the forward, largest first (the ``time_by_module_type``
    table): a layer type spread over many modules, each small, is where the time goes."""
    df = pd.DataFrame(result.tables.get("time_by_module_type") or [], columns=["type", "self_ms", "share"])
    df["share (%)"] = df["share"] * 100
    return df.sort_values("share", ascending=False, kind="stable").head(_TOP_TYPES).reset_index(drop=True)


def _forward_ms(result, rows: list[dict]) -> float:
    """The whole forward: the self times of every module, else the longest inclusive time."""
    total = (result.data.get("layer_time") or {}).get("total_self_ms")
    return float(total) if total else max(r["time_ms"] for r in rows)


def _layers(result):
    """Left: the modules that take the most self time, each with its share of the forward; right:
    the self time of each module type (many small modules of one type add up). Both panels draw the
    quantity the modules were picked by: self time."""
    rows = result.tables["layer_time"]
    self_times = "self_ms" in rows[0]
    total = _forward_ms(result, rows)
    df = layer_bars(rows, total if self_times else None)
    types = type_bars(result) if self_times else pd.DataFrame()
    height = max(3.0, 0.35 * max(len(df), len(types)) + 1.2)
    fig, axes = new_figure(ncols=2 if len(types) else 1, width=7.5, height=height)
    ax = axes[0][0]
    sns.barplot(data=df, y="module", x="ms", hue="type", dodge=False, ax=ax)
    if self_times:
        for i, share in enumerate(df["share"]):
            ax.annotate(f" {share:.0%}", (df["ms"][i], i), va="center", fontsize=8)
        ax.set_xlim(0, df["ms"].max() * 1.2)
    ax.set_xlabel("self time: exclusive of child modules (ms)" if self_times else "forward time, inclusive (ms)")
    ax.set_ylabel("")
    what = "self time" if self_times else "inclusive time"
    whole = f"{total:,.0f}" if total >= 100 else f"{total:.3g}"
    ax.set_title(f"Modules with the most {what} (batch 1)\nthe whole forward: {whole} ms", fontsize=10)
    if len(types):
        ax = axes[0][1]
        sns.barplot(data=types, y="type", x="share (%)", ax=ax, color="#7a8fb8")
        for i, share in enumerate(types["share (%)"]):
            ax.annotate(f" {share:.0f}%", (share, i), va="center", fontsize=8)
        ax.set_xlim(0, types["share (%)"].max() * 1.2)
        ax.set_xlabel("self time: share of the whole forward (%)")
        ax.set_ylabel("")
        ax.set_title("Self time by module type (batch 1)", fontsize=10)
    return fig


def panel(ax, result) -> None:
    """Dashboard panel: throughput per batch size, with the headline quality numbers."""
    speeds = list(result.measurements_of(Speed).values())
    if speeds:
        thr, label = _throughput(speeds)
        thr["batch size"] = thr["batch size"].astype(str)
        sns.barplot(data=thr, x="batch size", y=label, ax=ax, color="#5a9e6f")
    else:  # not timed (a model streamed from disk): what the run did instead of empty axes
        import textwrap

        ax.axis("off")
        note = (result.data.get("streaming") or {}).get("summary", "Speed was not measured.")
        ax.text(0.5, 0.5, textwrap.fill(note, 60), ha="center", va="center", fontsize=9, transform=ax.transAxes)
    mem = result.measurements.get("memory")
    text = []
    line = quality_line(result, short=True)
    if line:
        text.append(line)
    if isinstance(mem, Memory):
        text.append(f"weights {human_bytes(mem.param_bytes)}")
    ax.set_title("performance: " + ", ".join(text), fontsize=10)
