"""The work of the bitwidth analyzer (its keys, checks and description: ``config.py``; what differs
between a language model and a classifier: ``modes.py``)."""

from __future__ import annotations

import re
import time

from modelxray.analyzers.bitwidth.custom_plans import resolve_rules
from modelxray.analyzers.bitwidth.insights import scored_text
from modelxray.analyzers.bitwidth.modes import mode_for
from modelxray.analyzers.bitwidth.plans import config_rows, size_stats, smallest_within
from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.table import kind_of
from modelxray.metrics.agreement import outside_agreement_bounds
from modelxray.metrics.distinguish import indistinguishable
from modelxray.metrics.pareto import pareto_front
from modelxray.quant.targets import find_targets
from modelxray.quant.weight import WeightQuantizer, quantize_model

SIZE_KEYS = ("effective_bits", "model_mb", "compression_ratio")


def configurations(cfg, mode, targets, custom: dict[str, list[dict]]) -> tuple[dict[str, WeightQuantizer], list[dict]]:
    """The configurations to evaluate, and those left out with the reason (e.g. a model without
    attention has no attention-vs-MLP plan). ``custom``: the custom plans as rules (``resolve_rules``)."""
    hi, lo = cfg.high_bits, cfg.low_bits
    out = {f"uniform_int{b}": WeightQuantizer(**cfg.weight_format(b)) for b in cfg.uniform_bits}
    skipped = []
    if cfg.mixed:
        names = [f"mixed_attn{hi}_mlp{lo}", f"mixed_attn{lo}_mlp{hi}"]
        missing = [
            c for c in ("attention", "mlp") if not any(t.component == c for t in targets if t.kind in cfg.targets)
        ]
        if missing:
            what = " or ".join("MLP" if c == "mlp" else c for c in missing)
            skipped += [{"config": n, "reason": f"the model has no {what} modules"} for n in names]
        else:
            out[names[0]] = WeightQuantizer(**cfg.weight_format(lo, [{"component": "attention", "bits": hi}]))
            out[names[1]] = WeightQuantizer(**cfg.weight_format(lo, [{"component": "mlp", "bits": hi}]))
    if cfg.progressive:
        name = f"progressive_{lo}_edges{hi}"
        rules, why = mode.progressive_rules()
        if rules is None:
            skipped.append({"config": name, "reason": why})
        else:
            out[name] = WeightQuantizer(**cfg.weight_format(lo, rules))
    out.update(custom_quantizers(cfg, custom))
    return out, skipped


def custom_quantizers(cfg, custom: dict[str, list[dict]]) -> dict[str, WeightQuantizer]:
    """``custom_<name>``: each custom plan's rules over ``low_bits``."""
    return {
        f"custom_{name}": WeightQuantizer(**cfg.weight_format(cfg.low_bits, rules)) for name, rules in custom.items()
    }


class _Session:
    """What every part of the analyzer works on: the subject's model itself, quantized for each
    configuration and then put back (the original weights of its targets kept where
    ``runtime.original_weights`` says: no second copy of the model by default), its targets, the
    mode with its reference outputs, and ``evaluate(quantizer)``. A context manager: the model
    leaves it as it came, also when an evaluation fails."""

    search_levels = 1  # levels of the recommendation's binary search evaluated together (one at a time here)

    def __init__(self, cfg, subject, ctx: RunContext):
        language_model = isinstance(kind_of(subject), CausalLM)
        if subject.data is None and (not language_model or subject.batches is None):
            raise ConfigError(
                "analyzer.bitwidth", "needs a dataset or a DataLoader of token batches (a classifier: its test split)"
            )
        self.cfg, self.ctx = cfg, ctx
        self.work = subject.model
        self.tokenizer = subject.tokenizer
        # an lm-eval task metric scored on every configuration (rank_by_task), not on the probes
        self.ranking = cfg.ranking() if language_model else None
        self.targets = find_targets(self.work)
        self.originals = ctx.keep_originals(self.work, [f"{t.name}.weight" for t in self.targets])
        self.changed: set[str] = set()
        try:
            self.mode = mode_for(cfg, subject, self.work, self.targets, ctx.progress)
        except BaseException:
            self.originals.close()
            raise

    def restore(self) -> None:
        """The weights changed since the last restore, back to the originals."""
        self.originals.restore(sorted(self.changed))
        self.changed.clear()

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.restore()
        finally:
            self.originals.close()

    def evaluate(self, quantizer: WeightQuantizer, probe: bool = False, desc: str = "") -> tuple[dict, dict]:
        """The working copy quantized by ``quantizer`` from the original weights: its evaluation
        (``mode.evaluate``) and its size statistics."""
        self.restore()
        t0 = time.perf_counter()
        _, plan = quantizer.plan_for(self.work)
        self.changed.update(f"{t.name}.weight" for t in self.targets if plan.get(t.name) is not None)
        rows, _ = quantize_model(self.targets, plan)
        stats = size_stats(rows, self.work)
        stats["quantize_seconds"] = time.perf_counter() - t0
        m = self.mode.evaluate(self.work, probe, self.ctx.progress, desc)
        if self.ranking is not None and not probe:
            task = self.ranking.score(self.work, self.tokenizer, self.ctx.seed)
            stats.update({"task_score": task["value"], "task_score_se": task["se"]})
            stats["task_higher_is_better"] = task["higher_is_better"]
        return m, stats

    def evaluate_many(self, plans: list[tuple[WeightQuantizer, bool]], desc: str = "") -> list[tuple[dict, dict]]:
        """``evaluate`` of each ``(quantizer, probe)``, in order."""
        return [
            self.evaluate(q, probe)
            for q, probe in bar(plans, desc=f"bitwidth: {desc or 'plans'}", enabled=self.ctx.progress)
        ]

    def rows(self, configs: dict[str, WeightQuantizer]) -> tuple[list[dict], dict]:
        return config_rows(self, configs)


def _session(cfg, subject, ctx: RunContext):
    """The analyzer's session: the model in memory (``_Session``), or streamed from disk."""
    if subject.stream is not None:
        from modelxray.analyzers.bitwidth.streamed import StreamedSession

        return StreamedSession(cfg, subject, ctx)
    return _Session(cfg, subject, ctx)


def run(cfg, subject, ctx: RunContext) -> Result:
    with _session(cfg, subject, ctx) as session:
        result = _analyze(cfg, session, ctx)
    if session.originals is not None:  # where they were kept, for insights.md
        result.data["original_weights"] = session.originals.describe()
    if hasattr(session, "streaming"):
        result.data["streaming"] = session.streaming()
    return result


def _analyze(cfg, session: _Session, ctx: RunContext) -> Result:
    mode, targets = session.mode, session.targets
    custom = resolve_rules(cfg.custom, session.work, cfg.targets)
    configs, skipped = configurations(cfg, mode, targets, custom)
    probes = _probes(cfg, mode) if cfg.sensitivity else []
    # every configuration on all windows and every probe on its few, together (one read of a streamed model)
    plans = [(q, False) for q in configs.values()] + [(q, True) for _, q in probes]
    evaluated = session.evaluate_many(plans, "configurations and layer sensitivity")
    result = cfg.new_result()
    result.data.update(
        {
            "reference": mode.metrics,
            "task": mode.task,
            "quality_metric": mode.quality,
            "quality_key": mode.key,
            **mode.facts(),  # what insights.md says the configurations were scored on, and its units
        }
    )
    result.metrics.update({f"reference_{k}": v for k, v in mode.metrics.items() if k in mode.reference_keys})

    if custom:
        result.data["custom_rules"] = custom  # per-layer plans as the rules they were evaluated as
    result.data["skipped_configurations"] = skipped
    rows, evaluations = config_rows(session, configs, evaluated[: len(configs)])
    ranking = getattr(session, "ranking", None)
    for i in pareto_front([(r["effective_bits"], _pareto_value(mode, ranking, r)) for r in rows]):
        rows[i]["pareto"] = True
    if ranking is not None:
        result.data["ranked_by"] = ranking.label
    task_keys = ("task_score", "task_score_se") if ranking is not None else ()
    for r in rows:
        r.setdefault("pareto", False)
        for k in (*mode.row_keys, *SIZE_KEYS, *task_keys):
            result.metrics[f"{r['config']}_{k}"] = r[k]
    result.tables["configurations"] = rows

    if cfg.sensitivity:
        ranked_units = _sensitivity(cfg, mode, probes, evaluated[len(configs) :])
        result.tables["layer_sensitivity"] = [row for _, row in ranked_units]
        if cfg.recommend and ranked_units:
            ranked = sorted(ranked_units, key=lambda p: p[1]["rank"])
            _recommend_into(result, cfg, mode, ranked, rows, configs, session, evaluations)
    return result


def _pareto_value(mode, ranking, row: dict) -> float:
    """The quality axis of the Pareto front (lower is better): the lm-eval task's metric when the
    configurations are ranked by one, else the mode's own (perplexity, or accuracy)."""
    if ranking is None:
        return mode.pareto_value(row)
    return -row["task_score"] if row.get("task_higher_is_better", True) is not False else row["task_score"]


def run_layer_sensitivity(cfg, subject, ctx: RunContext) -> list[dict]:
    """Only the layer sensitivity of the analyzer ``cfg``: the ``layer_sensitivity`` table of
    ``run`` (one row per unit in model order, each with its ``rank``, 1 = most sensitive), without
    the configurations or the recommendation. The reference is computed on the probe's windows
    (examples) alone, the only ones sensitivity scores, so the rows are those ``run`` gives."""
    import dataclasses

    if isinstance(kind_of(subject), Classifier):
        probe_cfg = dataclasses.replace(cfg, eval_examples=min(cfg.eval_examples, cfg.sensitivity_examples))
    else:
        probe = max(1, -(-cfg.sensitivity_windows // cfg.batch_size)) * cfg.batch_size  # whole probe batches
        probe_cfg = dataclasses.replace(cfg, max_windows=min(cfg.max_windows or probe, probe))
    with _session(probe_cfg, subject, ctx) as session:
        probes = _probes(probe_cfg, session.mode)
        evaluated = session.evaluate_many([(q, True) for _, q in probes], "layer sensitivity")
        return [row for _, row in _sensitivity(probe_cfg, session.mode, probes, evaluated)]


def run_custom_configurations(cfg, subject, ctx: RunContext, configs: dict) -> list[dict]:
    """Evaluate ``configs`` (``{name: plan}`` as ``custom`` takes it: rules, one ``{attn_bits,
    mlp_bits}`` mapping per block, or a YAML path; or the path of a YAML file of them) with the
    analyzer ``cfg``'s format, against the same reference ``run`` uses: one row per plan, named
    ``custom_<name>``, with the columns of ``run``'s ``configurations`` table (without ``pareto``).
    Checked as ``custom`` is, before any work: a bad plan is one ConfigError line naming it."""
    import dataclasses

    cfg = dataclasses.replace(cfg, custom=configs)  # reads files and checks keys and bits
    cfg._preflight_model(subject)
    with _session(cfg, subject, ctx) as session:
        custom = resolve_rules(cfg.custom, session.work, cfg.targets)
        return config_rows(session, custom_quantizers(cfg, custom))[0]


def _probes(cfg, mode) -> list[tuple]:
    """``(unit, quantizer)``: each unit (a language model: one block's attention or MLP; a classifier:
    one block of a tower) alone at ``sensitivity_bits``, everything else unquantized, in model order."""
    return [
        (unit, WeightQuantizer(**cfg.weight_format(cfg.sensitivity_bits, unit.rules(cfg.sensitivity_bits), targets=[])))
        for unit in mode.units()
    ]


def _sensitivity(cfg, mode, probes: list[tuple], evaluated: list[tuple]) -> list[tuple]:
    """(unit, row) pairs in model order from the probes' evaluations, each row with its ``rank``
    (1 = most sensitive)."""
    base = mode.probe_reference()
    out = []
    for (unit, _), (m, stats) in zip(probes, evaluated, strict=True):
        out.append((unit, mode.sensitivity_row(unit, m, base, stats["params_quantized"])))
    ranked = sorted(out, key=lambda p: tuple(p[1][k] for k in mode.rank_by), reverse=True)
    for rank, (_, row) in enumerate(ranked):
        row["rank"] = rank + 1
    return out


def broken_bounds(cfg, mode, m: dict, ref: dict) -> list[str]:
    """The bounds a configuration's metrics ``m`` break against the unquantized ``ref``: the quality
    budget, and where measured, top-1 agreement below ``agreement_floor`` and KL above ``kl_ceiling``
    (accuracy alone says little of a model whose predictions moved). Empty when it fits them all."""
    out = []
    change = mode.change(m, ref)
    if change > mode.budget:
        out.append(f"{mode.change_key} {change:.3g} over the budget {mode.budget:g}")
    return out + outside_agreement_bounds(m, cfg.agreement_floor, cfg.kl_ceiling)


def _recommend(cfg, mode, ranked: list[tuple], session) -> tuple[dict, dict]:
    """Promote the most sensitive units to ``high_bits`` until the budget holds (a binary search, on
    the probe for a language model, on every evaluated example for a classifier), then confirm on
    the whole evaluation: the recommendation and that evaluation."""

    def plan(k):
        rules = [r for unit, _ in ranked[:k] for r in unit.rules(cfg.high_bits)]
        return WeightQuantizer(**cfg.weight_format(cfg.low_bits, rules)), rules

    probe = mode.search_on_probe
    base = mode.probe_reference() if probe else mode.metrics

    broken_at: dict[int, list[str]] = {}

    def within_many(ks: list[int]) -> list[bool]:
        evaluated = session.evaluate_many([(plan(k)[0], probe) for k in ks], "recommendation search")
        for k, (m, _) in zip(ks, evaluated, strict=True):
            broken_at[k] = broken_bounds(cfg, mode, m, base)
        return [not broken_at[k] for k in ks]

    lo, _ = smallest_within(len(ranked), within_many, session.search_levels)
    quantizer, rules = plan(lo)
    m, stats = session.evaluate(quantizer, desc="bitwidth: confirm recommendation")
    change = mode.change(m, mode.metrics)
    broken = broken_bounds(cfg, mode, m, mode.metrics)
    return m, {
        "source": "greedy",
        "units_high": lo,
        "units_total": len(ranked),
        mode.key: m[mode.key],
        mode.change_key: change,
        "within_budget": not broken,
        "broken_bounds": broken,
        # what promoting one unit fewer broke: the bound that decided how many stay at high_bits
        "decided_by": broken_at.get(lo - 1, []) if lo > 0 else [],
        "effective_bits": stats["effective_bits"],
        "model_mb": stats["model_mb"],
        **{k: m.get(k, float("nan")) for k in mode.rec_keys if k != mode.key},
        "high_units": [unit.label for unit, _ in ranked[:lo]],
        "rules": rules,
    }


def _recommend_into(result: Result, cfg, mode, ranked, rows, configs, session, evaluations: dict) -> None:
    """The greedy plan, or an evaluated configuration within budget when it is smaller; its metrics
    (``recommended_*``), what it cannot be told apart from, and its quant config file."""
    confirmed, rec = _recommend(cfg, mode, ranked, session)
    quantizer = WeightQuantizer(**cfg.weight_format(cfg.low_bits, rec["rules"]))
    within = [r for r in rows if not broken_bounds(cfg, mode, r, mode.metrics)]
    smaller = min(within, key=lambda r: r["effective_bits"], default=None)
    if smaller is not None and smaller["effective_bits"] < rec["effective_bits"]:
        rec = {
            **rec,
            "source": smaller["config"],
            "greedy_effective_bits": rec["effective_bits"],
            f"greedy_{mode.key}": rec[mode.key],
            mode.key: smaller[mode.key],
            mode.change_key: mode.change(smaller, mode.metrics),
            "within_budget": True,
            "broken_bounds": [],
            "decided_by": [],
            "effective_bits": smaller["effective_bits"],
            "model_mb": smaller["model_mb"],
            **{k: smaller[k] for k in mode.rec_keys},
        }
        quantizer = configs[smaller["config"]]
        confirmed = evaluations[smaller["config"]]
    rec.update(_indistinguishable(rec, confirmed, rows, evaluations, mode))
    result.data["recommendation"] = rec
    result.metrics.update(
        {f"recommended_{k}": v for k, v in rec.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    )
    plan_file = "bitwidth_recommended_plan.yaml"
    result.texts[plan_file] = _plan_yaml(quantizer, rec, mode)
    result.data["recommended_plan_file"] = plan_file


def _indistinguishable(rec: dict, confirmed: dict, rows: list[dict], evaluations: dict, mode) -> dict:
    """Whether the recommended plan can be told apart from the unquantized model (its paired loss
    change within two standard errors of zero: ``indistinguishable_from_reference``), and the
    cheaper evaluated configurations it cannot be told apart from (their loss minus the plan's,
    paired by window, within two standard errors: ``indistinguishable_cheaper``, cheapest first).
    A plan over budget by its estimate may still be as good as the recommendation on this text."""
    out: dict = {}
    if "delta_loss_se" in rec:
        out["indistinguishable_from_reference"] = indistinguishable(rec["delta_loss"], rec["delta_loss_se"])
    cheaper = []
    for r in sorted(rows, key=lambda r: r["effective_bits"]):
        if r["effective_bits"] >= rec["effective_bits"] or r["config"] == rec["source"]:
            continue
        d = mode.paired_difference(evaluations[r["config"]], confirmed)
        if d is not None and d.indistinguishable:
            cheaper.append(
                {
                    "config": r["config"],
                    "effective_bits": r["effective_bits"],
                    "loss_difference": d.value,
                    "loss_difference_se": d.se,
                }
            )
    out["indistinguishable_cheaper"] = cheaper
    return out


def _plan_yaml(q: WeightQuantizer, rec: dict, mode) -> str:
    if mode.key == "perplexity":
        quality = f"perplexity {rec['perplexity']:.4f} ({rec['ppl_increase']:+.1%})"
    else:
        quality = f"{mode.quality} {rec['accuracy']:.4f} ({0.0 - 100 * rec['accuracy_drop']:+.1f} points)"
    lines = [
        "# Recommended by the bit-width analyzer: copy into conf/quant/<name>.yaml and run quant=<name>",
        f"# ({rec['source']}) {quality}, {rec['effective_bits']:.3f} effective bits",
        *(
            [
                f"# on {scored_text(mode.scored())} its loss cannot be told apart from the unquantized model's "
                f"(change {rec['delta_loss']:+.4f} ± {rec['delta_loss_se']:.4f} nats, paired by window)"
            ]
            if rec.get("indistinguishable_from_reference")
            else []
        ),
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
        lines.append("  - {" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in r.items()) + "}")
    return "\n".join(lines) + "\n"


def _yaml_value(v) -> str:
    """A value as YAML reads it back: words bare (``mlp``), other strings quoted (a module name
    ``1`` would read as a number, a glob's ``*`` as an alias), lists as flow sequences."""
    import json

    import yaml

    if isinstance(v, str) and not (re.fullmatch(r"[A-Za-z_]\w*", v) and yaml.safe_load(v) == v):
        return json.dumps(v)
    return str(v)
