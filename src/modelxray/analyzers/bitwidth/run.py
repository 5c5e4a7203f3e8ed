"""The work of the bitwidth analyzer (its keys, checks and description: ``config.py``)."""

from __future__ import annotations

import copy
import time

from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext
from modelxray.measure.reference import Reference
from modelxray.metrics.pareto import pareto_front
from modelxray.metrics.windows import make_windows
from modelxray.quant.targets import find_targets, num_blocks
from modelxray.quant.weight import WeightQuantizer, quantize_model


def _fmt(cfg, bits: int, rules: list | None = None, targets: list | None = None) -> dict:
    return dict(
        bits=bits,
        symmetric=cfg.symmetric,
        granularity=cfg.granularity,
        group_size=cfg.group_size,
        scale_dtype=cfg.scale_dtype,
        targets=cfg.targets if targets is None else targets,
        rules=rules or [],
    )


def configurations(cfg, n_blocks: int) -> dict[str, WeightQuantizer]:
    hi, lo = cfg.high_bits, cfg.low_bits
    out = {f"uniform_int{b}": WeightQuantizer(**_fmt(cfg, b)) for b in cfg.uniform_bits}
    if cfg.mixed:
        out[f"mixed_attn{hi}_mlp{lo}"] = WeightQuantizer(**_fmt(cfg, lo, [{"component": "attention", "bits": hi}]))
        out[f"mixed_attn{lo}_mlp{hi}"] = WeightQuantizer(**_fmt(cfg, lo, [{"component": "mlp", "bits": hi}]))
    if cfg.progressive and n_blocks > 2 * cfg.progressive_edge:
        edge = list(range(cfg.progressive_edge)) + [-(i + 1) for i in range(cfg.progressive_edge)]
        out[f"progressive_{lo}_edges{hi}"] = WeightQuantizer(**_fmt(cfg, lo, [{"blocks": edge, "bits": hi}]))
    for name, rules in cfg.custom.items():
        out[f"custom_{name}"] = WeightQuantizer(**_fmt(cfg, lo, rules))
    return out


def run(cfg, subject, ctx: RunContext) -> Result:
    if subject.data is None:
        raise ConfigError("analyzer.bitwidth", "needs a dataset of token windows (not a user DataLoader)")
    windows = make_windows(subject.data.ids, subject.data.seq_len, "disjoint")
    if cfg.max_windows:
        windows = windows[: cfg.max_windows]
    work = copy.deepcopy(subject.model)
    targets = find_targets(work)
    originals = {t.name: t.weight_matrix().detach().clone() for t in targets}
    restore = lambda: [t.set_weight_matrix(originals[t.name]) for t in targets]  # noqa: E731
    ref = Reference(work, windows, cfg.batch_size, cfg.kl_windows, ctx.progress, "bitwidth: reference")
    result = cfg.new_result()
    result.data["reference"] = ref.metrics
    result.metrics.update({f"reference_{k}": v for k, v in ref.metrics.items() if k in ("loss", "perplexity")})

    def evaluate(quantizer: WeightQuantizer, max_batches=None, desc="") -> tuple[dict, dict]:
        restore()
        t0 = time.perf_counter()
        _, plan = quantizer.plan_for(work)
        rows, _ = quantize_model(targets, plan)
        stats = _size_stats(rows, work)
        stats["quantize_seconds"] = time.perf_counter() - t0
        return ref.evaluate(work, max_batches, ctx.progress, desc), stats

    configs = configurations(cfg, num_blocks(targets))
    rows = []
    for name, q in bar(configs.items(), desc="bitwidth: configurations", enabled=ctx.progress):
        m, stats = evaluate(q, desc=name)
        rows.append({"config": name, **_pick(m), **stats})
    for i in pareto_front([(r["effective_bits"], r["perplexity"]) for r in rows]):
        rows[i]["pareto"] = True
    for r in rows:
        r.setdefault("pareto", False)
        for k in ("perplexity", "loss", "top1_agree", "kl", "effective_bits", "model_mb", "compression_ratio"):
            result.metrics[f"{r['config']}_{k}"] = r[k]
    result.tables["configurations"] = rows

    if cfg.sensitivity:
        sens = _sensitivity(cfg, targets, ref, evaluate, ctx)
        result.tables["layer_sensitivity"] = sens
        if cfg.recommend and sens:
            rec = _recommend(cfg, sens, ref, evaluate, ctx)
            quantizer = WeightQuantizer(**_fmt(cfg, cfg.low_bits, rec["rules"]))
            # an evaluated configuration within budget and smaller than the greedy plan wins
            within = [r for r in rows if r["perplexity"] / ref.metrics["perplexity"] - 1 <= cfg.budget_ppl_increase]
            smaller = min(within, key=lambda r: r["effective_bits"], default=None)
            if smaller is not None and smaller["effective_bits"] < rec["effective_bits"]:
                rec = {
                    **rec,
                    "source": smaller["config"],
                    "greedy_effective_bits": rec["effective_bits"],
                    "greedy_perplexity": rec["perplexity"],
                    "perplexity": smaller["perplexity"],
                    "ppl_increase": smaller["perplexity"] / ref.metrics["perplexity"] - 1,
                    "within_budget": True,
                    "effective_bits": smaller["effective_bits"],
                    "model_mb": smaller["model_mb"],
                    "kl": smaller["kl"],
                    "top1_agree": smaller["top1_agree"],
                }
                quantizer = configs[smaller["config"]]
            result.data["recommendation"] = rec
            result.metrics.update(
                {
                    f"recommended_{k}": v
                    for k, v in rec.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)
                }
            )
            plan_file = "bitwidth_recommended_plan.yaml"
            result.texts[plan_file] = _plan_yaml(quantizer, rec)
            result.data["recommended_plan_file"] = plan_file
    restore()
    result.insights.extend(_insights(result, ref.metrics, cfg))
    return result


def _sensitivity(cfg, targets, ref: Reference, evaluate, ctx) -> list[dict]:
    """Loss increase when only one block's attention or MLP is at ``sensitivity_bits``."""
    n_batches = max(1, -(-cfg.sensitivity_windows // cfg.batch_size))
    base = ref.metrics_of(n_batches)["loss"]
    units = sorted(
        {
            (t.block, t.component)
            for t in targets
            if t.kind in cfg.targets and t.block is not None and t.component in ("attention", "mlp")
        }
    )
    out = []
    for block, comp in bar(units, desc="bitwidth: layer sensitivity", enabled=ctx.progress):
        q = WeightQuantizer(
            **_fmt(
                cfg,
                cfg.sensitivity_bits,
                [{"blocks": [block], "component": comp, "bits": cfg.sensitivity_bits}],
                targets=[],
            )
        )
        m, stats = evaluate(q, n_batches)
        out.append(
            {
                "block": block,
                "component": comp,
                "bits": cfg.sensitivity_bits,
                "loss_increase": m["loss"] - base,
                "kl": m["kl"],
                "params": stats["params_quantized"],
            }
        )
    ranked = sorted(out, key=lambda r: r["loss_increase"], reverse=True)
    for rank, r in enumerate(ranked):
        r["rank"] = rank + 1
    return out


def _recommend(cfg, sens: list[dict], ref: Reference, evaluate, ctx) -> dict:
    """Promote the most sensitive units to ``high_bits`` until the perplexity budget holds."""
    ranked = sorted(sens, key=lambda r: r["rank"])
    n_batches = max(1, -(-cfg.sensitivity_windows // cfg.batch_size))
    limit = ref.metrics_of(n_batches)["perplexity"] * (1 + cfg.budget_ppl_increase)

    def plan(k):
        rules = [{"blocks": [r["block"]], "component": r["component"], "bits": cfg.high_bits} for r in ranked[:k]]
        return WeightQuantizer(**_fmt(cfg, cfg.low_bits, rules))

    lo, hi = 0, len(ranked)  # binary search: the smallest k whose estimate is within budget
    if evaluate(plan(hi), n_batches)[0]["perplexity"] > limit:
        lo = hi
    while lo < hi:
        mid = (lo + hi) // 2
        if evaluate(plan(mid), n_batches)[0]["perplexity"] <= limit:
            hi = mid
        else:
            lo = mid + 1
    m, stats = evaluate(plan(lo), desc="bitwidth: confirm recommendation")
    increase = m["perplexity"] / ref.metrics["perplexity"] - 1
    return {
        "source": "greedy",
        "units_high": lo,
        "units_total": len(ranked),
        "perplexity": m["perplexity"],
        "ppl_increase": increase,
        "within_budget": increase <= cfg.budget_ppl_increase,
        "effective_bits": stats["effective_bits"],
        "model_mb": stats["model_mb"],
        "kl": m["kl"],
        "top1_agree": m["top1_agree"],
        "high_units": [f"{r['block']}.{r['component']}" for r in ranked[:lo]],
        "rules": [{"blocks": [r["block"]], "component": r["component"], "bits": cfg.high_bits} for r in ranked[:lo]],
    }


def _pick(m: dict) -> dict:
    return {k: m[k] for k in ("loss", "perplexity", "top1_agree", "kl")}


def _size_stats(rows: list[dict], model) -> dict:
    from modelxray.quant.summary import quant_result

    m = quant_result("rtn", rows, model, 0.0, []).metrics
    return {
        "effective_bits": m["effective_bits"],
        "model_effective_bits": m["model_effective_bits"],
        "model_mb": m["model_bytes_after"] / 2**20,
        "compression_ratio": m["compression_ratio"],
        "params_quantized": m["params_quantized"],
    }


def _plan_yaml(q: WeightQuantizer, rec: dict) -> str:
    lines = [
        "# Recommended by the bit-width analyzer: copy into conf/quant/<name>.yaml and run quant=<name>",
        f"# ({rec['source']}) perplexity {rec['perplexity']:.4f} ({rec['ppl_increase']:+.1%}), "
        f"{rec['effective_bits']:.3f} effective bits",
        "_target_: modelxray.quant.weight.WeightQuantizer",
        f"bits: {q.bits}",
        f"symmetric: {str(q.symmetric).lower()}",
        f"granularity: {q.granularity}",
        f"group_size: {q.group_size}",
        f"scale_dtype: {q.scale_dtype}",
        f"targets: [{', '.join(q.targets)}]",
        "skip: []",
        "rules:" + ("" if q.rules else " []"),
    ]
    for r in q.rules:
        lines.append("  - {" + ", ".join(f"{k}: {v}" for k, v in r.items()) + "}")
    return "\n".join(lines) + "\n"


def _insights(result: Result, ref: dict, a) -> list[str]:
    rows = result.tables.get("configurations") or []
    out = []
    front = [r for r in rows if r["pareto"]]
    if front:
        out.append(
            "Pareto-optimal configurations (effective bits -> perplexity): "
            + ", ".join(f"{r['config']} {r['effective_bits']:.2f} -> {r['perplexity']:.4g}" for r in front)
            + f"; unquantized {ref['perplexity']:.2f}."
        )
    sens = result.tables.get("layer_sensitivity") or []
    if sens:
        top = sorted(sens, key=lambda r: r["rank"])[:3]
        out.append(
            f"Most sensitive to {a.sensitivity_bits}-bit weights: "
            + ", ".join(f"block {r['block']} {r['component']} ({r['loss_increase']:+.4f} loss)" for r in top)
            + "."
        )
        by_comp: dict[str, float] = {}
        for r in sens:
            by_comp[r["component"]] = by_comp.get(r["component"], 0.0) + r["loss_increase"]
        if len(by_comp) == 2:
            worse = max(by_comp, key=by_comp.get)
            out.append(
                f"Summed over blocks, {worse} is the more sensitive component "
                f"({by_comp['attention']:.4f} attention vs {by_comp['mlp']:.4f} MLP loss increase)."
            )
    rec = result.data.get("recommendation")
    if rec:
        verdict = "within" if rec["within_budget"] else "NOT within"
        if rec["source"] != "greedy":
            where = (
                f"{rec['source']} (smaller than the best int{a.low_bits}/int{a.high_bits} mix within budget, "
                f"{rec['greedy_effective_bits']:.2f} bits at perplexity {rec['greedy_perplexity']:.3f})"
            )
        elif rec["units_high"]:
            where = (
                f"int{a.low_bits} everywhere except {rec['units_high']} of {rec['units_total']} block components "
                f"at int{a.high_bits} ({', '.join(rec['high_units'][:8])}{', ...' if len(rec['high_units']) > 8 else ''})"
            )
        else:
            where = f"int{a.low_bits} everywhere"
        out.append(
            f"Recommendation: {where}: {rec['effective_bits']:.2f} effective bits, "
            f"perplexity {rec['perplexity']:.3f} (+{rec['ppl_increase']:.1%}), {verdict} the "
            f"+{a.budget_ppl_increase:.0%} budget; plan written to {result.data.get('recommended_plan_file')}."
        )
    return out
