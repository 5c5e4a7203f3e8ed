"""The inspect analyzer's observations (insights.md): the architecture and its size, a weights-only
file's limits, a compute step that failed, what one forward costs against the measured peak, ops
whose data sat in cache, energy, the weights left out of the advice because they did not run, and
the first recommendations. Pure functions of the Result (its metrics, tables, data and energy
measurement, as saved in ``results/inspect.json``), so a reloaded Result says the same."""

from __future__ import annotations

from modelxray.analyzers.inspect import advice
from modelxray.core.result import Result
from modelxray.models.input_tensors import describe_input


def insights(result: Result, results: dict[str, Result], cfg) -> list[str]:
    """Every sentence, in the order of insights.md; none for a failed result."""
    if not result.ok:
        return []
    m, out = result.metrics, []
    arch = result.data.get("architecture", {})
    if not arch.get("runnable", True):
        out.append(
            f"{result.data.get('model', 'The model')} holds weights only: compute, energy and profiling need "
            "model.architecture."
        )
    out.append(
        f"{arch.get('kind', 'unknown')} ({arch.get('reason', '')}), {m['parameters']:,.0f} parameters in "
        f"{m['tensors']:.0f} tensors."
    )
    err = result.data.get("compute_error")
    if err:
        spec = result.data.get("input") or arch.get("input") or {}
        out.append(
            f"Compute analysis FAILED at step {err['step']} ({err['error']}) on input {describe_input(spec)}; "
            f"the parameter statistics are complete, traceback in {err['traceback']}. If the input is wrong, "
            "set analyzer.inspect.input_shape (one tensor) or analyzer.inspect.inputs (named tensors)."
        )
    if "flops_total" in m:
        spec = result.data["input"]
        line = f"One forward of {describe_input(spec).split('; from ')[0]} costs {m['flops_total'] / 1e9:.4g} GFLOPs"
        if "forward_ms" in m:
            line += f" in {m['forward_ms']:.1f} ms: {m['achieved_gflops_per_s']:.1f} GFLOP/s"
        if "utilization_of_peak" in m:
            line += f", {m['utilization_of_peak']:.0%} of the measured matmul peak"
        out.append(line + ".")
    note = advice.cache_note(result.tables.get("roofline") or [], m.get("peak_memory_gb_per_s"))
    if note:
        out.append("Roofline: " + note)
    diffs = result.data.get("reference_differences")
    if diffs:
        out.append(_against_reference(m, diffs))
    energy = result.measurements.get("energy")
    if energy is not None:
        out.append(energy.insight())
    skipped = advice.not_run_note(m, result.data)
    if skipped:
        out.append(skipped)
    for rec in result.tables.get("recommendations", [])[:6]:
        out.append(f"{rec['action']}: {rec['target']}: {rec['why']}.")
    return out


def _against_reference(m: dict, diffs: dict) -> str:
    """The weights against the reference's tensors of the same names, in one sentence."""
    n = int(m.get("reference_tensors_compared", 0))
    where = diffs["reference"]
    if n == 0:
        return (
            f"No weight matches a tensor of the reference {where} by name and shape: the two name their tensors "
            "differently (a GGUF file, another architecture), so nothing was compared."
        )
    top = max(diffs["tensors"], key=lambda r: r["rel_diff"])
    unchanged = int(m.get("reference_unchanged_tensors", 0))
    line = (
        f"Against the reference {where}: {n} tensors compared by name; relative difference "
        f"{m['reference_rel_diff_mean']:.3g} on average (weighted by size), largest {top['rel_diff']:.3g} "
        f"({top['name']}), lowest cosine {m['reference_cosine_min']:.6f}; {unchanged} unchanged"
    )
    alone = [
        f"{len(diffs[k])} only in the {w}"
        for k, w in (("only_in_model", "model"), ("only_in_reference", "reference"))
        if diffs[k]
    ]
    if diffs["shape_differs"]:
        alone.append(f"{len(diffs['shape_differs'])} of other shapes")
    return line + ("; " + ", ".join(alone) if alone else "") + "."
