"""Quantizing with torchao (``TorchaoQuantizer``): real int8 (or int4) weights, measured as stored."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelxray.metrics.tensor_bytes import storage_tensors
from modelxray.quant.library_swap import quantize_linears

if TYPE_CHECKING:
    import torch
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.quant.torchao_backend import TorchaoQuantizer


def _config(method: str):
    import logging

    logging.getLogger("torchao").setLevel(logging.ERROR)  # it warns about its CUDA-only extensions on CPU
    from torchao.quantization import (
        Int4WeightOnlyConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
    )

    if method == "int4_weight_only":
        return Int4WeightOnlyConfig(group_size=128)
    return {"int8_weight_only": Int8WeightOnlyConfig, "int8_dynamic": Int8DynamicActivationInt8WeightConfig}[method]()


def quantize_torchao(quantizer: TorchaoQuantizer, model: nn.Module) -> tuple[nn.Module, Result]:
    """A copy of ``model`` with torchao's low-bit Linear weights, and the report (sizes of the original)."""
    from torchao.quantization import quantize_

    def swap(copy: nn.Module, names: set[str]) -> None:
        quantize_(copy, _config(quantizer.method), filter_fn=lambda m, fqn: fqn in names)

    def dequantized(module: nn.Module) -> torch.Tensor:
        w = module.weight
        return w.dequantize() if hasattr(w, "dequantize") else w

    def stored_bytes(module: nn.Module) -> int:
        return sum(t.numel() * t.element_size() for t in storage_tensors(module.weight))

    bits = 4 if quantizer.method == "int4_weight_only" else 8
    note = (
        f"Real int{bits} kernels (torchao {quantizer.method}): the performance analyzer measures "
        "their actual memory and latency."
    )
    fmt = f"torchao {quantizer.method}"
    return quantize_linears(quantizer, model, swap, dequantized, stored_bytes, fmt, bits, [note])
