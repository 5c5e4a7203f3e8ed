"""What the quant stage keeps of the loaded model: whether it quantizes the model in place or a
copy, the report's note saying which and why, and whether the unquantized outputs are kept for an
analyzer to compare with."""

from __future__ import annotations

from omegaconf import DictConfig

from modelxray.app.job import JobInfo
from modelxray.core.subject import Subject
from modelxray.kinds.table import kind_of


def _quantize_in_place(cfg: DictConfig, job: JobInfo, components, given_model: bool) -> bool:
    """Quantize the loaded model itself, not a copy, when nothing needs its loaded weights after the
    quant stage: a configured model (never the user's own module) in a single run, or with the
    model cache off (``model_cache_size=0``); a sweep's jobs share the cached model."""
    if given_model or not getattr(components.quant, "in_place_capable", False):
        return False
    return job.sweep_dir is None or cfg.model_cache_size == 0


def _in_place_note(in_place: bool, cfg: DictConfig, job: JobInfo, components, given_model: bool) -> str:
    """What the quant stage kept of the loaded weights, and why, for the report."""
    if in_place:
        why = "model_cache_size=0" if cfg.model_cache_size == 0 else "a single run"
        return (
            f"Memory: quantized in place ({why}): the loaded weights were not kept, so the process held one "
            "copy of the model."
        )
    if given_model:
        why = "your model is left as you gave it"
    elif not getattr(components.quant, "in_place_capable", False):
        why = f"{components.quant.name} builds new modules"
    else:
        why = "the jobs of this sweep share the loaded model (model_cache_size=0 quantizes in place)"
    return f"Memory: quantized a copy of the model, which kept the loaded weights beside it: {why}."


def _keeps_reference(subject: Subject, components) -> bool:
    """Keep the unquantized outputs when a quantizer runs and an analyzer scores agreement with them
    (performance, on every kind; quant_impact and bitwidth keep their own)."""
    quantizes = getattr(components.quant, "name", "none") != "none"
    return quantizes and kind_of(subject).agreement_after_quant and "performance" in components.analyzers


def quantize_streamed(subject: Subject, quantizer, progress: bool = False) -> Subject:
    """A streamed model's quant stage: the quantizer becomes the stream's second path, applied to each
    block right after the float path ran through it (``quant.streamed``); GPTQ and AWQ calibrate each
    block on the dataset's calibration windows as they stream beside the evaluated ones."""
    if getattr(quantizer, "name", "none") == "none":
        return subject
    import dataclasses

    from modelxray.quant.calibration import subject_calibration
    from modelxray.quant.streamed import block_quantization

    calibration = None
    if getattr(quantizer, "needs_calibration", False):
        calibration = dataclasses.replace(subject_calibration(subject, quantizer), progress=progress)
    subject.stream.transform = block_quantization(quantizer, subject.stream, calibration)
    step = {"method": quantizer.name, "streamed": True}
    if hasattr(quantizer, "default_spec"):  # round-to-nearest, GPTQ, AWQ: their format in words
        step["default"] = quantizer.default_spec().describe()
    return subject.with_model(subject.model, step)


def streamed_quant_result(subject: Subject, progress: bool):
    """The quant report of a streamed model, gathered while its blocks went by; a model no analyzer
    streamed to the end (one failed half-way) is read once more, block by block, for the whole report."""
    stream = subject.stream
    if not getattr(stream.transform, "complete", False):  # no analyzer streamed it to the end
        stream.run_transform_only(stream.transform, progress)
    return stream.transform.result(subject.model)


def stream_metrics(stream) -> dict[str, float]:
    """``runtime/*``: what streaming the model cost (reads of the weights, bytes, hidden states)."""
    model_bytes = stream.model_bytes()
    return {
        "runtime/weight_reads": stream.stats.weight_reads(model_bytes),
        "runtime/weight_bytes_read": float(stream.stats.bytes_read),
        "runtime/stream_passes": float(stream.stats.passes),
        "runtime/hidden_state_bytes": float(stream.stats.hidden_bytes),
        "runtime/hidden_state_spilled_bytes": float(stream.stats.spilled_bytes),
        "runtime/block_bytes": float(stream.block_bytes()),
    }
