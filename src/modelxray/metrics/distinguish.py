"""When two measured figures can be told apart: one rule for every report that compares
configurations (quant_impact's strategies, bitwidth's plans, ``scripts/compare_runs.py``'s runs).

Two figures are indistinguishable when their difference is within ``SE_MULTIPLE`` standard errors
of zero (about a 95% two-sided test). The standard error of the difference is the paired one where
the two were scored on the same windows and the per-window differences are known (the text's own
variation cancels, so it resolves far smaller differences); otherwise the two figures' own errors
combined as independent, sqrt(se_a^2 + se_b^2), which overstates the error of figures scored on the
same text and so errs towards "indistinguishable". A figure without an error makes no claim.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modelxray.metrics.measurements.quality import Z_95

SE_MULTIPLE = 2.0  # a difference within this many standard errors of zero is not resolved


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def indistinguishable(difference: float, se: float | None, multiple: float = SE_MULTIPLE) -> bool:
    """|difference| <= multiple x se. False when the error is missing or not finite: without an
    error nothing can be said, and saying "indistinguishable" would be a claim."""
    return _finite(se) and _finite(difference) and abs(difference) <= multiple * se  # type: ignore[operator]


def combined_se(*ses: float | None) -> float:
    """Standard error of a difference (or sum) of independent estimates, sqrt(sum se_i^2); NaN when
    any error is missing."""
    if not all(_finite(s) for s in ses):
        return math.nan
    return math.sqrt(sum(s * s for s in ses))  # type: ignore[operator]


def se_from_interval(low: float | None, high: float | None, z: float = Z_95) -> float:
    """The standard error a two-sided 95% interval stands for: its width / (2 z). For an asymmetric
    interval (Wilson, a perplexity's exp of a normal interval) this is the average half-width, the
    error of the figure's normal approximation. NaN when a bound is missing."""
    if not (_finite(low) and _finite(high)):
        return math.nan
    return (high - low) / (2 * z)  # type: ignore[operator]


def number_at(record: Mapping[str, Any], key: str) -> float:
    """``record[key]`` as a float; NaN where it is missing, a bool or not a number."""
    v = record.get(key)
    try:
        return math.nan if v is None or isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        return math.nan


def _loss_of_perplexity(key: str) -> tuple[str, str] | None:
    """``x_perplexity`` -> (``x_loss``, ``x_loss_se``): a perplexity is exp of that loss."""
    if not key.endswith("perplexity"):
        return None
    stem = key[: -len("perplexity")]
    return f"{stem}loss", f"{stem}loss_se"


def interval_of(record: Mapping[str, Any], key: str, z: float = Z_95) -> tuple[float, float] | None:
    """The 95% interval of ``record[key]`` by the names errors are logged under: ``<key>_ci_low`` and
    ``<key>_ci_high``; else ``<key>_se`` (value -+ z se); else, for a perplexity, exp(loss -+ z
    loss_se) from its ``loss`` and ``loss_se`` (``x_perplexity`` from ``x_loss``, ``x_loss_se``).
    None when the record carries no finite error for it."""
    value = number_at(record, key)
    low, high = number_at(record, f"{key}_ci_low"), number_at(record, f"{key}_ci_high")
    if _finite(low) and _finite(high):
        return low, high
    se = number_at(record, f"{key}_se")
    if _finite(se) and _finite(value):
        return value - z * se, value + z * se
    names = _loss_of_perplexity(key)
    if names is not None:
        loss, loss_se = number_at(record, names[0]), number_at(record, names[1])
        if _finite(loss) and _finite(loss_se):
            return _exp(loss - z * loss_se), _exp(loss + z * loss_se)
    return None


def se_of(record: Mapping[str, Any], key: str) -> float:
    """The standard error of ``record[key]``: ``<key>_se``; else that of its interval
    (``se_from_interval``); else, for a perplexity, perplexity x ``loss_se`` (the delta method).
    NaN when the record carries none."""
    se = number_at(record, f"{key}_se")
    if _finite(se):
        return se
    se = se_from_interval(number_at(record, f"{key}_ci_low"), number_at(record, f"{key}_ci_high"))
    if _finite(se):
        return se
    names = _loss_of_perplexity(key)
    if names is not None:
        return number_at(record, key) * number_at(record, names[1])
    return math.nan


def error_bars(rows: Sequence[Mapping[str, Any]], key: str) -> list[list[float]] | None:
    """``[below, above]``: each row's distance from ``row[key]`` down and up to its 95% interval
    (``interval_of``), as matplotlib's ``errorbar`` takes them; 0 for a row without an error, None
    when no row has one (nothing to draw)."""
    below, above = [], []
    for row in rows:
        bounds = interval_of(row, key)
        value = number_at(row, key)
        lo, hi = (value - bounds[0], bounds[1] - value) if bounds is not None else (0.0, 0.0)
        below.append(max(lo, 0.0) if _finite(lo) else 0.0)
        above.append(max(hi, 0.0) if _finite(hi) else 0.0)
    return [below, above] if any(below) or any(above) else None


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


@dataclass(frozen=True)
class Difference:
    """``a - b`` with its standard error; ``paired`` when the error comes from per-window (or
    per-example) differences of the two on the same data."""

    value: float
    se: float
    paired: bool = False

    @property
    def indistinguishable(self) -> bool:
        return indistinguishable(self.value, self.se)

    def text(self, digits: int = 4, unit: str = "") -> str:
        """``+0.0012 ± 0.0009 nats``: signed, so a gain and a loss read apart."""
        err = f" ± {self.se:.{digits}f}" if _finite(self.se) else ""
        return f"{self.value:+.{digits}f}{err}{unit}"


def difference(
    a: float, b: float, se_a: float | None = None, se_b: float | None = None, paired_se: float | None = None
) -> Difference:
    """``a - b`` with the paired error where there is one, else the two errors combined."""
    if _finite(paired_se):
        return Difference(a - b, float(paired_se), paired=True)  # type: ignore[arg-type]
    return Difference(a - b, combined_se(se_a, se_b))
