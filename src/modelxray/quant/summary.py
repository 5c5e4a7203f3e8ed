"""What a quantizer did, as a ``Result``: per-layer rows and the model-level figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelxray.core.result import Result

if TYPE_CHECKING:
    from torch import nn


def layer_row(
    module: str, original, bits: float, fmt: str, packed_bytes: int, rel_error: float, target=None, kind: str = "linear"
) -> dict:
    """One quantized tensor's report row: its module, kind, component and block (from its ``target``,
    ``quant.targets.Target``, when known), bits and format, sizes before and after, and weight error."""
    return {
        "module": module,
        "kind": target.kind if target is not None else kind,
        "component": target.component if target is not None else "",
        "block": target.block if target is not None else None,
        "bits": bits,
        "format": fmt,
        "elements": original.numel(),
        "bytes_before": original.numel() * original.element_size(),
        "packed_bytes": packed_bytes,
        "rel_error": rel_error,
    }


def quant_result(
    method: str, rows: list[dict], model: nn.Module, seconds: float, notes: list[str], source: Any = None
) -> Result:
    """``rows``: one per quantized tensor with ``elements``, ``bytes_before``, ``packed_bytes``,
    ``bits`` and ``rel_error``. Model-level sizes count every other parameter at its storage size.
    ``source``: the quantizer that did it (the report asks it to draw the result)."""
    from modelxray.metrics.tensor_bytes import storage_key

    seen, total_elems, total_bytes = set(), 0, 0
    for p in model.parameters():
        if storage_key(p) in seen:
            continue
        seen.add(storage_key(p))
        total_elems += p.numel()
        total_bytes += p.numel() * p.element_size()
    q_elems = sum(r["elements"] for r in rows)
    q_before = sum(r["bytes_before"] for r in rows)
    q_after = sum(r["packed_bytes"] for r in rows)
    model_after = total_bytes - q_before + q_after
    errors = [r["rel_error"] for r in rows]
    metrics = {
        "modules_quantized": float(len(rows)),
        "params_quantized": float(q_elems),
        "params_quantized_share": q_elems / total_elems if total_elems else 0.0,
        "effective_bits": 8 * q_after / q_elems if q_elems else 0.0,
        "model_effective_bits": 8 * model_after / total_elems if total_elems else 0.0,
        "weight_bytes_before": float(q_before),
        "weight_bytes_after": float(q_after),
        "model_bytes_before": float(total_bytes),
        "model_bytes_after": float(model_after),
        "compression_ratio": total_bytes / model_after if model_after else 1.0,
        "weight_rel_error_mean": sum(errors) / len(errors) if errors else 0.0,
        "weight_rel_error_max": max(errors) if errors else 0.0,
        "seconds": seconds,
    }
    bits_hist: dict[str, int] = {}
    for r in rows:
        bits_hist[str(r["bits"])] = bits_hist.get(str(r["bits"]), 0) + r["elements"]
    for b, n in bits_hist.items():
        metrics[f"params_at_{b}bit_share"] = n / q_elems
    metrics["params_float_share"] = 1.0 - metrics["params_quantized_share"]
    left = _left_as_loaded(model, {r["module"] for r in rows}, total_elems)
    if left:
        notes = [*notes, f"Left as loaded (no target of this quantizer covers them): {left}."]
    warn = float_share_warning(metrics["params_float_share"], getattr(source, "float_share_warn", None), method)
    if warn:
        notes = [warn, *notes]
    return Result(
        "quant",
        metrics=metrics,
        tables={"layers": rows},
        data={"method": method, "bits_histogram": bits_hist, "simulated": getattr(source, "simulated", True)},
        insights=notes,
        source=source,
    )


def float_share_warning(share: float, limit: float | None, method: str) -> str | None:
    """The sentence that leads the quant report when more than ``limit`` of the parameters stayed float
    (every figure of the run then describes a model that is only partly ``method``), or None."""
    if limit is None or share <= limit:
        return None
    return (
        f"Warning: {share:.0%} of the parameters were left float (more than quant.float_share_warn={limit:g}): "
        f"every figure of this run describes a model only {1 - share:.0%} {method}; the quant report lists the "
        "layers left as loaded"
    ) + "."


def _left_as_loaded(model: nn.Module, covered: set[str], total: int, floor: float = 0.01) -> str:
    """The module types whose parameters stayed as loaded, each holding at least ``floor`` of the
    model's parameters, largest first: "LSTMCell 98.1% (cell), Embedding 1.2% (wte)"."""
    from collections import defaultdict

    from modelxray.core.formatting import listed, type_name
    from modelxray.metrics.tensor_bytes import storage_key

    counts: dict[str, int] = defaultdict(int)
    names: dict[str, list[str]] = defaultdict(list)
    seen: set[int] = set()
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if storage_key(p) not in seen]
        seen.update(storage_key(p) for p in own)
        if not own or name in covered:
            continue
        kind = type_name(module)
        counts[kind] += sum(p.numel() for p in own)
        names[kind].append(name or "(the model itself)")
    shown = []
    for kind, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        if total and n / total >= floor:
            where = listed(names[kind])
            shown.append(f"{kind} {n / total:.1%} of the parameters ({where})")
    return "; ".join(shown)
