"""``comprehensive_model_analysis.txt``: the whole inspection as one plain-text report, readable in
a terminal or a CI log, with every number the Markdown summary leaves out (all tensors)."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from modelxray.analyzers.inspect.advice import cache_note, not_run_note
from modelxray.analyzers.inspect.summary import executive_summary
from modelxray.core.formatting import human_bytes
from modelxray.models.input_tensors import describe_input

WIDTH = 100


def _num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3e}"
        return f"{v:,.4f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.1f}"
    return str(v)


def _table(rows: list[dict], cols: list[str]) -> list[str]:
    if not rows:
        return ["  (none)"]
    cells = [[_num(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = lambda vals: "  " + "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(vals, widths)))  # noqa: E731
    return [line(cols), "  " + "  ".join("-" * w for w in widths), *(line(r) for r in cells)]


def _section(title: str) -> list[str]:
    return ["", "=" * WIDTH, title.upper(), "=" * WIDTH]


def render(subject, result, cfg) -> str:
    info, m, data = subject.info, result.metrics, result.data
    out = [
        f"modelxray comprehensive model analysis: {info.name}",
        f"generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}",
    ]
    out += _section("executive summary")
    out += [f"  {line}" for line in executive_summary(result)]
    out += _section("source")
    out += [
        f"  name             {info.name}",
        f"  format           {info.source_format}",
        f"  stored as        {info.source_dtype}",
    ]
    if info.file_path:
        out.append(f"  file             {info.file_path} ({human_bytes(info.file_bytes or 0)})")
    out += [f"  note             {n}" for n in info.notes]

    arch = data.get("architecture", {})
    out += _section("architecture")
    out += [
        f"  kind             {arch.get('kind')}",
        f"  why              {arch.get('reason')}",
        f"  parameters       {_num(int(m['parameters']))} in {int(m['tensors'])} tensors, "
        f"{human_bytes(int(m['weight_bytes']))}",
    ]
    if arch.get("input"):
        out.append(f"  analysed input   {describe_input(arch['input'])}")
    if arch.get("module_counts"):
        out += ["", "  module types (leaf modules)"]
        out += _table(
            [
                {"type": k, "count": v, "param_share": arch["param_share"].get(k)}
                for k, v in arch["module_counts"].items()
            ],
            ["type", "count", "param_share"],
        )

    out += _section("parameters by layer type")
    agg = result.tables.get("parameters_by_layer_type", [])
    if agg:
        out += _table(agg, list(agg[0].keys()))
    out += _section("every tensor")
    cols = [
        "name",
        "type",
        "numel",
        "mean",
        "std",
        "min",
        "max",
        "zeros_share",
        "small_share",
        "entropy_bits",
        "kurtosis",
        "skewness",
        "l1",
        "l2",
        "spectral_norm",
        "stable_rank",
        "outlier_share",
        "quant_sensitivity",
        "prune_potential",
    ]
    out += _table(data.get("tensors", []), cols)
    out += [
        "",
        "  How to read the indicators:",
        f"  - quant_sensitivity: relative Frobenius error ||W - Q(W)|| / ||W|| of {cfg.sensitivity_bits}-bit "
        "symmetric round-to-nearest per output channel; higher = keep at higher precision.",
        "  - prune_potential: share of the weights that can be zeroed by magnitude while losing at most 1% of "
        "the tensor's squared L2 norm; higher = more prunable.",
        f"  - outlier_share: share of values beyond {cfg.outlier_k:g} std of the mean; small_share: |x| below "
        f"{cfg.small_threshold:g} x max|x|; entropy_bits: entropy of the {cfg.bins}-bin histogram.",
        f"  - spectral_norm: largest singular value ({cfg.spectral}, relative error bound "
        f"{_num(m.get('spectral_rel_error_max'))} at most); stable_rank = ||W||_F^2 / ||W||_2^2.",
    ]

    err = data.get("compute_error")
    if err:
        out += _section("compute: FAILED")
        out += [
            f"  failed at step   {err['step']} (steps: input, FLOPs, bytes per op, profile, peak, roofline, energy)",
            f"  error            {err['error']}",
            f"  input            {describe_input(data.get('input') or arch.get('input') or {})}",
            f"  traceback        {err['traceback']}",
            "  The parameter statistics above are complete; the compute figures below (if any) are those of the",
            "  steps that finished before the failure. If the input is wrong, set analyzer.inspect.input_shape",
            "  (one tensor) or analyzer.inspect.inputs (named tensors).",
        ]
    if "flops_total" in m:
        out += _section("compute")
        out.append(f"  FLOPs per forward   {_num(int(m['flops_total']))} (attention counted for any implementation)")
        if "forward_ms" in m:
            out.append(
                f"  forward time        {m['forward_ms']:.2f} ms (median of {cfg.profile_iters} after "
                f"{cfg.profile_warmup} warm-up)"
            )
        if "utilization_of_peak" in m:
            out.append(
                f"  achieved            {m['achieved_gflops_per_s']:.2f} GFLOP/s = {m['utilization_of_peak']:.1%} of "
                f"the measured matmul peak {m['peak_matmul_gflops_per_s']:.1f} GFLOP/s; memory "
                f"{m['peak_memory_gb_per_s']:.1f} GB/s"
            )
        out += ["", "  FLOPs by op type"] + _table(result.tables.get("flops_by_op", []), ["op", "flops", "share"])
        out += ["", "  FLOPs by module (inclusive)"] + _table(
            result.tables.get("flops_by_module", []), ["module", "flops", "share"]
        )
        roof = result.tables.get("roofline", [])
        if roof:
            out += ["", "  Roofline per op (time per forward; bound = which roof limits it)"]
            out += _table(roof, [c for c in roof[0].keys()])
            note = cache_note(roof, m.get("peak_memory_gb_per_s"))
            if note:
                out += ["", f"  in_cache = True: {note}"]
        fusion = result.tables.get("fusion_candidates", [])
        if fusion:
            out += ["", "  Fusion candidates"] + _table(fusion, [c for c in fusion[0].keys()])

    if "energy" in data:
        e = data["energy"]
        status = "MEASURED" if e["measured"] else "ESTIMATED"
        tdp = (
            f", CPU TDP {e['cpu_tdp_w']:g} W ({e.get('cpu_tdp_source') or 'source unknown'})"
            if e.get("cpu_tdp_w")
            else ""
        )
        out += _section("energy and CO2 (codecarbon)")
        out += [
            f"  {status}: {e['method']}",
            f"  power model        {e.get('cpu_power_model', 'unknown')}{tdp}",
            f"  {e['iterations']} forwards in {e['seconds']:.1f} s: {e['energy_j']:.2f} J {status} "
            f"(CPU {e['cpu_energy_j']:.2f}, GPU {e['gpu_energy_j']:.2f}, RAM {e['ram_energy_j']:.2f}), "
            f"mean {e['mean_power_w']:.1f} W",
            f"  per forward        {m['energy_j_per_forward']:.4g} J, {m['co2_g_per_forward']:.3g} g CO2 "
            f"(grid of {e['country_iso_code']}), {status}",
            f"  efficiency         {m['flops_per_joule'] / 1e9:.2f} GFLOP per J, {status}",
        ]
        out += _energy_split(m, data, result.tables)
    nodes = result.tables.get("nodes")
    if nodes:
        out += _section("nodes: each op by its input shapes, slowest first")
        cols = ["op", "module", "input_shapes", "calls", "time_s", "flops", "bytes", "intensity"]
        out += _table(nodes, cols + ["working_set_bytes", "cache_level"])
        out += [
            "",
            "  flops and bytes (read and written) are the traced forward's, exact for every op; time_s is the",
            "  profiler's time per forward of the same op on the same shapes, with the ops it calls (- where the",
            "  profiler saw none); working_set_bytes is bytes per call, cache_level the smallest cache holding it.",
        ]
    out += _layout_section(m, data, result.tables)
    out += _compressibility_section(m, result.tables, cfg)
    if "system" in data:
        s = data["system"]
        out += _section("system during the compute analysis")
        out += [f"  {k:<28} {_num(v)}" for k, v in s.items() if k != "sources"]
        out += [f"  source of {k:<18} {v}" for k, v in (s.get("sources") or {}).items()]

    out += _section("recommendations")
    recs = result.tables.get("recommendations", [])
    out += [f"  [{r['action']}] {r['target']}\n      {r['why']}" for r in recs] or ["  (none)"]
    skipped = not_run_note(m, data)
    if skipped:
        out += ["", f"  {skipped}"]
    return "\n".join(out) + "\n"


def _energy_split(m: dict, data: dict, tables: dict) -> list[str]:
    """The energy per op, three ways, each line saying where its figures come from (``energy_split.py``)."""
    split = data.get("energy_split")
    if not split:
        return []
    out = [""]
    if "idle_power_w" in m:
        out.append(f"  idle power         {m['idle_power_w']:.3g} W, {split['idle_power']}")
    else:
        out.append(f"  idle power         {split['idle_power']}")
    if "dynamic_energy_j_per_forward" in m:
        out.append(
            f"  dynamic energy     {m['dynamic_energy_j_per_forward']:.4g} J of a forward (its energy less the idle "
            f"power over its time), {split['dynamic_energy']}"
        )
    out += ["  energy per op, in the roofline table:", f"    energy_j           {split['time_share']}"]
    if "energy_model" in split:
        scale = f"; measured / modelled = {m['energy_model_scale']:.3g}" if "energy_model_scale" in m else ""
        out.append(
            f"    dynamic_energy_j   the dynamic energy by e_flop x FLOPs + e_byte x bytes, {split['energy_model']}{scale}"
        )
    if tables.get("energy_by_op_rapl"):
        out.append(f"    rapl_energy_j      {split['rapl']}")
        out += ["", "  RAPL energy per op group (per forward, counters read around each op)"]
        out += _table(tables["energy_by_op_rapl"], ["op", "calls", "energy_j", "time_s"])
    else:
        out.append(f"    rapl_energy_j      not measured: {split['rapl']}")
    return out


def _layout_section(m: dict, data: dict, tables: dict) -> list[str]:
    """Each tensor's alignment and strides, the CPU's caches and where each op's data fits."""
    if "tensors_non_contiguous" not in m and "caches" not in data:
        return []
    out = _section("memory layout and caches")
    if "tensors_non_contiguous" in m:
        line = data.get("cache_line_bytes", 64)
        out.append(
            f"  tensors          {int(m['tensors_misaligned'])} of {int(m['tensors'])} start off a {line}-byte cache "
            f"line; {int(m['tensors_non_contiguous'])} are not contiguous"
        )
        if tables.get("memory_layout"):
            out += _table(
                tables["memory_layout"], ["name", "shape", "strides", "stride_pattern", "align_offset", "bytes"]
            )
    caches = data.get("caches")
    if caches:
        sizes = ", ".join(f"{k} {human_bytes(v)}" for k, v in caches["sizes"].items())
        out.append(
            f"  caches           {sizes} ({caches['source']})" if sizes else f"  caches           {caches['source']}"
        )
    if "ops_beyond_l2_low_intensity" in m:
        n = int(m["ops_beyond_l2_low_intensity"])
        out.append(
            f"  locality         {n} op{'s' if n != 1 else ''} (by input shapes) with a working set beyond L2 and an "
            "intensity under the ridge point" + (": see the cache-locality advice" if n else "")
        )
    return out


def _compressibility_section(m: dict, tables: dict, cfg) -> list[str]:
    """The model's compressibility score, its formula and the score of each layer."""
    if "compressibility" not in m:
        return []
    out = _section("compressibility")
    out += [
        f"  model            {m['compressibility']:.3f}: {human_bytes(m['compressible_bytes'])} of "
        f"{human_bytes(m['weight_bytes'])} could go",
        f"  per weight matrix c = 1 - (1 - p) x (1 - q x (1 - s)), q = max(0, 1 - {cfg.sensitivity_bits} / bits held now):",
        "  p = prune_potential (0 for a layer whose units are the outputs), s = quant_sensitivity; other",
        "  tensors c = 0; a layer's and the model's score = bytes saved / bytes held.",
        "",
    ]
    return out + _table(tables.get("compressibility_by_layer", [])[: cfg.top * 2], list(_COMPRESS_COLS))


_COMPRESS_COLS = ("layer", "bytes", "bytes_saved", "compressibility", "prune_potential", "quant_sensitivity")
