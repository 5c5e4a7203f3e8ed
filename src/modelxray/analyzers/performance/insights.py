"""Sentences about a performance result, each with the numbers behind it; the thresholds are the
analyzer's own config keys (``analyzer.performance.realtime_latency_ms`` ...). A language model is
described in tokens (perplexity, tokens/s), a classifier in examples (accuracy, examples/s).
Quality figures carry their uncertainty, and a quantized model's change against its unquantized
outputs is called indistinguishable when it is within ``SE_MULTIPLE`` (2) standard errors of zero,
the rule quant_impact and bitwidth apply (``metrics/distinguish.py``)."""

from __future__ import annotations

import math

from modelxray.core.formatting import human_bytes
from modelxray.metrics.distinguish import SE_MULTIPLE, indistinguishable
from modelxray.metrics.measurements import Memory, Quality, Speed


def performance_insights(result, t) -> list[str]:
    """Quality, tail latency, batching gain, the slowest module type and memory, in sentences."""
    out = []
    q = result.measurements.get("quality")
    if isinstance(q, Quality) and q.is_classifier:
        out.append(_classifier_quality(result, q))
        vs = result.data.get("quality", {}).get("vs_unquantized")
        if vs and "delta_accuracy" in vs:
            out.append(against_unquantized(vs, int(q.n_scored or 0)))
    elif isinstance(q, Quality):
        out.append(_lm_quality(result, q))
        vs = result.data.get("quality", {}).get("vs_reference")
        if vs and "top1_agree" in vs:
            out.append(lm_against_reference(vs, int(result.data["quality"].get("windows", 0))))
    elif result.data.get("quality", {}).get("sentence"):  # a detector's, segmenter's or backbone's own words
        out.append(result.data["quality"]["sentence"])
    elif not result.tables.get("output_agreement"):  # a quality logged as plain figures (a token classifier)
        from modelxray.analyzers.performance.plots import quality_line

        line, desc = quality_line(result), result.data.get("quality", {}).get("protocol_description")
        if line:
            out.append(line[0].upper() + line[1:] + (f" on {desc}" if desc else "") + ".")
    if result.data.get("agreement"):  # a text or speech task's scored positions against the unquantized model's
        out.append(task_against_unquantized(result.data["agreement"], int(result.metrics.get("examples", 0))))
    if "generated_examples" in result.metrics:
        out += generated_outputs(result.metrics)
    agreement = result.tables.get("output_agreement") or []
    if agreement:
        out.append(_output_agreement(agreement))
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


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _lm_quality(result, q: Quality) -> str:
    """Perplexity with its 95% interval and the loss with its standard error (windows as units);
    bits per byte where the text's bytes are known (a causal LM's stream), and the perplexity named
    for what it is of (``Quality.name``: masked-token, target, transcript)."""
    desc = result.data.get("quality", {}).get("protocol_description", "")
    ci = q.perplexity_ci95
    interval = f"95% CI {ci[0]:.4g}-{ci[1]:.4g}; " if ci else ""
    loss_err = f" ± {q.loss_se:.4f}" if ci else ""
    bpb = f", {q.bits_per_byte:.3f} bits/byte" if _finite(q.bits_per_byte) else ""
    windows = f" in {int(q.windows):,} windows" if q.windows else ""
    acc_ci = q.accuracy_ci95 if _finite(q.accuracy_se) else None  # Wilson, at the windows' effective count
    acc_err = f" (95% interval {acc_ci[0]:.3f}-{acc_ci[1]:.3f})" if acc_ci else ""
    predicted = "next-token" if q.name == "perplexity" else "predicted-token"
    on = f", {desc}" if desc else ""
    return (
        f"{q.name[0].upper() + q.name[1:]} {q.perplexity:.3f} ({interval}loss {q.loss:.4f}{loss_err} nats/token{bpb}) "
        f"over {int(q.n_scored or 0):,} scored tokens{windows}{on}. Top-1 {predicted} accuracy "
        f"{q.accuracy or 0:.3f}{acc_err}" + ("; uncertainties with the window as the unit." if ci else ".")
    )


def _change(delta: float, se: float, digits: int, unit: str = "") -> str:
    """``-0.0022 ± 0.0022{unit}, within two standard errors of zero`` (or ``beyond``)."""
    err = f" ± {se:.{digits}f}" if _finite(se) else ""
    if not _finite(se):
        verdict = "no standard error"
    elif indistinguishable(delta, se):
        verdict = f"within {SE_MULTIPLE:g} standard errors of zero"
    else:
        verdict = f"beyond {SE_MULTIPLE:g} standard errors"
    return f"{delta:+.{digits}f}{err}{unit}, {verdict}"


def lm_against_reference(vs: dict, windows: int) -> str:
    """A language model against its reference on the same windows: the perplexity ratio and the
    paired loss change (whether it is within its uncertainty), top-1 agreement, and llama.cpp's KL
    statistics on the windows whose reference distributions were kept."""
    label = vs.get("reference", "the reference")
    parts = []
    if _finite(vs.get("delta_loss")):
        ratio_err = f" ± {vs['ppl_ratio_se']:.4f}" if _finite(vs.get("ppl_ratio_se")) else ""
        parts.append(
            f"perplexity ratio {vs['ppl_ratio']:.4f}{ratio_err} (loss change "
            f"{_change(vs['delta_loss'], vs.get('delta_loss_se', math.nan), 4, ' nats/token')}, paired by window)"
        )
    agree_err = f" ± {vs['top1_agree_se']:.1%}" if _finite(vs.get("top1_agree_se")) else ""
    parts.append(f"the same top-1 token on {vs['top1_agree']:.1%}{agree_err} of scored tokens")
    if _finite(vs.get("kl")):
        kl_err = f" ± {vs['kl_se']:.2g}" if _finite(vs.get("kl_se")) else ""
        tail = f", p99 {vs['kl_p99']:.3g}, max {vs['kl_max']:.3g}" if _finite(vs.get("kl_p99")) else ""
        n_kl = min(int(vs.get("kl_windows", windows)), windows)
        parts.append(f"KL {vs['kl']:.3g}{kl_err} nats/token{tail} (the first {n_kl} windows)")
    return f"Against {label} on the same {windows} windows: " + "; ".join(parts) + "."


def task_against_unquantized(vs: dict, n: int) -> str:
    """A masked LM's, seq2seq model's or text classifier's scored positions against the unquantized
    model's on the same examples: the paired loss change, top-1 agreement and KL, each with its error."""
    parts = []
    if _finite(vs.get("delta_loss")):
        parts.append(f"loss change {_change(vs['delta_loss'], vs.get('delta_loss_se', math.nan), 4, ' nats')}")
    if _finite(vs.get("top1_agree")):
        err = f" ± {vs['top1_agree_se']:.1%}" if _finite(vs.get("top1_agree_se")) else ""
        parts.append(f"the same top-1 prediction at {vs['top1_agree']:.1%}{err} of scored positions")
    if _finite(vs.get("kl")):
        err = f" ± {vs['kl_se']:.2g}" if _finite(vs.get("kl_se")) else ""
        parts.append(f"KL {vs['kl']:.3g}{err} nats")
    return f"Against the unquantized model on the same {n:,} examples (paired): " + "; ".join(parts) + "."


def generated_outputs(m: dict) -> list[str]:
    """The greedy outputs: chrF and BLEU against the references, the share that is empty, and against
    the unquantized model's outputs (identical share with its Wilson interval; chrF over the pairs
    where either output has text)."""
    n = int(m["generated_examples"])
    out = []
    if "chrf" in m:
        out.append(
            f"Greedy outputs of {n:,} examples against the references: chrF {m['chrf']:.1f} ± {m['chrf_se']:.1f}, "
            f"BLEU {m['bleu']:.1f} ± {m['bleu_se']:.1f}"
            + (f"; {m['empty_output_share']:.0%} of them are empty." if m.get("empty_output_share") else ".")
        )
    elif m.get("empty_output_share") == 1:
        out.append(f"Every one of the {n:,} greedy outputs is empty.")
    if "unquantized_exact_match" in m:
        same = m["unquantized_exact_match"]
        ci = f" (95% Wilson interval {m['unquantized_exact_match_ci_low']:.3f}-{m['unquantized_exact_match_ci_high']:.3f})"
        both = int(m.get("unquantized_both_empty", 0))
        line = f"Against the unquantized model's greedy outputs: {same:.0%} identical{ci}"
        if both == n:
            line += f"; both models' outputs are empty for all {n:,} examples, so they agree on saying nothing"
        elif "unquantized_chrf" in m:
            left = f", leaving out {both:,} pair(s) where both are empty" if both else ""
            line += f"; chrF {m['unquantized_chrf']:.1f} ± {m['unquantized_chrf_se']:.1f}{left}"
        out.append(line + ".")
    return out


def against_unquantized(vs: dict, n: int) -> str:
    """The paired change of a quantized classifier against its unquantized outputs on the same test
    examples, and whether it is within its uncertainty (then it cannot be told from no change)."""
    da, da_se = vs["delta_accuracy"], vs.get("delta_accuracy_se", math.nan)
    dl, dl_se = vs.get("delta_loss", math.nan), vs.get("delta_loss_se", math.nan)
    acc, ref = vs["unquantized_accuracy"] + da, vs["unquantized_accuracy"]
    if da == 0 and da_se == 0:
        head = "Quantized accuracy equals the unquantized model's: every one of the"
        head += f" {n:,} test examples keeps its verdict (right or wrong)"
    elif indistinguishable(da, da_se):
        head = (
            f"Quantized accuracy is indistinguishable from the unquantized model's on these {n:,} test examples: "
            f"{acc:.3f} vs {ref:.3f}, a change of {_change(da, da_se, 4)} (paired by example)"
        )
    else:
        what = "loses" if da < 0 else "gains"
        head = (
            f"Quantization {what} accuracy beyond its uncertainty: {acc:.3f} vs {ref:.3f} unquantized, "
            f"a change of {_change(da, da_se, 4)} (paired over {n:,} test examples)"
        )
    tail = [f"loss change {_change(dl, dl_se, 4, ' nats')}"] if _finite(dl) else []
    if "top1_agree" in vs:
        ci = (
            f" (95% CI {vs['top1_agree_ci_low']:.1%}-{vs['top1_agree_ci_high']:.1%})"
            if "top1_agree_ci_low" in vs
            else ""
        )
        tail.append(f"same top-1 prediction on {vs['top1_agree']:.1%}{ci}")
    if "kl" in vs:
        kl_err = f" ± {vs['kl_se']:.2g}" if _finite(vs.get("kl_se")) else ""
        tail.append(f"KL {vs['kl']:.3g}{kl_err} nats")
    return head + ("; " + ", ".join(tail) if tail else "") + "."


def _output_agreement(rows: list[dict]) -> str:
    """A generic model after quantization: each output's cosine similarity with its unquantized
    outputs, with the standard error over examples (none for an output of one value per example,
    where it would be trivially 1), and its relative error."""
    parts = []
    for r in rows[:3]:
        err = f" ± {r['cosine_se']:.2g}" if _finite(r.get("cosine_se")) else ""
        cosine = f"cosine {r['cosine']:.6f}{err}, " if "cosine" in r else ""
        text = f"{r['output']} {cosine}relative error {r['rel_error']:.3g}"
        if "top1_agree" in r:
            text += f", top-1 agreement {r['top1_agree']:.1%}"
        parts.append(text)
    more = f" (and {len(rows) - 3} more outputs in the table)" if len(rows) > 3 else ""
    n = int(rows[0].get("examples", 0))
    return (
        f"Outputs against the unquantized model's on {n:,} example(s) (mean ± standard error): "
        + "; ".join(parts)
        + more
        + "."
    )


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


def unpaired_lm_note(perf, results: dict) -> list[str]:
    """A quantized language model is scored here without its unquantized self (a classifier keeps
    its unquantized outputs to compare with): say where the paired change and its verdict are."""
    q, quant = perf.measurements.get("quality"), results.get("quant")
    if not (isinstance(q, Quality) and not q.is_classifier and quant is not None and quant.ok):
        return []
    if perf.data.get("quality", {}).get("vs_reference") or perf.data.get("agreement"):
        return []  # paired with the unquantized outputs above
    return [
        f"The perplexity above is the quantized model's ({quant.data.get('method', 'quantized')}) alone: this run "
        "has no unquantized score on the same windows to pair it with. analyzer=quant_impact measures the paired "
        "loss change against the unquantized model with its standard error and names the strategies it cannot "
        "tell from no quantization."
    ]


def is_simulated(quant_result) -> bool:
    """RTN, GPTQ and AWQ keep float weights that hold quantized values; casts and the libraries'
    quantizers store and run the quantized weights (``Quantizer.simulated``)."""
    return bool(quant_result.data.get("simulated", True))


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


def insights(result, results: dict, cfg) -> list[str]:
    """Every sentence of insights.md: the quality and speed findings, a note when a language model's
    quality has no paired baseline, then the deployment scenarios."""
    return (
        performance_insights(result, cfg)
        + unpaired_lm_note(result, results)
        + deployment_insights(result, results, cfg)
    )
