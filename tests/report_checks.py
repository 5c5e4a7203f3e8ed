"""What a report must never say beside its own numbers: a cross-check of a run's insights.md against
its metrics, used by the tests that run each kind of model (``contradictions``)."""

from __future__ import annotations

import math

PAIRED = ("top1_agree", "kl", "delta_loss", "delta_accuracy", "unquantized_exact_match", "frame_kl", "output_cosine")
PROPORTIONS = ("accuracy", "exact_match", "top1_agree", "agree", "share", "map", "miou", "pixel_accuracy")


def contradictions(metrics: dict[str, float], insights: str, degenerate: list[str] | None = None) -> list[str]:
    """Each sentence of ``insights`` (insights.md) that disagrees with ``metrics`` (one analyzer's, by
    leaf name), one line each; empty when the report agrees with its numbers."""
    found = []
    if any(k in metrics for k in PAIRED) and "no unquantized score" in insights:
        found.append("says it has no unquantized score beside paired figures")
    for key, value in metrics.items():
        of = metrics.get(key.removesuffix("_se"), 0.0)  # an infinite perplexity has an infinite error
        if key.endswith("_se") and not (value >= 0 and (math.isfinite(value) or not math.isfinite(of))):
            found.append(f"{key} = {value}: a standard error must be finite and not negative")
        low, high = metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")
        if low is None or high is None:
            continue
        if not low <= value <= high:
            found.append(f"{key} = {value} lies outside its interval {low}-{high}")
        if any(p in key for p in PROPORTIONS) and not 0 <= low <= high <= 1:
            found.append(f"{key}'s interval {low}-{high} leaves [0, 1]")
    if metrics.get("unquantized_exact_match") == 1 and metrics.get("unquantized_chrf", 100) < 100:
        found.append("identical outputs (exact match 1) beside a chrF below 100 between them")
    if degenerate and "Degenerate model" not in insights:
        found.append("a degenerate model is not flagged in the insights")
    if not degenerate and "Degenerate model" in insights:
        found.append("the insights flag a model the checks found working")
    return found
