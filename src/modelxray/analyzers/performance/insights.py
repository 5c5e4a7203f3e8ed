"""Sentences about a performance result, each with the numbers behind it; the thresholds are the
analyzer's own config keys (``analyzer.performance.realtime_latency_ms`` ...). A language model is
described in tokens (perplexity, tokens/s), a classifier in examples (accuracy, examples/s)."""

from __future__ import annotations

from modelxray.core.formatting import human_bytes
from modelxray.metrics.measurements import Memory, Quality, Speed


def performance_insights(result, t) -> list[str]:
    """Quality, tail latency, batching gain, the slowest module type and memory, in sentences."""
    out = []
    q = result.measurements.get("quality")
    if isinstance(q, Quality) and q.is_classifier:
        out.append(_classifier_quality(result, q))
    elif isinstance(q, Quality):
        bpb = float("nan") if q.bits_per_byte is None else q.bits_per_byte
        desc = result.data.get("quality", {}).get("protocol_description", "")
        out.append(
            f"Perplexity {q.perplexity:.3f} (loss {q.loss:.4f} nats/token, {bpb:.3f} bits/byte) over "
            f"{int(q.n_scored or 0):,} scored tokens, {desc}. Top-1 next-token accuracy {q.accuracy or 0:.3f}."
        )
    speeds = list(result.measurements_of(Speed).values())
    for s in speeds:
        lat = s.latency
        ratio = lat.p99_ms / lat.p50_ms if lat.p50_ms else 1.0
        if ratio > t.tail_ratio:
            out.append(
                f"Batch {s.batch_size}: tail latency is jittery (p99 {lat.p99_ms:.1f} ms = "
                f"{ratio:.2f}x p50 {lat.p50_ms:.1f} ms); pin threads or isolate the machine for latency work."
            )
    if len(speeds) > 1:
        lo, hi = speeds[0], speeds[-1]
        lo_tps, hi_tps = lo.throughput.items_per_s, hi.throughput.items_per_s
        gain = hi_tps / lo_tps
        out.append(
            f"Batching {lo.batch_size} -> {hi.batch_size} changes throughput {gain:.2f}x "
            f"({lo_tps:,.0f} -> {hi_tps:,.0f} {hi.unit}/s)"
            + ("; the machine is already saturated at small batches." if gain < 1.2 else ".")
        )
    types = result.tables.get("time_by_module_type") or []
    if types:
        top = types[0]
        out.append(
            f"{top['type']} modules take {top['share']:.0%} of forward time in their own code, excluding "
            f"submodules ({top['self_ms']:.1f} ms of {result.metrics.get('layer_time_total_ms', 0):.1f} ms at "
            "batch 1): the first place to look for a speed-up."
        )
    mem = result.measurements.get("memory")
    if isinstance(mem, Memory):
        out.append(
            f"Weights take {human_bytes(mem.param_bytes)} ({mem.num_parameters:,} parameters); "
            f"the process peaked at {human_bytes(mem.peak_rss_bytes)} resident."
        )
    return out


def _classifier_quality(result, q: Quality) -> str:
    info = result.data.get("quality", {})
    desc = info.get("protocol_description", "the test split")
    if q.accuracy is None:
        return f"Loss {q.loss:.4f} nats/example over {desc}."
    ci = q.accuracy_ci95
    interval = f" (95% Wilson interval {ci[0]:.3f}-{ci[1]:.3f})" if ci else ""
    correct = f"{int(info['correct']):,} of {int(q.n_scored or 0):,} correct, " if "correct" in info else ""
    topk = "".join(f", top-{k} accuracy {v:.3f}" for k, v in sorted(q.accuracy_at.items()) if k != 1)
    return f"Accuracy {q.accuracy:.3f}{interval}: {correct}on {desc}; loss {q.loss:.4f} nats/example{topk}."


def is_simulated(quant_result) -> bool:
    """RTN, GPTQ and AWQ keep float weights that hold quantized values; casts and torchao are real."""
    method = str(quant_result.data.get("method", ""))
    return not (method.startswith("cast") or method.startswith("torchao"))


def deployment_insights(perf, results: dict, t) -> list[str]:
    """Edge, real-time and server verdicts against the thresholds ``t`` (the analyzer's own keys),
    using the packed size of a simulated quantization when the run quantized."""
    speeds = list(perf.measurements_of(Speed).values())
    if not speeds:
        return []
    mem = perf.measurements.get("memory")
    out = []
    weight_mb, what = (mem.param_bytes if isinstance(mem, Memory) else 0) / 2**20, "weights"
    quant = results.get("quant")
    if quant is not None and quant.ok and is_simulated(quant):
        weight_mb, what = quant.metrics["model_bytes_after"] / 2**20, "packed quantized weights"
        out.append(
            f"Quantization here is simulated in float32: measured memory and latency are those of the float "
            f"model; the packed format would take {human_bytes(weight_mb * 2**20)}. Use quant=int8_torchao for real int8 kernels."
        )
    verdict = "fits" if weight_mb <= t.edge_max_weight_mb else "does not fit"
    out.append(
        f"Edge: {what} {human_bytes(weight_mb * 2**20)} {verdict} a {t.edge_max_weight_mb:.0f} MiB budget"
        + (
            "."
            if weight_mb <= t.edge_max_weight_mb
            else "; 8-bit or 4-bit weights would take 4x or 8x less than float32."
        )
    )
    bs1 = next((s for s in speeds if s.batch_size == 1), None)
    if bs1:
        lat = bs1.latency
        ok = lat.p95_ms <= t.realtime_latency_ms
        spread = f", mean {lat.mean_ms:.1f} ± {lat.ci95_half_ms:.1f} ms at 95% confidence" if lat.count > 1 else ""
        what = f"{bs1.seq_len} tokens" if bs1.seq_len is not None else "one example"
        out.append(
            f"Real-time: p95 latency at batch 1 is {lat.p95_ms:.1f} ms for {what} "
            f"({lat.count} runs{spread}), {'within' if ok else 'over'} the {t.realtime_latency_ms:.0f} ms target."
        )
    best = max(speeds, key=lambda s: s.throughput.items_per_s)
    best_tps, unit = best.throughput.items_per_s, best.unit
    target = t.server_min_tokens_per_s if unit == "tokens" else t.server_min_examples_per_s
    ok = best_tps >= target
    out.append(
        f"Server: best throughput {best_tps:,.0f} {unit}/s at batch {best.batch_size}, "
        f"{'above' if ok else 'below'} the {target:,.0f} {unit}/s target on this hardware."
    )
    return out
