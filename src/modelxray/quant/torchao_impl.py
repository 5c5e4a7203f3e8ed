"""Quantizing with torchao (``TorchaoQuantizer``): real int8 weights, measured as stored."""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING

from modelxray.metrics.tensor_bytes import storage_tensors
from modelxray.quant.library_backend import chosen_linears
from modelxray.quant.library_swap import conv1d_to_linear
from modelxray.quant.rtn import relative_error
from modelxray.quant.summary import quant_result
from modelxray.quant.targets import find_targets

if TYPE_CHECKING:
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
    """A copy of ``model`` with torchao int8 Linear weights, and the report (sizes of the original)."""
    from torchao.quantization import quantize_

    start = time.perf_counter()
    original, model = model, copy.deepcopy(model)
    chosen = chosen_linears(find_targets(model), quantizer.skip)
    conv1d_to_linear(model, chosen)
    originals = {n: m.weight.detach().clone() for n, m in model.named_modules() if n in chosen}
    quantize_(model, _config(quantizer.method), filter_fn=lambda m, fqn: fqn in chosen)
    rows = []
    for name, module in model.named_modules():
        if name not in chosen:
            continue
        w, orig = module.weight, originals[name]
        deq = w.dequantize() if hasattr(w, "dequantize") else w
        packed = sum(t.numel() * t.element_size() for t in storage_tensors(w))
        rows.append(
            {
                "module": name,
                "kind": "linear",
                "component": "",
                "block": None,
                "bits": 4 if quantizer.method == "int4_weight_only" else 8,
                "format": f"torchao {quantizer.method}",
                "elements": orig.numel(),
                "bytes_before": orig.numel() * orig.element_size(),
                "packed_bytes": packed,
                "rel_error": relative_error(orig, deq),
            }
        )
    result = quant_result(
        f"torchao {quantizer.method}",
        rows,
        original,
        time.perf_counter() - start,
        [
            f"Real int8 kernels (torchao {quantizer.method}): the performance analyzer measures "
            "their actual memory and latency."
        ],
        source=quantizer,
    )
    return model, result
