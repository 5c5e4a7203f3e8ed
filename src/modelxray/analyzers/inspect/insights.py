"""The inspect analyzer's observations (insights.md): the architecture and its size, a weights-only
file's limits, a compute step that failed, what one forward costs against the measured peak, ops
whose data sat in cache, energy, the weights left out of the advice because they did not run, and
the first recommendations. Pure functions of the Result (its metrics, tables, data and energy
measurement, as saved in ``results/inspect.json``), so a reloaded Result says the same."""

from __future__ import annotations

from modelxray.analyzers.inspect import advice
from modelxray.core.formatting import human_bytes, listed
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
    split = _energy_split(m, result.data.get("energy_split"))
    if split:
        out.append(split)
    layout = _layout(m, result.tables.get("memory_layout") or [])
    if layout:
        out.append(layout)
    if "compressibility" in m:
        out.append(_compressibility(m, result.tables.get("compressibility_by_layer") or [], cfg))
    skipped = advice.not_run_note(m, result.data)
    if skipped:
        out.append(skipped)
    for rec in result.tables.get("recommendations", [])[:6]:
        out.append(f"{rec['action']}: {rec['target']}: {rec['why']}.")
    return out


def _energy_split(m: dict, split: dict | None) -> str | None:
    """The dynamic energy, how the idle power was found, and whether RAPL split it per op."""
    if not split:
        return None
    line = f"Idle power: {split['idle_power']}"
    if "idle_power_w" in m:
        line = f"Idle power {m['idle_power_w']:.3g} W ({split['idle_power']})"
    if "dynamic_energy_j_per_forward" in m:
        line += (
            f"; the dynamic energy of a forward, {m['dynamic_energy_j_per_forward']:.3g} J, is split per op by FLOPs and bytes "
            f"({split['energy_model']})"
        )
    rapl = split["rapl"]
    return line + (f". Per op energy {rapl}." if rapl.startswith("MEASURED") else f". No per-op RAPL energy: {rapl}.")


def _layout(m: dict, rows: list[dict]) -> str | None:
    """The tensors that do not lie contiguously or start off a cache line, when there are any."""
    odd, off = int(m.get("tensors_non_contiguous", 0)), int(m.get("tensors_misaligned", 0))
    if not (odd or off):
        return None
    named = [f"{r['name']} ({r['stride_pattern']})" for r in rows if not r["contiguous"]]
    parts = [
        f"{odd} tensor{'s are' if odd != 1 else ' is'} not contiguous" + (f": {listed(named, 3)}" if named else "")
    ]
    if off:
        parts.append(f"{off} start{'s' if off == 1 else ''} off a 64-byte cache line")
    return "Memory layout: " + "; ".join(parts) + "."


def _compressibility(m: dict, layers: list[dict], cfg) -> str:
    """The model's compressibility score and the layer that would give the most bytes."""
    line = (
        f"Compressibility {m['compressibility']:.2f}: pruning, then {cfg.sensitivity_bits}-bit quantization, each "
        f"discounted by its cost, could remove {human_bytes(m['compressible_bytes'])} of "
        f"{human_bytes(m['weight_bytes'])}"
    )
    if layers and layers[0]["bytes_saved"] > 0:
        top = layers[0]
        line += f"; most from {top['layer']} ({top['compressibility']:.2f} of its {human_bytes(top['bytes'])})"
    return line + "."


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
