"""The work of the inspect analyzer (its keys, checks and description: ``config.py``)."""

from __future__ import annotations

import re
import statistics
import time
import traceback

import torch

from modelxray.analyzers.inspect import advice
from modelxray.analyzers.inspect.executed import Watch, layer_weights, observe, output_layers, unread_weights
from modelxray.analyzers.inspect.inputs import given_inputs, input_spec
from modelxray.analyzers.inspect.weights import analyze_weights
from modelxray.core.errors import ConfigError
from modelxray.core.result import Result, RunContext
from modelxray.metrics.tensor_stats import StatsConfig, aggregate
from modelxray.models.architecture import classify_names, describe
from modelxray.models.input_tensors import batch_of, make_input
from modelxray.models.weights_file import WeightsFile, named_tensors

_TABLE_STATS = (
    "shape",
    "numel",
    "std",
    "abs_mean",
    "zeros_share",
    "kurtosis",
    "outlier_share",
    "l2",
    "spectral_norm",
    "stable_rank",
    "quant_sensitivity",
    "prune_potential",
)


def stats_config(cfg, seed: int = 0) -> StatsConfig:
    return StatsConfig(
        bins=cfg.bins,
        outlier_k=cfg.outlier_k,
        small_threshold=cfg.small_threshold,
        spectral=cfg.spectral,
        spectral_rtol=cfg.spectral_rtol,
        spectral_max_iters=cfg.spectral_max_iters,
        sensitivity_bits=cfg.sensitivity_bits,
        seed=seed,
    )


def run(cfg, subject, ctx: RunContext) -> Result:
    model = subject.model
    result = cfg.new_result()
    result.data["model"] = subject.info.name  # named by insights.md
    rows = analyze_weights(model, stats_config(cfg, ctx.seed), ctx.progress)
    by_type = aggregate(rows, "type")
    result.data["tensors"] = rows
    result.tables["parameters_by_layer_type"] = by_type
    result.metrics.update(_parameter_metrics(rows))
    _layout(rows, result, cfg.top)
    watch, compute_recs = Watch(), []
    if isinstance(model, WeightsFile):
        kind, reason = classify_names([r["name"] for r in rows], {r["name"]: tuple(r["shape"]) for r in rows})
        result.data["architecture"] = {"kind": kind, "reason": reason, "runnable": False}
    else:
        try:
            arch = input_spec(cfg, subject)
        except ConfigError as exc:  # preflight raises it before any work; run alone, the parameters stay
            arch = describe(model)
            arch.input = {"kind": "unknown", "shape": None, "source": str(exc)}
            _compute_failed(result, "input", exc, traceback.format_exc())
        result.data["architecture"] = {**arch.__dict__, "runnable": True}
        if cfg.compute and arch.input.get("shape") is not None:
            compute_recs = _compute(cfg, model, arch.input, result, ctx, watch, given_inputs(cfg, subject))
    recs = _weight_advice(cfg, model, rows, watch, result) + compute_recs
    result.tables["top_tensors"] = _top_tensors(rows, cfg.top)
    result.tables["recommendations"] = recs
    if subject.reference_weights is not None:
        _against_reference(model, subject.reference_weights, result, cfg.top)
    from modelxray.analyzers.inspect.text_report import render
    from modelxray.analyzers.inspect.xml_report import render_xml

    result.texts["comprehensive_model_analysis.txt"] = render(subject, result, cfg)
    result.texts["comprehensive_model_analysis.xml"] = render_xml(subject.info.name, result)
    return result


def _weight_advice(cfg, model, rows: list[dict], watch: Watch, result: Result) -> list[dict]:
    """Prune and precision advice on the weights the forward read (all of them when it did not run):
    a branch the inputs never take was not measured at work. The layers that write the model's
    outputs are never pruning candidates: their units are the outputs."""
    if isinstance(model, WeightsFile):
        unread, heads = set(), set()
    else:
        unread, heads = unread_weights(model, watch), output_layers(model, watch)
        result.data["output_layers"] = sorted(heads)
    if watch.read is not None:
        skipped = [
            r["name"] for r in rows if r["name"] in unread and advice.is_weight_matrix(r["shape"], cfg.advice_min_numel)
        ]
        result.data["weights_not_run"] = skipped
        result.metrics["weight_matrices_not_run"] = float(len(skipped))
    ran = [r for r in rows if r["name"] not in unread]
    outputs = layer_weights(model, heads) if heads else set()
    _compressibility(cfg, rows, outputs, result)
    prunable = [r for r in ran if r["name"] not in outputs]
    return advice.prune_candidates(prunable, cfg.top, cfg.prune_min, cfg.advice_min_numel) + (
        advice.precision_candidates(ran, cfg.top, cfg.sensitivity_bits, cfg.precision_ratio, cfg.advice_min_numel)
    )


def _compressibility(cfg, rows: list[dict], outputs: set[str], result: Result) -> None:
    """One score in [0, 1] for the model and each layer: the share of its bytes pruning and
    ``sensitivity_bits``-bit quantization could remove, each discounted by its cost
    (``metrics/compressibility.py``); a layer whose units are the outputs is not pruned."""
    from modelxray.metrics import compressibility as comp

    matrices = {r["name"] for r in rows if advice.is_weight_matrix(r.get("shape"), cfg.advice_min_numel)}
    scored = comp.scored_rows(rows, cfg.sensitivity_bits, matrices, outputs)
    result.metrics["compressibility"] = comp.model_score(scored)
    result.metrics["compressible_bytes"] = float(sum(t["bytes_saved"] for t in scored))
    result.tables["compressibility_by_layer"] = comp.by_layer(scored)


def _layout(rows: list[dict], result: Result, top: int) -> None:
    """How many tensors start off a 64-byte cache line or are not contiguous, and a table of them."""
    from modelxray.metrics.memory_layout import CACHE_LINE

    laid = [r for r in rows if "stride_pattern" in r]
    if not laid:
        return
    odd = [r for r in laid if r.get("align_offset") or not r["contiguous"]]
    result.metrics["tensors_misaligned"] = float(sum(bool(r.get("align_offset")) for r in laid))
    result.metrics["tensors_non_contiguous"] = float(sum(not r["contiguous"] for r in laid))
    result.data["cache_line_bytes"] = CACHE_LINE
    result.tables["memory_layout"] = [
        {k: r.get(k) for k in ("name", "shape", "strides", "stride_pattern", "contiguous", "align_offset", "bytes")}
        | {"shape": str(list(r["shape"]))}
        for r in sorted(odd, key=lambda r: -r["bytes"])[: top * 3]
    ]


def _not_prunable(model, watch: Watch) -> set[str]:
    """Layers structured pruning must not name: those writing the model's outputs, and those whose
    weight the forward never read (removing their units changes nothing on these inputs)."""
    unread = unread_weights(model, watch)
    return output_layers(model, watch) | {n for n, _ in model.named_modules() if f"{n}.weight" in unread}


def _structured(cfg, model, x, result: Result, watch: Watch) -> list[dict]:
    """Whole units removed from the largest layers, each layer's cost measured (``structured_pruning``),
    and advice for the layers whose weakest units cost least."""
    from modelxray.measure.flops import run_model
    from modelxray.measure.structured_pruning import structured_pruning

    rows, together = structured_pruning(
        model, lambda: run_model(model, x), cfg.structured_prune_share, cfg.structured_layers
    )
    skip = _not_prunable(model, watch)
    rows = [r for r in rows if r["layer"] not in skip]
    result.tables["structured_pruning"] = rows
    if together is not None:
        result.metrics["structured_prune_output_change"] = together
    share = f"{cfg.structured_prune_share:.0%}"
    return [
        {
            "action": "prune structurally",
            "target": r["layer"],
            "why": f"removing its {share} weakest {r['unit']}s ({r['removed']} of {r['units']}, {r['params_removed']:,} "
            f"weights) changes the output by {r['output_change']:.2%}",
            "value": r["output_change"],
        }
        for r in rows[: min(cfg.top, 3)]
    ]


def _energy_by_op(rows: list[dict], energy) -> None:
    """Each operator's share of a forward's energy, by its share of the profiled time: an estimate
    (``energy_j`` with ``energy_status`` ESTIMATED), since no counter splits power by operator."""
    per_forward = energy.energy_j / max(energy.iterations, 1)
    total = sum(r.get("time_s", 0.0) for r in rows)
    for r in rows:
        r["energy_j"] = per_forward * r.get("time_s", 0.0) / total if total > 0 else float("nan")
        r["energy_status"] = "ESTIMATED"


def _against_reference(model, reference, result: Result, top: int) -> None:
    """Each weight against the reference's tensor of the same name and shape (``reference=file|hf``):
    the relative difference, largest absolute difference, cosine and changed share, a table of the
    ``top`` most changed and the totals; tensors found in one only are counted."""
    from modelxray.metrics.tensor_difference import tensor_difference

    mine = dict(named_tensors(model))  # a quantized library's weights dequantized
    rows, shape_differs, seen = [], [], set()
    for name, ref in reference.iter_tensors():
        seen.add(name)
        if name not in mine:
            continue
        if tuple(mine[name].shape) != tuple(ref.shape):
            shape_differs.append(name)
            continue
        rows.append({"name": name, "numel": ref.numel(), **tensor_difference(mine[name].float(), ref.float())})
    weight = sum(r["numel"] for r in rows)
    result.metrics["reference_tensors_compared"] = float(len(rows))
    if rows:
        result.metrics["reference_rel_diff_mean"] = sum(r["rel_diff"] * r["numel"] for r in rows) / weight
        result.metrics["reference_rel_diff_max"] = max(r["rel_diff"] for r in rows)
        result.metrics["reference_cosine_min"] = min(r["cosine"] for r in rows)
        result.metrics["reference_unchanged_tensors"] = float(sum(r["changed_share"] == 0 for r in rows))
    result.tables["reference_differences"] = sorted(rows, key=lambda r: -r["rel_diff"])[:top]
    files = getattr(reference, "files", None) or [reference]
    where = files[0].path if len(files) == 1 else files[0].path.parent
    result.data["reference_differences"] = {
        "reference": str(where),
        "tensors": rows,
        "only_in_model": sorted(set(mine) - seen),
        "only_in_reference": sorted(seen - set(mine)),
        "shape_differs": shape_differs,
    }


# -- compute, energy, system -----------------------------------------------------------------
COMPUTE_TRACEBACK = "errors/inspect_compute_traceback.txt"


MODEL_STEPS = ("FLOPs", "bytes per op", "profile")  # steps that run the model's forward


def _compute_failed(result: Result, step: str, exc: BaseException, tb: str) -> None:
    """Record a failed compute part beside the parameter results: ``data["compute_error"]``, the
    traceback as a text file, and the metric ``compute_failed`` = 1. Nothing is raised. Where the
    model's own forward raised (``MODEL_STEPS``) the analyzer has failed: the result carries the
    error (the run is FAILED, the exit non-zero) and keeps every partial result; a step of the
    machine's (peak, energy counters) leaves it a success with the parts it could measure."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""  # TorchScript puts the Python error on the last line
    if re.match(r"^[\w.]+(Error|Exception): ", last):  # TorchScript re-raises as torch.jit.Error naming it
        message = last.removeprefix("builtins.")[:500]
    else:
        message = f"{type(exc).__name__}: {last}"[:500]
    result.data["compute_error"] = {"step": step, "error": message, "traceback": COMPUTE_TRACEBACK}
    result.texts[COMPUTE_TRACEBACK] = tb
    result.metrics["compute_failed"] = 1.0
    if step in MODEL_STEPS:
        result.error = f"the model's forward raised during inspect's {step} step: {message}\n\n{tb}"


def _compute(cfg, model, spec: dict, result: Result, ctx: RunContext, watch: Watch, given=None) -> list[dict]:
    """FLOPs, bytes per op, profile, peak and roofline, energy: each step's results are kept as soon
    as it ends, so a failing step (a forward that raises, a profiler or energy error) loses only the
    steps from it on; the failure is recorded by ``_compute_failed``. ``watch`` is filled after the
    traced forward: which weights ran, which layers write the outputs (``executed.py``)."""
    from modelxray.analyzers.inspect import energy_split
    from modelxray.core.progress import bar
    from modelxray.measure.energy import Energy, measure_energy
    from modelxray.measure.flops import count_flops, fusion_candidates, op_traffic, run_model, trace_ops
    from modelxray.measure.hardware import cache_sizes
    from modelxray.measure.op_profile import energy_by_op, node_table, profile_nodes, profile_ops
    from modelxray.measure.peak import measure_peak, roofline
    from modelxray.measure.rapl import RaplMeter, rapl_zones
    from modelxray.measure.utilization import UtilizationSampler
    from modelxray.metrics.memory_layout import locality_candidates

    first = next(iter(model.parameters()), None)
    device = first.device if first is not None else torch.device("cpu")
    floating = next((p for p in model.parameters() if p.is_floating_point()), None)
    dtype = floating.dtype if floating is not None else torch.float32
    m, recs = result.metrics, []
    result.data["input"] = spec
    step = "input"
    steps = ["FLOPs", "bytes per op", "profile", "peak", "energy", "structured pruning"]
    with (
        UtilizationSampler(cfg.utilization_interval_s) as sampler,
        bar(total=len(steps), desc="inspect: compute", enabled=ctx.progress) as pbar,
    ):
        try:
            x = (
                dict(given.batch(batch_of(spec), device))
                if given is not None
                else make_input(spec, device, ctx.seed, dtype)
            )

            def forward():
                with torch.inference_mode():
                    run_model(model, x)

            step = "FLOPs"
            flops = count_flops(model, x)
            m["flops_total"] = float(flops.total)
            per = spec["shape"][0] * spec["shape"][1] if spec["kind"] == "token_ids" else batch_of(spec)
            m["flops_per_token" if spec["kind"] == "token_ids" else "flops_per_sample"] = flops.total / per
            result.data["flops_by_module"] = flops.by_module
            result.tables["flops_by_op"] = _flops_table(flops.by_op, flops.total)
            result.tables["flops_by_module"] = _module_table(flops.by_module, flops.total, cfg.top)
            pbar.update(1)

            step = "bytes per op"
            records = trace_ops(model, x)  # one traced forward feeds bytes per op and fusion candidates
            observe(model, x, records, watch)  # which weights ran, which layers write the outputs
            traffic = op_traffic(model, x, records)
            fusion = fusion_candidates(model, x, records)
            result.data["op_traffic"] = [{**o.__dict__, "intensity": o.intensity} for o in traffic]
            result.tables["fusion_candidates"] = fusion[: cfg.top]
            recs += advice.fusion_advice(fusion, min(cfg.top, 5))
            pbar.update(1)

            step = "profile"
            times, forward_s = profile_ops(model, x, warmup=cfg.profile_warmup, iters=cfg.profile_iters)
            m["forward_ms"] = forward_s * 1e3
            m["achieved_gflops_per_s"] = flops.total / forward_s / 1e9 if forward_s > 0 else float("nan")
            result.data["op_times"] = [t.__dict__ for t in times]
            # each op by its input shapes: the nodes of a TorchScript file as of an eager model, with the
            # traced forward's exact FLOPs and bytes and the profiler's time of the same op on the same shapes
            timed = profile_nodes(model, x, iters=2)
            caches, cache_source = cache_sizes()
            result.data["caches"] = {"sizes": caches, "source": cache_source}
            nodes = _with_cache_levels(node_table(records, timed), caches)
            result.tables["nodes"] = nodes[: cfg.top * 2]
            pbar.update(1)

            step = "peak"
            peak = measure_peak(device=str(device), dtype=dtype, size=cfg.peak_matmul_size)
            m["peak_matmul_gflops_per_s"] = peak.matmul_flops_per_s / 1e9
            m["peak_memory_gb_per_s"] = peak.memory_bytes_per_s / 1e9
            m["utilization_of_peak"] = (
                (flops.total / forward_s) / peak.matmul_flops_per_s if forward_s > 0 else float("nan")
            )
            result.data["peak"] = peak.__dict__
            step = "roofline"
            roof = advice.mark_latency_bound(roofline(traffic, times, peak), cfg.roof_share_min)
            result.tables["roofline"] = roof
            n = min(cfg.top, 5)
            recs += advice.memory_bound_advice(roof, n) + advice.latency_bound_advice(roof, n, peak)
            far = locality_candidates(nodes, caches, peak.ridge_intensity)
            if caches.get("L2"):
                m["ops_beyond_l2_low_intensity"] = float(len(far))
            recs += advice.locality_advice(far, n, caches, peak.ridge_intensity)
            pbar.update(1)

            if cfg.energy:
                step = "energy"
                zones, rapl_note = rapl_zones()
                meter = RaplMeter(zones) if zones else None
                start = (meter.read(), time.perf_counter()) if meter else None
                energy = measure_energy(
                    forward,
                    min_seconds=cfg.energy_seconds,
                    country_iso_code=cfg.country_iso_code,
                    sample_seconds=cfg.power_sample_seconds,
                    cpu_tdp_w=cfg.cpu_tdp_w,
                    tdp_key="analyzer.inspect.cpu_tdp_w",
                )
                window = (meter.read() - start[0], time.perf_counter() - start[1]) if meter else None
                # energy_j_per_forward, mean_power_w, co2_g_per_forward, flops_per_joule, energy_measured,
                # cpu_tdp_w (an estimate's TDP); the summary shows them in one line saying MEASURED or ESTIMATED
                result.record("energy", Energy(energy, "forward", energy.iterations, float(flops.total)))
                result.data["energy"] = energy.as_dict()
                roof = result.tables.get("roofline") or []
                _energy_by_op(roof, energy)
                rapl_rows = []
                if meter is not None and device.type != "cpu":  # its kernels run apart from the CPU's counters
                    rapl_note = f"the model runs on {device.type}, whose ops the CPU's RAPL counters cannot time"
                elif meter is not None:
                    rapl_rows, whole = energy_by_op(model, x, meter.read, seconds=cfg.rapl_seconds)
                    result.tables["energy_by_op_rapl"] = rapl_rows
                    result.data["rapl_forward"] = whole
                    rapl_note = (
                        f"MEASURED: RAPL counters ({meter.describe()}) read around each op of {whole['forwards']} "
                        f"forwards; {whole['energy_j']:.4g} J per forward, of which the ops' windows hold "
                        f"{sum(r['energy_j'] for r in rapl_rows):.4g} J"
                    )
                more, split_data = energy_split.split(roof, energy, cfg, meter, window, rapl_rows, rapl_note)
                m.update(more)
                result.data["energy_split"] = split_data
            pbar.update(1)

            if cfg.structured_layers:
                step = "structured pruning"
                recs += _structured(cfg, model, x, result, watch)
            pbar.update(1)
        except Exception as exc:  # noqa: BLE001 - the parameter results and the steps before it are kept
            _compute_failed(result, step, exc, traceback.format_exc())
    system = sampler.summary()
    m.update({"cores_busy": system["cores_busy"], "rss_peak_bytes": float(system["rss_peak_bytes"])})
    for key in ("cpu_freq_mhz_mean", "process_read_bytes", "process_write_bytes", "cache_miss_rate"):
        if key in system:  # measured where the OS exposes it; data["system"]["sources"] says where each came from
            m[key] = float(system[key])
    result.data.update({"system": system, "utilization_samples": sampler.samples})
    return recs


def _with_cache_levels(nodes: list[dict], caches: dict[str, int]) -> list[dict]:
    """Each node with its working set (bytes read and written per call) and the smallest cache that
    holds it (``metrics/memory_layout.cache_level``)."""
    from modelxray.metrics.memory_layout import cache_level

    for n in nodes:
        n["working_set_bytes"] = n["bytes"] / n["calls"] if n["calls"] else 0.0
        n["cache_level"] = cache_level(n["working_set_bytes"], caches)
    return nodes


def _parameter_metrics(rows: list[dict]) -> dict[str, float]:
    total = sum(r["numel"] for r in rows)
    mats = [r for r in rows if r.get("quant_sensitivity") is not None]
    out = {
        "tensors": float(len(rows)),
        "parameters": float(total),
        "weight_bytes": float(sum(r["bytes"] for r in rows)),
        "zeros_share": sum(r["zeros_share"] * r["numel"] for r in rows) / max(total, 1),
        "outlier_share": sum(r["outlier_share"] * r["numel"] for r in rows) / max(total, 1),
    }
    if mats:
        out["quant_sensitivity_median"] = statistics.median(r["quant_sensitivity"] for r in mats)
        out["quant_sensitivity_max"] = max(r["quant_sensitivity"] for r in mats)
        out["prune_potential_median"] = statistics.median(r["prune_potential"] for r in mats)
        ranks = [r["stable_rank"] for r in mats if r.get("stable_rank") is not None]
        if ranks:
            out["stable_rank_median"] = statistics.median(ranks)
        errs = [r["spectral_rel_error"] for r in mats if r.get("spectral_rel_error") is not None]
        if errs:
            out["spectral_rel_error_max"] = max(errs)
    return out


def _top_tensors(rows: list[dict], top: int) -> list[dict]:
    """The largest tensors, with the columns a reader scans first (all tensors are in the JSON)."""
    biggest = sorted(rows, key=lambda r: -r["numel"])[:top]
    return [
        {
            "name": r["name"],
            "type": r["type"],
            **{k: (str(list(r[k])) if k == "shape" else r[k]) for k in _TABLE_STATS if r.get(k) is not None},
        }
        for r in biggest
    ]


def _flops_table(by_op: dict[str, int], total: int) -> list[dict]:
    return [
        {"op": op, "flops": float(f), "share": f / total if total else 0.0}
        for op, f in sorted(by_op.items(), key=lambda kv: -kv[1])
        if f
    ]


def _module_table(by_module: dict[str, int], total: int, top: int) -> list[dict]:
    leafish = sorted(by_module.items(), key=lambda kv: -kv[1])
    return [{"module": m, "flops": float(f), "share": f / total if total else 0.0} for m, f in leafish[: top * 3]]
