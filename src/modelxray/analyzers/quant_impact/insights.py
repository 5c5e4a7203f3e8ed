"""The quant_impact analyzer's observations (insights.md): the hardware, the strategy to use for the
run's priority with its quality, size and speed against the baseline, which strategies are simulated,
those the text cannot tell apart from the unquantized model, strategies that lose quality, those that
cannot run here, and where the original weights were kept. Pure functions of the Result (its tables
and data, as saved in ``results/quant_impact.json``) and the analyzer's config, so a reloaded Result
says the same."""

from __future__ import annotations

import math

from modelxray.analyzers.quant_impact.config import PRIORITIES
from modelxray.core.formatting import human_bytes
from modelxray.core.result import Result
from modelxray.metrics.distinguish import indistinguishable


def insights(result: Result, results: dict[str, Result], cfg) -> list[str]:
    """Every sentence, in the order of insights.md; none for a failed result or one without strategies."""
    rows = result.tables.get("strategies") or []
    if not result.ok or not rows:
        return []
    out = strategy_insights(cfg.priority, rows, result.data)
    streaming = result.data.get("streaming")
    if streaming:
        out.append(streamed_text(streaming))
    else:
        out += memory_life(rows, result.data.get("load_memory"))
    out += fragmentation(rows, result.data.get("fragmentation_share", 0.25))
    if "original_weights" in result.data:
        names = result.data.get("in_place") or ["each strategy that can"]
        out.append(f"Memory: {', '.join(names)} quantized the model in place. {result.data['original_weights']}")
    return out


def strategy_name(strategy: str) -> str:
    """A strategy as a sentence names it: ``none`` is the model unquantized, never the word "none"."""
    return "none (the model unquantized)" if strategy == "none" else strategy


def over_budget(left_out: list[str]) -> str:
    """What the budget leaves out, as the end of the budget sentence."""
    if not left_out:
        return "every strategy fits it."
    if len(left_out) == 1:
        return f"the strategy {strategy_name(left_out[0])} exceeds it and is not recommended."
    names = ", ".join(strategy_name(s) for s in left_out[:-1]) + f" and {strategy_name(left_out[-1])}"
    return f"the strategies {names} exceed it and are not recommended."


def strategy_insights(priority: str, rows: list[dict], data: dict) -> list[str]:
    """The sentences about the strategies ``rows`` for ``priority``. ``data``: the Result's, with
    ``scoring`` (``run._Mode.scoring``: ``classifier``, one score per example, else a perplexity;
    ``throughput``, the column of speed, and its ``unit``; a classifier's ``examples``), the quality's
    name, the hardware profile, the strategies that could not run and the unquantized reference."""
    scoring, profile, quality_name = data["scoring"], data["hardware"], data["quality_metric"]
    classifier, throughput, unit = scoring["classifier"], scoring["throughput"], scoring["unit"]
    gpu = ", ".join(g["name"] for g in profile["gpus"]) or "no GPU"
    out = [
        f"Hardware: {profile['cpu_model']} ({profile['physical_cores']} cores, "
        f"{profile['ram_bytes'] / 2**30:.0f} GiB), {gpu}; torch {profile['torch']}."
    ]
    base = next((r for r in rows if r["strategy"] == "none"), rows[0])
    budget = data.get("budget") or {}
    allowed = [r for r in rows if r.get("within_budget", True) and not r.get("fidelity_broken")]
    moved = [r for r in rows if r.get("within_budget", True) and r.get("fidelity_broken")]
    bounds_said = []  # after the recommendation: what the agreement bounds kept out of it
    if moved:
        fid = data.get("fidelity", {})
        bounds_said.append(
            f"Not recommended whatever their score, their outputs moved too far from "
            f"{data.get('baseline', 'the unquantized model')} (top-1 agreement at least {fid.get('agreement_floor', 0.9):g}, "
            f"KL at most {fid.get('kl_ceiling', 0.25):g}): "
            + "; ".join(f"{r['strategy']} ({', '.join(r['fidelity_broken'])})" for r in moved)
            + "."
        )
    if budget:
        limits = " and ".join(
            f"weights within {v:g} GB" if k == "max_memory_gb" else f"median latency within {v:g} ms"
            for k, v in budget.items()
        )
        left_out = [r["strategy"] for r in rows if not r.get("within_budget", True)]
        out.append(f"Budget: {limits}; {over_budget(left_out)}")
    if not allowed:
        smallest = min(rows, key=lambda r: r["weight_bytes"])
        timed = [r for r in rows if not math.isnan(r["latency_p50_ms"])]
        fastest = min(timed, key=lambda r: r["latency_p50_ms"]) if timed else None
        small = f"{strategy_name(smallest['strategy'])} ({human_bytes(smallest['weight_bytes'])})"
        fast = (
            f", the fastest {strategy_name(fastest['strategy'])} ({fastest['latency_p50_ms']:.1f} ms)"
            if fastest
            else ""
        )
        out.append(f"No strategy meets the budget and the agreement bounds: the smallest is {small}{fast}.")
        return out
    best = max(allowed, key=lambda r: r[f"score_{priority}"])
    by_score = max((r for r in rows if r.get("within_budget", True)), key=lambda r: r[f"score_{priority}"])
    if by_score is not best:
        bounds_said.append(
            f"The '{priority}' score alone would pick {by_score['strategy']}; the agreement bound decided "
            f"against it ({', '.join(by_score['fidelity_broken'])})."
        )
    baseline = data.get("baseline", "the unquantized model")
    if baseline != "the unquantized model":  # reference=: another model is what every strategy is compared with
        out.append(
            f"Every loss change, KL and agreement is against {baseline} on the same tokens; 'none' is the model "
            "as loaded, compared with it like the others."
        )
    if classifier:
        quality = (
            f"{quality_name} {best['accuracy']:.3f} (baseline {base['accuracy']:.3f}, "
            f"{scoring['examples']:,} test examples)"
        )
    elif data.get("ranked_by"):  # ranked by an lm-eval task's metric
        quality = (
            f"{data['ranked_by']} {best['task_score']:.3f} (baseline {base['task_score']:.3f}; ranked by it), "
            f"perplexity {best['perplexity']:.3f} (baseline {base['perplexity']:.3f})"
        )
    else:
        quality = f"perplexity {best['perplexity']:.3f} (baseline {base['perplexity']:.3f})"
    speed = (
        "" if math.isnan(best[throughput]) else f", {best[throughput]:,.0f} {unit} (baseline {base[throughput]:,.0f})"
    )
    out.append(
        f"For priority '{priority}', use {best['strategy']}: {quality}, weights {human_bytes(best['weight_bytes'])} "
        f"(baseline {human_bytes(base['weight_bytes'])}){speed}."
    )
    out += bounds_said
    smallest = min(allowed, key=lambda r: r["weight_bytes"])
    if priority in PRIORITIES and smallest is not best and smallest["weight_bytes"] < best["weight_bytes"]:
        wq, ws, wm = PRIORITIES[priority]
        out.append(
            f"The smallest, {smallest['strategy']} ({human_bytes(smallest['weight_bytes'])}), is not recommended: "
            f"the '{priority}' score weighs memory {wm:.2g}, quality {wq:.2g} and speed {ws:.2g}, and {smallest['strategy']} "
            f"keeps {smallest['quality_ratio']:.2f} of the baseline's quality against {best['quality_ratio']:.2f}."
        )
    sim = [r["strategy"] for r in rows if r["simulated"]]
    if sim and not data.get("streaming"):
        out.append(
            f"{', '.join(sim)} are simulated here: their quality is exact, but their speed and process "
            "memory are those of the float model; their weight size is the packed format's. They share "
            "one timing of the float model with the baseline, so the speed axis does not rank them by "
            "timing noise."
        )
    if not classifier:
        out += _indistinguishable(rows, base, data["reference"], baseline)
    for r in rows:
        if r["strategy"] == base["strategy"]:
            continue
        if classifier and base["accuracy"] - r["accuracy"] > 0.02:
            out.append(
                f"{r['strategy']} loses {quality_name}: {r['accuracy']:.3f} vs {base['accuracy']:.3f} "
                f"(agrees with the unquantized model on {r['top1_agree']:.1%} of examples)."
            )
        elif not classifier and r["quality_ratio"] < 0.8:
            out.append(
                f"{r['strategy']} loses much quality: perplexity {r['perplexity']:.2f} vs {base['perplexity']:.2f}."
            )
    for u in data["unsupported"]:
        out.append(f"{u['strategy']} cannot run here: {u['reason']}.")
    return out


def streamed_text(streaming: dict) -> str:
    """What streaming the model block by block cost the strategies (``streamed.streamed_rows``)."""
    return (
        f"Streamed from disk block by block: the {streaming['strategies']} strategies that quantize one block at a "
        f"time were scored in {streaming['reads']} read{'s' * (streaming['reads'] != 1)} of the model "
        f"({streaming['weight_reads']:.2f} times its {human_bytes(streaming['model_bytes'])} of weights), in "
        f"{streaming['seconds']:.1f} s; process memory peaked at {human_bytes(streaming['peak_rss'])}. Speed {streaming['speed']}."
    )


def memory_life(rows: list[dict], load: dict | None) -> list[str]:
    """The process memory over the model's life: what loading it cost (once, before any strategy), the
    peak while each strategy quantized it above the process as loaded (its loading phase), and what
    inference added."""
    out = []
    if load:
        out.append(
            f"Loading the model took {load['seconds']:.1f} s; process memory peaked at {human_bytes(load['peak_rss'])} "
            f"({human_bytes(max(load['peak_rss'] - load['rss_before'], 0))} above the process before it), "
            f"{human_bytes(load['rss_after'])} held after."
        )
    quantized = [r for r in rows if r["strategy"] != "none" and "quantize_overhead_bytes" in r]
    if quantized:
        worst = max(quantized, key=lambda r: r["quantize_overhead_bytes"])
        parts = ", ".join(
            f"{r['strategy']} +{human_bytes(max(r['quantize_overhead_bytes'], 0))}"
            for r in sorted(quantized, key=lambda r: -r["quantize_overhead_bytes"])
        )
        out.append(
            f"Quantizing raised process memory above the loaded model by: {parts}. The costliest, "
            f"{worst['strategy']}, needs {human_bytes(worst['peak_quantize_rss'])} at its peak: plan the "
            "machine for that, not for the final weights."
        )
    return out


def fragmentation(rows: list[dict], share: float) -> list[str]:
    """On a GPU: the strategies after which PyTorch's caching allocator keeps more than ``share`` of its
    reserved memory unallocated, and what returns it."""
    out = []
    for r in rows:
        reserved, idle = r.get("cuda_peak_reserved", 0), r.get("cuda_fragmentation_bytes", 0)
        if reserved > 0 and idle / reserved > share:
            out.append(
                f"GPU memory fragmentation after {r['strategy']}: {human_bytes(idle)} of {human_bytes(reserved)} "
                f"reserved is unallocated ({idle / reserved:.0%}; inactive split blocks "
                f"{human_bytes(r.get('cuda_inactive_split_bytes', 0))}). Set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or call torch.cuda.empty_cache() between "
                "models, so the memory other work can use is not held back."
            )
    return out


def _indistinguishable(rows: list[dict], base: dict, reference: dict, baseline: str) -> list[str]:
    """Strategies whose paired loss change against the baseline (the unquantized model, or the
    reference model) is within two standard errors of zero: on the tokens the ``reference`` scored
    they cannot be told apart from it."""
    external = baseline != "the unquantized model"
    same = [
        r
        for r in rows
        if (external or r is not base) and indistinguishable(r.get("delta_loss", math.nan), r.get("delta_loss_se"))
    ]
    if not same:
        return []
    tokens = int(reference["tokens_scored"])
    parts = ", ".join(f"{r['strategy']} ({r['delta_loss']:+.4f} ± {r['delta_loss_se']:.4f} nats)" for r in same)
    return [
        f"Indistinguishable from {baseline if external else base['strategy']} on {tokens:,} tokens (loss change within two standard errors "
        f"of zero, paired by window): {parts}."
    ]
