"""Quantizing with bitsandbytes (``BitsAndBytesQuantizer``): each chosen Linear of a copy replaced
by ``Linear4bit`` or ``Linear8bitLt``, quantized by bitsandbytes when moved to the layer's device;
each reported as bitsandbytes stores it (codes, block scales, and the scales' own codes under
double quantization) against its own dequantized weight."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from modelxray.quant.library_swap import quantize_linears

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.quant.bnb_backend import BitsAndBytesQuantizer

BITS = {"nf4": 4, "fp4": 4, "int8": 8}


def _nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def stored_bytes(module: nn.Module) -> int:
    """Bytes bitsandbytes keeps for the weight: 4-bit codes with their block scales (and, under
    double quantization, the scales' codes, their scales and offset), or int8 codes with a scale per row."""
    w = module.weight
    state = getattr(w, "quant_state", None)
    if state is None:  # Int8Params: codes and one float scale per output channel
        return _nbytes(w.data) + _nbytes(_int8_scales(module))
    total = _nbytes(w.data) + _nbytes(state.absmax)
    if state.nested:
        total += _nbytes(state.state2.absmax) + _nbytes(state.offset)
    return total


def dequantized(module: nn.Module) -> torch.Tensor:
    import bitsandbytes as bnb

    w = module.weight
    if getattr(w, "quant_state", None) is not None:
        return bnb.functional.dequantize_4bit(w.data, w.quant_state)
    return w.data.float() * (_int8_scales(module).float()[:, None] / 127)


def _int8_scales(module: nn.Module) -> torch.Tensor:
    """The row scales of an int8 weight: on the weight until the layer's first forward, then in its state."""
    scales = getattr(module.weight, "SCB", None)
    return scales if scales is not None else module.state.SCB


def quantize_bnb(quantizer: BitsAndBytesQuantizer, model: nn.Module) -> tuple[nn.Module, Result]:
    import bitsandbytes as bnb

    def swap(copy: nn.Module, names: set[str]) -> None:
        for name in sorted(names):
            linear = copy.get_submodule(name)
            w, bias = linear.weight.detach(), linear.bias
            if quantizer.weights == "int8":
                new = bnb.nn.Linear8bitLt(
                    linear.in_features, linear.out_features, bias=bias is not None,
                    has_fp16_weights=False, threshold=quantizer.outlier_threshold, device="meta",
                )  # fmt: skip
                new.weight = bnb.nn.Int8Params(w.clone(), requires_grad=False, has_fp16_weights=False)
            else:
                new = bnb.nn.Linear4bit(
                    linear.in_features, linear.out_features, bias=bias is not None, compute_dtype=w.dtype,
                    compress_statistics=quantizer.double_quant, quant_type=quantizer.weights, device="meta",
                )  # fmt: skip
                new.weight = bnb.nn.Params4bit(
                    w.clone(), requires_grad=False, compress_statistics=quantizer.double_quant,
                    quant_type=quantizer.weights,
                )  # fmt: skip
            if bias is not None:
                new.bias = torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
            new = new.to(w.device)  # bitsandbytes quantizes the weight as it moves to the device
            parent, _, child = name.rpartition(".")
            setattr(copy.get_submodule(parent) if parent else copy, child, new)

    how = {
        "nf4": "NF4 codes (4-bit normal float) in blocks of 64 with an absmax scale each",
        "fp4": "FP4 codes in blocks of 64 with an absmax scale each",
        "int8": "int8 codes with a scale per output channel (LLM.int8()"
        + (
            f", activations above {quantizer.outlier_threshold} in 16 bits)"
            if quantizer.outlier_threshold
            else ", no outlier columns)"
        ),
    }[quantizer.weights]
    note = (
        f"bitsandbytes {quantizer.weights} ({bnb.__version__}): {how}"
        + (
            ", the scales quantized again (double quantization)"
            if quantizer.double_quant and quantizer.weights != "int8"
            else ""
        )
        + ". It runs through bitsandbytes' own modules: quality is the library's; sizes are the tensors it stores."
    )
    fmt = f"bitsandbytes {quantizer.weights}"
    return quantize_linears(quantizer, model, swap, dequantized, stored_bytes, fmt, BITS[quantizer.weights], [note])
