"""Recommendations from the inspection's numbers, each carrying the numbers behind it.

Pruning and precision advice concern weight matrices only (``is_weight_matrix``): at least two
dimensions larger than 1 and at least ``min_numel`` elements, so that a ViT ``cls_token`` of shape
[1, 1, 64] or a few-element position table is never named, while a 1x1 convolution kernel
[out, in, 1, 1] is. The analyzer hands them only the weights its forward read, and no layer that
writes the model's outputs for pruning (``executed.py``).

- prune: weight matrices with the highest ``prune_potential`` (share of weights that can be zeroed by
  magnitude for at most 1% of the tensor's energy), above ``prune_min``.
- keep at higher precision: weight matrices with the highest ``quant_sensitivity`` (relative error of
  b-bit round-to-nearest), when at least ``ratio`` times the median of the model's weight matrices,
  with kurtosis and outlier share.
- fuse: matmuls directly followed by elementwise ops (one kernel would skip writing and re-reading
  the intermediate tensor), by bytes saved.
- memory-bound: ops whose arithmetic intensity is below the machine's ridge point, by time share; an
  op that moved bytes faster than the measured copy bandwidth is said to have had its data in cache.
- cache locality: ops (by input shapes) whose working set per call exceeds the L2 cache the CPU
  reports and whose intensity is below the ridge point (``memory_layout.locality_candidates``): each
  call streams its data from a larger, slower level and does too little work per byte to hide it.
- latency-bound: ops that reach under ``roof_share_min`` of both the memory and the compute roof
  (``mark_latency_bound``): neither bytes nor FLOPs limit them, the fixed cost of each call does, so
  fewer bytes would not speed them up; batching or fusing would.
"""

from __future__ import annotations

import math
import statistics

from modelxray.core.formatting import human_bytes, listed


def is_weight_matrix(shape, min_numel: int) -> bool:
    """A tensor a pruning or precision choice applies to: two or more dimensions larger than 1 (a
    matrix, or a convolution kernel, once size-1 dimensions are dropped) and ``min_numel`` elements
    or more. Vectors stored with extra size-1 dimensions ([1, 1, 64] tokens) are not."""
    dims = [int(d) for d in shape or []]
    return sum(d > 1 for d in dims) >= 2 and math.prod(dims) >= min_numel


def _matrices(rows: list[dict], min_numel: int) -> list[dict]:
    return [r for r in rows if r.get("quant_sensitivity") is not None and is_weight_matrix(r.get("shape"), min_numel)]


def prune_candidates(rows: list[dict], top: int, prune_min: float, min_numel: int) -> list[dict]:
    mats = sorted(_matrices(rows, min_numel), key=lambda r: -r["prune_potential"])
    return [
        {
            "action": "prune",
            "target": r["name"],
            "why": f"{r['prune_potential']:.0%} of its weights hold "
            f"under 1% of its energy (sparsity now {r['zeros_share']:.1%}, std {r['std']:.3g})",
            "value": r["prune_potential"],
        }
        for r in mats[:top]
        if r["prune_potential"] >= prune_min
    ]


def precision_candidates(rows: list[dict], top: int, bits: int, ratio: float, min_numel: int) -> list[dict]:
    mats = _matrices(rows, min_numel)
    if not mats:
        return []
    median = statistics.median(r["quant_sensitivity"] for r in mats)
    worst = sorted(mats, key=lambda r: -r["quant_sensitivity"])[:top]

    def against_median(error: float) -> str:
        if median > 0:
            return f"x{error / median:.2f} the model median {median:.3f}"
        return (
            "where most matrices lose nothing (already on that grid: a quantized model, or rows narrower than a group)"
        )

    return [
        {
            "action": "keep higher precision",
            "target": r["name"],
            "why": f"{bits}-bit RTN relative error {r['quant_sensitivity']:.3f}, {against_median(r['quant_sensitivity'])}; "
            f"kurtosis {r['kurtosis']:.1f}, outliers {r['outlier_share']:.2%}",
            "value": r["quant_sensitivity"],
        }
        for r in worst
        if r["quant_sensitivity"] > 0 and r["quant_sensitivity"] >= ratio * median
    ]


def fusion_advice(candidates: list[dict], top: int) -> list[dict]:
    best = sorted(candidates, key=lambda c: -c.get("bytes_saved_estimate", 0))[:top]
    return [
        {
            "action": "fuse",
            "target": f"{c['producer']} -> {' -> '.join(c['consumers'])}"
            + (f" in {c['module']}" if c.get("module") else ""),
            "why": f"{c['count']} occurrences; a fused kernel would avoid about "
            f"{c.get('bytes_saved_estimate', 0) / 2**20:.1f} MiB of intermediate traffic per forward",
            "value": c.get("bytes_saved_estimate", 0),
        }
        for c in best
    ]


def memory_bound_advice(roofline_rows: list[dict], top: int) -> list[dict]:
    total = sum(r.get("time_s", 0.0) for r in roofline_rows) or 1.0
    mem = sorted((r for r in roofline_rows if r.get("bound") == "memory"), key=lambda r: -r.get("time_s", 0.0))[:top]
    return [
        {
            "action": "memory-bound",
            "target": r["op"],
            "why": f"{r.get('time_s', 0.0) / total:.1%} of op time at {r['intensity']:.2f} FLOP/byte "
            f"(ridge {r.get('ridge', float('nan')):.1f})"
            + (
                f", moving {r['achieved_bytes_per_s'] / 1e9:.1f} GB/s ({r['share_of_attainable']:.0%} of the roof"
                + ("; faster than the measured copy bandwidth: its data sat in cache)" if r.get("in_cache") else ")")
                if r.get("achieved_bytes_per_s") and r.get("share_of_attainable") is not None
                else ""
            )
            + "; fewer bytes (fusion, lower precision) speed it up, more FLOP/s do not",
            "value": r.get("time_s", 0.0),
        }
        for r in mem
    ]


_REUSING = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.linear", "aten.matmul", "aten.convolution")


def locality_advice(nodes: list[dict], top: int, caches: dict[str, int], ridge: float) -> list[dict]:
    """Advice for the ``locality_candidates`` nodes, slowest first, with the numbers behind it: a
    matmul gains reuse from more rows per call; any other op from being fused with its neighbours,
    which keeps the data it passes on in cache."""
    l2 = caches["L2"] if nodes else 0
    out = []
    for n in nodes[:top]:
        level = "L3" if n.get("cache_level") == "L3" else "memory"
        remedy = (
            "more rows per call (a larger batch) would reuse each weight byte more"
            if n["op"] in _REUSING
            else "fusing it with the op that makes or reads its data would keep that data in cache"
        )
        time_s = n.get("time_s")
        out.append(
            {
                "action": "cache locality",
                "target": f"{n['op']} on {n['input_shapes']}" + (f" in {n['module']}" if n.get("module") else ""),
                "why": f"{human_bytes(n['working_set_bytes'])} read and written per call exceeds the "
                f"{human_bytes(l2)} L2 cache, at {n['intensity']:.2f} FLOP/byte (ridge {ridge:.1f}): each call "
                f"streams its data from {level}"
                + (f" ({time_s * 1e3:.3g} ms per forward)" if time_s else "")
                + f"; {remedy}",
                "value": n["working_set_bytes"],
            }
        )
    return out


def mark_latency_bound(roofline_rows: list[dict], share_min: float) -> list[dict]:
    """The roofline rows, with ``bound`` "latency" for an op that reached under ``share_min`` of both
    roofs: ``share_of_attainable`` is the larger of its shares of the memory and the compute roof, so
    a small one says the op spent its time neither moving bytes nor doing FLOPs (launch and dispatch
    of calls on small tensors). Calling it memory-bound would advise fewer bytes, which cannot help."""
    return [{**r, "bound": "latency"} if _below_both_roofs(r, share_min) else r for r in roofline_rows]


def _below_both_roofs(row: dict, share_min: float) -> bool:
    share = row.get("share_of_attainable")
    return share is not None and share < share_min


def latency_bound_advice(roofline_rows: list[dict], top: int, peak) -> list[dict]:
    """Advice for the ``mark_latency_bound`` ops, slowest first, with both shares of the roofs."""
    total = sum(r.get("time_s", 0.0) for r in roofline_rows) or 1.0
    slow = sorted((r for r in roofline_rows if r.get("bound") == "latency"), key=lambda r: -r.get("time_s", 0.0))
    return [
        {
            "action": "latency-bound",
            "target": r["op"],
            "why": f"{r['time_s'] / total:.1%} of op time in {_calls(r.get('calls', 0))}, reaching "
            f"{r['bytes'] / peak.memory_bytes_per_s / r['time_s']:.1%} of the memory roof and "
            f"{r['flops'] / peak.matmul_flops_per_s / r['time_s']:.1%} of the compute roof: bound by neither but "
            "by the fixed cost of launching and dispatching each call on small tensors; more work per call "
            "(a larger batch) or fusing it with its neighbours speeds it up, fewer bytes do not",
            "value": r["time_s"],
        }
        for r in slow[:top]
    ]


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


def not_run_note(metrics: dict, data: dict) -> str | None:
    """The line saying how many weight matrices (``data["weights_not_run"]``) the prune and precision
    advice left out because the forward never read them (a branch these inputs do not take); None
    when none was."""
    n = int(metrics.get("weight_matrices_not_run", 0))
    if not n:
        return None
    layers = dict.fromkeys(name.rpartition(".")[0] or "(the model itself)" for name in data.get("weights_not_run", []))
    return (
        f"{n} weight matri{'x was' if n == 1 else 'ces were'} left out of the prune and precision advice: "
        f"{'it' if n == 1 else 'they'} did not run on these inputs (in {listed(layers, 3)})."
    )


def cache_note(roof: list[dict], copy_gb_per_s: float | None) -> str | None:
    """The sentence that keeps a reader from taking more than 100% of the memory roof for an error:
    the ops (``in_cache``) that moved bytes faster than the measured copy bandwidth had their data
    in cache. None when no op did."""
    fast = [r["op"] for r in roof if r.get("in_cache")]
    if not fast:
        return None
    shown = listed(fast, 5)
    bw = f" ({copy_gb_per_s:.1f} GB/s)" if copy_gb_per_s else ""
    return (
        f"{shown} moved bytes faster than the measured copy bandwidth{bw}, which is measured on a tensor "
        "far larger than the caches: their data sat in cache, so a share of the memory roof above 100% is "
        "expected there, not an error."
    )
