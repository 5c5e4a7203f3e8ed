"""The performance analyzer on a generic model (the ``Generic`` kind): any module run on
its named example inputs. Without labels its quality is agreement with its own unquantized outputs
(when the run quantized it); speed is per batch of examples, cycling through the given ones."""

from __future__ import annotations

from modelxray.core.result import Result, RunContext
from modelxray.data.example_inputs import tensors_only
from modelxray.measure.classifier_reference import input_dtype
from modelxray.measure.reference_outputs import generic_outputs
from modelxray.measure.scoring import model_device
from modelxray.measure.speed import StopRule, time_forward
from modelxray.metrics.agreement import output_agreement
from modelxray.metrics.measurements import Latency, Speed


def quality(cfg, subject, ctx: RunContext, result: Result) -> None:
    """Per output tensor: cosine similarity (and its standard error over examples), relative and
    largest absolute error, and top-1 agreement for outputs that score classes (named like logits,
    or in ``score_outputs``), against the outputs the model gave before it was quantized. The first output's figures are the headline metrics."""
    data = subject.data
    result.data["quality"] = {
        "protocol_description": f"{data.n_examples} example input(s): {data.description}",
        "inputs_source": data.source,
    }
    if subject.reference is None:
        result.data["quality"]["note"] = (
            "No labels: quality is agreement with the unquantized outputs, measured when the run quantizes (quant=...)."
        )
        return
    outputs = generic_outputs(subject.model, data.tensors)
    by_output = output_agreement(subject.reference, outputs, tuple(cfg.score_outputs))
    rows = [{"output": name, **vals} for name, vals in by_output.items()]
    result.tables["output_agreement"] = rows
    result.data["quality"]["output_agreement"] = by_output
    if rows:
        first = rows[0]
        for key in ("cosine", "cosine_se", "rel_error", "max_abs_error", "top1_agree"):
            if key in first:
                result.metrics[f"output_{key}"] = first[key]


def speed(cfg, subject, ctx: RunContext, result: Result) -> None:
    """Forward latency at each of ``speed_batch_sizes`` examples; throughput in examples/s."""
    model, data = subject.model, subject.data
    device, dtype = model_device(model), input_dtype(model)
    speeds = []
    for bs in cfg.speed_batch_sizes:
        batch = data.batch(bs, device, dtype)
        times = time_forward(
            model, batch, cfg.warmup, StopRule.of(cfg), ctx.progress, desc=f"performance: latency bs={bs}"
        )
        first = next(iter(tensors_only(batch).values()))
        sp = Speed.of_examples(bs, tuple(first.shape[1:]), Latency.from_values(times))
        result.record(f"speed/bs{bs}", sp)
        speeds.append(sp)
    result.tables["speed"] = [s.row() for s in speeds]
    result.data["speed"] = [s.to_dict() for s in speeds]


def layer_input(subject) -> tuple[dict, dict]:
    """One example (batch 1) for per-module timing, and how to describe it."""
    model, data = subject.model, subject.data
    batch = data.batch(1, model_device(model), input_dtype(model))
    return batch, {"inputs": {n: list(t.shape) if hasattr(t, "shape") else t for n, t in batch.items()}}
