"""quant_impact on a model streamed block by block (``runtime.offload=blocks``): every strategy that
quantizes one block at a time (round-to-nearest, GPTQ and AWQ, which calibrate each block on the
inputs it sees) is one path of a single stream beside the float model, so the model is read from disk
once for all of them. The library quantizers take the whole model at once and are listed as unable to
run, with the reason. Speed is not measured: a streamed forward times the disk, not the model."""

from __future__ import annotations

import dataclasses
import time
import traceback

from modelxray.analyzers.performance.streamed import NOT_TIMED
from modelxray.analyzers.quant_impact.config import load_strategy, strategy_name
from modelxray.core.errors import ConfigError, MissingLibrary
from modelxray.core.result import RunContext
from modelxray.measure.memory_timeline import MemoryTimeline
from modelxray.measure.streamed_comparison import score_variants
from modelxray.metrics.tensor_bytes import tensor_bytes_by_dtype
from modelxray.metrics.windows import lm_eval_windows
from modelxray.quant.streamed import block_quantization, streams_blocks

NOT_STREAMED = (
    "it hands the whole model to its library at once, which a streamed run never holds: use runtime.offload=none"
)


class GuardedPath:
    """One strategy's path through the stream: when its quantizer fails on a block, the path stops
    changing weights and keeps the traceback, and the other strategies stream on (their results are
    never lost to one failure)."""

    def __init__(self, inner):
        self.inner = inner
        self.failure: str | None = None
        if hasattr(inner, "undo"):  # a path that swaps modules puts the block's own back
            self.undo = inner.undo
        if hasattr(inner, "calibration_batches"):  # a calibrating path sees its calibration windows
            self.calibration_batches = inner.calibration_batches
            self.start = self._guarded(inner.start)

    def _guarded(self, call):
        def run(*args):
            if self.failure is None:
                try:
                    call(*args)
                except Exception:  # noqa: BLE001 - reported as this strategy's failure
                    self.failure = traceback.format_exc()

        return run

    def touches(self, prefix: str) -> bool:
        return self.failure is None and self.inner.touches(prefix)

    def apply(self, prefix: str, done: dict) -> None:
        self._guarded(self.inner.apply)(prefix, done)


def stored_bytes(model) -> int:
    """Bytes of the model's tensors as stored (its parameters on the meta device count by shape)."""
    return sum(sum(d.values()) for d in tensor_bytes_by_dtype(model).values())


def _paths(cfg, subject, profile) -> tuple[list[tuple[str, str, GuardedPath | None]], list[dict]]:
    """``(strategy, support, path)`` for each strategy that streams (``none``: no path, the float
    model as stored), and those that cannot, with the reason."""
    from modelxray.quant.calibration import subject_calibration

    out, unsupported = [], []
    for requested in cfg.strategies:
        name = strategy_name(requested)
        try:
            quantizer = load_strategy(name)
        except MissingLibrary as exc:
            unsupported.append({"strategy": name, "reason": str(exc)})
            continue
        ok, support = quantizer.support_here(profile)
        if not ok:
            unsupported.append({"strategy": name, "reason": support})
            continue
        if quantizer.name == "none":
            out.append((name, support, None))
            continue
        if not streams_blocks(quantizer):
            unsupported.append({"strategy": name, "reason": f"cannot stream block by block: {NOT_STREAMED}"})
            continue
        try:
            calibration = None
            if getattr(quantizer, "needs_calibration", False):
                calibration = dataclasses.replace(subject_calibration(subject, quantizer), progress=False)
            path = block_quantization(quantizer, subject.stream, calibration)
        except ConfigError as exc:  # the quantizer refuses this model (one line): list it, go on
            unsupported.append({"strategy": name, "reason": str(exc)})
            continue
        out.append((name, support, GuardedPath(path)))
    return out, unsupported


def streamed_rows(cfg, subject, ctx: RunContext, mode, profile) -> tuple[list[dict], list[dict], dict, list, dict]:
    """``(rows, unsupported, failures, timeline, streaming)``: every streaming strategy scored against the float
    path in one read of the model, its size from the report gathered as its blocks went by."""
    stream = subject.stream
    paths, unsupported = _paths(cfg, subject, profile)
    windows = lm_eval_windows(subject.data, subject.batches, cfg.eval_windows)
    mark = stream.stats.mark()
    with MemoryTimeline(cfg.memory_interval_ms / 1000) as tl:
        with tl.phase("load"):
            pass  # the process before the stream: the model is on the meta device
        start = time.perf_counter()
        with tl.phase("stream"):
            scores = score_variants(
                stream,
                windows,
                cfg.batch_size,
                cfg.kl_windows,
                [p for _, _, p in paths],
                progress=ctx.progress,
                desc="quant_impact: streaming blocks",
            )
        seconds = time.perf_counter() - start
    mode.ref = scores.reference
    rows, failures = [], {}
    for (name, support, path), comparison in zip(paths, scores.comparisons, strict=True):
        if path is not None and path.failure is not None:
            failures[name] = path.failure
            last = path.failure.strip().splitlines()[-1]
            unsupported.append({"strategy": name, "reason": f"failed: {last}"})
            continue
        m = comparison.result()
        report = path.inner.result(stream.model) if path is not None else None
        weight_bytes = report.metrics["model_bytes_after"] if report is not None else stored_bytes(stream.model)
        rows.append(
            {
                "strategy": name,
                "method": report.data.get("method", path.inner.quantizer.name) if report is not None else "none",
                "support": support,
                "simulated": "simulated" in support,
                "speed_measured": NOT_TIMED,
                **{k: m.get(k, float("nan")) for k in mode.quality_keys},
                "latency_p50_ms": float("nan"),
                "latency_p95_ms": float("nan"),
                mode.throughput: float("nan"),
                "weight_bytes": weight_bytes,
                "stored_bytes": weight_bytes,
                "effective_bits": report.metrics["effective_bits"] if report is not None else 32.0,
                "rss_at_load": tl.peak("load"),
                "peak_quantize_rss": tl.peak("stream"),
                "rss_after_quantize": tl.peak("load"),
                "peak_inference_rss": tl.peak("stream"),
                "quantize_seconds": path.inner.seconds if path is not None else 0.0,
                "memory_used_gb": weight_bytes / 2**30,
                "accuracy": m["accuracy"],
                "inference_time": float("nan"),
            }
        )
    model_bytes = stream.model_bytes()
    streaming = {
        "strategies": len(paths),
        **stream.stats.since(mark, model_bytes),
        "seconds": seconds,
        "peak_rss": tl.peak("stream"),
        "model_bytes": model_bytes,
        "speed": NOT_TIMED,
    }
    timeline = [{"strategy": "all (one stream)", **s} for s in tl.rows()]
    return rows, unsupported, failures, timeline, streaming
