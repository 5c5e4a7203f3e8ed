"""Performance analyzer: quality (loss, perplexity, bits per byte, top-k accuracy), speed (latency
percentiles, throughput per batch size), memory, and per-module forward time.

A language model is measured here on token windows; a classifier's quality and speed come from
``classifier`` (test split, examples/s), a generic model's from ``generic`` (its example inputs;
agreement with its unquantized outputs); memory and per-module time are shared."""

from __future__ import annotations

import math
import time

import torch

from modelxray.analyzers.performance.windows import lm_windows
from modelxray.core.result import Result, RunContext
from modelxray.kinds.base import choose, plurals
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.generic import Generic
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.table import kind_of
from modelxray.kinds.windows import WindowsKind
from modelxray.measure.layer_time import time_by_type, time_modules
from modelxray.measure.process_memory import cuda_peaks, reset_cuda_peaks, rss_and_peak
from modelxray.measure.reference import Reference
from modelxray.measure.reference_outputs import is_dual_encoder
from modelxray.measure.scoring import model_device, score_windows
from modelxray.measure.speed import CpuUse, CpuWatch, StopRule, time_forward
from modelxray.metrics.measurements import Latency, Memory, Quality, Speed
from modelxray.metrics.tensor_bytes import count_parameters, tensor_bytes_by_dtype
from modelxray.metrics.windows import speed_inputs, windows_from_batches


# -- the three measurements -------------------------------------------------------------
def run(cfg, subject, ctx: RunContext) -> Result:
    result = cfg.new_result()
    reset_cuda_peaks(model_device(subject.model))
    kind = kind_of(subject)
    measure = choose(kind, _MEASURES, "analyzer.performance", f"analyzes {plurals(cfg.model_kinds)}")
    with CpuWatch() as watch:  # what the machine gave the quality and speed passes
        layer_input = measure(cfg, subject, ctx, result)
    signs = result.data.get("degenerate") or kind.degenerate_signs(
        result.metrics, subject, cfg.uniform_perplexity_share
    )
    if signs:  # leads the insights: every other figure is about a model that does not work
        result.data["degenerate"] = signs
    _memory(cfg, subject, result)
    _consistency(cfg, subject, result, watch.use)
    if subject.stream is not None:  # streamed from disk: its forward's time is the disk's
        from modelxray.analyzers.performance.streamed import NOT_TIMED, streaming_data

        result.data["streaming"] = streamed = streaming_data(subject)
        result.insights.append(streamed["summary"])
        result.insights.append(f"Speed and per-module time: {NOT_TIMED}.")
        return result
    if cfg.layer_timing and isinstance(subject.model, torch.jit.ScriptModule):
        why = "TorchScript modules take no forward hooks; per-op time is in analyzer=inspect's profile"
        result.data["layer_time"] = {"skipped": why}
        result.insights.append(f"Per-module time skipped: {why}.")
    elif cfg.layer_timing:
        _layers(cfg, subject, result, *layer_input(subject))
    return result


# -- each family's quality and speed; each returns how to build its per-module timing input ----
def _language_model(cfg, subject, ctx, result: Result):
    _quality(cfg, subject, ctx, result)
    if subject.stream is None:
        _speed(cfg, subject, ctx, result)
    return lambda s: _lm_layer_input(cfg, s)


def _classifier(cfg, subject, ctx, result: Result):
    from modelxray.analyzers.performance import classifier

    classifier.quality(cfg, subject, ctx, result)
    if is_dual_encoder(subject.model):
        from modelxray.analyzers.performance.vision_language import retrieval

        retrieval(cfg, subject, ctx, result)
    classifier.speed(cfg, subject, ctx, result)
    return classifier.layer_input


def _generic(cfg, subject, ctx, result: Result):
    from modelxray.analyzers.performance import generic

    generic.quality(cfg, subject, ctx, result)
    generic.speed(cfg, subject, ctx, result)
    return generic.layer_input


def _windows(cfg, subject, ctx, result: Result):
    from modelxray.analyzers.performance import tasks

    tasks.quality(cfg, subject, ctx, result)
    if subject.stream is None:
        tasks.speed(cfg, subject, ctx, result)
    return tasks.layer_input


def _labelled_images(cfg, subject, ctx, result: Result):
    from modelxray.analyzers.performance import vision_tasks

    vision_tasks.quality(cfg, subject, ctx, result)
    vision_tasks.speed(cfg, subject, ctx, result)
    return vision_tasks.layer_input


# what measures a model's quality and speed, by kind class (a family's base class covers its members)
_MEASURES = {
    CausalLM: _language_model,
    Classifier: _classifier,
    Generic: _generic,
    WindowsKind: _windows,
    LabelledImagesKind: _labelled_images,
}


def _quality(cfg, subject, ctx, result: Result) -> None:
    windows, desc, data = lm_windows(cfg, subject)
    reference = subject.reference if isinstance(subject.reference, Reference) else None
    if subject.stream is not None:  # block by block from disk: the float and quantized paths together
        from modelxray.analyzers.performance.streamed import stream_scores

        score, seconds, comparison, reference = stream_scores(cfg, subject, windows, ctx.progress)
    elif reference is not None and reference.same_tokens(windows) is None:  # one pass: quality and the comparison
        start = time.perf_counter()
        comparison = reference.compare(subject.model, None, ctx.progress, "performance: perplexity", cfg.top_k)
        score, seconds = comparison.score, time.perf_counter() - start
    else:
        comparison = None
        score, seconds = score_windows(
            subject.model, windows, cfg.batch_size, cfg.top_k, ctx.progress, desc="performance: perplexity"
        )
    n_bytes = None
    if data is not None:
        # bytes of the scored tokens: exact when every token is scored, else pro rata
        n_bytes = data.n_bytes * score.n_tokens / max(data.n_tokens, 1)
    quality = Quality.from_dict(score.result(n_bytes))
    result.record("quality", quality)
    fed = sum(w.inputs.numel() for w in windows)
    if subject.stream is None:  # a streamed model's pass times the disk, not the model
        result.metrics["eval_tokens_per_s"] = fed / seconds
    result.data["quality"] = {
        **quality.to_dict(),
        "eval_tokens_per_s": fed / seconds if subject.stream is None else None,
        "protocol": cfg.protocol,
        "protocol_description": desc,
        "windows": len(windows),
        "top_k": cfg.top_k,
    }
    if comparison is not None:
        vs = against_reference(comparison, reference)
        result.metrics.update(vs)
        result.data["quality"]["vs_reference"] = {**vs, "reference": reference.label, "kl_windows": cfg.kl_windows}


def against_reference(comparison, reference) -> dict[str, float]:
    """The model against its reference on the same windows: top-1 agreement and the paired loss
    change on every window (each with its standard error, windows as units), KL(reference || model)
    on the first ``kl_windows`` as llama.cpp's KL report gives it (mean ± SE, p90/p99/p99.9, max, RMS
    change of the reference's top-token probability), and the perplexity ratio exp(delta_loss)."""
    got = comparison.result()
    keys = ("top1_agree", "top1_agree_se", "kl", "kl_se", "kl_p90", "kl_p99", "kl_p999", "kl_max", "rms_dp")
    out = {k: got[k] for k in keys if k in got}
    if "delta_loss" in got:
        ref_loss = reference.metrics["loss"]
        out.update(reference_loss=ref_loss, delta_loss=got["delta_loss"], delta_loss_se=got["delta_loss_se"])
        out["ppl_ratio"] = math.exp(got["delta_loss"])  # the model's perplexity over the reference's
        out["ppl_ratio_se"] = out["ppl_ratio"] * got["delta_loss_se"]  # delta method
    return out


def _speed(cfg, subject, ctx, result: Result) -> None:
    device = model_device(subject.model)
    if subject.data is not None:
        seq_len = cfg.speed_seq_len or subject.data.seq_len
        source = subject.data.ids
    else:
        first = windows_from_batches(subject.batches)
        seq_len = cfg.speed_seq_len or first[0].inputs.numel()
        source = torch.cat([w.inputs for w in first])
    speeds = []
    for bs in cfg.speed_batch_sizes:
        batch = speed_inputs(source, bs, seq_len).to(device)
        times = time_forward(
            subject.model, batch, cfg.warmup, StopRule.of(cfg), ctx.progress, desc=f"performance: latency bs={bs}"
        )
        speed = Speed(bs, seq_len, Latency.from_values(times))
        result.record(f"speed/bs{bs}", speed)  # metrics bs<b>_latency_*_ms, bs<b>_tokens_per_s ...
        speeds.append(speed)
    result.tables["speed"] = [s.row() for s in speeds]
    result.data["speed"] = [s.to_dict() for s in speeds]


def _memory(cfg, subject, result: Result) -> None:
    model = subject.model
    by_dtype = tensor_bytes_by_dtype(model)
    rss, peak = rss_and_peak()  # in this order: a peak read first can come out below the current size
    mem = Memory(
        param_bytes=sum(by_dtype["params"].values()),
        buffer_bytes=sum(by_dtype["buffers"].values()),
        num_parameters=count_parameters(model),
        peak_rss_bytes=peak,
        rss_bytes=rss,
        **cuda_peaks(model_device(model)),  # cuda_max_allocated_bytes, cuda_max_reserved_bytes on a GPU
        file_bytes=subject.info.file_bytes or None,
        by_dtype=by_dtype,
    )
    result.record("memory", mem)
    result.data["memory"] = mem.to_dict()
    result.tables["memory_by_dtype"] = [
        {"kind": kind, "dtype": dt, "bytes": b} for kind, d in by_dtype.items() for dt, b in d.items()
    ]


def _consistency(cfg, subject, result: Result, use: CpuUse | None) -> None:
    """Every figure against its neighbours (``metrics/consistency.py``): the machine, each speed
    against the quality pass, each latency against its samples, the memory peak against the current
    size. Each flag is a sentence of the report; ``consistency_flags`` counts them."""
    from modelxray.metrics import consistency as check

    speeds = list(result.measurements_of(Speed).values())
    busy, evidence = check.busy_machine(use.wait_share, use.load, use.threads, use.cpus) if use else (None, None)
    machine = check.machine_flag(busy, evidence, use.threads) if speeds and use else None
    flags = [machine] if machine else []
    kind = kind_of(subject)
    unit, pass_name = ("tokens", "perplexity pass") if isinstance(kind, CausalLM) else ("examples", "accuracy pass")
    eval_per_s = result.metrics.get(f"eval_{unit}_per_s")
    rows = []
    if isinstance(kind, (CausalLM, Classifier)) and eval_per_s and speeds:  # one forward per batch, as timed
        flat = model_device(subject.model).type == "cpu"
        rows = check.speed_ratios([s for s in speeds if s.unit == unit], eval_per_s, cfg.batch_size, flat)
        flags += check.throughput_flags(rows, eval_per_s, cfg.batch_size, pass_name, busy)
    for s in speeds:
        flags += check.latency_flags(f"speed/bs{s.batch_size}", f"Batch {s.batch_size}", s.latency)
    flags += check.memory_flags(result.measurements["memory"])
    result.data["consistency"] = {
        "flags": [f.to_dict() for f in flags],
        "speed_vs_quality": rows,
        "cpu": use.to_dict() if use is not None else None,
    }
    result.metrics["consistency_flags"] = float(len(flags))
    result.insights += [f.text for f in flags]


def _lm_layer_input(cfg, subject) -> tuple[torch.Tensor, dict]:
    """One window of tokens (batch 1) for per-module timing, and its length: the dataset's window, or
    the first row of the user's DataLoader as it is (its length fits the model, its tokens the
    vocabulary)."""
    if subject.data is not None:
        seq_len, source = cfg.speed_seq_len or subject.data.seq_len, subject.data.ids
    else:
        source = windows_from_batches(subject.batches)[0].inputs
        seq_len = cfg.speed_seq_len or source.numel()
    return speed_inputs(source, 1, seq_len).to(model_device(subject.model)), {"seq_len": seq_len}


def _layers(cfg, subject, result: Result, batch: torch.Tensor | dict, workload: dict) -> None:
    """Per-module forward time at batch 1 (``batch``: token ids, one classifier input, or a generic
    model's named inputs)."""
    rows = time_modules(subject.model, batch, cfg.layer_timing_iters)
    if not rows:
        result.data["layer_time"] = {"skipped": f"{subject.info.name} has no submodules to time separately"}
        return
    by_type = time_by_type(rows)
    total = sum(by_type.values()) or 1.0
    result.tables["layer_time"] = rows[: cfg.top_layers]
    result.tables["time_by_module_type"] = [
        {"type": t, "self_ms": ms, "share": ms / total} for t, ms in by_type.items()
    ]
    result.data["layer_time"] = {
        "batch_size": 1,
        **workload,  # seq_len (tokens), input_shape (a classifier's input) or inputs (a generic model's)
        "iters": cfg.layer_timing_iters,
        "total_self_ms": total,
    }
    result.metrics["layer_time_total_ms"] = total
    for t, ms in by_type.items():
        result.metrics[f"time_share/{t}"] = ms / total
