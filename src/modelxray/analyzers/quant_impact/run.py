"""The work of the quant_impact analyzer (its keys, checks and description: ``config.py``)."""

from __future__ import annotations

import gc
import math
import time

import torch

from modelxray.analyzers.quant_impact.config import PRIORITIES, load_strategy
from modelxray.core.errors import ConfigError
from modelxray.core.formatting import human_bytes
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext
from modelxray.measure.hardware import hardware_profile, strategy_support
from modelxray.measure.memory_timeline import MemoryTimeline
from modelxray.measure.reference import Reference
from modelxray.measure.scoring import model_device
from modelxray.measure.speed import time_forward
from modelxray.metrics.measurements import Latency
from modelxray.metrics.memory import tensor_bytes_by_dtype
from modelxray.metrics.windows import make_windows, speed_inputs


def efficiency_scores(rows: list[dict], priority: str) -> list[float]:
    """Weighted geometric mean of quality (baseline ppl / ppl), speed (tokens/s vs baseline) and memory
    (baseline bytes / bytes), each capped at the best strategy's value: 1.0 = best on every axis."""
    wq, ws, wm = PRIORITIES[priority]
    axes = [(r["quality_ratio"], r["speed_ratio"], r["memory_ratio"]) for r in rows]
    best = [max(a[i] for a in axes) or 1.0 for i in range(3)]
    return [math.exp(sum(w * math.log(max(a[i] / best[i], 1e-9)) for i, w in enumerate((wq, ws, wm)))) for a in axes]


def run(cfg, subject, ctx: RunContext) -> Result:
    if subject.data is None:
        raise ConfigError("analyzer.quant_impact", "needs a dataset of token windows (not a user DataLoader)")
    profile = hardware_profile()
    windows = make_windows(subject.data.ids, subject.data.seq_len, "disjoint")[: cfg.eval_windows]
    ref = Reference(subject.model, windows, cfg.batch_size, cfg.kl_windows, ctx.progress, "quant_impact: reference")
    device = model_device(subject.model)
    batch = speed_inputs(subject.data.ids, cfg.speed_batch_size, subject.data.seq_len).to(device)
    rows, timelines, unsupported = [], [], []
    for name in bar(cfg.strategies, desc="quant_impact: strategies", enabled=ctx.progress):
        quantizer = load_strategy(name)
        ok, why = strategy_support(quantizer, profile)
        if not ok:
            unsupported.append({"strategy": name, "reason": why})
            continue
        rows.append(_measure(cfg, name, quantizer, why, subject, ref, batch, device, timelines, ctx))
        gc.collect()
    base = next((r for r in rows if r["strategy"] == "none"), rows[0] if rows else None)
    result = cfg.new_result()
    result.data.update(
        {"hardware": profile, "unsupported": unsupported, "priority": cfg.priority, "reference": ref.metrics}
    )
    if not rows:
        return result
    for r in rows:
        r["quality_ratio"] = base["perplexity"] / r["perplexity"]
        r["speed_ratio"] = r["tokens_per_s"] / base["tokens_per_s"]
        r["memory_ratio"] = base["weight_bytes"] / r["weight_bytes"]
        r["memory_saved_bytes"] = base["weight_bytes"] - r["weight_bytes"]
        r["quality_per_gb"] = r["quality_ratio"] / (r["weight_bytes"] / 2**30)
        r["inference_overhead_bytes"] = r["peak_inference_rss"] - r["rss_after_quantize"]
    for priority in PRIORITIES:
        for r, score in zip(rows, efficiency_scores(rows, priority)):
            r[f"score_{priority}"] = score
    result.tables["strategies"] = rows
    result.tables["memory_timeline"] = timelines
    result.tables["unsupported"] = unsupported
    for r in rows:
        for k in (
            "perplexity",
            "kl",
            "top1_agree",
            "latency_p50_ms",
            "tokens_per_s",
            "weight_bytes",
            "stored_bytes",
            "peak_quantize_rss",
            "peak_inference_rss",
            "quantize_seconds",
            "quality_per_gb",
            f"score_{cfg.priority}",
        ):
            result.metrics[f"{r['strategy']}_{k}"] = r[k]
    result.data["recommendations"] = _recommend(cfg, rows, profile)
    result.insights.extend(_insights(cfg, rows, unsupported, profile))
    result.texts.update(_export(rows, timelines))
    return result


def _measure(cfg, name, quantizer, support, subject, ref, batch, device, timelines, ctx) -> dict:
    with MemoryTimeline(cfg.memory_interval_ms / 1000, device) as tl:
        with tl.phase("load"):
            pass  # the model is already loaded: this marks the baseline level
        start = time.perf_counter()
        with tl.phase("quantize"):
            qsubject, report = quantizer.apply(subject)
        quantize_s = time.perf_counter() - start
        after_quantize = tl.samples[-1].rss
        with tl.phase("inference"):
            m = ref.evaluate(qsubject.model, progress=ctx.progress, desc=f"quant_impact: {name}")
            times = time_forward(qsubject.model, batch, cfg.warmup, cfg.iters, progress=False)
    stored = sum(sum(d.values()) for d in tensor_bytes_by_dtype(qsubject.model).values())
    weight_bytes = report.metrics["model_bytes_after"] if report is not None else stored
    lat = Latency.from_values(times)
    for s in tl.rows():
        timelines.append({"strategy": name, **s})
    row = {
        "strategy": name,
        "method": (report.data.get("method") if report else "none"),
        "support": support,
        "simulated": "simulated" in support,
        **{k: m[k] for k in ("loss", "perplexity", "kl", "top1_agree")},
        "latency_p50_ms": lat.p50_ms,
        "latency_p95_ms": lat.p95_ms,
        "tokens_per_s": batch.numel() / lat.mean_s,
        "weight_bytes": weight_bytes,
        "stored_bytes": stored,
        "effective_bits": report.metrics["effective_bits"] if report is not None else 32.0,
        "rss_at_load": tl.peak("load"),
        "peak_quantize_rss": tl.peak("quantize"),
        "rss_after_quantize": after_quantize,
        "peak_inference_rss": tl.peak("inference"),
        "quantize_seconds": quantize_s,
    }
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        row.update(
            {
                "cuda_peak_reserved": tl.peak("inference", "cuda_reserved"),
                "cuda_peak_allocated": tl.peak("inference", "cuda_allocated"),
                "cuda_fragmentation_bytes": torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device),
                "cuda_inactive_split_bytes": stats.get("inactive_split_bytes.all.current", 0),
            }
        )
    del qsubject
    return row


def _recommend(cfg, rows: list[dict], profile: dict) -> dict:
    out = {}
    for priority in PRIORITIES:
        best = max(rows, key=lambda r: r[f"score_{priority}"])
        out[priority] = {
            "strategy": best["strategy"],
            "score": best[f"score_{priority}"],
            "perplexity": best["perplexity"],
            "weight_mb": best["weight_bytes"] / 2**20,
        }
    return out


def _insights(cfg, rows, unsupported, profile) -> list[str]:
    gpu = ", ".join(g["name"] for g in profile["gpus"]) or "no GPU"
    out = [
        f"Hardware: {profile['cpu_model']} ({profile['physical_cores']} cores, "
        f"{profile['ram_bytes'] / 2**30:.0f} GiB), {gpu}; torch {profile['torch']}."
    ]
    base = next((r for r in rows if r["strategy"] == "none"), rows[0])
    best = max(rows, key=lambda r: r[f"score_{cfg.priority}"])
    out.append(
        f"For priority '{cfg.priority}', use {best['strategy']}: perplexity {best['perplexity']:.3f} "
        f"(baseline {base['perplexity']:.3f}), weights {human_bytes(best['weight_bytes'])} "
        f"(baseline {human_bytes(base['weight_bytes'])}), {best['tokens_per_s']:,.0f} tokens/s "
        f"(baseline {base['tokens_per_s']:,.0f})."
    )
    sim = [r["strategy"] for r in rows if r["simulated"]]
    if sim:
        out.append(
            f"{', '.join(sim)} are simulated here: their quality is exact, but their speed and process "
            "memory are those of the float model; their weight size is the packed format's."
        )
    for r in rows:
        if r["strategy"] != base["strategy"] and r["quality_ratio"] < 0.8:
            out.append(
                f"{r['strategy']} loses much quality: perplexity {r['perplexity']:.2f} vs {base['perplexity']:.2f}."
            )
    for u in unsupported:
        out.append(f"{u['strategy']} cannot run here: {u['reason']}.")
    return out


def _export(rows: list[dict], timelines: list[dict]) -> dict[str, str]:
    """The strategy table and the memory timeline as CSV files of the run (written by the report)."""
    import pandas as pd

    return {
        "quant_impact_strategies.csv": pd.DataFrame(rows).to_csv(index=False),
        "quant_impact_memory_timeline.csv": pd.DataFrame(timelines).to_csv(index=False),
    }
