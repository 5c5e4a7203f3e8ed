"""The bitwidth analyzer's observations (insights.md): the Pareto-optimal configurations and those
the text cannot tell apart from the unquantized model, the most sensitive units and which component
(a language model) or tower (a dual encoder) matters more, the recommendation against its budget and
what it cannot be told apart from, the configurations a model has no use for, and where the original
weights were kept. Pure functions of the Result (its tables and data, as saved in
``results/bitwidth.json``) and the analyzer's config, so a reloaded Result says the same."""

from __future__ import annotations

import math
from dataclasses import dataclass

from modelxray.analyzers.bitwidth.blocks import OTHER
from modelxray.core.result import Result
from modelxray.metrics.distinguish import Difference, indistinguishable


def scored_text(scored: dict) -> str:
    """What every configuration was scored on, for a sentence: ``8,160 tokens``, ``512 test examples``."""
    return f"{scored['count']:,} {scored['unit']}"


@dataclass(frozen=True)
class Scoring:
    """What the sentences need of the mode the run scored in (``modes.py``: a language model's
    perplexity or a classifier's accuracy), read back from the Result's data and the config."""

    task: str
    key: str  # the budgeted quality: perplexity | accuracy
    quality: str  # its name in a sentence: perplexity, accuracy, zero-shot accuracy, mAP@.5 ...
    reference: dict  # the unquantized model's metrics
    scored: dict  # {count, unit}: what every configuration was scored on
    unit_noun: str  # what a sensitivity unit is called: block components | blocks
    change_key: str  # the recommendation's budgeted change: ppl_increase | accuracy_drop
    budget: float
    sensitivity_view: str  # how the sensitivity units are ranked: components | blocks | agreement | classifier

    @classmethod
    def of(cls, result: Result, cfg) -> Scoring:
        d = result.data
        key = d["quality_key"]
        budget = cfg.budget_ppl_increase if key == "perplexity" else cfg.budget_accuracy_drop
        view = sensitivity_view(result)
        return cls(
            d["task"],
            key,
            d["quality_metric"],
            d["reference"],
            d["scored"],
            d["unit_noun"],
            d["change_key"],
            budget,
            view,
        )

    def describe(self, m: dict, change: float) -> str:
        if self.key == "perplexity":
            return f"perplexity {m['perplexity']:.3f} ({change:+.1%})"
        return f"{self.quality} {m['accuracy']:.3f} ({0.0 - 100 * change:+.1f} points)"

    def budget_text(self) -> str:
        if self.key == "perplexity":
            return f"{self.budget:+.0%} budget"
        return f"{100 * self.budget:g}-point {self.quality} budget"

    def sample_text(self) -> str:
        return scored_text(self.scored)


def sensitivity_view(result: Result) -> str:
    """How the result's sensitivity units are ranked: components | blocks | agreement | classifier."""
    d = result.data
    return d.get("sensitivity_view") or _view_of_older_result(
        d, d.get("quality_key", "perplexity"), result.tables.get("layer_sensitivity") or []
    )


def _view_of_older_result(d: dict, key: str, sens: list[dict]) -> str:
    """A result saved before its mode named its sensitivity view: read it off what the result holds."""
    if key == "perplexity":
        return "components" if d.get("unit_noun") == "block components" else "blocks"
    return "agreement" if sens and "disagreement" in sens[0] else "classifier"


def insights(result: Result, results: dict[str, Result], cfg) -> list[str]:
    """Every sentence, in the order of insights.md; none for a failed result."""
    if not result.ok:
        return []
    mode = Scoring.of(result, cfg)
    out = _pareto(result, mode) + _same_as_reference(result.tables.get("configurations") or [], mode)
    sens = result.tables.get("layer_sensitivity") or []
    if sens:
        view = mode.sensitivity_view
        if view == "components":
            out += _sensitivity_lm(sens, cfg)
        elif view == "blocks":
            out += _sensitivity_blocks(sens, cfg)
        elif view == "agreement":
            out += _sensitivity_vision(sens, cfg, mode)
        else:
            out += _sensitivity_classifier(sens, cfg)
    rec = result.data.get("recommendation")
    if rec:
        out.append(_recommendation(result, rec, mode, cfg))
        out += _recommendation_noise(rec, mode)
    by_reason: dict[str, list[str]] = {}
    for s in result.data.get("skipped_configurations") or []:
        by_reason.setdefault(s["reason"], []).append(s["config"])
    out += [f"{' and '.join(names)} not evaluated: {reason}." for reason, names in by_reason.items()]
    if "original_weights" in result.data:
        out.append(f"Memory: {result.data['original_weights']}")
    if result.data.get("streaming"):
        out.append(streamed_text(result.data["streaming"], bool(rec)))
    return out


def streamed_text(streaming: dict, searched: bool) -> str:
    """How many reads of a model streamed from disk the plans took (``streamed.StreamedSession``);
    ``searched``: a recommendation was searched for."""
    reads, levels = streaming["reads"], streaming["search_levels"]
    out = (
        f"Streamed from disk block by block: {streaming['plans']} plans in {reads} read{'s' * (reads != 1)} of the "
        f"model ({streaming['weight_reads']:.2f} times its weights), every configuration and sensitivity probe in "
        "the first"
    )
    if searched:
        out += (
            f"; the recommendation's binary search took {levels} level{'s' * (levels != 1)} per read "
            "(stream_search_levels), its confirmation one more"
        )
    return out + "."


def _pareto(result: Result, mode) -> list[str]:
    front = sorted(
        (r for r in result.tables.get("configurations") or [] if r["pareto"]), key=lambda r: r["effective_bits"]
    )
    if not front:
        return []
    ref = mode.reference[mode.key]
    if mode.key == "perplexity":
        tail = f"unquantized {ref:.2f}"
        points = ", ".join(f"{r['config']} {r['effective_bits']:.2f} -> {r['perplexity']:.4g}" for r in front)
    else:
        tail = f"unquantized {ref:.3f} on {mode.scored['count']:,} test examples"
        points = ", ".join(f"{r['config']} {r['effective_bits']:.2f} -> {r['accuracy']:.3f}" for r in front)
    return [f"Pareto-optimal configurations (effective bits -> {mode.quality}): {points}; {tail}."]


def _sensitivity_lm(sens: list[dict], cfg) -> list[str]:
    top = sorted(sens, key=lambda r: r["rank"])[:3]
    out = [
        f"Most sensitive to {cfg.sensitivity_bits}-bit weights: "
        + ", ".join(f"block {r['block']} {r['component']} ({r['loss_increase']:+.4f} loss)" for r in top)
        + "."
    ]
    by_comp = _sums(sens, "component", "loss_increase")
    if len(by_comp) == 2:
        worse = max(by_comp, key=by_comp.get)
        out.append(
            f"Summed over blocks, {worse} is the more sensitive component "
            f"({by_comp['attention']:+.4f} attention vs {by_comp['mlp']:+.4f} MLP loss increase, nats)."
        )
    return out


def _sensitivity_classifier(sens: list[dict], cfg) -> list[str]:
    top = sorted(sens, key=lambda r: r["rank"])[:3]
    out = [
        f"Most sensitive to {cfg.sensitivity_bits}-bit weights, one block at a time: "
        + ", ".join(f"{r['block']} ({_kind(r)}KL {r['kl']:.3g}, {_points(r)})" for r in top)
        + "."
    ]
    by_tower = _sums([r for r in sens if "tower" in r and r["type"] != OTHER], "tower", "kl")
    if len(by_tower) == 2:
        worse = max(by_tower, key=by_tower.get)
        sums = " vs ".join(f"{v:.3g} {k}" for k, v in by_tower.items())
        out.append(f"Summed over blocks, the {worse} tower is the more sensitive ({sums}, KL in nats).")
    return out


def _sensitivity_blocks(sens: list[dict], cfg) -> list[str]:
    top = sorted(sens, key=lambda r: r["rank"])[:3]
    return [
        f"Most sensitive to {cfg.sensitivity_bits}-bit weights, one block at a time: "
        + ", ".join(f"{r['block']} ({_kind(r)}{r['loss_increase']:+.4f} loss, KL {r['kl']:.3g})" for r in top)
        + "."
    ]


def _sensitivity_vision(sens: list[dict], cfg, mode) -> list[str]:
    top = sorted(sens, key=lambda r: r["rank"])[:3]
    return [
        f"Most sensitive to {cfg.sensitivity_bits}-bit weights, one block at a time: "
        + ", ".join(
            f"{r['block']} ({_kind(r)}agreement with the unquantized outputs {r['top1_agree']:.3f}, "
            f"{mode.quality} {0.0 - r['accuracy_drop']:+.3f})"
            for r in top
        )
        + "."
    ]


def _kind(row: dict) -> str:
    return "" if row["type"] == OTHER else f"{row['type']}; "


def _points(row: dict) -> str:
    return f"accuracy {0.0 - 100 * row['accuracy_drop']:+.1f} points"


def _sums(rows: list[dict], by: str, value: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        out[r[by]] = out.get(r[by], 0.0) + r[value]
    return out


def _recommendation(result: Result, rec: dict, mode, cfg) -> str:
    verdict = "within" if rec["within_budget"] else "NOT within"
    if rec["source"] != "greedy":
        where = (
            f"{rec['source']} (smaller than the best int{cfg.low_bits}/int{cfg.high_bits} mix within budget, "
            f"{rec['greedy_effective_bits']:.2f} bits at {mode.quality} {rec[f'greedy_{mode.key}']:.3f})"
        )
    elif rec["units_high"]:
        names = rec["high_units"]
        where = (
            f"int{cfg.low_bits} everywhere except {rec['units_high']} of {rec['units_total']} {mode.unit_noun} "
            f"at int{cfg.high_bits} ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"
        )
    else:
        where = f"int{cfg.low_bits} everywhere"
    bounds = (
        f"the {mode.budget_text()}, top-1 agreement at least {cfg.agreement_floor:g} and KL at most {cfg.kl_ceiling:g}"
    )
    broken = rec.get("broken_bounds") or []
    decided = rec.get("decided_by") or []
    why = (
        f" ({'; '.join(broken)})"
        if broken
        else (f"; with one unit fewer at int{cfg.high_bits}: {'; '.join(decided)}" if decided else "")
    )
    return (
        f"Recommendation: {where}: {rec['effective_bits']:.2f} effective bits, "
        f"{mode.describe(rec, rec[mode.change_key])}, {verdict} {bounds}{why}; "
        f"plan written to {result.data.get('recommended_plan_file')}."
    )


def _loss_change(value: float, se: float) -> str:
    return Difference(value, se, paired=True).text(unit=" nats")


def _same_as_reference(rows: list[dict], mode) -> list[str]:
    """The configurations whose loss change against the unquantized model, paired by window, is
    within two standard errors of zero: on this text they cannot be told apart from it."""
    same = [r for r in rows if indistinguishable(r.get("delta_loss", math.nan), r.get("delta_loss_se"))]
    if not same:
        return []
    parts = ", ".join(f"{r['config']} ({_loss_change(r['delta_loss'], r['delta_loss_se'])})" for r in same)
    return [
        f"Indistinguishable from the unquantized model on {mode.sample_text()} (loss change within two "
        f"standard errors of zero, paired by window): {parts}."
    ]


def _recommendation_noise(rec: dict, mode) -> list[str]:
    """What the recommended plan cannot be told apart from on this text: the unquantized model, and
    cheaper evaluated configurations (whose extra savings the text does not show to cost quality)."""
    out = []
    if rec.get("indistinguishable_from_reference"):
        out.append(
            f"On {mode.sample_text()} the recommended plan cannot be told apart from the unquantized model: "
            f"its loss change, {_loss_change(rec['delta_loss'], rec['delta_loss_se'])}, is within two "
            "standard errors of zero (paired by window)."
        )
    cheaper = rec.get("indistinguishable_cheaper") or []
    if cheaper:
        parts = ", ".join(
            f"{c['config']} ({c['effective_bits']:.2f} effective bits; loss "
            f"{_loss_change(c['loss_difference'], c['loss_difference_se'])} against the plan)"
            for c in cheaper
        )
        out.append(
            f"On {mode.sample_text()} the recommended plan cannot be told apart from the cheaper {parts}: "
            "the difference is within two standard errors, paired by window, so the plan's extra bits buy "
            "no quality this text can resolve; score more tokens (dataset.max_tokens) to decide."
        )
    return out
