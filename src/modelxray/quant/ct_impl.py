"""Quantizing with compressed-tensors (``CompressedTensorsQuantizer``).

A copy's chosen Linear layers get the scheme (``apply_quantization_config``) and their weight
scales from each group's or channel's range (``calculate_qparams``, as llm-compressor's
round-to-nearest observer computes them); compressed-tensors compresses the copy (``ModelCompressor``)
and transformers saves it and loads it back through its compressed-tensors loader, which is the model
returned. Each layer is reported as the checkpoint stores it (its compressed tensors' bytes) against
the weight the checkpoint loads as. A model that is not a transformers model (or whose layers were
GPT-2 Conv1D, stored transposed) cannot be saved as a checkpoint: it keeps compressed-tensors'
quantized forward in memory, and the report says so.
"""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from modelxray.quant.library_backend import chosen_linears
from modelxray.quant.library_swap import conv1d_to_linear
from modelxray.quant.rtn import relative_error
from modelxray.quant.summary import layer_row, quant_result
from modelxray.quant.targets import find_targets

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.quant.ct_backend import CompressedTensorsQuantizer

BITS = {"W4A16": 4, "W8A16": 8, "W8A8": 8}
STORED = ("weight_packed", "weight", "weight_scale", "weight_zero_point")  # what a compressed layer keeps


def quantize_compressed_tensors(
    quantizer: CompressedTensorsQuantizer, model: nn.Module, progress: bool = True
) -> tuple[nn.Module, Result]:
    """``progress`` False: the libraries' own bars (compressing, writing, loading) are not shown."""
    with contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO()):
        return _quantize(quantizer, model)


def _quantize(quantizer: CompressedTensorsQuantizer, model: nn.Module) -> tuple[nn.Module, Result]:
    import compressed_tensors
    from compressed_tensors.compressors import ModelCompressor

    start = time.perf_counter()
    original, work = model, copy.deepcopy(model)
    targets = {t.name: t for t in find_targets(work)}
    chosen = chosen_linears(list(targets.values()), quantizer.skip)
    savable = hasattr(work, "save_pretrained") and all(
        isinstance(work.get_submodule(n), torch.nn.Linear) for n in chosen
    )
    conv1d_to_linear(work, chosen)
    originals = {n: work.get_submodule(n).weight.detach().clone() for n in chosen}
    scheme = _apply_scheme(quantizer, work, chosen)
    compressor = ModelCompressor.from_pretrained_model(work)
    compressor.compress_model(work)
    stored = {n: _stored_bytes(work.get_submodule(n)) for n in chosen}
    notes = [
        f"compressed-tensors {quantizer.scheme} ({compressed_tensors.__version__}): {_describe(scheme)}; "
        "scales from each weight group's range, as llm-compressor's round-to-nearest computes them."
    ]
    if savable:
        with tempfile.TemporaryDirectory(prefix="modelxray-ct-") as tmp:
            folder = Path(quantizer.save_dir).expanduser() if quantizer.save_dir else Path(tmp)
            work.save_pretrained(folder)
            compressor.update_config(str(folder))
            del work  # saved: the checkpoint loads next, without this copy beside it
            dtype = next(original.parameters()).dtype
            loaded = type(original).from_pretrained(folder, dtype=dtype).eval()
        # decompressed now, as its first forward would, so the analyses see the weights it computes with
        ModelCompressor.from_pretrained_model(loaded).decompress_model(loaded)
        loaded.to(next(original.parameters()).device)
        notes.append(
            "The model was saved as a compressed-tensors checkpoint and loaded back through transformers: it is "
            "measured as that checkpoint loads (decompressed, computing in float"
            + (", with int8 activations per token" if quantizer.scheme == "W8A8" else "")
            + "); vLLM runs its packed weights with its own kernels."
            + (f" Saved in {quantizer.save_dir}." if quantizer.save_dir else "")
        )
    else:
        compressor.decompress_model(work)
        loaded = work
        notes.append(
            "This model cannot be saved as a transformers checkpoint, so it runs compressed-tensors' quantized "
            "forward in memory: the same values a saved checkpoint would load as."
        )
    rows = []
    for name in sorted(chosen):
        orig = originals[name]
        error = relative_error(orig, _loaded_weight(loaded.get_submodule(name)).to(orig.dtype))
        fmt = f"compressed-tensors {quantizer.scheme}"
        rows.append(layer_row(name, orig, BITS[quantizer.scheme], fmt, stored[name], error, targets[name]))
    result = quant_result(
        f"compressed-tensors {quantizer.scheme}", rows, original, time.perf_counter() - start, notes, source=quantizer
    )
    return loaded, result


def _apply_scheme(quantizer: CompressedTensorsQuantizer, model: nn.Module, chosen: set[str]):
    """The scheme on the chosen layers, with each weight's scale and zero point from its range."""
    from compressed_tensors.quantization import (
        QuantizationConfig,
        QuantizationStatus,
        apply_quantization_config,
        preset_name_to_scheme,
    )
    from compressed_tensors.quantization.utils import calculate_qparams

    scheme = preset_name_to_scheme(quantizer.scheme, targets=sorted(chosen))
    if quantizer.group_size is not None:
        scheme.weights.group_size = quantizer.group_size
    config = QuantizationConfig(config_groups={"group_0": scheme}, quantization_status=QuantizationStatus.INITIALIZED)
    apply_quantization_config(model, config, show_progress=False)
    for name in chosen:
        module = model.get_submodule(name)
        args = module.quantization_scheme.weights
        w = module.weight.detach()
        if args.strategy == "group":
            groups = w.reshape(w.shape[0], -1, args.group_size)
            lo, hi = groups.amin(-1), groups.amax(-1)
        else:  # channel
            lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
        scale, zero = calculate_qparams(lo, hi, args)
        module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape))
        if hasattr(module, "weight_zero_point"):
            module.weight_zero_point.data.copy_(zero.reshape(module.weight_zero_point.shape))
        module.quantization_status = QuantizationStatus.FROZEN
    return scheme


def _stored_bytes(module: nn.Module) -> int:
    """Bytes of the compressed layer's tensors for its weight: codes (packed for int4), scales and zero points."""
    tensors = dict(module.named_parameters(recurse=False)) | dict(module.named_buffers(recurse=False))
    return sum(t.numel() * t.element_size() for k, t in tensors.items() if k in STORED)


def _loaded_weight(module: nn.Module) -> torch.Tensor:
    """The weight the layer computes with: the checkpoint's decompressed weight, or for an in-memory
    model compressed-tensors' dequantization of its quantized forward."""
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize

    w = module.weight.detach()
    if getattr(module, "quantization_status", None) is not None and hasattr(module, "weight_scale"):
        zero = getattr(module, "weight_zero_point", None)
        return fake_quantize(w, module.weight_scale, zero, module.quantization_scheme.weights)
    return w


def _describe(scheme) -> str:
    w = scheme.weights
    how = f"{w.num_bits}-bit {'symmetric' if w.symmetric else 'asymmetric'} weights"
    how += f" in groups of {w.group_size}" if w.strategy == "group" else " with a scale per output channel"
    if scheme.input_activations is not None:
        how += f", {scheme.input_activations.num_bits}-bit activations per token, scaled as they come"
    return how
