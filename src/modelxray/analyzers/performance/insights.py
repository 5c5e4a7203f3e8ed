"""Sentences about a performance result, each with the numbers behind it; the thresholds are the
analyzer's own config keys (``analyzer.performance.realtime_latency_ms`` ...)."""

from __future__ import annotations

from modelxray.core.formatting import human_bytes


def performance_insights(result, t) -> list[str]:
    """Quality, tail latency, batching gain, the slowest module type and memory, in sentences."""
    m, out = result.metrics, []
    q = result.data.get("quality", {})
    if "perplexity" in m:
        out.append(
            f"Perplexity {m['perplexity']:.3f} (loss {m['loss']:.4f} nats/token, "
            f"{m.get('bits_per_byte', float('nan')):.3f} bits/byte) over {int(m['tokens_scored']):,} scored "
            f"tokens, {q.get('protocol_description', '')}. Top-1 next-token accuracy {m.get('accuracy', 0):.3f}."
        )
    speed = result.data.get("speed") or []
    for r in speed:
        ratio = r["latency_p99_ms"] / r["latency_p50_ms"] if r["latency_p50_ms"] else 1.0
        if ratio > t.tail_ratio:
            out.append(
                f"Batch {r['batch_size']}: tail latency is jittery (p99 {r['latency_p99_ms']:.1f} ms = "
                f"{ratio:.2f}x p50 {r['latency_p50_ms']:.1f} ms); pin threads or isolate the machine for latency work."
            )
    if len(speed) > 1:
        lo, hi = speed[0], speed[-1]
        gain = hi["tokens_per_s"] / lo["tokens_per_s"]
        out.append(
            f"Batching {lo['batch_size']} -> {hi['batch_size']} changes throughput {gain:.2f}x "
            f"({lo['tokens_per_s']:,.0f} -> {hi['tokens_per_s']:,.0f} tokens/s)"
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
    mem = result.data.get("memory")
    if mem:
        out.append(
            f"Weights take {human_bytes(mem['param_bytes'])} ({mem['num_parameters']:,} parameters); "
            f"the process peaked at {human_bytes(mem['peak_rss_bytes'])} resident."
        )
    return out


def is_simulated(quant_result) -> bool:
    """RTN, GPTQ and AWQ keep float weights that hold quantized values; casts and torchao are real."""
    method = str(quant_result.data.get("method", ""))
    return not (method.startswith("cast") or method.startswith("torchao"))


def deployment_insights(perf, results: dict, t) -> list[str]:
    """Edge, real-time and server verdicts against the thresholds ``t`` (the analyzer's own keys),
    using the packed size of a simulated quantization when the run quantized."""
    if not perf.data.get("speed"):
        return []
    speed, mem = perf.data["speed"], perf.data.get("memory", {})
    out = []
    weight_mb, what = mem.get("param_bytes", 0) / 2**20, "weights"
    quant = results.get("quant")
    if quant is not None and quant.ok and is_simulated(quant):
        weight_mb, what = quant.metrics["model_bytes_after"] / 2**20, "packed quantized weights"
        out.append(
            f"Quantization here is simulated in float32: measured memory and latency are those of the float "
            f"model; the packed format would take {weight_mb:.0f} MiB. Use quant=int8_torchao for real int8 kernels."
        )
    verdict = "fits" if weight_mb <= t.edge_max_weight_mb else "does not fit"
    out.append(
        f"Edge: {what} {weight_mb:.0f} MiB {verdict} a {t.edge_max_weight_mb:.0f} MiB budget"
        + (
            "."
            if weight_mb <= t.edge_max_weight_mb
            else "; 8-bit or 4-bit weights would take 4x or 8x less than float32."
        )
    )
    bs1 = next((r for r in speed if r["batch_size"] == 1), None)
    if bs1:
        ok = bs1["latency_p95_ms"] <= t.realtime_latency_ms
        out.append(
            f"Real-time: p95 latency at batch 1 is {bs1['latency_p95_ms']:.1f} ms for {bs1['seq_len']} tokens, "
            f"{'within' if ok else 'over'} the {t.realtime_latency_ms:.0f} ms target."
        )
    best = max(speed, key=lambda r: r["tokens_per_s"])
    ok = best["tokens_per_s"] >= t.server_min_tokens_per_s
    out.append(
        f"Server: best throughput {best['tokens_per_s']:,.0f} tokens/s at batch {best['batch_size']}, "
        f"{'above' if ok else 'below'} the {t.server_min_tokens_per_s:,.0f} tokens/s target on this hardware."
    )
    return out
