"""Bit-width analyzer: how quality trades against size across quantization configurations.

Evaluates uniform, attention-vs-MLP mixed, progressive and custom RTN plans against the model's
own outputs (loss, perplexity, top-1 agreement, KL), measures per-layer sensitivity (one block's
attention or MLP at low bits at a time), finds the Pareto frontier of quality vs effective bits,
and recommends the smallest plan within a perplexity budget, built greedily from the sensitivity
ranking and confirmed by a full evaluation.

Cost: the reference outputs are computed once; every configuration quantizes one working copy
restored from the original weights in memory (no reloads, no per-configuration copies).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext
from modelxray.data.windows import make_windows
from modelxray.measure.reference import Reference
from modelxray.metrics.pareto import pareto_front
from modelxray.quant.plan import check_bits, parse_rules
from modelxray.quant.rtn import GRANULARITIES
from modelxray.quant.targets import find_targets, num_blocks
from modelxray.quant.weight import WeightQuantizer, quantize_model


@dataclass
class BitwidthAnalyzer(Analyzer):
    name: ClassVar[str] = "bitwidth"

    uniform_bits: list[int] = field(default_factory=lambda: [8, 6, 4, 3, 2])
    symmetric: bool = True
    granularity: str = "group"
    group_size: int = 128
    scale_dtype: str = "float16"
    targets: list[str] = field(default_factory=lambda: ["linear"])
    high_bits: int = 8
    low_bits: int = 4
    mixed: bool = True
    progressive: bool = True
    progressive_edge: int = 2
    custom: dict = field(default_factory=dict)
    sensitivity: bool = True
    sensitivity_bits: int = 3
    sensitivity_windows: int = 4
    budget_ppl_increase: float = 0.05
    recommend: bool = True
    max_windows: int | None = None
    kl_windows: int = 8
    batch_size: int = 4

    def validate(self) -> None:
        for b in self.uniform_bits:
            check_bits(b, "uniform_bits")
        for key in ("high_bits", "low_bits", "sensitivity_bits"):
            check_bits(getattr(self, key), key)
        if self.low_bits >= self.high_bits:
            raise ConfigError("low_bits", f"must be below high_bits ({self.high_bits}), got {self.low_bits}")
        self.require_choice("granularity", GRANULARITIES)
        self.require_positive("group_size", "progressive_edge", "sensitivity_windows", "batch_size", "kl_windows")
        self.require_positive("max_windows", allow_none=True)
        if self.budget_ppl_increase < 0:
            raise ConfigError("budget_ppl_increase", f"must be >= 0, got {self.budget_ppl_increase}")
        for name, rules in self.custom.items():
            try:
                parse_rules(rules)
            except ConfigError as exc:
                raise exc.under(f"custom.{name}") from None
        WeightQuantizer(**self._fmt(self.low_bits))  # validates the format

    def _fmt(self, bits: int, rules: list | None = None, targets: list | None = None) -> dict:
        return dict(
            bits=bits,
            symmetric=self.symmetric,
            granularity=self.granularity,
            group_size=self.group_size,
            scale_dtype=self.scale_dtype,
            targets=self.targets if targets is None else targets,
            rules=rules or [],
        )

    def configurations(self, n_blocks: int) -> dict[str, WeightQuantizer]:
        hi, lo = self.high_bits, self.low_bits
        out = {f"uniform_int{b}": WeightQuantizer(**self._fmt(b)) for b in self.uniform_bits}
        if self.mixed:
            out[f"mixed_attn{hi}_mlp{lo}"] = WeightQuantizer(**self._fmt(lo, [{"component": "attention", "bits": hi}]))
            out[f"mixed_attn{lo}_mlp{hi}"] = WeightQuantizer(**self._fmt(lo, [{"component": "mlp", "bits": hi}]))
        if self.progressive and n_blocks > 2 * self.progressive_edge:
            edge = list(range(self.progressive_edge)) + [-(i + 1) for i in range(self.progressive_edge)]
            out[f"progressive_{lo}_edges{hi}"] = WeightQuantizer(**self._fmt(lo, [{"blocks": edge, "bits": hi}]))
        for name, rules in self.custom.items():
            out[f"custom_{name}"] = WeightQuantizer(**self._fmt(lo, rules))
        return out

    def run(self, subject, ctx: RunContext) -> Result:
        if subject.data is None:
            raise ConfigError("analyzer.bitwidth", "needs a dataset of token windows (not a user DataLoader)")
        windows = make_windows(subject.data.ids, subject.data.seq_len, "disjoint")
        if self.max_windows:
            windows = windows[: self.max_windows]
        work = copy.deepcopy(subject.model)
        targets = find_targets(work)
        originals = {t.name: t.weight_matrix().detach().clone() for t in targets}
        restore = lambda: [t.set_weight_matrix(originals[t.name]) for t in targets]  # noqa: E731
        ref = Reference(work, windows, self.batch_size, self.kl_windows, ctx.progress, "bitwidth: reference")
        result = Result(self.name)
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

        configs = self.configurations(num_blocks(targets))
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

        if self.sensitivity:
            sens = self._sensitivity(targets, ref, evaluate, ctx)
            result.tables["layer_sensitivity"] = sens
            if self.recommend and sens:
                rec = self._recommend(sens, ref, evaluate, ctx)
                quantizer = WeightQuantizer(**self._fmt(self.low_bits, rec["rules"]))
                # an evaluated configuration within budget and smaller than the greedy plan wins
                within = [
                    r for r in rows if r["perplexity"] / ref.metrics["perplexity"] - 1 <= self.budget_ppl_increase
                ]
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
                path = ctx.output_dir / "bitwidth_recommended_plan.yaml"
                path.write_text(_plan_yaml(quantizer, rec))
                result.data["recommended_plan_file"] = path.name
        restore()
        result.insights.extend(_insights(result, ref.metrics, self))
        return result

    def _sensitivity(self, targets, ref: Reference, evaluate, ctx) -> list[dict]:
        """Loss increase when only one block's attention or MLP is at ``sensitivity_bits``."""
        n_batches = max(1, -(-self.sensitivity_windows // self.batch_size))
        base = ref.metrics_of(n_batches)["loss"]
        units = sorted(
            {
                (t.block, t.component)
                for t in targets
                if t.kind in self.targets and t.block is not None and t.component in ("attention", "mlp")
            }
        )
        out = []
        for block, comp in bar(units, desc="bitwidth: layer sensitivity", enabled=ctx.progress):
            q = WeightQuantizer(
                **self._fmt(
                    self.sensitivity_bits,
                    [{"blocks": [block], "component": comp, "bits": self.sensitivity_bits}],
                    targets=[],
                )
            )
            m, stats = evaluate(q, n_batches)
            out.append(
                {
                    "block": block,
                    "component": comp,
                    "bits": self.sensitivity_bits,
                    "loss_increase": m["loss"] - base,
                    "kl": m["kl"],
                    "params": stats["params_quantized"],
                }
            )
        ranked = sorted(out, key=lambda r: r["loss_increase"], reverse=True)
        for rank, r in enumerate(ranked):
            r["rank"] = rank + 1
        return out

    def _recommend(self, sens: list[dict], ref: Reference, evaluate, ctx) -> dict:
        """Promote the most sensitive units to ``high_bits`` until the perplexity budget holds."""
        ranked = sorted(sens, key=lambda r: r["rank"])
        n_batches = max(1, -(-self.sensitivity_windows // self.batch_size))
        limit = ref.metrics_of(n_batches)["perplexity"] * (1 + self.budget_ppl_increase)

        def plan(k):
            rules = [{"blocks": [r["block"]], "component": r["component"], "bits": self.high_bits} for r in ranked[:k]]
            return WeightQuantizer(**self._fmt(self.low_bits, rules))

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
            "within_budget": increase <= self.budget_ppl_increase,
            "effective_bits": stats["effective_bits"],
            "model_mb": stats["model_mb"],
            "kl": m["kl"],
            "top1_agree": m["top1_agree"],
            "high_units": [f"{r['block']}.{r['component']}" for r in ranked[:lo]],
            "rules": [
                {"blocks": [r["block"]], "component": r["component"], "bits": self.high_bits} for r in ranked[:lo]
            ],
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


def _insights(result: Result, ref: dict, a: BitwidthAnalyzer) -> list[str]:
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
