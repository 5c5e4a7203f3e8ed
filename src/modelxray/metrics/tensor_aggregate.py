"""Per-tensor statistics (``tensor_stats``) aggregated by layer type: parameter-weighted means and
the extremes that matter. Pure: rows of dicts in, rows of dicts out."""

from __future__ import annotations

import math


def aggregate(rows: list[dict], key: str = "type") -> list[dict]:
    """One row per value of ``rows[i][key]`` (largest parameter count first): tensors,
    parameters, bytes, parameter-weighted means of the per-tensor shares and shapes of the
    distribution, and the extremes that matter (min and max value, max kurtosis, max spectral
    norm, min stable rank, max quant_sensitivity). Every row has the same keys; a statistic no
    tensor of the group has (spectral stats of norms and biases) is ``None``; NaN is skipped."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r.get(key)), []).append(r)

    def wmean(rs: list[dict], k: str) -> float | None:
        vals = [(r[k], r["numel"]) for r in rs if r.get(k) is not None and not _isnan(r[k])]
        w = sum(nw for _, nw in vals)
        return sum(v * nw for v, nw in vals) / w if w else None

    def ext(rs: list[dict], k: str, f) -> float | None:
        vals = [r[k] for r in rs if r.get(k) is not None and not _isnan(r[k])]
        return f(vals) if vals else None

    out = []
    for name, rs in sorted(groups.items(), key=lambda kv: -sum(r["numel"] for r in kv[1])):
        out.append(
            {
                key: name,
                "tensors": len(rs),
                "parameters": sum(r["numel"] for r in rs),
                "bytes": sum(r["bytes"] for r in rs),
                "mean": wmean(rs, "mean"),
                "std": wmean(rs, "std"),
                "abs_mean": wmean(rs, "abs_mean"),
                "min": ext(rs, "min", min),
                "max": ext(rs, "max", max),
                "zeros_share": wmean(rs, "zeros_share"),
                "small_share": wmean(rs, "small_share"),
                "outlier_share": wmean(rs, "outlier_share"),
                "entropy_bits": wmean(rs, "entropy_bits"),
                "kurtosis": wmean(rs, "kurtosis"),
                "kurtosis_max": ext(rs, "kurtosis", max),
                "skewness": wmean(rs, "skewness"),
                "spectral_norm_max": ext(rs, "spectral_norm", max),
                "stable_rank": wmean(rs, "stable_rank"),
                "stable_rank_min": ext(rs, "stable_rank", min),
                "quant_sensitivity": wmean(rs, "quant_sensitivity"),
                "quant_sensitivity_max": ext(rs, "quant_sensitivity", max),
                "prune_potential": wmean(rs, "prune_potential"),
            }
        )
    return out


def _isnan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)
