"""Sentences about a quantization report (``insights.md``), each with the numbers behind it."""

from __future__ import annotations

from modelxray.core.formatting import human_bytes


def quant_insights(result) -> list[str]:
    """What was quantized, at how many effective bits, how much smaller, and the worst layers."""
    m, rows = result.metrics, result.tables.get("layers") or []
    out = [
        f"{result.data.get('method', 'quantization')}: {int(m['modules_quantized'])} tensors "
        f"({m['params_quantized_share']:.0%} of parameters) at {m['effective_bits']:.2f} effective bits "
        f"including scales; the model shrinks {m['compression_ratio']:.2f}x "
        f"({human_bytes(m['model_bytes_before'])} -> {human_bytes(m['model_bytes_after'])}) in {m['seconds']:.1f} s."
    ]
    if rows:
        worst = sorted(rows, key=lambda r: r["rel_error"], reverse=True)[:3]
        out.append(
            "Largest relative weight errors: "
            + ", ".join(f"{r['module']} ({r['format']}) {r['rel_error']:.3f}" for r in worst)
            + f"; mean {m['weight_rel_error_mean']:.4f}."
        )
    return out
